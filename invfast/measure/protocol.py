"""Measurement protocols: invfast's (the default) and the one of Ericsson et al.'s (2021) published code.

>>> from invfast.measure.protocol import get_protocol
>>> get_protocol("ericsson").include_identity
True

Every knob where the two differ is a field of :class:`Protocol`; ``docs/measure.md`` has the table
with the reasons invfast's default departs from the original.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["PROTOCOLS", "Protocol", "get_protocol", "resample_indices", "resize_center_crop"]


@dataclass(frozen=True)
class Protocol:
    """How a measurement is made beyond the model, data and grid.

    Attributes:
        name: 'invfast' or 'ericsson'.
        include_identity: identity parameters are averaged into each transform's mean.
        shrinkage: default covariance shrinkage for ``FeatureStats.finalize`` ('trace' or a λ >= 0 added as λ·I).
        random_init_shrinkage: λ the original adds for a randomly initialised model only (informative:
            pass it as ``shrinkage`` when measuring such a model).
        preprocess_after_transform: transforms act on the images as loaded and Resize(resize) +
            CenterCrop(crop) follow (the original); otherwise resize first, transform, then crop.
        with_replacement: evaluated images are drawn with replacement (seeded) from the data, whose
            whole set gives the reference statistics.
        transforms: 'registry' (invfast's grids and ops) or 'ericsson' (:mod:`invfast.transforms.ericsson`).
        real_world_self_pairs: real-world cosine means over a group include each view paired with itself
            (the distance never does: the original computes it with ``torch.pdist``, distinct pairs only).
        resize, crop: the sizes of the post-transform preprocessing (pixels); under ``transforms='ericsson'``
            they also set the translation range ((resize - crop) / 2), the crop boxes (fractions of
            ``resize``) and the side of the crop views (``crop``), as in the original.
        real_world_resize, real_world_crop: real-world views are read as loaded and given
            ``Resize(real_world_resize)`` + ``CenterCrop(real_world_crop)`` (the original's 224, 224); None: the
            measurement's own loading (``resize`` px squares, then ``crop``).
        folder_listing: the image list of a folder that the images of ``measure_invariance`` (and its draw)
            index: ``'invfast'`` (every file, sorted by relative path, hidden ones skipped) or ``'imagefolder'``
            (``torchvision.datasets.ImageFolder(root).samples`` of torchvision 0.10: :class:`~invfast.data.folder.
            FolderSource`'s ``listing``). Real-world groups are always one subfolder each, listed by invfast.
        file_pixels: how 16-bit, 32-bit and float files become 8-bit RGB: ``'range'`` (scaled by what they
            hold) or ``'pillow'`` (``Image.open(f).convert("RGB")``, the original's loader: clipped, floats
            truncated, with a warning naming the file).
        blur_rounding: the bytes of blur's views under ``transforms='ericsson'``: ``'truncate'``
            (torchvision 0.10, which the original pins) or ``'round'`` (torchvision 0.29).
    """

    name: str
    include_identity: bool = False
    shrinkage: str | float = "trace"
    random_init_shrinkage: float | None = None
    preprocess_after_transform: bool = False
    with_replacement: bool = False
    transforms: str = "registry"
    real_world_self_pairs: bool = False
    resize: int = 256
    crop: int = 224
    real_world_resize: int | None = None
    real_world_crop: int | None = None
    folder_listing: str = "invfast"
    file_pixels: str = "range"
    blur_rounding: str = "truncate"

    def __post_init__(self) -> None:
        from invfast.data.folder import FILE_PIXELS, LISTINGS
        from invfast.transforms.ericsson_ops import BLUR_ROUNDINGS

        for field, value, allowed in (
            ("folder_listing", self.folder_listing, LISTINGS),
            ("file_pixels", self.file_pixels, FILE_PIXELS),
            ("blur_rounding", self.blur_rounding, BLUR_ROUNDINGS),
        ):
            if value not in allowed:
                raise ValueError(f"Protocol.{field} must be one of {', '.join(allowed)}, got {value!r}")

    def transform(self, t: Any, seed: int = 0) -> Any:
        """The protocol's version of test transform ``t`` (a name or a transform object)."""
        if self.transforms == "registry":
            return t
        from invfast.transforms import ericsson

        name = t if isinstance(t, str) else getattr(t, "name", None)
        from invfast.transforms import TEST_TRANSFORMS

        if name not in TEST_TRANSFORMS:
            return t
        return ericsson.get(name, seed=seed, resize=self.resize, crop=self.crop, blur_rounding=self.blur_rounding)


PROTOCOLS: dict[str, Protocol] = {
    "invfast": Protocol(name="invfast"),
    "ericsson": Protocol(
        name="ericsson",
        include_identity=True,
        shrinkage=0.0,
        random_init_shrinkage=1e-10,
        preprocess_after_transform=True,
        with_replacement=True,
        transforms="ericsson",
        real_world_self_pairs=True,
        real_world_resize=224,
        real_world_crop=224,
        folder_listing="imagefolder",
        file_pixels="pillow",
    ),
}


def get_protocol(protocol: str | Protocol) -> Protocol:
    """The named protocol ('invfast', 'ericsson') or a given :class:`Protocol`."""
    if isinstance(protocol, Protocol):
        return protocol
    if not isinstance(protocol, str) or protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    return PROTOCOLS[protocol]


def resize_center_crop(x: torch.Tensor, resize: int, crop: int) -> torch.Tensor:
    """torchvision 0.10 ``Resize(resize)`` + ``CenterCrop(crop)`` on PIL images: the shorter side becomes
    ``resize`` (the longer ``int(resize * long / short)``; width on ties), bilinear -- uint8 images exactly as
    Pillow resizes them, float ones with torch's antialiased bilinear
    (:func:`invfast.transforms.ericsson_ops.resize_bilinear`) -- then the centre ``crop`` (offsets rounded half to
    even).

    x: [B, C, H, W] uint8 or float -> [B, C, crop, crop] in the dtype of ``x``.
    """
    from invfast.transforms.ericsson_ops import resize_bilinear

    H, W = x.shape[-2:]
    if crop > resize:
        raise ValueError(f"crop ({crop}) must not exceed resize ({resize})")
    if W <= H:
        nw, nh = resize, int(resize * H / W)
    else:
        nh, nw = resize, int(resize * W / H)
    top, left = round((nh - crop) / 2.0), round((nw - crop) / 2.0)
    return resize_bilinear(x, (nh, nw), box=(top, left, crop, crop))


def resample_indices(n: int, k: int | None, seed: int) -> torch.Tensor:
    """int64 [k]: ``k`` (default ``n``) image indices drawn uniformly with replacement from 0..n-1, as the
    original draws them: ``np.random.seed(seed)`` then ``np.random.choice(np.arange(n), k)`` (numpy's legacy
    ``RandomState``, whose stream every numpy version keeps: the same indices for the same ``n``, ``k``, seed)."""
    if n < 1:
        raise ValueError("no images to draw from")
    size = n if k is None else int(k)
    return torch.from_numpy(np.random.RandomState(int(seed)).choice(np.arange(n), size).astype(np.int64))


class ResampledSource:
    """The images ``indices`` of ``source`` (repeats allowed): ``load(i)`` loads ``source[indices[i]]``."""

    def __init__(self, source: Any, indices: torch.Tensor) -> None:
        self.source, self.indices = source, indices.to(torch.int64)

    def __len__(self) -> int:
        return int(self.indices.numel())

    def load(self, indices: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.source.load(self.indices[torch.as_tensor(indices, dtype=torch.int64)])

    def identity(self) -> str:
        """SHA-256 over the underlying source's identity and the drawn indices."""
        import hashlib

        inner = self.source.identity() if hasattr(self.source, "identity") else repr(self.source.describe())
        return hashlib.sha256(inner.encode() + self.indices.numpy().tobytes()).hexdigest()

    def describe(self) -> dict[str, Any]:
        return {
            "resampled_from": self.source.describe(),
            "n": len(self),
            "indices_sum": int(self.indices.sum()),
            "indices_head": self.indices[:8].tolist(),
        }
