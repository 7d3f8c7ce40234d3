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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from invfast.ops import pillow as Pil
from invfast.ops import transforms_u8
from invfast.ops.augment import warp
from invfast.ops.color import adjust_hue, blend, luma, rgb_to_hsv
from invfast.transforms import affine as Af
from invfast.transforms import ericsson_ops as Eo
from invfast.transforms import functional as Fn
from invfast.transforms import grids as G
from invfast.transforms.transform import TestTransform, _no_check, check_k

__all__ = [
    "PIXEL_REFERENCE",
    "DaliOp",
    "Builtin",
    "DALI_WARP",
    "affine_params",
    "RECORDS",
    "SPATIAL",
    "APPEARANCE",
    "TEST_TRANSFORMS",
]

#: the image side the built-in pixel grids (translation, blur σ, deform σ) are given for (Ericsson et al. 2021, App. B)
PIXEL_REFERENCE = 224
_CHUNK_ELEMENTS = 1 << 22  # float elements per intermediate chunk (16 MiB: stays cache-friendly)


@dataclass(frozen=True)
class DaliOp:
    """A test transform as one DALI graph node: ``build(fn, types, x, a, H, W)``, with DALI's ``fn`` and
    ``types`` modules passed in (this module does not import DALI), ``x`` the uint8 HWC images and ``a`` one
    argument per sample: the parameter as a float32 scalar or, with ``matrix``, the affine's DALI matrix
    [2, 3] (output -> input, corner coordinates)."""

    build: Callable[..., Any]
    matrix: bool = False


