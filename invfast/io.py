"""Files written so that a kill at any moment leaves either the old content or the new, never a mix.

Every writer goes through :func:`atomic_write`: the content goes to a temporary file in the same
folder, is flushed and fsynced, renamed over the target, and the folder entry is fsynced.

Checkpoints and partial states are written with :func:`atomic_torch_save` ``(checksum=True)``: the
file ends with a trailer ``INVFAST-SHA256:<hex>`` over the bytes before it (``torch.load`` ignores
it), and :func:`load_verified` refuses a file whose bytes no longer match, then loads it with
``weights_only=True`` (no code from the file ever runs). :func:`output_lock` gives a command
exclusive use of its output folder.

No write follows a symbolic link (:mod:`invfast.runtime.write_paths`, which this module builds on): temporaries are
created with ``O_EXCL | O_NOFOLLOW`` under a random name, the lock file is opened with ``O_NOFOLLOW``, figures
go through :func:`save_figure`, and below a folder registered with :func:`write_root` (a command's output
or cache folder) a link at any component of a path is refused and every temporary is journaled, so that
:func:`clean_temporaries` deletes only what a dead invfast writer left.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import pickle
from collections.abc import Iterator
from typing import IO, Any

from invfast.runtime.write_paths import (
    PLAIN,
    check_path,
    is_link,
    link_error,
    new_temporary,
    plain_fd,
)

__all__ = [
    "atomic_write",
    "atomic_write_text",
    "atomic_torch_save",
    "atomic_save_npy",
    "save_figure",
    "config_difference",
    "without_added_defaults",
    "load_verified",
    "require_regular",
    "special_file_kind",
    "DamagedFileError",
    "OutputLockedError",
    "output_lock",
]

_TRAILER = b"\nINVFAST-SHA256:"
_TRAILER_LEN = len(_TRAILER) + 64 + 1  # marker, hex digest, newline


class DamagedFileError(ValueError):
    """A file invfast wrote was changed, cut short or is not what it claims to be."""


class OutputLockedError(RuntimeError):
    """Another live process holds the output folder."""


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
    ``"wb"`` or ``"w"`` (text, UTF-8). The temporary is a new file (``O_EXCL | O_NOFOLLOW``, a random
    name); a link at ``path`` is replaced, never written through, and below a :func:`write_root` folder a
    link at any component of ``path`` is refused.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    path = os.fspath(path)
    if os.path.isdir(path) and not is_link(path):
        raise ValueError(f"cannot write {path!r}: it is a folder; give a file name")
    full = check_path(path)
    folder = os.path.dirname(full)
    os.makedirs(folder, exist_ok=True)
    fd, tmp = new_temporary(full)
    try:
        with open(fd, mode, encoding="utf-8" if mode == "w" else None) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        check_path(full)  # again: a link planted while the file was written is refused too
        os.replace(tmp, full)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    _fsync_dir(folder)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_write(path, "w") as f:
        f.write(text)


def atomic_torch_save(obj: Any, path: str | os.PathLike, checksum: bool = True) -> None:
    """``torch.save(obj)`` to ``path`` atomically, followed by a SHA-256 trailer unless ``checksum=False``
    (the trailer is ignored by ``torch.load``; :func:`load_verified` checks it)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    with atomic_write(path, "wb") as f:
        f.write(data)
        if checksum:
            f.write(_TRAILER + hashlib.sha256(data).hexdigest().encode("ascii") + b"\n")


