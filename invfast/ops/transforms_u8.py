"""uint8 ops of the test transforms: every image through every parameter in one call, compiled for the CPU
(``csrc/transforms``), each with the torch reference that defines it (and serves other devices).

Ops (``torch.ops.invfast.<name>``; images uint8 [B, C, H, W], output uint8 [B, P, C, H, W]):

* ``lut_u8(images, tables [Bt, P, Ct, 256])``: a 256-entry table per (image or all, parameter, channel or
  all); brightness, contrast, posterize, invert and equalize are tables built here from the same float32
  maths as the float path, so the bytes are the float path's. Tables of the form ``(v & m) ^ k`` (identity,
  invert, posterize) run as byte logic.
* ``histogram_u8(images) -> int64 [B, C, 256]``: level counts (equalize; contrast's exact mean).
* ``blend_u8(images, factors [P], degenerate)``: torchvision's blend ``f x + (1 - f) d`` with the grayscale
  image (saturation), the grayscale image in levels (grayscale, ``f = 1 - flag``) or PIL's SMOOTH image in
  levels (sharpness), in float32 in the reference's order.
* ``hue_u8(images, shifts [P])``: torchvision ``adjust_hue`` in float32 in the reference's order.
* ``blur_u8(images, taps [P, 2R + 1])``: separable blur, reflect padding (float32 sums in another order than
  the reference's matrix products: within one level of it).
* ``warp_affine_u8(images, matrix [P, 2, 3], fill [C])``: the geometric transforms; integer maps are exact
  copies, bilinear maps within one level of :func:`invfast.ops.augment.warp_affine_reference`.

Dispatch: the table (:mod:`invfast.dispatch`) decides per op and device; there are no CUDA kernels, so the
references run on GPUs, except that :func:`warp_u8` hands uint8 images to the general
:func:`invfast.ops.augment.warp_affine` there (whose CUDA kernel the table picks where measured faster). The
per-transform functions (``brightness`` ... ``invert``, :func:`warp_u8`) are what the test transforms' records
(:data:`invfast.transforms.builtin.RECORDS`) call for uint8 images; this layer knows no transform names.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from invfast import _loader, backend, dispatch
from invfast.constants import LUMA_WEIGHTS
from invfast.ops.augment import warp_affine, warp_affine_reference
from invfast.ops.color import adjust_hue, blend, luma, rgb_to_hsv
from invfast.ops.kernels import gaussian_taps, separable_filter

DEGENERATES = ("luma", "luma_levels", "smooth_levels")
_CHUNK_ELEMENTS = 1 << 22  # float elements per intermediate chunk of the references


def _unit(images: torch.Tensor) -> torch.Tensor:
    """uint8 -> float32 v / 255 (a true division, as ``functional.to_float``)."""
    return images.to(torch.float32).div_(255.0)


def _levels(x: torch.Tensor) -> torch.Tensor:
    """float in [0, 1] -> uint8, rounded half up (``functional.from_float``)."""
    return x.mul(255.0).add_(0.5).clamp_(0, 255).to(torch.uint8)


#: torch forks a thread team for an element-wise op on more elements than this (ATen's GRAIN_SIZE)
_TORCH_GRAIN = 32768


def _unforked(fn: Callable[[int, int], torch.Tensor], n: int, row_elements: int, device: torch.device) -> torch.Tensor:
    """``fn(start, end)`` over row ranges of ``[0, n)`` small enough that torch runs each op on one CPU thread,
    concatenated along dim 0 (one call on other devices). For the per-image tables: a few microseconds of work,
    where a thread team costs more and, with another process on the cores, waits milliseconds for a
    descheduled thread (issue 43). Element-wise, so the values are those of one call over all rows."""
    step = max(1, _TORCH_GRAIN // max(1, row_elements))
    if step >= n or device.type != "cpu":
        return fn(0, n)
    return torch.cat([fn(s, min(n, s + step)) for s in range(0, n, step)])


def _check_images(op: str, images: torch.Tensor, rgb: bool = False) -> None:
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.dim() != 4:
        got = f"{images.dtype} of shape {tuple(images.shape)}" if isinstance(images, torch.Tensor) else type(images)
        raise ValueError(f"{op}: images must be a uint8 tensor [B, C, H, W], got {got}")
    if rgb and images.shape[1] != 3:
        raise ValueError(f"{op}: images must be RGB [B, 3, H, W], got shape {tuple(images.shape)}")


def _check_params(op: str, name: str, p: torch.Tensor) -> None:
    if not isinstance(p, torch.Tensor) or p.dtype != torch.float32 or p.dim() != 1:
        got = f"{p.dtype} of shape {tuple(p.shape)}" if isinstance(p, torch.Tensor) else type(p)
        raise ValueError(f"{op}: {name} must be a 1-D float32 tensor [P], got {got}")


def _step(images: torch.Tensor) -> int:
    """Parameters per chunk of a reference, so its float intermediates stay near _CHUNK_ELEMENTS."""
    return max(1, _CHUNK_ELEMENTS // max(1, images.numel()))


# ----------------------------------------------------------------------------------------------
# references


@backend.register_reference("lut_u8")
def lut_u8_reference(images: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    B, C, H, W = images.shape
    P = tables.shape[1]
    idx = images.to(torch.int64).view(B, 1, C, H * W).expand(B, P, C, H * W)
    return torch.gather(tables.expand(B, P, C, 256), 3, idx).view(B, P, C, H, W)


@backend.register_reference("histogram_u8")
def histogram_u8_reference(images: torch.Tensor) -> torch.Tensor:
    B, C, H, W = images.shape
    flat = images.reshape(B * C, H * W).to(torch.int64)
    hist = torch.zeros(B * C, 256, dtype=torch.int64, device=images.device)
    return hist.scatter_add_(1, flat, torch.ones_like(flat)).view(B, C, 256)


def smooth_levels(x: torch.Tensor) -> torch.Tensor:
    """PIL's SMOOTH filter (3x3, centre 5, / 13) of float images [N, C, H, W] inside, rounded to uint8 levels;
    the border keeps ``x`` (torchvision ``adjust_sharpness``'s degenerate image of a uint8 image)."""
    N, C, H, W = x.shape
    if H < 3 or W < 3:  # every pixel is on the border
        return x.clone()
    k = torch.ones(3, 3, dtype=x.dtype, device=x.device)
    k[1, 1] = 5.0
    k /= k.sum()
    flat = x.reshape(N * C, 1, H, W)
    smooth = F.conv2d(flat, k.view(1, 1, 3, 3)).mul_(255.0).round_().div_(255.0)
    out = flat.clone()
    out[:, :, 1:-1, 1:-1] = smooth
    return out.reshape(N, C, H, W)


@backend.register_reference("blend_u8")
def blend_u8_reference(images: torch.Tensor, factors: torch.Tensor, degenerate: str) -> torch.Tensor:
    B, C, H, W = images.shape
    x = _unit(images)
    if degenerate == "smooth_levels":
        d = smooth_levels(x)
    else:
        d = luma(x)
        if degenerate == "luma_levels":
            d = d.mul(255.0).round_().div_(255.0)
    P = factors.shape[0]
    out = torch.empty((B, P, C, H, W), dtype=torch.uint8, device=images.device)
    step = _step(images)
    for s in range(0, P, step):
        f = factors[s : s + step].view(1, -1, 1, 1, 1)
        out[:, s : s + step] = _levels(blend(x.unsqueeze(1), d.unsqueeze(1), f))
    return out


@backend.register_reference("hue_u8")
def hue_u8_reference(images: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    B, C, H, W = images.shape
    hsv = rgb_to_hsv(_unit(images)).unsqueeze(1)
    P = shifts.shape[0]
    out = torch.empty((B, P, C, H, W), dtype=torch.uint8, device=images.device)
    step = _step(images)
    for s in range(0, P, step):
        sh = shifts[s : s + step]
        n = sh.shape[0]
        out[:, s : s + n] = _levels(adjust_hue(None, sh.view(1, n, 1, 1), hsv=hsv.expand(B, n, C, H, W)))
    return out


@backend.register_reference("blur_u8")
def blur_u8_reference(images: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    B, C, H, W = images.shape
    P, K = taps.shape
    x = _unit(images)
    out = torch.empty((B, P, C, H, W), dtype=torch.uint8, device=images.device)
    if K == 1:
        out.copy_(_levels(x.unsqueeze(1) * taps.view(1, P, 1, 1, 1)))
        return out
    step = _step(images)
    for s in range(0, P, step):
        out[:, s : s + step] = _levels(separable_filter(x, taps[s : s + step]))
    return out


@backend.register_reference("warp_affine_u8")
def warp_affine_u8_reference(images: torch.Tensor, matrix: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    return warp_affine_reference(images, matrix, images.shape[2], images.shape[3], fill)


# ----------------------------------------------------------------------------------------------
# the ops (kernel or reference, as the dispatch table says)


def lut(images: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """``out[b, p, c] = tables[b or 0, p, c or 0][images[b, c]]``: images uint8 [B, C, H, W], tables uint8
    [Bt, P, Ct, 256] (Bt in {1, B}, Ct in {1, C}) -> uint8 [B, P, C, H, W]."""
    _check_images("lut_u8", images)
    B, C = images.shape[:2]
    if (
        tables.dtype != torch.uint8
        or tables.dim() != 4
        or tables.shape[3] != 256
        or tables.shape[0] not in (1, B)
        or tables.shape[2] not in (1, C)
    ):
        raise ValueError(
            f"lut_u8: tables must be uint8 [1 or B={B}, P, 1 or C={C}, 256], got {tables.dtype} of "
            f"shape {tuple(tables.shape)}"
        )
    return backend.call("lut_u8", images.contiguous(), tables.contiguous())


def histogram(images: torch.Tensor) -> torch.Tensor:
    """Level counts of every plane: uint8 [B, C, H, W] -> int64 [B, C, 256]."""
    _check_images("histogram_u8", images)
    return backend.call("histogram_u8", images.contiguous())


def blend_degenerate(images: torch.Tensor, factors: torch.Tensor, degenerate: str) -> torch.Tensor:
    """``u8(clamp(f x + (1 - f) d, 0, 1))`` for every factor ``f`` [P] (float32): ``d`` is the luma ('luma'),
    the luma rounded to levels ('luma_levels') or PIL's SMOOTH image rounded to levels, border kept
    ('smooth_levels'). uint8 RGB [B, 3, H, W] -> [B, P, 3, H, W]."""
    _check_images("blend_u8", images, rgb=True)
    _check_params("blend_u8", "factors", factors)
    if degenerate not in DEGENERATES:
        raise ValueError(f"blend_u8: degenerate must be one of {', '.join(DEGENERATES)}, got {degenerate!r}")
    return backend.call("blend_u8", images.contiguous(), factors.contiguous(), degenerate)


def hue(images: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """torchvision ``adjust_hue`` by every shift [P] (float32, in [-0.5, 0.5]): uint8 RGB -> [B, P, 3, H, W]."""
    _check_images("hue_u8", images, rgb=True)
    _check_params("hue_u8", "shifts", shifts)
    return backend.call("hue_u8", images.contiguous(), shifts.contiguous())


def blur_taps(images: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Separable blur with every row of ``taps`` [P, 2R + 1] (float32, symmetric, R < H and R < W), reflect
    padding: uint8 [B, C, H, W] -> [B, P, C, H, W]."""
    _check_images("blur_u8", images)
    H, W = images.shape[2:]
    if taps.dtype != torch.float32 or taps.dim() != 2 or taps.shape[1] % 2 != 1:
        raise ValueError(f"blur_u8: taps must be float32 [P, 2R + 1], got {taps.dtype} of shape {tuple(taps.shape)}")
    if (taps.shape[1] - 1) // 2 >= min(H, W):
        raise ValueError(
            f"blur_u8: the blur radius {(taps.shape[1] - 1) // 2} must be smaller than the image "
            f"({H}x{W}) for reflect padding"
        )
    return backend.call("blur_u8", images.contiguous(), taps.contiguous())


def warp_u8(images: torch.Tensor, matrix: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """Every image through every affine map ``matrix`` [P, 2, 3] (float64; output pixel (x, y) samples the
    source at ``matrix[p] @ (x, y, 1)``, pixel-centre units), bilinear with ``fill`` [C] (0..255) outside,
    rounded half up; integer maps copy exactly. uint8 [B, C, H, W] -> [B, P, C, H, W].

    Where this op has no kernel (a GPU) the general warp runs, under every backend mode: its own kernel where
    the mode picks it (measured on uint8 images), else the same torch reference."""
    _check_images("warp_affine_u8", images)
    if matrix.dim() != 3 or tuple(matrix.shape[1:]) != (2, 3):
        raise ValueError(f"warp_affine_u8: matrix must be [P, 2, 3], got shape {tuple(matrix.shape)}")
    args = (images.contiguous(), matrix.to(torch.float64).contiguous(), fill.to(torch.float64).contiguous())
    fn = None
    if dispatch.kernel_available("warp_affine_u8", images.device.type):  # (backend 'compiled' raises without one)
        fn = backend.compiled_for("warp_affine_u8", *args)
    if fn is None:
        return warp_affine(args[0], args[1], images.shape[2], images.shape[3], args[2])
    return fn(*args)


# ----------------------------------------------------------------------------------------------
# the appearance test transforms on uint8 images: name -> f(images [B, 3, H, W], params [P] float32)


def _unit_levels(device: torch.device) -> torch.Tensor:
    return torch.arange(256, dtype=torch.float32, device=device).div_(255.0)


def brightness(images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    x = _unit_levels(images.device).view(1, 1, 1, 256)
    return lut(images, _levels((x * factors.view(1, -1, 1, 1)).clamp_(0.0, 1.0)))


def contrast(images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """Blend with each image's mean luma, taken exactly from the level counts (float64, then float32)."""
    B, C, H, W = images.shape
    sums = (histogram(images) * torch.arange(256, device=images.device)).sum(dim=2).to(torch.float64)  # [B, C]
    w = torch.tensor(LUMA_WEIGHTS, dtype=torch.float64, device=images.device)
    mean = ((sums * w).sum(dim=1) / (255.0 * H * W)).to(torch.float32).view(B, 1, 1, 1)
    x = _unit_levels(images.device).view(1, 1, 1, 256)
    f = factors.view(1, -1, 1, 1)
    tables = _unforked(lambda s, e: _levels(blend(x, mean[s:e], f)), B, f.numel() * 256, images.device)
    return lut(images, tables)


def posterize(images: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    mask = 255 - (2 ** (8 - bits.round().to(torch.int64)) - 1)  # [P]
    v = torch.arange(256, dtype=torch.int64, device=images.device)
    return lut(images, (v.view(1, 256) & mask.view(-1, 1)).to(torch.uint8).view(1, -1, 1, 256))


def invert(images: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    v = torch.arange(256, dtype=torch.int64, device=images.device).view(1, 256)
    return lut(images, torch.where(flags.view(-1, 1) > 0.5, 255 - v, v).to(torch.uint8).view(1, -1, 1, 256))


def equalize(images: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    """PIL ``ImageOps.equalize`` per channel (as ``functional.equalize_u8``), tables from the level counts."""
    B, C, H, W = images.shape
    hist = histogram(images).view(B * C, 256)
    v = torch.arange(256, dtype=torch.int64, device=images.device).view(1, 256)
    last = torch.where(hist > 0, v, -1).amax(dim=1, keepdim=True)  # last non-empty level
    step = (H * W - hist.gather(1, last)) // 255
    safe = step.clamp_min(1)
    eq = (torch.cumsum(hist, 1) + safe // 2) // safe
    eq = torch.cat([torch.zeros_like(eq[:, :1]), eq[:, :-1]], dim=1).clamp_(0, 255)
    eq = torch.where(step == 0, v, eq).view(B, 1, C, 256)
    return lut(images, torch.where(flags.view(1, -1, 1, 1) > 0.5, eq, v.view(1, 1, 1, 256)).to(torch.uint8))


def saturation(images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    return blend_degenerate(images, factors, "luma")


def grayscale(images: torch.Tensor, flags: torch.Tensor) -> torch.Tensor:
    return blend_degenerate(images, 1.0 - flags, "luma_levels")


def sharpness(images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    return blend_degenerate(images, factors, "smooth_levels")


def blur(images: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Gaussian blur, radius int(3 sigma + 0.5) cut at min(H, W) - 1 (``functional.blur_grid``)."""
    taps = gaussian_taps(sigma, max_radius=min(images.shape[2:]) - 1).to(torch.float32)
    return blur_taps(images, taps)


def _register_compiled() -> None:
    if _loader.load() is None:
        return

    def block(images: torch.Tensor, P: int) -> torch.Tensor:
        return images.new_empty((images.shape[0], P, *images.shape[1:]))

    torch.library.register_fake("invfast::lut_u8")(lambda images, tables: block(images, tables.shape[1]))
    torch.library.register_fake("invfast::histogram_u8")(
        lambda images: images.new_empty((images.shape[0], images.shape[1], 256), dtype=torch.int64)
    )
    torch.library.register_fake("invfast::blend_u8")(
        lambda images, factors, degenerate: block(images, factors.shape[0])
    )
    torch.library.register_fake("invfast::hue_u8")(lambda images, shifts: block(images, shifts.shape[0]))
    torch.library.register_fake("invfast::blur_u8")(lambda images, taps: block(images, taps.shape[0]))
    torch.library.register_fake("invfast::warp_affine_u8")(lambda images, matrix, fill: block(images, matrix.shape[0]))


_register_compiled()
