"""Batched, batch-independent image operations on RGBA objects (float32 [B, 4, H, W]).

Every operation is built from elementwise torch ops (shifted-slice filters instead of conv2d,
sampling grids computed elementwise instead of ``affine_grid``'s matmul), so a sample's pixels
do not depend on the batch it is generated in: item ``idx`` is byte-identical whether it is made
alone, in a batch of 7 or of 4096.

"pm" tensors are premultiplied RGBA in [0, 1]; "rgb" tensors are straight colour [B, 3, H, W]
with a separate alpha [B, 1, H, W].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from invfast.ops.kernels import gaussian_taps
from invfast.ops.synth_reference import pixel_centres, sample_grid, separable_blur

# ----------------------------------------------------------------------------- colour (straight rgb)


def sharpen(rgb: torch.Tensor, factor: float) -> torch.Tensor:
    """torchvision adjust_sharpness: blend with the 3x3 smoothed image ([[1,1,1],[1,5,1],[1,1,1]]/13);
    border pixels keep their values."""
    H, W = rgb.shape[-2:]
    if H < 3 or W < 3:
        return rgb
    k = [[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]
    blurred = None
    for dy in range(3):
        for dx in range(3):
            term = rgb[:, :, dy : dy + H - 2, dx : dx + W - 2] * (k[dy][dx] / 13.0)
            blurred = term if blurred is None else blurred + term
    assert blurred is not None  # the 3x3 loop ran
    degenerate = rgb.clone()
    degenerate[:, :, 1:-1, 1:-1] = blurred
    return (degenerate + (rgb - degenerate) * factor).clamp_(0.0, 1.0)


def pixelate(pm: torch.Tensor, ratio: float) -> torch.Tensor:
    """Box-filter down to ``ratio`` of the side, then nearest-neighbour back up."""
    H, W = pm.shape[-2:]
    small = F.adaptive_avg_pool2d(pm, (max(1, round(H * ratio)), max(1, round(W * ratio))))
    return F.interpolate(small, size=(H, W), mode="nearest")


def erase(pm: torch.Tensor, top: torch.Tensor, left: torch.Tensor, side: int) -> torch.Tensor:
    """Make the ``side x side`` square at (top, left) [B] (int pixels) fully transparent."""
    H, W = pm.shape[-2:]
    ys = torch.arange(H).view(1, H, 1)
    xs = torch.arange(W).view(1, 1, W)
    t = top.view(-1, 1, 1)
    lft = left.view(-1, 1, 1)
    inside = (ys >= t) & (ys < t + side) & (xs >= lft) & (xs < lft + side)
    return pm * (~inside).unsqueeze(1).to(pm.dtype)


# ----------------------------------------------------------------------------- geometry


def elastic(pm: torch.Tensor, noise: torch.Tensor, alpha: float, sigma: float) -> torch.Tensor:
    """torchvision ElasticTransform: displacement = GaussianBlur(noise, sigma) * alpha / size.

    noise [B, 2, H, W] uniform in [-1, 1] (x and y displacement fields before smoothing).
    """
    B, _, H, W = pm.shape
    size = int(8 * sigma + 1)
    size += 1 - size % 2
    size = min(size, 2 * min(H, W) - 1)
    taps = gaussian_taps(torch.full((B,), float(sigma)), size=size).to(torch.float32)
    disp = separable_blur(noise, taps) * (alpha / H)
    xs = pixel_centres(W).view(1, 1, W)
    ys = pixel_centres(H).view(1, H, 1)
    return sample_grid(pm, xs + disp[:, 0], ys + disp[:, 1])
