"""Files written so that a kill at any moment leaves either the old content or the new, never a mix.

Every writer goes through :func:`atomic_write`: the content goes to a temporary file in the same
folder, is flushed and fsynced, renamed over the target, and the folder entry is fsynced.
"""
from __future__ import annotations

import contextlib
import os
from typing import IO, Any, Iterator

__all__ = ["atomic_write", "atomic_write_text", "atomic_torch_save", "atomic_save_npy", "config_difference"]


def _fsync_dir(folder: str) -> None:
    with contextlib.suppress(OSError):  # some file systems refuse to open or fsync a directory
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path`` for writing; on success it replaces ``path`` atomically.

    On an exception the temporary file is removed and ``path`` is left as it was. ``mode`` is
    ``"wb"`` or ``"w"`` (text, UTF-8).
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        with open(tmp, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    _fsync_dir(folder)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_write(path, "w") as f:
        f.write(text)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj)`` to ``path`` atomically."""
    import torch

    with atomic_write(path, "wb") as f:
        torch.save(obj, f)


def atomic_save_npy(path: str | os.PathLike, arr: Any) -> None:
    """``numpy.save(arr)`` to ``path`` (which should end in ``.npy``) atomically."""
    import numpy as np

    with atomic_write(path, "wb") as f:
        np.save(f, arr)


def _norm(v: Any) -> Any:
    return [_norm(x) for x in v] if isinstance(v, (tuple, list)) else v


def config_difference(saved: dict[str, Any], current: dict[str, Any], where: str = "folder") -> list[str]:
    """One human-readable line per field that differs between two config dicts (tuples equal lists);
    ``where`` names what holds ``saved`` ("folder", "checkpoint", ...)."""
    keys = sorted(set(saved) | set(current))
    return [f"{k}: {where} has {saved.get(k, '<absent>')!r}, this run has {current.get(k, '<absent>')!r}"
            for k in keys if _norm(saved.get(k, "<absent>")) != _norm(current.get(k, "<absent>"))]
