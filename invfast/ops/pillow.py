"""Pillow's resamplers, bit for bit, batched: the nearest-neighbour affine transform and the bilinear resize
that torchvision 0.10 runs on PIL images (``F.affine``/``F.rotate`` with their default NEAREST,
``F.resize``/``Resize`` with BILINEAR). Pillow's code (``src/libImaging/Geometry.c`` and ``Resample.c``) is
the same from 8.1.0, the version Ericsson et al.'s published code pins, to 12.x.

**Affine, NEAREST** (``Image.transform(size, Image.AFFINE, data, Image.NEAREST)``):
``data = (a0, a1, a2, a3, a4, a5)`` maps the centre ``(x + 0.5, y + 0.5)`` of output pixel (x, y) to the
input point ``(a0 x' + a1 y' + a2, a3 x' + a4 y' + a5)`` (corner coordinates: the input pixel (i, j) covers
``[i, i + 1) x [j, j + 1)``); the output pixel copies the input pixel containing that point, or ``fill``
when it lies outside. Pillow computes the point in one of three ways, reproduced here exactly:

- ``a1 == a3 == 0`` (scales, flips, 0/180-degree rotations): ``ImagingScaleAffine``, one table per axis
  accumulated in double precision (``xo = a2 + a0 / 2``, then ``xo += a0`` per pixel);
- otherwise, when the four corners map inside +-32768 px: ``affine_fixed``, 16.16 fixed point
  (``FIX(v) = floor(v * 65536 + 0.5)``, ``x_in = (FIX(a2 + a0/2 + a1/2) + x FIX(a0) + y FIX(a1)) >> 16``);
- otherwise the double-precision loop (``xx += a0`` along a row, ``xo += a1`` per row).

Integer arithmetic (the fixed-point path) runs on the images' device; the double-precision
accumulations are sequential sums, done on the host (``torch.cumsum`` on the CPU adds in order) and
moved once.

**Resize, BILINEAR, uint8** (``Image.resize(size, Image.BILINEAR)``): separable, horizontal pass first,
each pass rounding to uint8. Per output pixel, the triangle filter scaled by the reduction factor
(support ``max(1, in/out)`` px, centre ``(i + 0.5) in/out``) is normalised and quantised to 22-bit fixed
point (``int(0.5 + w * 2^22)``); the output is ``clip((2^21 + sum(p w)) >> 22, 0, 255)``, in int32 like
Pillow's, so every device gives Pillow's bits.

**Colour** (torchvision 0.10's ``adjust_*`` / ``rgb_to_grayscale`` on PIL images, one function per transform,
:func:`pillow_brightness` ... :func:`pillow_grayscale`):
``ImageEnhance`` is ``Image.blend(degenerate, image, factor)`` (:func:`invfast.ops.color.pillow_blend`) with
a black image (brightness), the grey ``int(mean(L) + 0.5)`` (contrast; ``L`` = ``convert("L")``), ``L`` as RGB
(saturation, ``ImageEnhance.Color``) or the ``SMOOTH`` filter's image (sharpness: 3x3 weights 1, centre 5,
/13, summed in float32 row by row from 0.5 and truncated, Filter.c; the border rows and columns copied);
grayscale is ``L`` in every channel; hue adds ``np.uint8(255 shift)`` to the hue of ``convert("HSV")``
(uint8 wrap-around) and converts back (:mod:`invfast.ops.color`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from invfast.ops.augment import _gather_nearest, fill_vector
from invfast.ops.color import pillow_adjust_hue, pillow_blend, pillow_luma

__all__ = [
    "SMOOTH_KERNEL",
    "pillow_affine_indices",
    "pillow_affine_nearest",
    "pillow_brightness",
    "pillow_contrast",
    "pillow_grayscale",
    "pillow_hue",
    "pillow_saturation",
    "pillow_sharpness",
    "pillow_resize",
    "pillow_resize_weights",
    "pillow_smooth",
]

_FIXED_LIMIT = 32768.0  # Geometry.c check_fixed: |coordinate| < 32768 at the four corners
_MAX_INDEX_ELEMENTS = 1 << 24  # output pixels x views per chunk of index tables


def _fix(v: float) -> int:
    """Geometry.c ``FIX(v) = FLOOR(v * 65536.0 + 0.5)`` (16.16 fixed point, rounded half up)."""
    return math.floor(v * 65536.0 + 0.5)


def _coord(v: torch.Tensor) -> torch.Tensor:
    """Geometry.c ``COORD(v)``: -1 below 0, else truncation to int (floor for v >= 0)."""
    return torch.where(v < 0, torch.full_like(v, -1.0), torch.trunc(v)).to(torch.int64)


def _accumulate(start: float, step: float, n: int) -> torch.Tensor:
    """float64 [n]: ``start, start + step, (start + step) + step, ...`` added in order, as C's ``v += step``."""
    seq = torch.full((n,), step, dtype=torch.float64, device="cpu")
    seq[0] = start
    return torch.cumsum(seq, 0)