@dataclass(frozen=True)
class Builtin:
    """Everything about one built-in test transform, in one place: its grid, which parameters are the
    identity, the parameter check, and how it is applied — at most one of

    - ``affine``: ``(params float64 [P] or [P, m], H, W) -> (A [P, 2, 2], c [P, 2])``, the warp's map from an
      output pixel to the source pixel it samples, ``A @ (out - centre) + c`` (every affine spatial transform);
    - ``integer``: ``(images uint8 [B, C, H, W], params [P]) -> uint8 [B, P, C, H, W]``, an op on 8-bit levels
      (float input is quantised to them first);
    - ``float_op``: ``(t, x float [B, C, H, W], params [p], ctx, fill, was_u8) -> [B, p, C, H, W]``, run on
      chunks of parameters; ``prepare(x) -> ctx`` computes what every chunk shares once per batch;

    and ``u8``, the uint8 op that replaces ``integer`` / ``float_op`` on uint8 input (compiled on the CPU);
    ``published``, how Ericsson et al.'s evaluation code applies it where that differs (``protocol="ericsson"``,
    :class:`~invfast.transforms.ericsson_ops.Published`); ``dali``, its DALI graph node where DALI has one
    (:mod:`invfast.transforms.dali`). ``pixel_reference``: the image side (px) the grid's values are pixel distances
    for (224: translation, blur σ, deform σ), so a measurement at another size can scale the grid
    (``MeasureConfig.grid_side``); None for grids in units that do not depend on the size.
    """

    name: str
    family: str
    param_dim: int
    grid: Callable[[int], torch.Tensor]
    identity: Callable[[torch.Tensor], torch.Tensor]
    check: Callable[[torch.Tensor], None] = _no_check
    affine: Af.Affine | None = None
    integer: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    float_op: Callable[..., torch.Tensor] | None = None
    prepare: Callable[[torch.Tensor], dict[str, torch.Tensor]] | None = None
    u8: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    published: Eo.Published | None = None
    dali: DaliOp | None = None
    pixel_reference: int | None = None

    def apply(self, t: TestTransform, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
        """The transform on checked ``images`` [B, C, H, W] and params ``p``: [B, P, C, H, W] in their dtype."""
        if self.affine is not None:
            return Af.affine_apply(self.name, self.affine, images, p, fill)
        B, C, H, W = images.shape
        p = p.to(images.device)  # the small parameter tensor moves once; everything below is on the data's device
        if images.dtype == torch.uint8 and self.u8 is not None:  # one uint8 op (compiled on CPU)
            return self.u8(images, p)
        out = torch.empty((B, p.shape[0], C, H, W), dtype=images.dtype, device=images.device)
        if self.integer is not None:
            u8 = images if images.dtype == torch.uint8 else Fn.quantize(images.float())
            res = self.integer(u8, p)
            out.copy_(res if images.dtype == torch.uint8 else res.to(images.dtype).div_(255.0))
            return out
        assert self.float_op is not None, self.name
        x = Fn.to_float(images)
        ctx = self.prepare(x) if self.prepare is not None else {}
        step = max(1, _CHUNK_ELEMENTS // max(1, B * C * H * W))
        for s in range(0, p.shape[0], step):
            y = self.float_op(t, x, p[s : s + step], ctx, fill, images.dtype == torch.uint8)
            out[:, s : s + step] = Fn.from_float(y, images.dtype)
        return out


# ----------------------------------------------------------------------------------------------
# the pieces the records are made of


def _views(x: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x [B, C, H, W]`` as ``[B, 1, C, H, W]`` and ``p [n]`` as one value per view ``[1, n, 1, 1, 1]``."""
    return x.unsqueeze(1), p.view(1, p.shape[0], 1, 1, 1)


def _switch(other: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A binary integer op: ``other(u8)`` where the parameter is 1, the image where it is 0."""

    def op(u8: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        on = (p > 0.5).view(1, -1, 1, 1, 1)
        return torch.where(on, other(u8).unsqueeze(1), u8.unsqueeze(1))

    return op


def _posterize(u8: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return Fn.posterize_u8(u8, p.round())


def _gray(x: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"gray": luma(x)}


def _mean_luma(x: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"mean": luma(x).mean(dim=(-3, -2, -1), keepdim=True)}


def _hsv(x: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"hsv": rgb_to_hsv(x)}


def _deform(t: TestTransform, x: torch.Tensor, p: torch.Tensor, ctx: dict, fill: Any, was_u8: bool) -> torch.Tensor:
    H, W = x.shape[-2:]
    disp = Fn.elastic_displacement(p, (H, W), t.alpha * min(H, W), t.seed)
    coords = (Fn.identity_coords(H, W, device=x.device).unsqueeze(0) + disp).to(torch.float32)
    return warp(x, coords, fill)


def _grayscale(t: TestTransform, x: torch.Tensor, p: torch.Tensor, ctx: dict, fill: Any, was_u8: bool) -> torch.Tensor:
    xb, col = _views(x, p)
    g = ctx["gray"].expand(*x.shape).unsqueeze(1)
    if was_u8:  # the uint8 grayscale image holds rounded levels
        g = g.mul(255.0).round_().div_(255.0)
    return torch.where(col > 0.5, g, xb)


def _brightness(t: TestTransform, x: torch.Tensor, p: torch.Tensor, ctx: dict, fill: Any, was_u8: bool) -> torch.Tensor:
    return Fn.adjust_brightness(*_views(x, p))


def _blend_with(key: str) -> Callable[..., torch.Tensor]:
    """``blend(image, ctx[key], factor)`` per view: contrast (the mean luma), saturation (the gray image)."""

    def op(t: TestTransform, x: torch.Tensor, p: torch.Tensor, ctx: dict, fill: Any, was_u8: bool) -> torch.Tensor:
        xb, col = _views(x, p)
        return blend(xb, ctx[key].unsqueeze(1), col)

    return op


def _hue(t: TestTransform, x: torch.Tensor, p: torch.Tensor, ctx: dict, fill: Any, was_u8: bool) -> torch.Tensor:
    B, C, H, W = x.shape
    n = p.shape[0]
    return adjust_hue(None, p.view(1, n, 1, 1), hsv=ctx["hsv"].unsqueeze(1).expand(B, n, C, H, W))


def _blur(t: TestTransform, x: torch.Tensor, p: torch.Tensor, ctx: dict, fill: Any, was_u8: bool) -> torch.Tensor:
    return Fn.blur_grid(x, p)


def _sharpness(t: TestTransform, x: torch.Tensor, p: torch.Tensor, ctx: dict, fill: Any, was_u8: bool) -> torch.Tensor:
    xb, col = _views(x, p)
    return blend(xb, Fn.sharpness_degenerate(x, quantise=was_u8).unsqueeze(1), col)


# ----------------------------------------------------------------------------------------------
# DALI graph nodes (DALI's ``fn`` and ``types`` passed in)


def _dali_flip(axis: str) -> DaliOp:
    def build(fn: Any, types: Any, x: Any, a: Any, H: int, W: int) -> Any:
        on = fn.cast(a, dtype=types.INT32)
        return fn.flip(x, horizontal=on) if axis == "horizontal" else fn.flip(x, vertical=on, horizontal=0)

    return DaliOp(build)


def _dali_brightness(fn: Any, types: Any, x: Any, a: Any, H: int, W: int) -> Any:
    return fn.brightness(x, brightness=a)


def _dali_invert(fn: Any, types: Any, x: Any, a: Any, H: int, W: int) -> Any:
    xi = fn.cast(x, dtype=types.FLOAT)
    return fn.cast(a * (255.0 - xi) + (1.0 - a) * xi, dtype=types.UINT8)


def _dali_grayscale(fn: Any, types: Any, x: Any, a: Any, H: int, W: int) -> Any:
    gray = fn.color_space_conversion(x, image_type=types.RGB, output_type=types.GRAY)
    g3 = fn.cast(fn.cat(gray, gray, gray, axis=2), dtype=types.FLOAT)
    return fn.cast(a * g3 + (1.0 - a) * fn.cast(x, dtype=types.FLOAT), dtype=types.UINT8)  # DALI casts round


def _dali_blur(fn: Any, types: Any, x: Any, a: Any, H: int, W: int) -> Any:
    return fn.gaussian_blur(x, sigma=fn.cast(a, dtype=types.FLOAT) + 1e-6)


def _dali_warp(fn: Any, types: Any, x: Any, a: Any, H: int, W: int) -> Any:
    return fn.warp_affine(x, matrix=a, size=[H, W], fill_value=0, interp_type=types.INTERP_LINEAR, inverse_map=True)


DALI_WARP = DaliOp(_dali_warp, matrix=True)


# ----------------------------------------------------------------------------------------------
# Ericsson et al.'s published versions (:mod:`invfast.transforms.ericsson_ops`)


def _pillow(colour: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], lo: float, hi: float) -> Eo.Published:
    """A colour transform as Pillow's uint8 arithmetic, on the published ``linspace(lo, hi, k)`` grid."""
    return Eo.Published(Eo.linear_grid(lo, hi), Eo.pillow(colour), builtin_units=True)


def affine_params(t: TestTransform, p: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A [P, 2, 2], c [P, 2])`` float64 of an affine built-in's parameters ``p`` at size H x W: the output
    pixel ``o`` samples the source at ``A @ (o - centre) + c`` (pixel centres, :func:`invfast.transforms.
    functional.centre`). KeyError for a transform that is not an affine built-in."""
    rec = RECORDS.get(t.name)
    if rec is None or rec.affine is None:
        raise KeyError(t.name)
    return rec.affine(p.to(torch.float64), H, W)


def _records() -> dict[str, Builtin]:
    lin = lambda lo, hi: lambda k: G.lin(lo, hi, k)  # noqa: E731
    ones = lambda p: G.near(p, 1.0)  # noqa: E731
    on = lambda p: p < 0.5  # noqa: E731  (binary: 0 = identity)
    u8 = transforms_u8
    records = [
        Builtin(
            name="crop",
            family="spatial",
            param_dim=4,
            grid=G.crop_grid,
            identity=lambda p: G.near(p[:, 0], 0) & G.near(p[:, 1], 0) & G.near(p[:, 2], 1) & G.near(p[:, 3], 1),
            check=G.crop_check,
            affine=Af.crop,
            published=Eo.Published(
                lambda k, resize, crop: Eo.crop_grid(k, resize),
                Eo.resized_crop,
                param_dim=4,
                check=Eo.crop_check,
                at_model_size=True,
            ),
            dali=DALI_WARP,
        ),
        Builtin(
            name="hflip",
            family="spatial",
            param_dim=1,
            grid=G.binary_grid,
            identity=on,
            check=G.binary_check("hflip"),
            affine=Af.flip(0),
            dali=_dali_flip("horizontal"),
        ),
        Builtin(
            name="vflip",
            family="spatial",
            param_dim=1,
            grid=G.binary_grid,
            identity=on,
            check=G.binary_check("vflip"),
            affine=Af.flip(1),
            dali=_dali_flip("vertical"),
        ),
        Builtin(
            name="scale",
            family="spatial",
            param_dim=1,
            grid=lin(0.25, 2.0),
            identity=ones,
            check=G.range_check("scale", 0.0, None, "the factor", strict_lo=True),
            affine=Af.scale,
            published=Eo.Published(
                lambda k, resize, crop: Eo.scale_grid(k),
                Eo.nearest(Eo.scale_data),
                check=Eo.positive("scale", "the factor"),
            ),
            dali=DALI_WARP,
        ),
        Builtin(
            name="shear",
            family="spatial",
            param_dim=2,
            grid=G.shear_grid,
            identity=lambda p: (torch.remainder(p, 180.0) == 0).all(dim=1),
            check=G.shear_check,
            affine=Af.shear,
            published=Eo.Published(
                lambda k, resize, crop: Eo.shear_grid(k),
                Eo.nearest(Eo.shear_data),
                param_dim=2,
                identity=lambda p: (p == 0).all(dim=1),
                check=Eo.shear_check,
            ),
            dali=DALI_WARP,
        ),
        Builtin(
            name="rotation",
            family="spatial",
            param_dim=1,
            grid=G.rotation_grid,
            identity=lambda p: G.near(torch.remainder(p, 360.0), 0) | G.near(torch.remainder(p, 360.0), 360),
            affine=Af.rotation,
            published=Eo.Published(
                lambda k, resize, crop: Eo.rotation_grid(k),
                Eo.nearest(Eo.rotate_data),
                identity=lambda p: torch.remainder(p.double(), 360.0) == 0,
            ),
            dali=DALI_WARP,
        ),
        Builtin(
            name="translation",
            family="spatial",
            param_dim=2,
            grid=G.translation_grid,
            identity=lambda p: (p == 0).all(dim=1),
            affine=Af.translation,
            published=Eo.Published(Eo.translation_grid, Eo.nearest(Eo.translation_data), param_dim=2),
            dali=DALI_WARP,
            pixel_reference=PIXEL_REFERENCE,
        ),
        Builtin(
            name="deform",
            family="spatial",
            param_dim=1,
            grid=lin(10.0, 50.0),
            identity=lambda p: torch.zeros_like(p, dtype=torch.bool),
            check=G.range_check("deform", 0.0, None, "sigma", strict_lo=True),
            float_op=_deform,
            published=Eo.Published(
                lambda k, resize, crop: Eo.deform_grid(k),
                Eo.elastic,
                param_dim=2,
                check=Eo.positive("deform", "sigma"),
            ),
            pixel_reference=PIXEL_REFERENCE,
        ),
        Builtin(
            name="grayscale",
            family="appearance",
            param_dim=1,
            grid=G.binary_grid,
            identity=on,
            check=G.binary_check("grayscale"),
            float_op=_grayscale,
            prepare=_gray,
            u8=u8.grayscale,
            published=Eo.Published(
                lambda k, resize, crop: G.binary_grid(check_k(k)), Eo.pillow(Pil.pillow_grayscale), builtin_units=True
            ),
            dali=DaliOp(_dali_grayscale),
        ),
        Builtin(
            name="brightness",
            family="appearance",
            param_dim=1,
            grid=lin(0.25, 5.0),
            identity=ones,
            check=G.range_check("brightness", 0.0, None, "the factor"),
            float_op=_brightness,
            u8=u8.brightness,
            published=_pillow(Pil.pillow_brightness, 0.25, 5.0),
            dali=DaliOp(_dali_brightness),
        ),
        Builtin(
            name="contrast",
            family="appearance",
            param_dim=1,
            grid=lin(0.25, 5.0),
            identity=ones,
            check=G.range_check("contrast", 0.0, None, "the factor"),
            float_op=_blend_with("mean"),
            prepare=_mean_luma,
            u8=u8.contrast,
            published=_pillow(Pil.pillow_contrast, 0.25, 5.0),
        ),
        Builtin(
            name="saturation",
            family="appearance",
            param_dim=1,
            grid=lin(0.25, 5.0),
            identity=ones,
            check=G.range_check("saturation", 0.0, None, "the factor"),
            float_op=_blend_with("gray"),
            prepare=_gray,
            u8=u8.saturation,
            published=_pillow(Pil.pillow_saturation, 0.25, 5.0),
        ),
        Builtin(
            name="hue",
            family="appearance",
            param_dim=1,
            grid=lin(-0.5, 0.5),
            identity=lambda p: p == 0,
            check=G.range_check("hue", -0.5, 0.5, "the shift"),
            float_op=_hue,
            prepare=_hsv,
            u8=u8.hue,
            published=_pillow(Pil.pillow_hue, -0.5, 0.5),
        ),
        Builtin(
            name="blur",
            family="appearance",
            param_dim=1,
            grid=lin(1e-5, 20.0),
            identity=lambda p: (3.0 * p.double() + 0.5).floor() == 0,
            check=G.range_check("blur", 0.0, None, "sigma"),
            float_op=_blur,
            u8=u8.blur,
            published=Eo.Published(
                Eo.linear_grid(1e-5, 20.0),
                Eo.blur,
                identity=lambda p: torch.exp(-0.5 / p.double().clamp_min(1e-12) ** 2) < 1e-12,
                check=Eo.blur_check,
            ),
            dali=DaliOp(_dali_blur),
            pixel_reference=PIXEL_REFERENCE,
        ),
        Builtin(
            name="sharpness",
            family="appearance",
            param_dim=1,
            grid=lin(1.0, 30.0),
            identity=ones,
            check=G.range_check("sharpness", 0.0, None, "the factor"),
            float_op=_sharpness,
            u8=u8.sharpness,
            published=_pillow(Pil.pillow_sharpness, 1.0, 30.0),
        ),
        Builtin(
            name="equalize",
            family="appearance",
            param_dim=1,
            grid=G.binary_grid,
            identity=on,
            check=G.binary_check("equalize"),
            integer=_switch(Fn.equalize_u8),
            u8=u8.equalize,
        ),
        Builtin(
            name="posterize",
            family="appearance",
            param_dim=1,
            grid=lambda k: torch.arange(1, 9, dtype=torch.float32, device=G.CPU),
            identity=lambda p: p == 8,
            check=G.posterize_check,
            integer=_posterize,
            u8=u8.posterize,
            published=Eo.Published(
                lambda k, resize, crop: Eo.posterize_grid(k),
                Eo.builtin_apply,
                identity=lambda p: p == 8,
                check=Eo.posterize_check,
            ),
        ),
        Builtin(
            name="invert",
            family="appearance",
            param_dim=1,
            grid=G.binary_grid,
            identity=on,
            check=G.binary_check("invert"),
            integer=_switch(lambda u8: 255 - u8),
            u8=u8.invert,
            dali=DaliOp(_dali_invert),
        ),
    ]
    return {r.name: r for r in records}


#: the record of each built-in test transform: the 18 of Ericsson et al. (2021, App. B), spatial then appearance
RECORDS: dict[str, Builtin] = _records()
SPATIAL: tuple[str, ...] = tuple(n for n, r in RECORDS.items() if r.family == "spatial")
APPEARANCE: tuple[str, ...] = tuple(n for n, r in RECORDS.items() if r.family == "appearance")
#: the names of the 18 test transforms, spatial then appearance
TEST_TRANSFORMS: tuple[str, ...] = SPATIAL + APPEARANCE
