"""Colour maths, the one home of luma, blending, RGB <-> HSV and hue rotation: on float images in [0, 1]
(torchvision's conventions; the references of the compiled ops and the transforms above them all import
these), and on uint8 images as Pillow computes them (``pillow_*``: what torchvision 0.10 runs on PIL images,
used by ``protocol="ericsson"``).

Luma weights are :data:`invfast.constants.LUMA_WEIGHTS`. Hue rotation has two float32 evaluations of the
same formula (``hsv_to_rgb(..., sectors=...)``): each compiled kernel matches one of them bit for bit.

Pillow's uint8 arithmetic (``src/libImaging/Convert.c`` and ``Blend.c``, unchanged from Pillow 8.1, the
version Ericsson et al.'s code pins, to 13) is reproduced step for step: C's ``float`` steps in float32, its
``double`` steps in float64, its truncations and roundings, so that every input gives Pillow's bytes (the
HSV conversions are checked on all 2^24 colours in ``tests/test_ericsson_fidelity.py``).
"""

from __future__ import annotations

import threading

import torch

from invfast.constants import LUMA_WEIGHTS

__all__ = [
    "PILLOW_LUMA_FIXED",
    "adjust_hue",
    "blend",
    "hsv_to_rgb",
    "luma",
    "pillow_adjust_hue",
    "pillow_blend",
    "pillow_hsv_to_rgb",
    "pillow_hue_steps",
    "pillow_luma",
    "pillow_rgb_to_hsv",
    "rgb_to_hsv",
]


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


# ---------------------------------------------------------------------------------------------- Pillow, uint8
#: Pillow's ``convert("L")`` weights of R, G, B in 16.16 fixed point (Convert.c ``L24``: ITU-R 601-2 x 2^16)
PILLOW_LUMA_FIXED = (19595, 38470, 7471)


def pillow_luma(x: torch.Tensor) -> torch.Tensor:
    """Pillow's ``convert("L")`` of uint8 RGB ``x`` [..., 3, H, W]: ``(19595 R + 38470 G + 7471 B + 2^15) >> 16``
    in int32 (rounded; Pillow 8.1 and later) -> uint8 [..., 1, H, W]."""
    r, g, b = x.to(torch.int32).unbind(dim=-3)
    wr, wg, wb = PILLOW_LUMA_FIXED
    return ((r * wr + g * wg + b * wb + (1 << 15)) >> 16).to(torch.uint8).unsqueeze(-3)


