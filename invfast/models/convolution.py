"""2-D convolution that avoids a oneDNN bug in strided 1x1 convolutions on x86 CPUs.

oneDNN's 1x1 convolution, when its source is channels-last (NHWC), the stride is above 1 and the
input channels per group are fewer than its channel block (8 on AVX2, 16 on AVX-512), copies the
strided source into a workspace too small for it ("reduce to unit stride") during the backward
pass for the weights: heap corruption, seen as a segfault, "double free or corruption", a hang of
the OpenMP team, or silently wrong weight gradients (uxlfoundation/oneDNN#6035, open; oneDNN 3.12
in torch 2.13.0+cpu). A 1x1 convolution with stride s and no padding is the same map as the stride-1
convolution of the input subsampled every s pixels, which never takes that path; :func:`conv2d` does
that wherever the bug can strike and calls ``F.conv2d`` unchanged elsewhere.

A 1x1 weight is channels-last and contiguous at once, so torch picks the NHWC path whenever the
input or the weight was converted with ``.to(memory_format=torch.channels_last)``: the rule is
applied on every CPU tensor, whatever its layout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["ONEDNN_CHANNEL_BLOCK", "Conv2d", "channels_last_hazards", "conv2d", "onednn_rtus_hazard"]

#: the largest channel block of oneDNN's x86 1x1 kernels (AVX-512); below it, strided NHWC is unsafe
ONEDNN_CHANNEL_BLOCK = 16


def _pair(v: int | tuple[int, ...]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[-1]))


def onednn_rtus_hazard(
    in_channels_per_group: int,
    kernel_size: int | tuple[int, ...],
    stride: int | tuple[int, ...],
    padding: int | tuple[int, ...] | str,
    device: torch.device,
) -> bool:
    """True where oneDNN's strided 1x1 convolution can corrupt memory on this device (module docstring)."""
    return (
        device.type == "cpu"
        and _pair(kernel_size) == (1, 1)
        and max(_pair(stride)) > 1
        and padding in (0, (0, 0), "valid")
        and in_channels_per_group < ONEDNN_CHANNEL_BLOCK
    )


def conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | tuple[int, ...] = 1,
    padding: int | tuple[int, ...] | str = 0,
    groups: int = 1,
) -> torch.Tensor:
    """``F.conv2d`` (dilation 1) with the oneDNN workaround: x [B, C, H, W], weight [O, C/groups, k, k] ->
    [B, O, H', W'], the same values (up to float summation order) as ``F.conv2d``."""
    if onednn_rtus_hazard(weight.shape[1], tuple(weight.shape[-2:]), stride, padding, x.device):
        sh, sw = _pair(stride)
        return F.conv2d(x[:, :, ::sh, ::sw], weight, bias, 1, 0, 1, groups)
    return F.conv2d(x, weight, bias, stride, padding, 1, groups)


class Conv2d(nn.Conv2d):
    """``torch.nn.Conv2d`` (same parameters, state dict and repr) computed through :func:`conv2d`."""

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.padding_mode != "zeros" or self.dilation != (1, 1):
            return super()._conv_forward(input, weight, bias)
        return conv2d(input, weight, bias, self.stride, self.padding, self.groups)


def channels_last_hazards(module: nn.Module, device: torch.device) -> list[str]:
    """Names of the plain ``nn.Conv2d`` layers of ``module`` that hit the oneDNN bug when trained
    channels-last on ``device`` (this module's :class:`Conv2d` is safe and not listed)."""
    return [
        name
        for name, m in module.named_modules()
        if type(m) is nn.Conv2d
        and m.dilation == (1, 1)
        and onednn_rtus_hazard(m.in_channels // m.groups, m.kernel_size, m.stride, m.padding, device)
    ]
