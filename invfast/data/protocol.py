"""The one image-source protocol shared by measurement and pretraining.

A source gives random access to equally sized images by index, so the measurement engine can shard
and resume from any position and the trainer decides the sampling order (never the source):

- ``len(source)``: number of images;
- ``source.load(indices) -> (images [B, C, H, W] uint8 (0..255) or float (0..1), ok [B] bool)``:
  rows whose ``ok`` is False could not be decoded (their pixels are zeros);
- ``source.get(indices) -> uint8 [B, 3, H, W]``: the same images as uint8 for training; raises
  :class:`ImageDecodeError` when one of them cannot be read (a training batch has no holes);
- ``source.batches(index_batches, pin_memory=False)``: ``load`` over many batches in order, the way
  to read a whole pass (a folder decodes the next batches in DataLoader worker processes meanwhile);
  ``pin_memory=True`` returns page-locked host images, for an asynchronous upload to a CUDA device;
- ``source.groups``: ``None``, or an int64 tensor [N] of group ids (object/scene, real-world mode);
- ``source.spec``: a string naming the data (recorded in checkpoints and reports);
- ``source.describe()``: a JSON-able description, used to recognise the same run when resuming.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import torch


class ImageDecodeError(ValueError):
    """An image file could not be decoded and the source is strict (or the images are for training)."""


@runtime_checkable
class ImageSource(Protocol):
    """What measurement and pretraining read images through (see the module docstring)."""

    groups: torch.Tensor | None
    spec: str

    def __len__(self) -> int: ...

    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def get(self, indices: Sequence[int] | torch.Tensor) -> torch.Tensor: ...

    def describe(self) -> dict[str, Any]: ...


#: a float image whose maximum is above 1 by more than this is not 0..1 (rounding noise of 0..1 images passes)
FLOAT_UNIT_TOLERANCE = 1e-3
#: below this maximum a float image that is not 0..1 is not told apart from a 0..1 one with overshoot either:
#: read as 0..255 it would be black (its brightest pixel under 2 of 255 levels)
FLOAT_AMBIGUOUS_MAX = 2.0


def float_range_scale(lo: float, hi: float, what: str = "images") -> float:
    """255 or 1: the scale of float pixels with values in ``[lo, hi]`` -- 1 for 0..1 (within
    :data:`FLOAT_UNIT_TOLERANCE`), 255 for 0..255 with a maximum above :data:`FLOAT_AMBIGUOUS_MAX` -- or one
    ValueError naming the range: below 0, above 255, or slightly above 1 (a 0..1 image with overshoot, or a
    0..255 one that would be black: which, the values cannot tell). The one rule of float images, in memory
    (:func:`float_scale`) and in files (:func:`invfast.data.folder.image_to_rgb`)."""
    tol = FLOAT_UNIT_TOLERANCE
    if lo >= -tol and hi <= 1 + tol:
        return 1.0
    if lo >= -tol and FLOAT_AMBIGUOUS_MAX < hi <= 255 + tol:
        return 255.0
    if lo >= -tol and hi <= FLOAT_AMBIGUOUS_MAX:
        raise ValueError(
            f"{what}: float values in [{lo:.4g}, {hi:.4g}]: slightly above 1, so neither 0..1 nor 0..255 can be "
            "told; clip them to 0..1 (np.clip(a, 0, 1)) if they are 0..1 with overshoot, or pass uint8"
        )
    raise ValueError(
        f"{what}: float values in [{lo:.4g}, {hi:.4g}]: the scale cannot be told (expected 0..1 or 0..255); "
        "rescale them or pass uint8"
    )


def float_scale(images: torch.Tensor, what: str = "images") -> float:
    """255 or 1: the scale float ``images`` are on (0..1, or already 0..255; :func:`float_range_scale`); one
    ValueError saying what was found for NaN/Inf or a range that is neither (checked once where images enter
    invfast)."""
    bad = int((~torch.isfinite(images)).sum())
    if bad:
        raise ValueError(f"{what} hold {bad} NaN/Inf value(s); replace them (they cannot be turned into pixels)")
    if images.numel() == 0:
        return 1.0
    return float_range_scale(float(images.min()), float(images.max()), what)


def integer_scale(lo: int, hi: int, what: str = "images") -> float:
    """The divisor taking integer pixels with values in ``[lo, hi]`` to 0..255, read by their range: 1 for
    0..255, 257 for 16-bit values (up to 65535); one ValueError naming the range for anything else (the
    rule of 32-bit integer image files and integer ``.npy`` arrays)."""
    if lo < 0 or hi > 65535:
        raise ValueError(
            f"{what} hold integer values in [{lo}, {hi}]: the scale cannot be told (expected 0..255, or "
            "0..65535 for 16-bit); convert them to uint8"
        )
    return 257.0 if hi > 255 else 1.0


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """uint8 images unchanged; float images in 0..1 -> uint8 0..255 (rounded, clamped)."""
    if images.dtype == torch.uint8:
        return images
    return (images.clamp(0, 1) * 255).round().to(torch.uint8)


class Source(abc.ABC):
    """Base of invfast's sources: ``get`` and ``batches`` from ``load``; subclasses define
    ``__len__``, ``load`` and ``describe``."""

    groups: torch.Tensor | None = None
    spec: str = "source"

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of images."""

    @abc.abstractmethod
    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Images [B, C, H, W] at ``indices`` (uint8 0..255 or float 0..1) and a bool [B] mask of those that decoded."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """What identifies this source's content (for resume fingerprints and reports)."""

    def identity(self) -> str:
        """A SHA-256 (hex) naming which images this source holds, equal for the same images wherever and
        whenever they are read (so runs on different machines can be compared): here over ``describe()``;
        sources refine it (file names and sizes, image bytes)."""
        return _sha256_json(self.describe())

    def get(self, indices: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """uint8 images [B, C, H, W] at ``indices``; ImageDecodeError if one cannot be read."""
        images, ok = self.load(indices)
        if not bool(ok.all()):
            bad = torch.as_tensor(indices, dtype=torch.long).reshape(-1)[~ok].tolist()
            raise ImageDecodeError(
                f"{self.spec}: image(s) {bad[:5]} cannot be read; remove them from the data "
                "(training batches cannot skip images)"
            )
        return to_uint8(images)

    def batches(
        self, index_batches: Iterable[Sequence[int] | torch.Tensor], *, pin_memory: bool = False
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``load`` of each batch of indices, in order; ``pin_memory``: host images come back
        page-locked (needs a CUDA build of torch), so ``.to(cuda, non_blocking=True)`` is asynchronous."""
        for idx in index_batches:
            images, ok = self.load(idx)
            yield (pin(images) if pin_memory else images), ok


def _sha256_json(obj: Any) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def pin(images: torch.Tensor) -> torch.Tensor:
    """``images`` in page-locked host memory (unchanged when already pinned or not on the host)."""
    if images.device.type != "cpu" or images.is_pinned():
        return images
    return images.pin_memory()


__all__ = [
    "FLOAT_AMBIGUOUS_MAX",
    "FLOAT_UNIT_TOLERANCE",
    "ImageDecodeError",
    "ImageSource",
    "Source",
    "float_range_scale",
    "float_scale",
    "integer_scale",
    "pin",
    "to_uint8",
]
