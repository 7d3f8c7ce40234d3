"""The 18 built-in test transforms of Ericsson et al. (2021, App. B): implementations, grids, checks.

>>> from invfast import transforms as T
>>> rot = T.get("rotation")
>>> params = rot.grid(8)                     # tensor([0., 45., ..., 315.])
>>> out = rot.apply(images, params)          # [B, 8, 3, H, W], same dtype as images

Parameter units (per transform, one row of ``params`` per output view):

========== =========== ================================================================
name       params      meaning
========== =========== ================================================================
crop       [P, 4]      (top, left, height, width) as fractions of the image side; resized back
hflip      [P]         0 = unchanged, 1 = flipped left-right (likewise vflip, grayscale,
                       invert, equalize: 0 = identity, 1 = transformed)
scale      [P]         zoom factor about the centre (> 0; 1 = identity)
shear      [P, 2]      x and y shear in degrees (torchvision ``affine(shear=...)``)
rotation   [P]         degrees, counter-clockwise as displayed (PIL ``Image.rotate``;
                       :func:`invfast.ops.geometry.rotation_matrix`)
translation[P, 2]      (x, y) shift in pixels
deform     [P]         elastic smoothness sigma in pixels (> 0), fixed seed and RMS ``alpha``
brightness [P]         factor >= 0 (1 = identity); contrast, saturation, sharpness likewise
hue        [P]         shift in [-0.5, 0.5] of the colour circle
blur       [P]         Gaussian sigma in pixels (>= 0); radius int(3 sigma + 0.5)
posterize  [P]         bits kept, integer 1..8 (8 = identity)
========== =========== ================================================================

Geometric transforms fill uncovered pixels with ``fill`` (default 0 = black).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from invfast.ops import transforms_u8
from invfast.ops.augment import _fill_vector, warp
from invfast.ops.color import adjust_hue, blend, luma, rgb_to_hsv
from invfast.ops.geometry import rotation_matrix, shear_matrix
from invfast.transforms import functional as Fn
from invfast.transforms._checks import require
from invfast.transforms.transform import TestTransform, _no_check

SPATIAL: tuple[str, ...] = ("crop", "hflip", "vflip", "scale", "shear", "rotation", "translation", "deform")
APPEARANCE: tuple[str, ...] = (
    "grayscale",
    "brightness",
    "contrast",
    "saturation",
    "hue",
    "blur",
    "sharpness",
    "equalize",
    "posterize",
    "invert",
)
#: the names of the 18 test transforms of Ericsson et al. (2021, App. B), spatial then appearance
TEST_TRANSFORMS: tuple[str, ...] = SPATIAL + APPEARANCE

_CHUNK_ELEMENTS = 1 << 22  # float elements per intermediate chunk (16 MiB: stays cache-friendly)


# grids are small host tensors (on the CPU whatever torch's default device); apply() moves them once

_CPU = torch.device("cpu")


def _lin(lo: float, hi: float, k: int) -> torch.Tensor:
    return torch.linspace(lo, hi, k, dtype=torch.float64, device=_CPU).to(torch.float32)


def _side(k: int, dims: int) -> int:
    return max(1, int(round(k ** (1.0 / dims))))


def apply_builtin(t: TestTransform, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
    """A built-in transform on checked ``images`` [B, C, H, W] and params ``p``: [B, P, C, H, W] in their dtype."""
    B, C, H, W = images.shape
    P = p.shape[0]
    if t.family == "spatial" and t.name != "deform":
        return _affine_apply(t, images, p, fill)
    p = p.to(images.device)  # the small parameter tensor moves once; everything below is on the data's device
    if images.dtype == torch.uint8 and t.name in transforms_u8.APPEARANCE:  # one uint8 op (compiled on CPU)
        return transforms_u8.APPEARANCE[t.name](images, p)
    out = torch.empty((B, P, C, H, W), dtype=images.dtype, device=images.device)
    if t.name in ("posterize", "equalize", "invert"):
        u8 = images if images.dtype == torch.uint8 else Fn.quantize(images.float())
        res = _integer_op(t.name, u8, p)
        out.copy_(res if images.dtype == torch.uint8 else res.to(images.dtype).div_(255.0))
        return out
    x = Fn.to_float(images)
    ctx = _prepare(t, x)
    step = max(1, _CHUNK_ELEMENTS // max(1, B * C * H * W))
    for s in range(0, P, step):
        y = _float_op(t, x, p[s : s + step], ctx, fill, images.dtype == torch.uint8)
        out[:, s : s + step] = Fn.from_float(y, images.dtype)
    return out


# ----------------------------------------------------------------------------------------------
# per-transform implementations


def _integer_op(name: str, u8: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    if name == "posterize":
        return Fn.posterize_u8(u8, p.round())
    on = (p > 0.5).view(1, -1, 1, 1, 1)
    base = u8.unsqueeze(1)
    other = (255 - u8) if name == "invert" else Fn.equalize_u8(u8)
    return torch.where(on, other.unsqueeze(1), base)


def _prepare(t: TestTransform, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-batch quantities shared by every parameter (grayscale, HSV, means)."""
    if t.name in ("saturation", "grayscale"):
        return {"gray": luma(x)}
    if t.name == "contrast":
        return {"mean": luma(x).mean(dim=(-3, -2, -1), keepdim=True)}
    if t.name == "hue":
        return {"hsv": rgb_to_hsv(x)}
    return {}


