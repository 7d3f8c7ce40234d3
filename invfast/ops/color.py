"""Colour maths on float images in [0, 1] (torchvision's conventions), the one home of luma, RGB <-> HSV
and hue rotation: the references of the compiled ops and the transforms above them all import these.

Luma weights are :data:`invfast.constants.LUMA_WEIGHTS`. Hue rotation has two float32 evaluations of the
same formula (``hsv_to_rgb(..., sectors=...)``): each compiled kernel matches one of them bit for bit.
"""

from __future__ import annotations

import torch

from invfast.constants import LUMA_WEIGHTS

__all__ = ["adjust_hue", "blend", "hsv_to_rgb", "luma", "rgb_to_hsv"]


def luma(x: torch.Tensor) -> torch.Tensor:
    """Luma [..., 1, H, W] of RGB ``x`` [..., 3, H, W] (ITU-R 601-2 weights, torchvision ``rgb_to_grayscale``)."""
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


#: torchvision ``_hsv2rgb``'s sector table: row i (sector of the hue) picks (r, g, b) from (v, q, p, t)
_SECTORS = ((0, 3, 2), (1, 0, 2), (2, 0, 3), (2, 1, 0), (3, 2, 0), (0, 2, 1))


def hsv_to_rgb(hsv: torch.Tensor, *, sectors: bool = False) -> torch.Tensor:
    """Inverse of :func:`rgb_to_hsv`: HSV [..., 3, H, W] -> RGB in [0, 1].

    Two evaluations of torchvision's ``_hsv2rgb``, equal in exact arithmetic, a few float32 ulps apart:

    - ``sectors=False`` (default): without a sector table, channel n in (5, 3, 1) for (r, g, b) is
      ``v - v s clamp(min(k, 4 - k), 0, 1)``, ``k = (n + 6 h) mod 6`` (the compiled augment kernel's form);
    - ``sectors=True``: torchvision's six-sector table of ``p = v(1 - s)``, ``q = v(1 - s f)``,
      ``t = v(1 - s(1 - f))`` (the compiled Transforms-2D colour kernel's form).
    """
    h, s, v = hsv.unbind(dim=-3)
    if sectors:
        i = torch.floor(h * 6.0)
        f = h * 6.0 - i
        p = (v * (1.0 - s)).clamp(0.0, 1.0)
        q = (v * (1.0 - s * f)).clamp(0.0, 1.0)
        t = (v * (1.0 - s * (1.0 - f))).clamp(0.0, 1.0)
        table = torch.stack([v, q, p, t], dim=-3)  # [..., 4, H, W]
        sel = torch.tensor(_SECTORS, dtype=torch.int64, device=hsv.device)
        idx = sel[i.to(torch.int64) % 6].movedim(-1, -3)  # [..., 3, H, W]
        return torch.gather(table, -3, idx)
    h6 = h * 6.0
    vs = v * s
    out = []
    for n in (5.0, 3.0, 1.0):
        k = torch.remainder(h6 + n, 6.0)
        a = torch.minimum(k, 4.0 - k).clamp_(0.0, 1.0)
        out.append((v - vs * a).clamp_(0.0, 1.0))
    return torch.stack(out, dim=-3)


def adjust_hue(
    x: torch.Tensor | None, shift: torch.Tensor, hsv: torch.Tensor | None = None, *, sectors: bool = False
) -> torch.Tensor:
    """Rotate the hue of RGB ``x`` [..., 3, H, W] by ``shift`` (fraction of the colour circle, [-0.5, 0.5];
    torchvision ``adjust_hue``): ``h <- (h + shift) mod 1`` in HSV.

    Args:
        x: RGB in [0, 1]; may be None when ``hsv`` is given.
        shift: broadcastable against [..., H, W] (e.g. [B, 1, 1] for one shift per image); a shift of
            shape [..., 1, H', W'] with as many dimensions as the image also works.
        hsv: :func:`rgb_to_hsv` of ``x`` when the caller already has it (shared across shifts).
        sectors: the :func:`hsv_to_rgb` evaluation (see there).
    """
    if hsv is None:
        if x is None:
            raise ValueError("adjust_hue needs the image x or its hsv (both are None)")
        hsv = rgb_to_hsv(x)
    h, s, v = hsv.unbind(dim=-3)
    shift = shift.squeeze(-3) if shift.dim() == hsv.dim() else shift
    h = torch.remainder(h + shift, 1.0)
    return hsv_to_rgb(torch.stack((h, s, v), dim=-3), sectors=sectors)
