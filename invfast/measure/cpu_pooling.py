"""Max-pooling of NCHW tensors on the CPU through torch's channels-last kernel, bit for bit.

torch 2.13's CPU ``max_pool2d`` is much slower on an NCHW tensor than on the same tensor in channels-last memory,
even counting both copies (ResNet's stem pool; the figures in docs/performance.md, *Fourth step*).
A maximum is exact, so pooling a channels-last copy and copying the result back to NCHW gives the same bits,
NaN and signed infinities included (``tests/measure/test_cpu_pooling.py``). :func:`nhwc_max_pools` does this
inside every ``nn.MaxPool2d`` of a model with a pair of forward hooks, which the measurement registers on the
CPU for its forward passes and removes afterwards; the model's code and weights are not changed. (A
``TorchFunctionMode`` would catch functional calls too, but it adds a cost to every torch call of the forward
pass, which in a ResNet-18 takes back much of what the faster pool saves.)
"""

from __future__ import annotations

import threading
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

__all__ = ["nhwc_max_pools", "pools_through_nhwc"]

_DTYPES = frozenset({torch.float32, torch.float64, torch.bfloat16, torch.float16})


def pools_through_nhwc(x: Any) -> bool:
    """True where ``x`` is a tensor that :func:`nhwc_max_pools` pools through a channels-last copy: a CPU float
    tensor [B, C, H, W] in NCHW memory (not channels-last as well) that autograd does not record."""
    return (
        isinstance(x, torch.Tensor)
        and x.device.type == "cpu"
        and x.dim() == 4
        and x.dtype in _DTYPES
        and x.is_contiguous()
        and not x.is_contiguous(memory_format=torch.channels_last)
        and not (x.requires_grad and torch.is_grad_enabled())
    )


class _Converted(threading.local):
    """Per thread: for each pool entered and not yet left, whether its input was converted (pools do not nest,
    but a model may run on several threads at once)."""

    def __init__(self) -> None:
        self.stack: list[bool] = []


def nhwc_max_pools(model: nn.Module) -> list[RemovableHandle]:
    """Hooks on every ``nn.MaxPool2d`` of ``model`` (without ``return_indices``): an input that
    :func:`pools_through_nhwc` accepts is pooled as a channels-last copy and the output handed on in NCHW memory,
    the same values bit for bit; other inputs are pooled as they come. The hooks run before any the model already
    has, so those see NCHW outputs. Remove them with ``handle.remove()`` for each handle returned."""
    converted = _Converted()

    def before(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        go = bool(args) and pools_through_nhwc(args[0])
        converted.stack.append(go)
        return (args[0].contiguous(memory_format=torch.channels_last), *args[1:]) if go else None

    def after(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        if converted.stack and converted.stack.pop() and isinstance(output, torch.Tensor):
            return output.contiguous()
        return None

    handles: list[RemovableHandle] = []
    for m in model.modules():
        if isinstance(m, nn.MaxPool2d) and not m.return_indices:
            handles.append(m.register_forward_pre_hook(before, prepend=True))
            handles.append(m.register_forward_hook(after, prepend=True))
    return handles
