"""Batched, batch-independent image operations on RGBA objects (float32 [B, 4, H, W]).

Every operation is built from elementwise torch ops (shifted-slice filters instead of conv2d,
sampling grids computed elementwise instead of ``affine_grid``'s matmul), so a sample's pixels
do not depend on the batch it is generated in: item ``idx`` is byte-identical whether it is made
alone, in a batch of 7 or of 4096.

"pm" tensors are premultiplied RGBA in [0, 1]; "rgb" tensors are straight colour [B, 3, H, W]
with a separate alpha [B, 1, H, W].
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from invfast.ops.synth_reference import (_col, _shift_sum, affine_warp, brightness, contrast, gray,  # noqa: F401
                                         grayscale, hue_shift, invert, pixel_centres, posterize, premultiply,
                                         sample_grid, separable_blur, unpremultiply)


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
            term = rgb[:, :, dy:dy + H - 2, dx:dx + W - 2] * (k[dy][dx] / 13.0)
            blurred = term if blurred is None else blurred + term
    degenerate = rgb.clone()
    degenerate[:, :, 1:-1, 1:-1] = blurred
    return (degenerate + (rgb - degenerate) * factor).clamp_(0.0, 1.0)


def gaussian_kernels(sigma: torch.Tensor, size: int) -> torch.Tensor:
    """Normalised 1-D Gaussian taps [B, size] for per-sample ``sigma`` [B] (float64 -> float32)."""
    half = (size - 1) / 2.0
    x = torch.arange(size, dtype=torch.float64) - half
    s = sigma.to(torch.float64).view(-1, 1).clamp_min(1e-6)
    k = torch.exp(-0.5 * (x.view(1, -1) / s) ** 2)
    return (k / k.sum(dim=1, keepdim=True)).to(torch.float32)


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
    taps = gaussian_kernels(torch.full((B,), float(sigma)), size)
    disp = separable_blur(noise, taps) * (alpha / H)
    xs = pixel_centres(W).view(1, 1, W)
    ys = pixel_centres(H).view(1, H, 1)
    return sample_grid(pm, xs + disp[:, 0], ys + disp[:, 1])


def rotation_matrix(angle_deg: torch.Tensor) -> torch.Tensor:
    """[B, 2, 2] counter-clockwise (as displayed, y pointing down) rotation, float64."""
    t = angle_deg.to(torch.float64) * (math.pi / 180.0)
    c, s = torch.cos(t), torch.sin(t)
    return torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)