def pillow_blend(a: torch.Tensor, b: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """Pillow's ``Image.blend(a, b, alpha)`` of uint8 images (broadcast): ``a + alpha (b - a)`` in C ``float``
    (the product and the sum each rounded to float32, ``alpha`` a float32), truncated toward zero and clipped
    to 0..255. Blend.c's two loops (0 <= alpha <= 1, and extrapolation with its clipping) are both this
    formula; ``ImageEnhance`` is ``blend(degenerate, image, factor)``."""
    af = a.to(torch.float32)
    step = torch.mul(alpha.to(device=a.device, dtype=torch.float32), b.to(torch.float32) - af)
    return torch.add(af, step).trunc_().clamp_(0.0, 255.0).to(torch.uint8)


def pillow_rgb_to_hsv(x: torch.Tensor) -> torch.Tensor:
    """Pillow's ``convert("HSV")`` of uint8 RGB ``x`` [..., 3, H, W] -> uint8 HSV (Convert.c ``rgb2hsv_row``,
    after colorsys): v = max; grey pixels get h = s = 0; otherwise s = ``(int)(255 s)`` and h =
    ``(int)(255 h)`` with h in turns, h computed in float32 through C's mixed float/double expressions."""
    xi = x.to(torch.int32)
    r, g, b = xi.unbind(dim=-3)
    maxc, minc = xi.amax(dim=-3), xi.amin(dim=-3)
    grey = maxc == minc
    cr = (maxc - minc).to(torch.float32)
    crd = torch.where(grey, torch.ones_like(cr), cr)
    s = cr / torch.where(grey, torch.ones_like(cr), maxc.to(torch.float32))
    rc, gc, bc = ((maxc - c).to(torch.float32) / crd for c in (r, g, b))
    h_r = bc - gc  # float - float
    h_g = ((2.0 + rc.double()) - bc.double()).float()  # 2.0 + rc - bc: double, stored in a float
    h_b = ((4.0 + gc.double()) - rc.double()).float()
    h = torch.where(r == maxc, h_r, torch.where(g == maxc, h_g, h_b))
    h = torch.fmod(h.double() / 6.0 + 1.0, 1.0).float()
    uh = torch.trunc(h.double() * 255.0).clamp_(0, 255)
    us = torch.trunc(s.double() * 255.0).clamp_(0, 255)
    zero = torch.zeros_like(uh)
    hsv = torch.stack((torch.where(grey, zero, uh), torch.where(grey, zero, us), maxc.double()), dim=-3)
    return hsv.to(torch.uint8)


def _c_round(x: torch.Tensor) -> torch.Tensor:
    """C ``round`` of x >= 0: half away from zero (``x - floor(x)`` is exact in float64)."""
    f = torch.floor(x)
    return f + (x - f >= 0.5).to(x.dtype)


#: Pillow's hsv2rgb sector table: for sector i (0..5), (r, g, b) picked from (v, q, p, t)
_PIL_SECTORS = ((0, 3, 2), (1, 0, 2), (2, 0, 3), (2, 1, 0), (3, 2, 0), (0, 2, 1))
_HSV_TABLES: dict[str, torch.Tensor] = {}
_HSV_LOCK = threading.Lock()


def _pillow_hsv_table(device: torch.device) -> torch.Tensor:
    """uint8 [3, 2^24]: Pillow's ``HSV -> RGB`` of every (h, s, v) at index ``h << 16 | s << 8 | v`` (Convert.c
    ``hsv2rgb``): i = floor(6h/255) (double), f = 6h/255 - i stored in a float, fs = s/255 a float;
    p, q, t = C ``round`` of ``v (1 - fs)``, ``v (1 - fs f)`` (fs f a float product), ``v (1 - fs (1 - f))``
    in double; s = 0 gives (v, v, v). Built once per device (48 MiB) from per-(h, s) factors of v."""
    key = str(device)
    with _HSV_LOCK:
        table = _HSV_TABLES.get(key)
    if table is not None:
        return table
    lv = torch.arange(256, dtype=torch.float64, device=device)
    x = lv * 6.0 / 255.0
    i = torch.floor(x)
    f = (x - i).float()  # [h]
    fs = (lv / 255.0).float()  # [s]
    mq = 1.0 - (f.view(-1, 1) * fs.view(1, -1)).double()  # [h, s]: the float product fs * f, then double
    mt = 1.0 - fs.double().view(1, -1) * (1.0 - f.double()).view(-1, 1)  # [h, s]
    v = lv.to(torch.uint8).view(1, 256).expand(256, 256)  # [s, v]
    p = _c_round((1.0 - fs.double()).view(-1, 1) * lv).clamp_(0, 255).to(torch.uint8)  # [s, v]
    table = torch.empty((3, 256, 256, 256), dtype=torch.uint8, device=device)  # [rgb, h, s, v]
    sectors = (i.to(torch.int64) % 6).tolist()
    for h0 in range(0, 256, 16):  # 16 hues at a time: float64 intermediates of 8 MiB
        q = _c_round(mq[h0 : h0 + 16].unsqueeze(-1) * lv).clamp_(0, 255).to(torch.uint8)  # [16, s, v]
        t = _c_round(mt[h0 : h0 + 16].unsqueeze(-1) * lv).clamp_(0, 255).to(torch.uint8)
        for j in range(16):
            planes = (v, q[j], p, t[j])
            for c, pick in enumerate(_PIL_SECTORS[sectors[h0 + j]]):
                table[c, h0 + j] = planes[pick]
    table[:, :, 0, :] = v  # s = 0: grey
    table = table.reshape(3, -1)
    with _HSV_LOCK:
        return _HSV_TABLES.setdefault(key, table)


def pillow_hsv_to_rgb(hsv: torch.Tensor) -> torch.Tensor:
    """Pillow's ``convert("RGB")`` of uint8 HSV [..., 3, H, W] (Convert.c ``hsv2rgb``) -> uint8 RGB."""
    h, s, v = hsv.to(torch.int64).unbind(dim=-3)
    return _pillow_hsv_table(hsv.device)[:, (h << 16) | (s << 8) | v].movedim(0, -3)


def pillow_hue_steps(shift: torch.Tensor) -> torch.Tensor:
    """int64: the uint8 steps torchvision 0.10 adds to Pillow's hue channel for a shift (fraction of the colour
    circle, float32): ``np.uint8(shift * 255)``, truncated toward zero, modulo 256 (Pillow's hue unit is 1/255
    of a turn, so a step is 1/255 turn and the uint8 wrap-around 256/255 of one)."""
    return torch.remainder(torch.trunc(shift.double() * 255.0).to(torch.int64), 256)


def pillow_adjust_hue(x: torch.Tensor, shift: torch.Tensor, chunk_elements: int = 1 << 22) -> torch.Tensor:
    """torchvision 0.10 ``adjust_hue`` of PIL images, every shift: ``convert("HSV")``, the hue channel plus
    :func:`pillow_hue_steps` (uint8 wrap-around), ``convert("RGB")``. uint8 RGB [B, 3, H, W], shifts [P] (turns,
    float32) -> uint8 [B, P, 3, H, W]; views in chunks of about ``chunk_elements`` index elements."""
    B, _, H, W = x.shape
    h, s, v = pillow_rgb_to_hsv(x).to(torch.int64).unbind(dim=-3)  # [B, H, W]
    sv = ((s << 8) | v).unsqueeze(1)
    steps = pillow_hue_steps(shift).to(x.device).view(1, -1, 1, 1)
    P = steps.shape[1]
    table = _pillow_hsv_table(x.device)
    out = torch.empty((B, P, 3, H, W), dtype=torch.uint8, device=x.device)
    step = max(1, chunk_elements // max(1, B * H * W))
    for s0 in range(0, P, step):
        idx = (torch.remainder(h.unsqueeze(1) + steps[:, s0 : s0 + step], 256) << 16) | sv  # [B, p, H, W]
        out[:, s0 : s0 + step] = table[:, idx].movedim(0, 2)
    return out
