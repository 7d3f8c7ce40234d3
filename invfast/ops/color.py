"""RGB <-> HSV on float images in [0, 1] (torchvision's conventions): shared by the references of
the compiled ops and by the transforms above them."""
from __future__ import annotations

import torch

from invfast.constants import LUMA_WEIGHTS

__all__ = ["rgb_to_hsv", "hsv_to_rgb", "luma", "blend"]


def luma(x: torch.Tensor) -> torch.Tensor:
    """Luma [..., 1, H, W] of RGB ``x`` [..., 3, H, W] (ITU-R 601-2 weights)."""
    r, g, b = x.unbind(dim=-3)
    return (LUMA_WEIGHTS[0] * r + LUMA_WEIGHTS[1] * g + LUMA_WEIGHTS[2] * b).unsqueeze(-3)


def blend(a: torch.Tensor, b: torch.Tensor, ratio: torch.Tensor) -> torch.Tensor:
    """``ratio * a + (1 - ratio) * b`` clamped to [0, 1] (torchvision ``_blend``)."""
    return (ratio * a + (1.0 - ratio) * b).clamp_(0.0, 1.0)


def rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """RGB [..., 3, H, W] in [0, 1] -> HSV with hue in [0, 1) (torchvision ``_rgb2hsv``)."""
    r, g, b = x.unbind(dim=-3)
    maxc = x.amax(dim=-3)
    minc = x.amin(dim=-3)
    eqc = maxc == minc
    cr = maxc - minc
    ones = torch.ones_like(maxc)
    s = cr / torch.where(eqc, ones, maxc)
    crd = torch.where(eqc, ones, cr)
    rc = (maxc - r) / crd
    gc = (maxc - g) / crd
    bc = (maxc - b) / crd
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = torch.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    return torch.stack((h, s, maxc), dim=-3)


def hsv_to_rgb(hsv: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`rgb_to_hsv` (same values as torchvision ``_hsv2rgb``), written without a sector
    table: channel n in (5, 3, 1) for (r, g, b) is ``v - v s clamp(min(k, 4 - k), 0, 1)``,
    ``k = (n + 6 h) mod 6``."""
    h, s, v = hsv.unbind(dim=-3)
    h6 = h * 6.0
    vs = v * s
    out = []
    for n in (5.0, 3.0, 1.0):
        k = torch.remainder(h6 + n, 6.0)
        a = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
        out.append((v - vs * a).clamp_(0.0, 1.0))
    return torch.stack(out, dim=-3)