def special_file_kind(path: str | os.PathLike) -> str | None:
    """What ``path`` is when it exists and is neither a regular file nor a folder ('a FIFO (named pipe)', 'a
    socket', 'a character device', 'a block device'): reading one can wait forever. None otherwise."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    )
    return next((name for test, name in kinds if test(mode)), None)


def require_regular(path: str | os.PathLike, what: str) -> None:
    """ValueError (one line naming ``what`` and ``path``) when ``path`` is a FIFO, socket or device: invfast reads
    only regular files, and reading one of those can wait forever with no message."""
    kind = special_file_kind(path)
    if kind is not None:
        raise ValueError(f"{what} {os.fspath(path)!r} is {kind}, not a regular file; invfast reads only regular files")


def load_verified(
    path: str | os.PathLike, *, what: str = "file", require_checksum: bool = True, fix: str = "delete it to start over"
) -> Any:
    """``torch.load(path, weights_only=True)`` after checking the SHA-256 trailer written by
    :func:`atomic_torch_save`.

    Raises :class:`DamagedFileError` (naming ``what`` and ``fix``) when the file is empty, cut short,
    changed after it was written, lacks the trailer while ``require_checksum``, or holds anything
    but tensors and plain containers (a pickle that would run code is refused, never executed).
    ``FileNotFoundError`` when it is absent.
    """
    import torch

    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"no {what} at {p!r}")
    require_regular(p, what)
    with open(p, "rb") as f:
        data = f.read()
    if not data:
        raise DamagedFileError(f"the {what} {p!r} is empty (0 bytes); {fix}")
    tail = data[-_TRAILER_LEN:]
    if len(data) >= _TRAILER_LEN and tail.startswith(_TRAILER) and tail.endswith(b"\n"):
        body = data[:-_TRAILER_LEN]
        if hashlib.sha256(body).hexdigest().encode("ascii") != tail[len(_TRAILER) : -1]:
            raise DamagedFileError(
                f"the {what} {p!r} is damaged: its bytes do not match the checksum written with "
                f"it (changed or corrupted after it was saved); {fix}"
            )
    elif require_checksum:
        raise DamagedFileError(
            f"the {what} {p!r} carries no invfast checksum (cut short, or not written by this "
            f"version of invfast); {fix}"
        )
    else:
        body = data
    try:
        return torch.load(io.BytesIO(body), map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the file is not ours
        if isinstance(e, pickle.UnpicklingError) and "weights_only" in str(e):
            # torch's own text suggests weights_only=False, which would run the file's code: not repeated
            first = "it holds Python objects other than tensors and plain containers"
        else:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DamagedFileError(
            f"cannot read the {what} {p!r} ({first[:300]}); only tensors and plain containers are loaded; {fix}"
        ) from e


def atomic_save_npy(path: str | os.PathLike, arr: Any) -> None:
    """``numpy.save(arr)`` to ``path`` (which should end in ``.npy``) atomically."""
    import numpy as np

    with atomic_write(path, "wb") as f:
        np.save(f, arr)


def save_figure(fig: Any, path: str | os.PathLike, **kwargs: Any) -> None:
    """``fig.savefig`` (a matplotlib figure) to ``path`` through :func:`atomic_write`: a kill leaves the
    old picture or the new one, never a cut one, and no link is followed. The format comes from the
    extension (``png`` without one) unless ``format=`` is given."""
    fmt = kwargs.pop("format", None) or os.path.splitext(os.fspath(path))[1][1:].lower() or "png"
    with atomic_write(path, "wb") as f:
        fig.savefig(f, format=fmt, **kwargs)


def _norm(v: Any) -> Any:
    return [_norm(x) for x in v] if isinstance(v, (tuple, list)) else v


def without_added_defaults(config: dict[str, Any], added: dict[str, Any]) -> dict[str, Any]:
    """``config`` without the fields of ``added`` (fields that came after runs were saved, each with the value
    that gives the numbers of before it existed) that hold exactly that value: a run saved before a field
    existed resumes under that value, and only under it."""
    return {k: v for k, v in config.items() if not (k in added and v == added[k])}


def config_difference(saved: dict[str, Any], current: dict[str, Any], where: str = "folder") -> list[str]:
    """One human-readable line per field that differs between two config dicts (tuples equal lists);
    ``where`` names what holds ``saved`` ("folder", "checkpoint", ...)."""
    keys = sorted(set(saved) | set(current))
    return [
        f"{k}: {where} has {saved.get(k, '<absent>')!r}, this run has {current.get(k, '<absent>')!r}"
        for k in keys
        if _norm(saved.get(k, "<absent>")) != _norm(current.get(k, "<absent>"))
    ]


LOCK_NAME = ".invfast.lock"


def _holder(lock_path: str) -> str:
    with contextlib.suppress(OSError, ValueError):
        fd = os.open(lock_path, os.O_RDONLY | PLAIN)
        with open(fd, encoding="utf-8", errors="replace") as f:
            text = f.read(200).strip()
        if text:
            return text
    return "unknown pid"


@contextlib.contextmanager
def output_lock(folder: str | os.PathLike, command: str, option: str = "--out") -> Iterator[str]:
    """Exclusive use of ``folder`` (created if needed) while the block runs.

    Takes ``fcntl.flock`` on ``<folder>/.invfast.lock`` and writes ``pid <n> (<command>)`` into it;
    a second run gets :class:`OutputLockedError` naming the holder. The kernel drops the lock when
    its process dies, so a lock file left by a killed run never blocks; a run that ends normally
    removes it. The lock file is opened without following a link (:class:`SymlinkError`) and must be a
    plain file with one name. ``option`` names the folder in messages (``--out``, ``--cache-dir``).
    Yields the lock file path. On systems without ``fcntl`` the block runs unlocked.
    """
    folder = os.fspath(folder)
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise ValueError(f"{option} {folder!r} exists and is not a folder; give a folder (it is created when absent)")
    os.makedirs(folder, exist_ok=True)
    lock_path = os.path.join(folder, LOCK_NAME)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield lock_path
        return
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | PLAIN, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise link_error(lock_path, "output folder" if option == "--out" else "cache folder", option) from None
            if e.errno in (errno.EISDIR, errno.ENXIO):
                raise ValueError(f"{lock_path!r} is not invfast's lock file (not a regular file); remove it") from None
            raise
        plain_fd(fd, lock_path, "its lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputLockedError(
                f"{folder!r} is in use by another invfast run ({_holder(lock_path)}); wait for it to finish, "
                f"stop it, or choose another {option} folder"
            ) from None
        try:  # the holder before us may have removed the file between our open and flock: lock the new one
            same = os.lstat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} ({command})\n".encode())
        yield lock_path
    finally:
        with contextlib.suppress(OSError):
            if os.lstat(lock_path).st_ino == os.fstat(fd).st_ino:
                os.remove(lock_path)  # still holding the lock, so no one else holds this file
        os.close(fd)  # releases the lock
