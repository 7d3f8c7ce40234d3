"""From what a user gives to a source: :func:`as_source` (Python values and paths) and
:func:`open_source` (the data specs of the command lines: ``synthetic:...``, ``folder:PATH``,
``npy:FILE``). The sources themselves live in :mod:`invfast.data.tensors`, :mod:`invfast.data.folder`
and :mod:`invfast.data.synthetic`; their protocol in :mod:`invfast.data.protocol`."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from invfast.data.arrays import read_image_array
from invfast.data.folder import FolderSource
from invfast.data.protocol import Source
from invfast.data.synthetic import (
    heldout_split,
    synthetic_source,
)
from invfast.data.tensors import ArraySource, DatasetSource, TensorSource


def open_source(
    spec: str | os.PathLike,
    *,
    resize: int | None = None,
    n: int | None = None,
    strict: bool = False,
    workers: int = 0,
    extensions: tuple[str, ...] | None = None,
    native: bool = False,
    listing: str = "invfast",
    pixels: str = "range",
    listed: Any = None,
) -> Source:
    """A source from a data spec string.

    - ``synthetic:KEY=VALUE,...``: Transforms-2D by index (keys and defaults: :mod:`invfast.data.synthetic`);
    - ``folder:PATH`` or a folder path: every image under PATH, ``resize`` px square (default 256);
    - ``npy:FILE.npy``: an array [N, 3, H, W] or [N, H, W, 3] held in memory (the dtypes it may have:
      :mod:`invfast.data.arrays`).

    ``n`` keeps the first n images; ``strict``, ``workers``, ``extensions``, ``native`` (folder images as
    loaded, each at its own size), ``listing`` and ``pixels`` (``ImageFolder``'s list, Pillow's reading) and
    ``listed`` (the folder's listing made already: :func:`~invfast.data.folder.folder_listing`) go to
    :class:`FolderSource`.
    """
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError(f"data spec must be a string, got {type(spec).__name__}")
    s = os.fspath(spec)
    if s == "synthetic" or s.startswith("synthetic:"):
        return synthetic_source(s, n=n)
    if s.startswith("npy:"):
        path = s[len("npy:") :]
        arr = read_image_array(path)
        return ArraySource(arr if n is None else arr[:n], spec=f"npy:{os.path.abspath(path)}")
    if s.startswith("folder:"):
        s = s[len("folder:") :]
    elif not os.path.isdir(s) and ":" in s and not os.path.exists(s):
        raise ValueError(f"data spec {spec!r} must be 'synthetic:...', 'folder:PATH', 'npy:FILE' or a folder")
    elif os.path.isfile(s):
        hint = f"npy:{s} for an array file" if s.lower().endswith(".npy") else "the folder that holds it"
        raise ValueError(f"data {s!r} is a file, not a folder of images; give {hint}")
    return FolderSource(
        s,
        resize=256 if resize is None else resize,
        n=n,
        strict=strict,
        workers=workers,
        extensions=extensions,
        native=native,
        listing=listing,
        pixels=pixels,
        listed=listed,
    )


def folder_of(data: Any) -> str | None:
    """The folder that ``data`` names as :func:`as_source` reads it (``'folder:PATH'`` or a folder's path);
    None for anything else."""
    if not isinstance(data, (str, os.PathLike)):
        return None
    s = os.fspath(data)
    if s == "synthetic" or s.startswith(("synthetic:", "npy:")):
        return None
    s = s[len("folder:") :] if s.startswith("folder:") else s
    return s if os.path.isdir(s) else None


def as_source(
    data: Any,
    *,
    n: int | None = None,
    resize: int = 256,
    strict: bool = False,
    groups: Any = None,
    workers: int = 0,
    native: bool = False,
    listing: str = "invfast",
    pixels: str = "range",
    listed: Any = None,
) -> Any:
    """Turn what the user gave into a source: a source, tensor/array, folder path, a spec string
    (:func:`open_source`), or a map-style dataset. ``n`` keeps the first n images; ``native``, ``listing``,
    ``pixels`` and ``listed`` apply to folders (:class:`~invfast.data.folder.FolderSource`)."""
    if hasattr(data, "load") and hasattr(data, "describe") and hasattr(data, "__len__"):
        src = data
    elif isinstance(data, (torch.Tensor, np.ndarray)):
        x = data if n is None else data[:n]
        return TensorSource(x, groups=None if groups is None else np.asarray(groups)[: len(x)])
    elif isinstance(data, (str, os.PathLike)):
        return open_source(
            data,
            resize=resize,
            n=n,
            strict=strict,
            workers=workers,
            native=native,
            listing=listing,
            pixels=pixels,
            listed=listed,
        )
    else:
        return DatasetSource(data, n=n)
    if groups is not None:
        raise ValueError("groups can only be given with in-memory tensors; folders group by subfolder")
    return src


def heldout_source(spec: str, train: Any) -> Any:
    """Images for the invariance measured during pretraining: the synthetic 'val' split, else ``train``."""
    if isinstance(spec, str) and (spec == "synthetic" or spec.startswith("synthetic:")):
        return heldout_split(spec, "val")
    return train


__all__ = ["as_source", "folder_of", "heldout_source", "open_source"]