def _affine_params(t: TestTransform, p: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    c = Fn.centre(H, W, device=p.device).expand(p.shape[0], 2)
    n = p.shape[0]
    eye = torch.eye(2, dtype=torch.float64, device=p.device).expand(n, 2, 2)
    pd = p.to(torch.float64)
    if t.name == "crop":
        return Fn.crop_box_affine(pd[:, 0] * H, pd[:, 1] * W, pd[:, 2] * H, pd[:, 3] * W, (H, W))
    if t.name in ("hflip", "vflip"):
        axis = 0 if t.name == "hflip" else 1
        A = eye.clone()
        A[:, axis, axis] = torch.where(pd > 0.5, -1.0, 1.0)
        return A, c
    if t.name == "scale":
        return eye / pd.view(-1, 1, 1), c
    if t.name == "rotation":  # the warp samples the source of each output pixel: the inverse map
        return rotation_matrix(pd, inverse=True), c
    if t.name == "shear":
        return shear_matrix(pd[:, 0], pd[:, 1], inverse=True), c
    if t.name == "translation":
        return eye, c - pd
    raise KeyError(t.name)


_MATRICES: dict[tuple, torch.Tensor] = {}  # (name, H, W, dtype, shape, parameter bytes) -> [P, 2, 3] float64
_MATRICES_MAX = 64
_MATRICES_LOCK = threading.Lock()


def _affine_matrix(t: TestTransform, p: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """The [P, 2, 3] sampling maps of an affine transform's parameters, computed in float64 on the CPU
    (bit-identical for every data device). A measurement applies one grid to batch after batch, so the maps
    of the last few (transform, size, grid) are kept: the dozen small torch ops that build them cost more
    than a flip of a 224-px batch."""
    pc = p.detach().to("cpu").contiguous()
    if torch.compiler.is_compiling():  # a traced graph computes the maps (the kept ones are keyed by bytes)
        return _affine_maps(t, pc, H, W)
    key = (t.name, H, W, pc.dtype, tuple(pc.shape), pc.numpy().tobytes())
    with _MATRICES_LOCK:  # the measure loop makes views on a producer thread
        matrix = _MATRICES.get(key)
    if matrix is None:
        matrix = _affine_maps(t, pc, H, W)
        with _MATRICES_LOCK:
            if len(_MATRICES) >= _MATRICES_MAX:
                _MATRICES.pop(next(iter(_MATRICES)))
            _MATRICES[key] = matrix
    return matrix


def _affine_maps(t: TestTransform, pc: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """[P, 2, 3] float64 sampling maps of the CPU parameters ``pc`` at size H x W."""
    A, b = _affine_params(t, pc, H, W)
    A = Fn._snap(A.to(torch.float64))
    offset = Fn._snap(b.to(torch.float64) - (A @ Fn.centre(H, W).view(2, 1)).squeeze(-1))
    return torch.cat([A, offset.unsqueeze(-1)], dim=-1).contiguous()


def _affine_apply(t: TestTransform, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
    """All affine test transforms: one call of the batched warp (compiled on CPU when built)."""
    from invfast.ops.augment import warp_affine

    B, C, H, W = images.shape
    if isinstance(fill, (int, float)) and not isinstance(fill, bool):  # one number: checked without torch ops
        if not 0.0 <= fill <= 1.0:
            raise ValueError(f"fill must be in [0, 1] (image units), got {[float(fill)] * C}")
        fillv = torch.full((C,), float(fill), dtype=torch.float64, device=_CPU)
    else:
        fillv = _fill_vector(fill, C).to(torch.float64)  # on the CPU: the warp reads it as numbers
        require((fillv >= 0) & (fillv <= 1), "fill must be in [0, 1] (image units)", lambda: f", got {fillv.tolist()}")
    matrix = _affine_matrix(t, p, H, W).to(images.device)
    if images.dtype == torch.uint8:
        return transforms_u8.warp(images, matrix, fillv * 255.0)
    x = images if images.dtype in (torch.float32, torch.float64) else images.to(torch.float32)
    return warp_affine(x.contiguous(), matrix, H, W, fillv).to(images.dtype)


def _float_op(t: TestTransform, x: torch.Tensor, p: torch.Tensor, ctx: dict, fill: Any, was_u8: bool) -> torch.Tensor:
    B, C, H, W = x.shape
    n = p.shape[0]
    xb = x.unsqueeze(1)  # [B, 1, C, H, W]
    col = p.view(1, n, 1, 1, 1) if p.dim() == 1 else p  # one value per view for the point-wise transforms
    name = t.name
    if name == "deform":
        disp = Fn.elastic_displacement(p, (H, W), t.alpha * min(H, W), t.seed)
        coords = (Fn.identity_coords(H, W, device=x.device).unsqueeze(0) + disp).to(torch.float32)
        return warp(x, coords, fill)
    if name == "grayscale":
        g = ctx["gray"].expand(B, C, H, W).unsqueeze(1)
        if was_u8:  # the uint8 grayscale image holds rounded levels
            g = g.mul(255.0).round_().div_(255.0)
        return torch.where(col > 0.5, g, xb)
    if name == "brightness":
        return Fn.adjust_brightness(xb, col)
    if name == "contrast":
        return blend(xb, ctx["mean"].unsqueeze(1), col)
    if name == "saturation":
        return blend(xb, ctx["gray"].unsqueeze(1), col)
    if name == "hue":
        hsv = ctx["hsv"].unsqueeze(1)
        return adjust_hue(None, p.view(1, n, 1, 1), hsv=hsv.expand(B, n, C, H, W))
    if name == "blur":
        return Fn.blur_grid(x, p)
    if name == "sharpness":
        deg = Fn.sharpness_degenerate(x, quantise=was_u8).unsqueeze(1)
        return blend(xb, deg, col)
    raise KeyError(name)


# ----------------------------------------------------------------------------------------------
# grids, identities and parameter checks


def _binary_grid(k: int) -> torch.Tensor:
    return torch.tensor([0.0, 1.0], device=_CPU)


def _crop_grid(k: int) -> torch.Tensor:
    n = _side(k, 4)
    anchors = _lin(0.0, 0.25, n) if n > 1 else torch.zeros(1, device=_CPU)
    sizes = _lin(0.75, 0.25, n) if n > 1 else torch.full((1,), 0.75, device=_CPU)
    g = torch.cartesian_prod(anchors, anchors, sizes, sizes)
    return g.reshape(-1, 4)


def _shear_grid(k: int) -> torch.Tensor:
    n = _side(k, 2)
    a = torch.tensor([-160.0 + 320.0 * i / n for i in range(n)], dtype=torch.float32, device=_CPU)
    return torch.cartesian_prod(a, a).reshape(-1, 2)


def _translation_grid(k: int) -> torch.Tensor:
    n = _side(k, 2)
    a = _lin(-16.0, 16.0, n) if n > 1 else torch.zeros(1, device=_CPU)
    return torch.cartesian_prod(a, a).reshape(-1, 2)


def _rotation_grid(k: int) -> torch.Tensor:
    return (torch.arange(k, dtype=torch.float64, device=_CPU) * (360.0 / k)).to(torch.float32)


def _range_check(name: str, lo: float | None, hi: float | None, what: str, strict_lo: bool = False):
    def check(p: torch.Tensor) -> None:
        if lo is not None:
            ok = (p > lo) if strict_lo else (p >= lo)
            require(
                ok, f"{name}: {what} must be {'>' if strict_lo else '>='} {lo}", lambda: f", got {float(p[~ok][0]):g}"
            )
        if hi is not None:
            require(p <= hi, f"{name}: {what} must be <= {hi}", lambda: f", got {float(p[p > hi][0]):g}")

    return check


def _binary_check(name: str):
    def check(p: torch.Tensor) -> None:
        require(
            (p == 0) | (p == 1),
            f"{name}: params must be 0 (identity) or 1 (transformed)",
            lambda: f", got {p.unique().tolist()}",
        )

    return check


def _posterize_check(p: torch.Tensor) -> None:
    ok = (p == p.round()) & (p >= 1) & (p <= 8)
    require(ok, "posterize: bits must be an integer in 1..8 (8 = identity)", lambda: f", got {float(p[~ok][0]):g}")


def _crop_check(p: torch.Tensor) -> None:
    top, left, h, w = p.unbind(1)
    require((h > 0) & (w > 0), "crop: height and width fractions must be > 0")
    require(
        (top >= 0) & (left >= 0) & (top + h <= 1 + 1e-6) & (left + w <= 1 + 1e-6),
        "crop: the box (top, left, height, width) must lie inside the image: "
        "top, left >= 0 and top + height, left + width <= 1",
    )


def _shear_check(p: torch.Tensor) -> None:
    c = torch.cos(torch.deg2rad(p.double())).abs()
    require(c >= 1e-6, "shear: angles of +-90 degrees (mod 180) are degenerate (infinite shear)")


def _close(p: torch.Tensor, v: float) -> torch.Tensor:
    return (p - v).abs() <= 1e-6 * max(1.0, abs(v))


def build_builtins() -> dict[str, TestTransform]:
    """The 18 built-in transforms by name, in :data:`TEST_TRANSFORMS` order."""
    lin = lambda lo, hi: lambda k: _lin(lo, hi, k)  # noqa: E731
    ones = lambda p: _close(p, 1.0)  # noqa: E731
    on = lambda p: p < 0.5  # noqa: E731  (binary: 0 = identity)
    specs: list[tuple[str, int, Callable, Callable, Callable]] = [
        (
            "crop",
            4,
            _crop_grid,
            lambda p: _close(p[:, 0], 0) & _close(p[:, 1], 0) & _close(p[:, 2], 1) & _close(p[:, 3], 1),
            _crop_check,
        ),
        ("hflip", 1, _binary_grid, on, _binary_check("hflip")),
        ("vflip", 1, _binary_grid, on, _binary_check("vflip")),
        ("scale", 1, lin(0.25, 2.0), ones, _range_check("scale", 0.0, None, "the factor", strict_lo=True)),
        ("shear", 2, _shear_grid, lambda p: (torch.remainder(p, 180.0) == 0).all(dim=1), _shear_check),
        (
            "rotation",
            1,
            _rotation_grid,
            lambda p: _close(torch.remainder(p, 360.0), 0) | _close(torch.remainder(p, 360.0), 360),
            _no_check,
        ),
        ("translation", 2, _translation_grid, lambda p: (p == 0).all(dim=1), _no_check),
        (
            "deform",
            1,
            lin(10.0, 50.0),
            lambda p: torch.zeros_like(p, dtype=torch.bool),
            _range_check("deform", 0.0, None, "sigma", strict_lo=True),
        ),
        ("grayscale", 1, _binary_grid, on, _binary_check("grayscale")),
        ("brightness", 1, lin(0.25, 5.0), ones, _range_check("brightness", 0.0, None, "the factor")),
        ("contrast", 1, lin(0.25, 5.0), ones, _range_check("contrast", 0.0, None, "the factor")),
        ("saturation", 1, lin(0.25, 5.0), ones, _range_check("saturation", 0.0, None, "the factor")),
        ("hue", 1, lin(-0.5, 0.5), lambda p: p == 0, _range_check("hue", -0.5, 0.5, "the shift")),
        (
            "blur",
            1,
            lin(1e-5, 20.0),
            lambda p: (3.0 * p.double() + 0.5).floor() == 0,
            _range_check("blur", 0.0, None, "sigma"),
        ),
        ("sharpness", 1, lin(1.0, 30.0), ones, _range_check("sharpness", 0.0, None, "the factor")),
        ("equalize", 1, _binary_grid, on, _binary_check("equalize")),
        (
            "posterize",
            1,
            lambda k: torch.arange(1, 9, dtype=torch.float32, device=_CPU),
            lambda p: p == 8,
            _posterize_check,
        ),
        ("invert", 1, _binary_grid, on, _binary_check("invert")),
    ]
    out = {}
    for name, dim, grid, ident, check in specs:
        out[name] = TestTransform(
            name=name,
            family="spatial" if name in SPATIAL else "appearance",
            param_dim=dim,
            _grid=grid,
            _identity=ident,
            _check=check,
            _impl=apply_builtin,
        )
    assert tuple(out) == TEST_TRANSFORMS
    return out
