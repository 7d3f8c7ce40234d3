"""Image sources for pretraining: :mod:`invfast.data` with the training rules.

The sources (``ArraySource``, ``FolderSource``, ``SyntheticSource``), the ``synthetic:`` spec and its
defaults are :mod:`invfast.data`'s, shared with measurement. Training adds two rules: a folder is read
for image files only (by extension) and strictly, because a training batch cannot skip an image; and
a folder needs the size its images are resized to.
"""

from __future__ import annotations

from typing import Any

from invfast.data import IMAGE_EXTENSIONS
from invfast.data import open_source as _open


def open_training_source(spec: str, load_size: int | None = None, workers: int = 0) -> Any:
    """A training source from a CLI data spec.

    - ``synthetic:objects=61,transforms=rotate+hue,n=5000,size=32,seed=0`` — Transforms-2D by index
      (keys and defaults: :mod:`invfast.data.synthetic`);
    - ``folder:PATH`` — every image file under PATH, resized to ``load_size`` (shorter side, then
      centre crop), decoded by ``workers`` DataLoader worker processes;
    - ``npy:FILE.npy`` — an array [N, 3, H, W] or [N, H, W, 3] held in memory (uint8, 16-bit or other
      integer images, float in 0..1 or 0..255: :mod:`invfast.data.arrays`).
    """
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"data spec {spec!r} must be 'synthetic:...', 'folder:PATH' or 'npy:FILE'")
    kind = spec.split(":", 1)[0]
    if kind not in ("synthetic", "folder", "npy"):
        raise ValueError(f"unknown data kind {kind!r} in {spec!r}; use synthetic:, folder: or npy:")
    if kind == "folder" and load_size is None:
        raise ValueError("folder data needs a load size (the pixel size images are resized to on load)")
    return _open(spec, resize=load_size, strict=True, workers=workers, extensions=IMAGE_EXTENSIONS)


__all__ = ["open_training_source"]
