"""The pieces of Ericsson et al.'s (2021) published evaluation code, one per test transform: grids,
Pillow affine data, the resized crop, the 23-tap blur, the elastic deform and Pillow's colour arithmetic,
and :class:`Published`, the record of how that code applies a transform. The records are part of each
built-in's record (:mod:`invfast.transforms.builtin`); :mod:`invfast.transforms.ericsson` applies them and
documents the protocol."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from invfast.ops.augment import fill_vector
from invfast.ops.geometry import rotation_matrix, shear_matrix
from invfast.ops.kernels import gaussian_taps, torchvision_gaussian_taps
from invfast.ops.pillow import pillow_affine_nearest, pillow_resize
from invfast.transforms import functional as Fn
from invfast.transforms.ericsson_elastic import elastic_apply, elastic_params
from invfast.transforms.transform import check_k

__all__ = [
    "Apply",
    "BLUR_ROUNDINGS",
    "BLUR_TAPS",
    "Grid",
    "POSTERIZE_BITS",
    "Published",
    "SHEAR_DEG",
    "blur",
    "blur_check",
    "blur_kernels",
    "builtin_apply",
    "crop_boxes",
    "crop_check",
    "crop_grid",
    "deform_grid",
    "elastic",
    "linear_grid",
    "nearest",
    "never",
    "pillow",
    "positive",
    "posterize_check",
    "posterize_grid",
    "resize_bilinear",
    "resized_crop",
    "rotate_data",
    "rotation_grid",
    "scale_data",
    "scale_grid",
    "shear_check",
    "shear_data",
    "shear_grid",
    "translation_data",
    "translation_grid",
]

#: (t, images [B, C, H, W], params [P] or [P, m], fill) -> views [B, P, C, H', W']
Apply = Callable[[Any, torch.Tensor, torch.Tensor, Any], torch.Tensor]
#: (k, resize, crop) -> float32 params
Grid = Callable[[int, int, int], torch.Tensor]

SHEAR_DEG = 1.0  #: x-shear passed with every scale and translation view
BLUR_TAPS = 23  #: fixed Gaussian kernel length of the blur transform
POSTERIZE_BITS = tuple(range(1, 8))  #: the published posterize grid (``torch.arange(1, 8)``)


# ---------------------------------------------------------------------------------------------- grids
def _published_side(k: int, root: int) -> int:
    """``int(np.sqrt(k))`` (root 2) or ``int(np.sqrt(np.sqrt(k)))`` (root 4), as the original sizes its grids."""
    v = float(check_k(k))
    for _ in range(root // 2):
        v = math.sqrt(v)
    return max(1, int(v))


def _linspace32(lo: float, hi: float, n: int) -> torch.Tensor:
    """``torch.linspace(lo, hi, n)`` in float32 (torch's default dtype in the original)."""
    return torch.linspace(lo, hi, n, dtype=torch.float32, device="cpu")


def translation_grid(k: int, resize: int = 256, crop: int = 224) -> torch.Tensor:
    """float32 [n², 2], n = int(sqrt(k)): (x, y) shifts ``linspace(-s, s, n + 1)[:n] * resize`` per axis with
    s = (1 - crop / resize) / 2 (-16..14 px, step 2, for 256/224 and k = 256)."""
    n = _published_side(k, 2)
    space = (1 - crop / resize) / 2
    a = _linspace32(-space, space, n + 1)[:n] * resize
    return torch.cartesian_prod(a, a).reshape(-1, 2)


def scale_grid(k: int) -> torch.Tensor:
    """float32 [k]: ``linspace(1/4, 2, k)``."""
    return _linspace32(0.25, 2.0, check_k(k))


def shear_grid(k: int) -> torch.Tensor:
    """float32 [n², 2], n = int(sqrt(k)): (sx, sy) degrees, ``linspace(-160, 160, n + 1)[:n]`` per axis."""
    n = _published_side(k, 2)
    a = _linspace32(-160.0, 160.0, n + 1)[:n]
    return torch.cartesian_prod(a, a).reshape(-1, 2)


def rotation_grid(k: int) -> torch.Tensor:
    """float32 [k]: degrees counter-clockwise, ``linspace(0, 360, k + 1)[:k]``."""
    return _linspace32(0.0, 360.0, check_k(k) + 1)[:k]


def crop_grid(k: int, resize: int = 256) -> torch.Tensor:
    """float32 [n⁴, 4], n = int(k^¼): (top, left, height, width) in pixels of the image as loaded,
    top/left in ``linspace(0, 0.25, n) * resize``, height/width in ``linspace(0.75, 0.25, n) * resize``."""
    n = _published_side(k, 4)
    a = _linspace32(0.0, 0.25, n) * resize
    b = _linspace32(0.75, 0.25, n) * resize
    return torch.cartesian_prod(a, a, b, b).reshape(-1, 4)


def posterize_grid(k: int) -> torch.Tensor:
    """float32 [7]: bits 1..7 whatever ``k`` (the original measures posterize with k = 7)."""
    check_k(k)
    return torch.tensor(POSTERIZE_BITS, dtype=torch.float32, device="cpu")


def deform_grid(k: int) -> torch.Tensor:
    """float32 [k, 2]: (sigma, draw) with sigma ``int(linspace(10, 50, 8))`` tiled k times' worth, draw = 0..k-1."""
    k = check_k(k)
    sig = torch.linspace(10.0, 50.0, 8, dtype=torch.float64, device="cpu").floor()  # int() of positive values
    tiled = sig.repeat(math.ceil(k / 8))[:k]
    return torch.stack([tiled, torch.arange(k, dtype=torch.float64, device="cpu")], 1).to(torch.float32)


# ---------------------------------------------------------------------------------------------- affine (nearest)
def _inverse_shear_1deg(n: int) -> torch.Tensor:
    zero = torch.zeros(n, dtype=torch.float64, device="cpu")
    return shear_matrix(torch.full((n,), SHEAR_DEG, dtype=torch.float64, device="cpu"), zero, inverse=True)


def _no_shift(n: int) -> torch.Tensor:
    return torch.zeros(n, 2, dtype=torch.float64, device="cpu")


def scale_data(p: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """float64 [P, 6]: the Pillow ``AFFINE`` data of torchvision's ``F.affine(scale=s, shear=1)`` on a W x H
    PIL image: the inverse of the 1° x-shear and 1/s about the centre ``(W/2, H/2)`` (corner coordinates),
    ``a2 = a0 (-cx - tx) + a1 (-cy - ty) + cx`` as ``_get_inverse_affine_matrix`` orders it (angle 0)."""
    pd = p.detach().to("cpu", torch.float64)
    return _with_offsets(_inverse_shear_1deg(pd.shape[0]) / pd.view(-1, 1, 1), _no_shift(pd.shape[0]), H, W)


def shear_data(p: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """float64 [P, 6]: as :func:`scale_data` for ``F.affine(shear=(sx, sy))``, p [P, 2] degrees."""
    pd = p.detach().to("cpu", torch.float64)
    return _with_offsets(shear_matrix(pd[:, 0], pd[:, 1], inverse=True), _no_shift(pd.shape[0]), H, W)


def translation_data(p: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """float64 [P, 6]: as :func:`scale_data` for ``F.affine(translate=(x, y), shear=1)``, p [P, 2] pixels."""
    pd = p.detach().to("cpu", torch.float64)
    return _with_offsets(_inverse_shear_1deg(pd.shape[0]), pd, H, W)


def rotate_data(angle: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """float64 [P, 6]: Pillow ``Image.rotate(angle)``'s data (no expand, centre ``(W/2, H/2)``): the inverse
    rotation with entries rounded to 15 decimals, as ``Image.rotate`` rounds them."""
    a = torch.remainder(angle.detach().to("cpu", torch.float64), 360.0)
    A = torch.round(rotation_matrix(a, inverse=True), decimals=15)
    return _with_offsets(A, torch.zeros(a.shape[0], 2, dtype=torch.float64, device="cpu"), H, W)


def _with_offsets(A: torch.Tensor, t: torch.Tensor, H: int, W: int) -> torch.Tensor:
    cx, cy = W * 0.5, H * 0.5
    ux, uy = -cx - t[:, 0], -cy - t[:, 1]
    a2 = (A[:, 0, 0] * ux + A[:, 0, 1] * uy) + cx
    a5 = (A[:, 1, 0] * ux + A[:, 1, 1] * uy) + cy
    return torch.stack([A[:, 0, 0], A[:, 0, 1], a2, A[:, 1, 0], A[:, 1, 1], a5], 1)


def _fill_units(fill: Any, C: int, dtype: torch.dtype) -> torch.Tensor:
    f = fill_vector(fill, C).to(torch.float64)
    if bool(((f < 0) | (f > 1)).any()):
        raise ValueError(f"fill must be in [0, 1] (image units), got {f.tolist()}")
    return torch.floor(f * 255.0 + 0.5) if dtype == torch.uint8 else f


def nearest(data: Callable[[torch.Tensor, int, int], torch.Tensor]) -> Apply:
    """The published apply of an affine transform whose Pillow data ``data(p, H, W)`` gives: nearest
    resampling bit for bit as Pillow (:func:`invfast.ops.pillow.pillow_affine_nearest`), ``fill`` in [0, 1]."""

    def apply(t: Any, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
        _, C, H, W = images.shape
        return pillow_affine_nearest(images, data(p, H, W), H, W, _fill_units(fill, C, images.dtype).tolist())

    return apply


# ---------------------------------------------------------------------------------------------- resized crop
def crop_boxes(p: torch.Tensor) -> torch.Tensor:
    """int64 [P, 4] (x0, y0, x1, y1): PIL's ``crop((left, top, left + width, top + height))`` box, each corner
    rounded half to even (``Image._crop``: ``map(int, map(round, box))``), from (top, left, height, width)."""
    pd = p.detach().to("cpu", torch.float64)
    top, left, h, w = pd.unbind(1)
    return torch.round(torch.stack([left, top, left + w, top + h], 1)).to(torch.int64)


def resize_bilinear(
    x: torch.Tensor, size: tuple[int, int], box: tuple[int, int, int, int] | None = None
) -> torch.Tensor:
    """torchvision ``resize`` to ``size`` (h, w), bilinear, of [..., C, H, W]: uint8 images as Pillow resizes them
    (:func:`invfast.ops.pillow.pillow_resize`, bit for bit); float images with torch's antialiased bilinear
    (the same filter without Pillow's uint8 rounding). ``box`` (top, left, height, width): only that part of
    the result (a crop after the resize)."""
    if x.dtype == torch.uint8:
        return pillow_resize(x, size, box)
    y = x
    if tuple(x.shape[-2:]) != tuple(size):
        y = F.interpolate(
            x.reshape(-1, *x.shape[-3:]), size=tuple(size), mode="bilinear", align_corners=False, antialias=True
        ).reshape(*x.shape[:-2], *size)
    if box is None:
        return y
    top, left, h, w = box
    return y[..., top : top + h, left : left + w]


def resized_crop(t: Any, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
    """The published crop: each PIL-rounded box (:func:`crop_boxes`, zero outside the image) resized to
    ``t.crop`` x ``t.crop``. [B, C, H, W] -> [B, P, C, crop, crop]."""
    B, C, H, W = images.shape
    out = t.crop
    boxes = crop_boxes(p)
    if bool(((boxes[:, 2] <= boxes[:, 0]) | (boxes[:, 3] <= boxes[:, 1])).any()):
        raise ValueError(
            "crop (ericsson protocol): a box is empty after PIL's rounding; height and width must be at least 1 px"
        )
    res = torch.empty((B, p.shape[0], C, out, out), dtype=images.dtype, device=images.device)
    for j, (x0, y0, x1, y1) in enumerate(boxes.tolist()):
        region = images.new_zeros((B, C, y1 - y0, x1 - x0))  # PIL pads outside the image with 0
        ix0, iy0, ix1, iy1 = max(x0, 0), max(y0, 0), min(x1, W), min(y1, H)
        if ix1 > ix0 and iy1 > iy0:
            region[..., iy0 - y0 : iy1 - y0, ix0 - x0 : ix1 - x0] = images[..., iy0:iy1, ix0:ix1]
        res[:, j] = resize_bilinear(region, (out, out))
    return res


# ---------------------------------------------------------------------------------------------- blur
def blur_kernels(sigma: torch.Tensor, taps: int = BLUR_TAPS) -> torch.Tensor:
    """float64 [P, taps]: the protocol's fixed-length kernel, ``exp(-x²/(2σ²))`` on x = -(taps-1)/2 .. (taps-1)/2,
    normalised (torchvision's kernel; :func:`invfast.ops.kernels.gaussian_taps` with ``size=taps``)."""
    return gaussian_taps(sigma, size=taps)


#: how the uint8 views of the published blur become bytes: torchvision 0.10's ``to_pil_image`` truncates
#: (``pic.mul(255).byte()`` of the float 0..1 blur), torchvision 0.29 rounds the float 0..255 blur half to even
BLUR_ROUNDINGS = ("truncate", "round")


def _blur23(images: torch.Tensor, sigma: torch.Tensor, rounding: str = "truncate") -> torch.Tensor:
    """torchvision ``gaussian_blur(img, 23, sigma)`` of every image, every sigma, as it runs on a PIL image.

    uint8 images, ``rounding="truncate"`` (torchvision 0.10, the version the original pins): ``to_tensor``
    (``float32 / 255``), the 23 x 23 kernel ``outer(k, k)`` of torchvision's float32 taps
    (:func:`invfast.ops.kernels.torchvision_gaussian_taps`), reflect padding, a depthwise ``conv2d``, then
    ``to_pil_image``: ``mul(255).byte()``, truncated. ``rounding="round"`` (torchvision 0.29): ``pil_to_tensor``
    (the uint8 values as float32), the same kernel and convolution, ``torch.round`` (half to even). Float images:
    the float64 taps rounded to their dtype, the blur in their dtype, nothing rounded. The convolution runs one
    image at a time with its views side by side as groups (each channel's sums as in torchvision's call).
    [B, C, H, W] -> [B, P, C, H, W]."""
    B, C, H, W = images.shape
    R = (BLUR_TAPS - 1) // 2
    if min(H, W) <= R:
        raise ValueError(
            f"blur (ericsson protocol): images must be larger than {R} px for the {BLUR_TAPS}-tap "
            f"kernel's reflect padding, got {H}x{W}"
        )
    if rounding not in BLUR_ROUNDINGS:
        raise ValueError(f"blur (ericsson protocol): rounding must be one of {BLUR_ROUNDINGS}, got {rounding!r}")
    P = sigma.shape[0]
    u8 = images.dtype == torch.uint8
    if u8:  # torchvision's float32 taps; to_tensor's / 255 for 0.10
        k = torchvision_gaussian_taps(sigma, BLUR_TAPS).to(images.device)
        x = images.to(torch.float32)
        x = x.div(255) if rounding == "truncate" else x
    else:
        k = blur_kernels(sigma).to(images.dtype).to(images.device)  # the 1-D taps, rounded to the working dtype
        x = images
    k2 = (k.view(P, -1, 1) * k.view(P, 1, -1)).repeat_interleave(C, 0).unsqueeze(1)  # torch.mm(k[:, None], k[None])
    out = torch.empty((B, P, C, H, W), dtype=images.dtype, device=images.device)
    padded = F.pad(x, (R, R, R, R), mode="reflect")
    step = max(1, (1 << 24) // padded[0].numel())  # views per call: about 64 MiB of input
    for b in range(B):
        for s in range(0, P, step):
            n = min(step, P - s)
            y = F.conv2d(padded[b : b + 1].repeat(1, n, 1, 1), k2[s * C : (s + n) * C], groups=n * C)
            if u8:  # 0.10's to_pil_image: pic.mul(255).byte(), truncated; 0.29: torch.round, then uint8
                y = (y.mul(255) if rounding == "truncate" else torch.round(y)).to(torch.uint8)
            out[b, s : s + n] = y.view(n, C, H, W)
    return out


def blur(t: Any, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
    """The published blur (:func:`_blur23`, rounded as ``t.blur_rounding`` says: torchvision 0.10's truncation
    by default) of uint8 images, or of float images in float."""
    rounding = getattr(t, "blur_rounding", "truncate")
    if images.dtype == torch.uint8:
        return _blur23(images, p, rounding)
    return Fn.from_float(_blur23(Fn.to_float(images), p, rounding), images.dtype)


def elastic(t: Any, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
    """The published deform: albumentations' elastic transform (:mod:`invfast.transforms.ericsson_elastic`),
    p [P, 2] = (sigma, draw), randomness from ``t.seed``."""
    x = Fn.to_float(images)
    H, W = x.shape[-2:]
    m, d = elastic_params(p[:, 0].double(), p[:, 1].double(), (H, W), t.seed, device=x.device)
    return Fn.from_float(elastic_apply(x, m, d), images.dtype)


def builtin_apply(t: Any, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
    """The built-in transform's own apply (``t.builtin``): posterize, and the colour transforms of float images."""
    return t.builtin.apply(images, p)


def pillow(colour: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Apply:
    """A published colour transform: ``colour``, Pillow's uint8 arithmetic (one of :mod:`invfast.ops.pillow`'s
    ``pillow_brightness`` ... ``pillow_grayscale``), on uint8 images, the built-in's float op on float images."""

    def apply(t: Any, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
        if images.dtype != torch.uint8:
            return t.builtin.apply(images, p)
        return colour(images, p)

    return apply


def linear_grid(lo: float, hi: float) -> Grid:
    """The published ``torch.linspace(lo, hi, k)`` (float32) grid."""
    return lambda k, resize, crop: _linspace32(lo, hi, check_k(k))


def never(p: torch.Tensor) -> torch.Tensor:
    """bool [P], all False: no view is a copy."""
    return torch.zeros(p.shape[0], dtype=torch.bool, device="cpu")


def _first_column(p: torch.Tensor) -> torch.Tensor:
    return p if p.dim() == 1 else p[:, 0]


def positive(name: str, what: str) -> Callable[[torch.Tensor], None]:
    """A check that the first parameter column is > 0."""

    def check(p: torch.Tensor) -> None:
        if bool((_first_column(p) <= 0).any()):
            raise ValueError(f"{name}: {what} must be > 0")

    return check


def blur_check(p: torch.Tensor) -> None:
    if bool((p < 0).any()):
        raise ValueError("blur: sigma must be >= 0")


def crop_check(p: torch.Tensor) -> None:
    if bool((p[:, 2:] <= 0).any()):
        raise ValueError("crop (ericsson protocol): height and width (pixels) must be > 0")


def shear_check(p: torch.Tensor) -> None:
    if bool((torch.cos(torch.deg2rad(p.double())).abs() < 1e-6).any()):
        raise ValueError("shear: angles of +-90 degrees (mod 180) are degenerate (infinite shear)")


def posterize_check(p: torch.Tensor) -> None:
    if not bool((p == p.round()).all()) or bool(((p < 1) | (p > 8)).any()):
        raise ValueError("posterize: bits must be integers in 1..8")


@dataclass(frozen=True)
class Published:
    """How Ericsson et al.'s published evaluation code applies one test transform (``protocol="ericsson"``),
    held by the transform's record (:attr:`invfast.transforms.builtin.Builtin.published`).

    - ``grid(k, resize, crop)``: the published parameter grid (float32);
    - ``apply(t, images, p, fill)``: [B, C, H, W] -> [B, P, C, H', W'] in the images' dtype, ``t`` the
      :class:`~invfast.transforms.ericsson.EricssonTransform` (its ``seed``, ``crop`` and ``builtin``);
    - ``identity(p)``: bool [P], which views are copies; ``check(p)``: raises on bad values after the
      shape and finiteness checks;
    - ``builtin_units``: params, checks and identity are the built-in's (the colour transforms);
    - ``at_model_size``: the views come out at ``crop`` x ``crop`` (no Resize + CenterCrop after).
    """

    grid: Grid
    apply: Apply
    param_dim: int = 1
    identity: Callable[[torch.Tensor], torch.Tensor] = never
    check: Callable[[torch.Tensor], None] = lambda p: None
    builtin_units: bool = False
    at_model_size: bool = False
