"""The memory layout of pretraining on the CPU: networks and views stored channels-last (NHWC), where
oneDNN's convolutions run faster (``benchmarks/bench_pretrain.py``), and files written contiguous."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from invfast.models.convolution import ONEDNN_CHANNEL_BLOCK, channels_last_hazards

__all__ = ["use_channels_last", "channels_last", "contiguous_state"]


def use_channels_last(setting: bool | None, device: torch.device, model: torch.nn.Module | None = None) -> bool:
    """``TrainConfig.channels_last`` resolved: None means on the CPU only (not measured elsewhere), and
    only for a ``model`` free of the layers that corrupt memory there when trained channels-last
    (:func:`invfast.models.convolution.channels_last_hazards`; invfast's own models have none).
    ``True`` with such a layer is refused: it would crash in native code."""
    if setting is False or (setting is None and device.type != "cpu"):
        return False
    hazards = channels_last_hazards(model, device) if model is not None else []
    if not hazards:
        return True
    problem = (
        f"layer {hazards[0]!r} is a strided 1x1 convolution with fewer than {ONEDNN_CHANNEL_BLOCK} input channels, "
        "which corrupts memory in oneDNN when trained channels-last on the CPU (uxlfoundation/oneDNN#6035)"
    )
    remedy = "build it with invfast.models.convolution.Conv2d to keep channels-last"
    if setting:
        raise ValueError(f"channels_last=True: {problem}; use channels_last=False, or {remedy}")
    warnings.warn(f"training contiguous (NCHW), not channels-last: {problem}; {remedy}", RuntimeWarning, stacklevel=3)
    return False


def channels_last(x: Any) -> Any:
    """A 4-D tensor in channels-last (NHWC) memory order; anything else unchanged."""
    return x.contiguous(memory_format=torch.channels_last) if isinstance(x, torch.Tensor) and x.dim() == 4 else x


def contiguous_state(state: dict[str, Any]) -> dict[str, Any]:
    """A state dict with every tensor in the default (contiguous) memory order, whatever it trained in."""
    return {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
