"""Synthetic-data ops: alpha-compositing a batch of transformed objects onto background images."""
from __future__ import annotations

import torch

from invfast import _loader, backend


def _check(obj: torch.Tensor, backgrounds: torch.Tensor, bg_index: torch.Tensor) -> None:
    if obj.dtype != torch.float32 or obj.dim() != 4 or obj.shape[1] != 4:
        raise ValueError(f"synth_composite: obj must be float32 [B, 4, H, W] premultiplied RGBA, "
                         f"got {obj.dtype} {tuple(obj.shape)}")
    if backgrounds.dtype != torch.uint8 or backgrounds.dim() != 4 or backgrounds.shape[1] != 3:
        raise ValueError(f"synth_composite: backgrounds must be uint8 [N, 3, H, W], "
                         f"got {backgrounds.dtype} {tuple(backgrounds.shape)}")
    if backgrounds.shape[2:] != obj.shape[2:]:
        raise ValueError(f"synth_composite: background size {tuple(backgrounds.shape[2:])} differs from "
                         f"object size {tuple(obj.shape[2:])}")
    if bg_index.dtype != torch.int64 or bg_index.dim() != 1 or bg_index.shape[0] != obj.shape[0]:
        raise ValueError(f"synth_composite: bg_index must be int64 [B={obj.shape[0]}], "
                         f"got {bg_index.dtype} {tuple(bg_index.shape)}")
    if bg_index.numel() and (int(bg_index.min()) < 0 or int(bg_index.max()) >= backgrounds.shape[0]):
        raise ValueError(f"synth_composite: bg_index out of range for {backgrounds.shape[0]} backgrounds")


@backend.register_reference("synth_composite")
def synth_composite_reference(obj: torch.Tensor, backgrounds: torch.Tensor, bg_index: torch.Tensor) -> torch.Tensor:
    """obj float32 [B, 4, H, W] (premultiplied RGBA in [0, 1]), backgrounds uint8 [N, 3, H, W],
    bg_index int64 [B] -> uint8 [B, 3, H, W]:
    ``round_half_even(clamp(bg * (1 - a) + rgb * 255, 0, 255))`` evaluated in float32 in exactly this order."""
    bg = backgrounds.index_select(0, bg_index).to(torch.float32)
    one_minus_a = 1.0 - obj[:, 3:4]
    out = bg * one_minus_a + obj[:, :3] * 255.0
    return out.clamp_(0.0, 255.0).round_().to(torch.uint8)


def composite(obj: torch.Tensor, backgrounds: torch.Tensor, bg_index: torch.Tensor) -> torch.Tensor:
    """Alpha-composite premultiplied RGBA objects over backgrounds[bg_index] (compiled when available)."""
    _check(obj, backgrounds, bg_index)
    obj = obj.contiguous()
    backgrounds = backgrounds.contiguous()
    bg_index = bg_index.contiguous()
    return backend.call("synth_composite", obj, backgrounds, bg_index)


def _register_compiled() -> None:
    if _loader.load() is None:
        return
    try:
        torch.ops.invfast.synth_composite
    except (AttributeError, RuntimeError):
        return

    @torch.library.register_fake("invfast::synth_composite")
    def _(obj, backgrounds, bg_index):
        return obj.new_empty((obj.shape[0], 3, obj.shape[2], obj.shape[3]), dtype=torch.uint8)


_register_compiled()
