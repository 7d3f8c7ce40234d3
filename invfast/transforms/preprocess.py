"""Resize-then-centre-crop preprocessing (the paper: shorter side to 256, centre crop 224)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from invfast.transforms import functional as Fn
from invfast.transforms._checks import as_images


def resize(images: torch.Tensor, size: int) -> torch.Tensor:
    """Resize the shorter side to ``size`` (bilinear, antialiased when shrinking, like PIL/torchvision).

    Args:
        images: [B, 3, H, W] uint8 or float in [0, 1].

    Returns:
        same dtype, [B, 3, H', W'] with min(H', W') == size.
    """
    images = as_images(images)
    H, W = images.shape[-2:]
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"resize must be a positive int, got {size!r}")
    if H <= W:
        nh, nw = size, int(size * W / H)
    else:
        nh, nw = int(size * H / W), size
    if (nh, nw) == (H, W):
        return images
    x = F.interpolate(
        Fn.to_float(images), size=(nh, nw), mode="bilinear", align_corners=False, antialias=nh < H or nw < W
    )
    return Fn.from_float(x, images.dtype)


def center_crop(images: torch.Tensor, size: int) -> torch.Tensor:
    """Centre crop to ``size`` x ``size`` (torchvision's rounding of the offsets)."""
    images = as_images(images)
    H, W = images.shape[-2:]
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"crop must be a positive int, got {size!r}")
    if size > H or size > W:
        raise ValueError(
            f"crop {size} is larger than the (resized) image {H}x{W}; use a smaller crop or a larger resize"
        )
    top = int(round((H - size) / 2.0))
    left = int(round((W - size) / 2.0))
    return images[..., top : top + size, left : left + size]


def preprocess(images: torch.Tensor, resize: int | None = 256, crop: int | None = 224) -> torch.Tensor:
    """Shorter side to ``resize`` (None: keep), then centre crop ``crop`` (None: keep).

    For 32-px data use e.g. ``preprocess(x, resize=36, crop=32)`` or ``resize=None, crop=32``.

    Args:
        images: [B, 3, H, W] uint8 (0..255) or float (0..1).

    Returns:
        [B, 3, crop, crop], same dtype.
    """
    images = as_images(images)
    if resize is not None:
        images = _resize(images, resize)
    if crop is not None:
        images = center_crop(images, crop)
    return images.contiguous()


_resize = resize