def _check_fixed(a: Sequence[float], x: int, y: int) -> bool:
    return abs(x * a[0] + y * a[1] + a[2]) < _FIXED_LIMIT and abs(x * a[3] + y * a[4] + a[5]) < _FIXED_LIMIT


def pillow_affine_indices(
    data: torch.Tensor, out_h: int, out_w: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The input pixel each output pixel copies, as Pillow picks it.

    Args:
        data: [P, 6] float64 Pillow affine coefficients (host; read with ``tolist``).
        out_h, out_w: output size.
        device: where the index tables are made.

    Returns:
        (xin, yin) int64 [P, out_h, out_w] on ``device``; a position outside ``[0, W) x [0, H)`` of the input
        (checked by the caller, which knows the input size) means ``fill``. Values below 0 are -1.
    """
    rows = data.detach().to("cpu", torch.float64).reshape(-1, 6).tolist()
    dev = torch.device(device)
    xs = torch.arange(out_w, dtype=torch.int64, device=dev).view(1, out_w)
    ys = torch.arange(out_h, dtype=torch.int64, device=dev).view(out_h, 1)
    xin = torch.empty((len(rows), out_h, out_w), dtype=torch.int64, device=dev)
    yin = torch.empty_like(xin)
    for j, a in enumerate(rows):
        if a[1] == 0 and a[3] == 0:  # ImagingScaleAffine: separable tables
            xt = _coord(_accumulate(a[2] + a[0] * 0.5, a[0], out_w)).to(dev)
            yt = _coord(_accumulate(a[5] + a[4] * 0.5, a[4], out_h)).to(dev)
            xin[j] = xt.view(1, out_w).expand(out_h, out_w)
            yin[j] = yt.view(out_h, 1).expand(out_h, out_w)
        elif all(_check_fixed(a, x, y) for x, y in ((0, 0), (out_w, out_h), (0, out_h), (out_w, 0))):
            a0, a1, a3, a4 = _fix(a[0]), _fix(a[1]), _fix(a[3]), _fix(a[4])
            a2 = _fix(a[2] + a[0] * 0.5 + a[1] * 0.5)
            a5 = _fix(a[5] + a[3] * 0.5 + a[4] * 0.5)
            xin[j] = torch.div(a2 + ys * a1 + xs * a0, 65536, rounding_mode="floor")  # xx >> 16
            yin[j] = torch.div(a5 + ys * a4 + xs * a3, 65536, rounding_mode="floor")
        else:  # the double-precision loop: row starts accumulate a1 (a4), then each row accumulates a0 (a3)
            for out, start, step_row, step_col in (
                (xin, a[2] + a[1] * 0.5 + a[0] * 0.5, a[1], a[0]),
                (yin, a[5] + a[4] * 0.5 + a[3] * 0.5, a[4], a[3]),
            ):
                grid = torch.full((out_h, out_w), step_col, dtype=torch.float64, device="cpu")
                grid[:, 0] = _accumulate(start, step_row, out_h)
                out[j] = _coord(torch.cumsum(grid, 1)).to(dev)
    return xin, yin


def pillow_affine_nearest(
    images: torch.Tensor, data: torch.Tensor, out_h: int, out_w: int, fill: float | Sequence[float] = 0.0
) -> torch.Tensor:
    """``Image.transform((out_w, out_h), Image.AFFINE, data[p], Image.NEAREST)`` of every image, every ``p``.

    Args:
        images: [B, C, H, W], any dtype (pixels are copied, never mixed).
        data: [P, 6] float64 Pillow affine coefficients (output pixel centre -> input point, corner units).
        out_h, out_w: output size.
        fill: value(s) in image units (0..255 for uint8) for output pixels whose point lies outside.

    Returns:
        [B, P, C, out_h, out_w] in the images' dtype, on their device.
    """
    B, C = images.shape[:2]
    P = data.shape[0]
    fillv = fill_vector(fill, C, device=images.device).to(images.dtype)
    out = torch.empty((B, P, C, out_h, out_w), dtype=images.dtype, device=images.device)
    step = max(1, _MAX_INDEX_ELEMENTS // max(1, out_h * out_w))
    for s in range(0, P, step):
        xin, yin = pillow_affine_indices(data[s : s + step], out_h, out_w, images.device)
        # [1, p, Ho, Wo, 2] integer positions; outside [0, W) x [0, H) the gather writes the fill
        out[:, s : s + step] = _gather_nearest(images, torch.stack([xin, yin], dim=-1).unsqueeze(0), fillv)
    return out


# ---------------------------------------------------------------------------------------------- resize
_PRECISION_BITS = 22  # Resample.c: 32 - 8 - 2


def pillow_resize_weights(in_size: int, out_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Resample.c ``precompute_coeffs`` (bilinear, box ``[0, in_size]``) then ``normalize_coeffs_8bpc``.

    Returns:
        (first input index int64 [out], fixed-point weights float64 [out, K] of input pixels first .. first+K-1;
        weights past an output pixel's last input are 0 and their indices clamped), on the CPU.
    """
    scale = float(in_size) / out_size
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale  # the bilinear filter's support is 1
    ksize = math.ceil(support) * 2 + 1
    center = (torch.arange(out_size, dtype=torch.float64, device="cpu") + 0.5) * scale
    xmin = torch.trunc(center - support + 0.5).clamp_min(0)
    xmax = torch.trunc(center + support + 0.5).clamp_max(in_size) - xmin  # taps per output pixel
    taps = torch.arange(ksize, dtype=torch.float64, device="cpu").view(1, -1)
    t = ((taps + xmin.view(-1, 1)) - center.view(-1, 1) + 0.5) * (1.0 / filterscale)
    w = torch.where(t.abs() < 1.0, 1.0 - t.abs(), torch.zeros_like(t))
    w = torch.where(taps < xmax.view(-1, 1), w, torch.zeros_like(w))
    ww = torch.zeros(out_size, dtype=torch.float64, device="cpu")
    for j in range(ksize):  # the C loop's order of addition
        ww = ww + w[:, j]
    w = torch.where(ww.view(-1, 1) != 0, w / ww.view(-1, 1), w)
    fixed = torch.trunc(0.5 + w * float(1 << _PRECISION_BITS))  # the weights are >= 0
    return xmin.to(torch.int64), fixed


def _resample(x: torch.Tensor, dim: int, in_size: int, out_size: int, keep: slice, offset: int = 0) -> torch.Tensor:
    """One Pillow pass along ``dim`` (-1 or -2) of int32 ``x`` holding uint8 levels (input position ``offset`` of
    that axis first), output positions ``keep`` only: int32 sums as Resample.c's (``2^21 + sum(p w) < 2^31``),
    one tap at a time."""
    first, fixed = pillow_resize_weights(in_size, out_size)
    first, fixed = first[keep] - offset, fixed[keep]
    dev = x.device
    shape = list(x.shape)
    shape[dim] = first.shape[0]
    ss = torch.full(shape, 1 << (_PRECISION_BITS - 1), dtype=torch.int32, device=dev)
    view = (-1, 1) if dim == -2 else (1, -1)
    last = x.shape[dim] - 1
    for k in range(fixed.shape[1]):
        idx = (first + k).clamp(0, last).to(dev).view(view).expand(shape)
        ss.addcmul_(torch.gather(x, dim, idx), fixed[:, k].to(device=dev, dtype=torch.int32).view(view))
    return torch.bitwise_right_shift(ss, _PRECISION_BITS).clamp_(0, 255)


def pillow_resize(
    images: torch.Tensor, size: tuple[int, int], box: tuple[int, int, int, int] | None = None
) -> torch.Tensor:
    """``Image.resize((w, h), Image.BILINEAR)`` of every uint8 image [..., H, W], bit for bit as Pillow 8.1
    computes it (horizontal pass first).

    Args:
        images: uint8 [..., H, W].
        size: (h, w) of the resized image.
        box: (top, left, height, width): return only this part of the resized image (what a crop after the
            resize keeps; only what it needs is computed). None: all of it.

    Returns:
        uint8 [..., h, w] (or the box's height x width).
    """
    if images.dtype != torch.uint8:
        raise TypeError(f"pillow_resize: images must be uint8 (Pillow's 8-bit resampler), got {images.dtype}")
    h, w = int(size[0]), int(size[1])
    top, left, bh, bw = (0, 0, h, w) if box is None else (int(v) for v in box)
    if h < 1 or w < 1 or bh < 1 or bw < 1 or top < 0 or left < 0 or top + bh > h or left + bw > w:
        raise ValueError(f"pillow_resize: size {size} must be positive and box {box} inside it")
    H, W = images.shape[-2:]
    rows, cols = slice(top, top + bh), slice(left, left + bw)
    if h != H:  # the horizontal pass only needs the input rows the kept output rows read
        first, fixed = pillow_resize_weights(H, h)
        taps = torch.arange(fixed.shape[1], device="cpu").view(1, -1) + first[rows].view(-1, 1)
        used = taps[fixed[rows] > 0]
        r0, r1 = int(used.min()), int(used.max()) + 1
    else:
        r0, r1 = top, top + bh
    x = images[..., r0:r1, :].to(torch.int32)
    x = _resample(x, -1, W, w, cols) if w != W else x[..., cols]  # Pillow skips a pass whose size does not change
    if h != H:
        x = _resample(x, -2, H, h, rows, offset=r0)  # rows outside r0..r1 are never read
    return x.to(torch.uint8)


# ---------------------------------------------------------------------------------------------- colour
#: ``ImageFilter.SMOOTH``'s 3x3 weights (row-major); Pillow divides them by their sum, 13
SMOOTH_KERNEL = (1.0, 1.0, 1.0, 1.0, 5.0, 1.0, 1.0, 1.0, 1.0)
_CHUNK_ELEMENTS = 1 << 22  # float32 elements per intermediate chunk


def pillow_smooth(images: torch.Tensor) -> torch.Tensor:
    """``image.filter(ImageFilter.SMOOTH)`` of uint8 images [..., H, W], bit for bit (Filter.c
    ``ImagingFilter3x3``): per inner pixel ``ss = 0.5`` plus, row y+1, y, y-1 in turn, ``(a k0 + b k1) + c k2``,
    all in float32 with the weights ``float(w) / 13``; truncated and clipped; the first and last row and column
    are copied, and an image under 3 x 3 px is copied whole."""
    H, W = images.shape[-2:]
    if H < 3 or W < 3:
        return images.clone()
    f = images.to(torch.float32)
    k = torch.tensor(SMOOTH_KERNEL, dtype=torch.float32, device=images.device) / torch.tensor(
        13.0, dtype=torch.float32, device=images.device
    )
    ss = torch.full(f[..., 1:-1, 1:-1].shape, 0.5, dtype=torch.float32, device=images.device)
    for row, r0 in ((2, 0), (1, 3), (0, 6)):  # in1 (y + 1) with kernel[0:3], in0 with [3:6], in_1 with [6:9]
        line = f[..., row : row + H - 2, :]
        ss = ss + ((line[..., :-2] * k[r0] + line[..., 1:-1] * k[r0 + 1]) + line[..., 2:] * k[r0 + 2])
    out = images.clone()
    out[..., 1:-1, 1:-1] = ss.trunc_().clamp_(0.0, 255.0).to(torch.uint8)
    return out


def _level_tables(degenerate: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """uint8 [Bt, P, 1, 256]: ``pillow_blend(d, level, f)`` for every constant degenerate ``d`` [Bt] and factor."""
    lv = torch.arange(256, dtype=torch.uint8, device=factors.device).view(1, 1, 1, 256)
    return pillow_blend(degenerate.view(-1, 1, 1, 1), lv, factors.view(1, -1, 1, 1))


def _rgb_u8(fn: str, images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """``params`` flattened onto the images' device, once ``images`` is checked to be uint8 RGB [B, 3, H, W]."""
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"{fn}: images must be uint8 RGB [B, 3, H, W], got {images.dtype} {tuple(images.shape)}")
    return params.to(images.device).reshape(-1)


def _blend_chunks(degenerate: torch.Tensor, images: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """``pillow_blend(degenerate, images, f)`` for every factor of ``p`` [P], a chunk of factors at a time."""
    B, C, H, W = images.shape
    out = torch.empty((B, p.shape[0], C, H, W), dtype=torch.uint8, device=images.device)
    step = max(1, _CHUNK_ELEMENTS // max(1, images.numel()))
    for s0 in range(0, p.shape[0], step):
        f = p[s0 : s0 + step].view(1, -1, 1, 1, 1)
        out[:, s0 : s0 + step] = pillow_blend(degenerate.unsqueeze(1), images.unsqueeze(1), f)
    return out


# Each colour transform below is torchvision 0.10's on PIL images: uint8 RGB [B, 3, H, W], params [P] -> uint8
# [B, P, 3, H, W]. Brightness and contrast blend with a constant, so they are 256-entry tables per view (the
# ``lut_u8`` op, a plain lookup); saturation, sharpness and hue are computed per pixel.


def pillow_brightness(images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Brightness``: blend(black, image, f) for each factor f."""
    from invfast.ops import transforms_u8

    p = _rgb_u8("pillow_brightness", images, params)
    return transforms_u8.lut(images, _level_tables(torch.zeros(1, device=p.device), p))


def pillow_contrast(images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Contrast``: blend(grey int(mean(L) + 0.5), image, f); ImageStat's mean is sum / count in
    double."""
    from invfast.ops import transforms_u8

    p = _rgb_u8("pillow_contrast", images, params)
    H, W = images.shape[-2:]
    mean = pillow_luma(images).to(torch.int64).sum(dim=(1, 2, 3)).double() / float(H * W)
    return transforms_u8.lut(images, _level_tables(torch.floor(mean + 0.5), p))


def pillow_saturation(images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Color``: blend(L as RGB, image, f)."""
    p = _rgb_u8("pillow_saturation", images, params)
    return _blend_chunks(pillow_luma(images).expand_as(images), images, p)


def pillow_sharpness(images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """``ImageEnhance.Sharpness``: blend(``ImageFilter.SMOOTH`` of the image, image, f)."""
    p = _rgb_u8("pillow_sharpness", images, params)
    return _blend_chunks(pillow_smooth(images), images, p)


def pillow_hue(images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """torchvision 0.10's ``adjust_hue`` on a PIL image: the H channel of HSV shifted by each param (turns)."""
    return pillow_adjust_hue(images, _rgb_u8("pillow_hue", images, params), _CHUNK_ELEMENTS)


def pillow_grayscale(images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """``rgb_to_grayscale`` (L as RGB) where a param is 1, the image where it is 0."""
    p = _rgb_u8("pillow_grayscale", images, params)
    B, C, H, W = images.shape
    on = (p > 0.5).view(1, -1, 1, 1, 1)
    return torch.where(on, pillow_luma(images).unsqueeze(1).expand(B, p.shape[0], C, H, W), images.unsqueeze(1))
