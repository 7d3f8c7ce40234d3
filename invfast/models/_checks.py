"""Input checks shared by the models: descriptors, image sizes, checkpoints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from invfast._validate import require


def check_descriptor(i: Any, inv_dim: int, batch: int | None = None, clamp: bool = False) -> torch.Tensor:
    """``i`` as a float tensor [K] or [B, K] with entries in [0, 1].

    Raises ValueError when the last dimension is not ``inv_dim``, when a [B, K] descriptor does not
    match the image batch ``batch``, or when entries leave [0, 1] (unless ``clamp`` is True, in
    which case they are clamped).
    """
    if not isinstance(i, torch.Tensor):
        try:
            i = torch.as_tensor(i, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(
                f"i (invariance descriptor) must be a tensor or sequence of floats, got {type(i).__name__}"
            ) from exc
    if not i.is_floating_point():
        i = i.float()
    if i.dim() not in (1, 2) or i.shape[-1] != inv_dim:
        raise ValueError(
            f"i (invariance descriptor) must have shape [K={inv_dim}] or [B, K={inv_dim}], got {tuple(i.shape)}"
        )
    if i.dim() == 2 and batch is not None and i.shape[0] != batch:
        raise ValueError(
            f"i has {i.shape[0]} descriptors but the image batch has {batch}; pass one descriptor [K] "
            "for the whole batch or one per image [B, K]"
        )
    require(torch.isfinite(i).all(), "i (invariance descriptor) contains NaN/Inf")
    if clamp:
        return i.clamp(0.0, 1.0)
    if i.device.type != "cpu":  # the message's min and max would be a read from the device at every forward
        require(((i >= 0) & (i <= 1)).all(), "i (invariance descriptor) must lie in [0, 1] (pass clamp=True to clamp)")
    elif bool(((i < 0) | (i > 1)).any()):
        raise ValueError(
            f"i (invariance descriptor) must lie in [0, 1]; got min {float(i.min()):.4g}, max "
            f"{float(i.max()):.4g} (pass clamp=True to clamp)"
        )
    return i


def check_images(x: Any, in_channels: int, min_size: int, max_size: int | None, hint: str) -> torch.Tensor:
    """``x`` as a floating [B, C, H, W] tensor whose spatial size fits the stem."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor [B, {in_channels}, H, W], got {type(x).__name__}")
    if x.dim() != 4 or x.shape[1] != in_channels:
        raise ValueError(f"x must have shape [B, {in_channels}, H, W], got {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"x must be floating point (normalised images), got {x.dtype}; convert with x.float() / 255")
    h, w = x.shape[-2:]
    if min(h, w) < min_size or (max_size is not None and max(h, w) > max_size):
        rng = f"{min_size}..{max_size}" if max_size is not None else f">= {min_size}"
        raise ValueError(f"x has spatial size {h}x{w} but this stem expects {rng} px; {hint}")
    return x


class CheckedStateDict:
    """Mixin: ``load_state_dict`` raises a ValueError naming missing, unexpected and mis-shaped keys."""

    arch: str = "model"

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False):
        own = nn.Module.state_dict(self)  # type: ignore[call-overload]  # a mixin of nn.Module subclasses
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        shapes = [
            f"{k}: checkpoint {tuple(state_dict[k].shape)} vs model {tuple(v.shape)}"
            for k, v in own.items()
            if k in state_dict and hasattr(state_dict[k], "shape") and tuple(state_dict[k].shape) != tuple(v.shape)
        ]
        if shapes or (strict and (missing or unexpected)):

            def few(keys: list[str]) -> str:
                return ", ".join(keys[:8]) + (f", ... ({len(keys)} in all)" if len(keys) > 8 else "")

            parts = []
            if missing:
                parts.append(f"missing keys: {few(missing)}")
            if unexpected:
                parts.append(f"unexpected keys: {few(unexpected)}")
            if shapes:
                parts.append(f"shape mismatches: {few(shapes)}")
            raise ValueError(
                f"checkpoint does not match architecture {self.arch!r} (was it saved from another "
                f"architecture or width?): " + "; ".join(parts)
            )
        return nn.Module.load_state_dict(self, state_dict, strict=strict, assign=assign)  # type: ignore[arg-type]
