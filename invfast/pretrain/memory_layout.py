"""The memory layout of pretraining on the CPU: networks and views stored channels-last (NHWC), where
oneDNN's convolutions run faster (``benchmarks/bench_pretrain.py``), and files written contiguous."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["use_channels_last", "channels_last", "contiguous_state"]


def use_channels_last(setting: bool | None, device: torch.device) -> bool:
    """``TrainConfig.channels_last`` resolved: None means on the CPU only (not measured elsewhere)."""
    return device.type == "cpu" if setting is None else bool(setting)


def channels_last(x: Any) -> Any:
    """A 4-D tensor in channels-last (NHWC) memory order; anything else unchanged."""
    return x.contiguous(memory_format=torch.channels_last) if isinstance(x, torch.Tensor) and x.dim() == 4 else x


def contiguous_state(state: dict[str, Any]) -> dict[str, Any]:
    """A state dict with every tensor in the default (contiguous) memory order, whatever it trained in."""
    return {k: v.contiguous() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
