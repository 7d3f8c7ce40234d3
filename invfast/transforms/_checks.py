"""Input checks for the transforms: clear ValueErrors that name the argument and the fix."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from invfast._validate import check_finite, compiling

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def as_images(images: Any, name: str = "images", allow_empty: bool = False) -> torch.Tensor:
    """``images`` as an RGB batch [B, 3, H, W], uint8 (0..255) or floating (0..1)."""
    if isinstance(images, np.ndarray):
        images = torch.from_numpy(images)
    if not isinstance(images, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor [B, 3, H, W], got {type(images).__name__}")
    if images.dtype != torch.uint8 and images.dtype not in _FLOATS:
        raise ValueError(
            f"{name} must be uint8 (0..255) or floating (0..1), got {images.dtype}; "
            f"convert with {name}.to(torch.uint8) or {name}.float() / 255"
        )
    if images.dim() != 4:
        hint = f" (add the batch dimension with {name}.unsqueeze(0))" if images.dim() == 3 else ""
        raise ValueError(f"{name} must have 4 dimensions [B, C, H, W], got shape {tuple(images.shape)}{hint}")
    if images.shape[1] != 3:
        hint = " (channels-last? use images.permute(0, 3, 1, 2))" if images.shape[-1] == 3 else ""
        raise ValueError(
            f"{name} must be RGB with 3 channels in dim 1, got {images.shape[1]} channels{hint}; "
            "convert grayscale with images.expand(-1, 3, -1, -1) and drop alpha with images[:, :3]"
        )
    if images.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{name} is an empty batch (B = 0); pass at least one image")
    if images.shape[2] < 2 or images.shape[3] < 2:
        raise ValueError(f"{name} must be at least 2x2 pixels, got {tuple(images.shape[2:])}")
    if images.is_floating_point() and images.numel():
        fix = f"floating {name} must be in [0, 1]"
        if compiling():
            check_finite(images, f"{name} contains NaN/Inf values")
            require((images >= -1e-3) & (images <= 1.0 + 1e-3), fix + "; for 0..255 data pass uint8 or divide by 255")
        else:
            lo, hi = torch.stack(torch.aminmax(images)).tolist()  # one read from the device; NaN propagates
            if not (math.isfinite(lo) and math.isfinite(hi)):
                raise ValueError(f"{name} contains NaN/Inf values")
            if lo < -1e-3 or hi > 1.0 + 1e-3:
                raise ValueError(
                    f"{fix}, got values in [{lo:.3g}, {hi:.3g}]; for 0..255 data pass uint8 or divide by 255"
                )
    return images


def require(ok: torch.Tensor, message: str, detail: Callable[[], str] | None = None) -> None:
    """ValueError(``message`` + ``detail()``) unless every entry of the bool tensor ``ok`` is True.

    Under ``torch.compile`` the check runs inside the graph instead (``torch._assert_async``: a RuntimeError
    with ``message`` when the graph executes), so a value check on the data costs no graph break; ``detail``
    (which may read values back to the host) is only called in eager mode, after the check failed."""
    if compiling():
        torch._assert_async(ok.all(), message)
        return
    if not bool(ok.all()):
        raise ValueError(message + (detail() if detail is not None else ""))
