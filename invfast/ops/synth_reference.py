"""Torch references of the Transforms-2D compiled ops (:mod:`invfast.ops.synth`): premultiplied-alpha
helpers, the per-object colour operations, the separable blur and the affine warp. The
Transforms-2D generator (:mod:`invfast.synthetic.ops2d`) builds on these same functions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from invfast.ops.color import adjust_hue, luma

__all__ = [
    "unpremultiply",
    "premultiply",
    "gray",
    "hue_shift",
    "brightness",
    "contrast",
    "grayscale",
    "posterize",
    "invert",
    "separable_blur",
    "pixel_centres",
    "sample_grid",
    "affine_warp",
]


def unpremultiply(pm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """pm [B, 4, H, W] -> (rgb [B, 3, H, W] straight colour (0 where transparent), alpha [B, 1, H, W])."""
    a = pm[:, 3:4]
    safe = torch.where(a > 0, a, torch.ones_like(a))
    rgb = torch.where(a > 0, pm[:, :3] / safe, torch.zeros_like(pm[:, :3]))
    return rgb.clamp_(0.0, 1.0), a


def premultiply(rgb: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    return torch.cat([rgb * a, a], dim=1)


def _col(v: torch.Tensor) -> torch.Tensor:
    return v.to(torch.float32).view(-1, 1, 1, 1)


def gray(rgb: torch.Tensor) -> torch.Tensor:
    """Luma [B, 1, H, W] (:func:`invfast.ops.color.luma`)."""
    return luma(rgb)


def hue_shift(rgb: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Rotate hue by ``shift`` [B] (fraction of the colour circle) in HSV, as torchvision's adjust_hue
    (:func:`invfast.ops.color.adjust_hue` with torchvision's sector table, as the compiled kernel)."""
    return adjust_hue(rgb, shift.to(torch.float32).view(-1, 1, 1), sectors=True)


def brightness(rgb: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return (rgb * _col(factor)).clamp_(0.0, 1.0)


def contrast(rgb: torch.Tensor, a: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend with the object's mean luma (alpha-weighted, accumulated in float64)."""
    lum = gray(rgb).to(torch.float64)
    w = a.to(torch.float64)
    mean = ((lum * w).sum(dim=(1, 2, 3)) / w.sum(dim=(1, 2, 3)).clamp_min(1e-12)).to(torch.float32)
    m = mean.view(-1, 1, 1, 1)
    f = _col(factor)
    return (rgb * f + m * (1.0 - f)).clamp_(0.0, 1.0)


def grayscale(rgb: torch.Tensor) -> torch.Tensor:
    return gray(rgb).expand(-1, 3, -1, -1).contiguous()


def posterize(rgb: torch.Tensor, bits: int = 1) -> torch.Tensor:
    """Keep the top ``bits`` of each 8-bit channel (torchvision semantics on the uint8 value)."""
    v = torch.round(rgb * 255.0)
    step = float(2 ** (8 - bits))
    return torch.floor(v / step) * (step / 255.0)


def invert(rgb: torch.Tensor) -> torch.Tensor:
    return 1.0 - rgb


def _shift_sum(x: torch.Tensor, weights: list[float] | torch.Tensor, dim: int) -> torch.Tensor:
    """1-D correlation along ``dim`` of an already padded ``x`` with K taps (list or [B, K] per sample)."""
    k = len(weights) if isinstance(weights, list) else weights.shape[1]
    n = x.shape[dim] - k + 1
    out = None
    for j in range(k):
        w = weights[j] if isinstance(weights, list) else weights[:, j].view(-1, 1, 1, 1)
        term = x.narrow(dim, j, n) * w
        out = term if out is None else out + term
    if out is None:
        raise ValueError("weights must hold at least one tap, got none")
    return out


def separable_blur(x: torch.Tensor, kernels: torch.Tensor) -> torch.Tensor:
    """Blur x [B, C, H, W] with per-sample separable kernels [B, K] (reflect padding where it fits,
    replicate otherwise)."""
    k = kernels.shape[1]
    pad = k // 2
    H, W = x.shape[-2:]
    mode = "reflect" if pad < min(H, W) else "replicate"
    xp = F.pad(x, (pad, pad, 0, 0), mode=mode)
    x = _shift_sum(xp, kernels, dim=3)
    xp = F.pad(x, (0, 0, pad, pad), mode=mode)
    return _shift_sum(xp, kernels, dim=2)


def pixel_centres(n: int) -> torch.Tensor:
    """Normalised coordinates of pixel centres (align_corners=False convention) [n]."""
    return (torch.arange(n, dtype=torch.float32) * 2.0 + 1.0) / n - 1.0


def sample_grid(pm: torch.Tensor, gx: torch.Tensor, gy: torch.Tensor) -> torch.Tensor:
    """Bilinear sampling of pm at normalised coordinates gx, gy [B, H, W] (zeros outside)."""
    grid = torch.stack([gx, gy], dim=-1)
    return F.grid_sample(pm, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def affine_warp(pm: torch.Tensor, inv: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """Warp pm with the inverse map p_in = inv @ (p_out - offset), all in normalised coordinates.

    inv [B, 2, 2] and offset [B, 2] (float64, converted to float32). The grid is evaluated
    elementwise (no matmul), so each sample's result is independent of the batch.
    """
    B, _, H, W = pm.shape
    xs = pixel_centres(W).view(1, 1, W)
    ys = pixel_centres(H).view(1, H, 1)
    inv32 = inv.to(torch.float32)
    off32 = offset.to(torch.float32)
    dx = xs - off32[:, 0].view(B, 1, 1)
    dy = ys - off32[:, 1].view(B, 1, 1)
    gx = dx * inv32[:, 0, 0].view(B, 1, 1) + dy * inv32[:, 0, 1].view(B, 1, 1)
    gy = dx * inv32[:, 1, 0].view(B, 1, 1) + dy * inv32[:, 1, 1].view(B, 1, 1)
    return sample_grid(pm, gx, gy)
