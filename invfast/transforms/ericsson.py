"""The test transforms as Ericsson et al.'s (2021) published evaluation code applies them.

Used by ``protocol="ericsson"`` (:mod:`invfast.measure.protocol`); invfast's own registry
(:mod:`invfast.transforms.registry`) stays the default. The original is
github.com/linusericsson/ssl-invariances, ``eval_synthetic_invariance.py`` (``ManualTransform``): each
transform is a ``torchvision.transforms.functional`` call (torchvision 0.10, Pillow 8.1) on the PIL image
as loaded, then ``Resize(resize)`` + ``CenterCrop(crop)`` (256, 224) -- except ``resized_crop``, which
is resized straight to ``crop x crop``. Fourteen transforms differ from the registry:

=========== ========== ===========================================================================
name        params     what the original code does
=========== ========== ===========================================================================
crop        [P, 4]     ``TF.resized_crop(img, top, left, height, width, (crop, crop))``: the box in
                       **pixels of the image as loaded** (top, left in ``linspace(0, 0.25, n)·resize``,
                       height, width in ``linspace(0.75, 0.25, n)·resize``, n = int(k^¼)); PIL rounds
                       the box corners (half to even) and pads outside the image with 0; the crop is
                       resized (bilinear, antialiased) to crop x crop with **no** Resize + CenterCrop
scale       [P]        ``TF.affine(scale=s, shear=1)``: zoom about the centre with a 1° x-shear,
                       s in ``linspace(0.25, 2, k)`` (float32)
shear       [P, 2]     ``TF.affine(shear=(sx, sy))``, ``linspace(-160, 160, n + 1)[:n]`` per axis
rotation    [P]        ``TF.rotate(angle)`` = Pillow ``Image.rotate``, ``linspace(0, 360, k + 1)[:k]``
translation [P, 2]     ``TF.affine(translate=(x, y), shear=1)``: shift in pixels with a 1° x-shear, per
                       axis ``linspace(-s, s, n + 1)[:n]``, s = (resize - crop) / 2 (-16..14 px, step 2)
blur        [P]        Gaussian of std sigma on a fixed 23-tap kernel (taps -11..11, reflect
                       padding): its effective std saturates at sqrt((23²-1)/12) ≈ 6.6 px
posterize   [P]        bits 1..7 (7 views; no identity view in the grid)
deform      [P, 2]     (sigma, draw): albumentations 1.0.3 ``ElasticTransform(sigma=σ, approximate=True)``
                       (:mod:`invfast.transforms.ericsson_elastic`); sigma in ``int(linspace(10, 50, 8))``
                       tiled over the grid; ``draw`` seeds the randomness
grayscale,  [P]        Pillow's uint8 arithmetic (:func:`invfast.ops.pillow.pillow_colour`): ``ImageEnhance``
brightness,            blends truncated to uint8, contrast's grey the integer ``int(mean(L) + 0.5)``,
contrast,              ``convert("L")``'s fixed-point luma, hue shifted by ``int(255 shift)`` steps of the
saturation,            uint8 hue of ``convert("HSV")``; grids ``linspace`` in float32 (hue ``(-0.5, 0.5)``,
hue, sharpness         factors ``(0.25, 5)``, sharpness ``(1, 30)``); float images: the registry's float ops
=========== ========== ===========================================================================

Resampling of scale, shear, rotation and translation is **nearest**, torchvision's default for PIL
images: Pillow's ``Image.transform(size, AFFINE, data, NEAREST)`` with torchvision's inverse matrix
(``_get_inverse_affine_matrix``, centre ``(W/2, H/2)`` in corner coordinates), or ``Image.rotate``'s
own matrix, reproduced bit for bit by :func:`invfast.ops.pillow.pillow_affine_nearest`; fill 0.

Every other name is the registry's transform. Randomness of ``deform`` comes from
``torch.Generator().manual_seed(seed * 1_000_003 + draw)`` (CPU, float64), moved to the data's
device, so a seed gives the same views on every device; the original draws fresh numbers for every
image and call, here every grid point has its own draw shared by all images.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from invfast.ops.augment import _fill_vector
from invfast.ops.geometry import rotation_matrix, shear_matrix
from invfast.ops.kernels import gaussian_taps
from invfast.ops.pillow import PILLOW_COLOUR, pillow_affine_nearest, pillow_colour, pillow_resize
from invfast.transforms import functional as Fn
from invfast.transforms import registry
from invfast.transforms._checks import as_images
from invfast.transforms.ericsson_elastic import elastic_apply, elastic_params
from invfast.transforms.transform import check_k

__all__ = [
    "BLUR_TAPS",
    "ERICSSON_CHANGED",
    "POSTERIZE_BITS",
    "SHEAR_DEG",
    "EricssonTransform",
    "affine_data",
    "blur_kernels",
    "crop_boxes",
    "crop_grid",
    "deform_grid",
    "get",
    "posterize_grid",
    "resize_bilinear",
    "rotate_data",
    "rotation_grid",
    "scale_grid",
    "shear_grid",
    "translation_grid",
]

SHEAR_DEG = 1.0  #: x-shear passed with every scale and translation view
BLUR_TAPS = 23  #: fixed Gaussian kernel length of the blur transform
POSTERIZE_BITS = tuple(range(1, 8))  #: the published posterize grid (``torch.arange(1, 8)``)
ERICSSON_CHANGED = ("crop", "scale", "shear", "rotation", "translation", "deform", "blur", "posterize") + PILLOW_COLOUR
_AFFINE = ("scale", "shear", "rotation", "translation")
_DIMS = {"crop": 4, "shear": 2, "translation": 2, "deform": 2}


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


#: the published ``torch.linspace(lo, hi, k)`` (float32) of the other transforms with k views
_LINEAR = {
    "brightness": (0.25, 5.0),
    "contrast": (0.25, 5.0),
    "saturation": (0.25, 5.0),
    "hue": (-0.5, 0.5),
    "blur": (1e-5, 20.0),
    "sharpness": (1.0, 30.0),
}

_GRIDS = {
    "translation": translation_grid,
    "scale": scale_grid,
    "shear": shear_grid,
    "rotation": rotation_grid,
    "crop": crop_grid,
    "posterize": posterize_grid,
    "deform": deform_grid,
}


# ---------------------------------------------------------------------------------------------- affine (nearest)
def affine_data(name: str, p: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """float64 [P, 6]: the Pillow ``AFFINE`` data torchvision's ``F.affine`` passes for each view of
    ``name`` ('translation', 'scale', 'shear') on a W x H PIL image: the inverse of the shear (and
    1/scale) about the centre ``(W/2, H/2)`` (corner coordinates), ``a2 = a0 (-cx - tx) + a1 (-cy - ty) + cx``
    as ``_get_inverse_affine_matrix`` orders it (angle 0)."""
    pd = p.detach().to("cpu", torch.float64)
    n = pd.shape[0]
    zero = torch.zeros(n, dtype=torch.float64, device="cpu")
    if name == "shear":
        A, t = shear_matrix(pd[:, 0], pd[:, 1], inverse=True), torch.zeros(n, 2, dtype=torch.float64, device="cpu")
    else:
        A = shear_matrix(torch.full((n,), SHEAR_DEG, dtype=torch.float64, device="cpu"), zero, inverse=True)
        no_shift = torch.zeros(n, 2, dtype=torch.float64, device="cpu")
        A, t = (A / pd.view(-1, 1, 1), no_shift) if name == "scale" else (A, pd)
    return _with_offsets(A, t, H, W)


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
    f = _fill_vector(fill, C).to(torch.float64)
    if bool(((f < 0) | (f > 1)).any()):
        raise ValueError(f"fill must be in [0, 1] (image units), got {f.tolist()}")
    return torch.floor(f * 255.0 + 0.5) if dtype == torch.uint8 else f


def _apply_nearest(name: str, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
    _, C, H, W = images.shape
    data = rotate_data(p, H, W) if name == "rotation" else affine_data(name, p, H, W)
    return pillow_affine_nearest(images, data, H, W, _fill_units(fill, C, images.dtype).tolist())


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


def _apply_crop(images: torch.Tensor, p: torch.Tensor, out: int) -> torch.Tensor:
    B, C, H, W = images.shape
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


def _blur(images: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """torchvision 0.10 ``gaussian_blur(img, 23, sigma)`` of every image, every sigma, as it runs on a PIL image:
    the 23 x 23 kernel ``outer(k, k)`` in float32 (float for float images), reflect padding, a depthwise
    ``conv2d`` (one image at a time; views side by side as groups, each channel's sums as in torchvision's
    call), uint8 results rounded half to even (``_cast_squeeze_out``). [B, C, H, W] -> [B, P, C, H, W]."""
    B, C, H, W = images.shape
    R = (BLUR_TAPS - 1) // 2
    if min(H, W) <= R:
        raise ValueError(
            f"blur (ericsson protocol): images must be larger than {R} px for the {BLUR_TAPS}-tap "
            f"kernel's reflect padding, got {H}x{W}"
        )
    P = sigma.shape[0]
    dtype = images.dtype if images.is_floating_point() else torch.float32
    k = blur_kernels(sigma).to(dtype).to(images.device)  # the 1-D taps, rounded to the working dtype
    k2 = (k.view(P, -1, 1) * k.view(P, 1, -1)).repeat_interleave(C, 0).unsqueeze(1)  # torch.mm(k[:, None], k[None])
    out = torch.empty((B, P, C, H, W), dtype=images.dtype, device=images.device)
    padded = F.pad(images.to(dtype), (R, R, R, R), mode="reflect")
    step = max(1, (1 << 24) // padded[0].numel())  # views per call: about 64 MiB of input
    for b in range(B):
        for s in range(0, P, step):
            n = min(step, P - s)
            y = F.conv2d(padded[b : b + 1].repeat(1, n, 1, 1), k2[s * C : (s + n) * C], groups=n * C)
            out[b, s : s + n] = (torch.round(y) if images.dtype == torch.uint8 else y).view(n, C, H, W)
    return out


# ---------------------------------------------------------------------------------------------- transforms
@dataclass(frozen=True)
class EricssonTransform:
    """A test transform as the original evaluation code applies it (same interface as
    :class:`invfast.transforms.transform.TestTransform`: ``grid``, ``is_identity``, ``apply``).

    Attributes:
        resize, crop: the original's Resize + CenterCrop sizes: they set the translation range and the crop
            boxes (pixels), and ``crop`` is the side of the crop transform's views.
    """

    __test__ = False

    name: str
    family: str
    param_dim: int
    seed: int = 0
    resize: int = 256
    crop: int = 224

    @property
    def includes_preprocessing(self) -> bool:
        """The views come out at the model's input size (crop x crop): the original's ``resized_crop`` is
        not followed by Resize + CenterCrop."""
        return self.name == "crop"

    def grid(self, k: int = 256) -> torch.Tensor:
        if self.name == "translation":
            return translation_grid(k, self.resize, self.crop)
        if self.name == "crop":
            return crop_grid(k, self.resize)
        if self.name in _GRIDS:
            return _GRIDS[self.name](k)
        if self.name in _LINEAR:
            return _linspace32(*_LINEAR[self.name], check_k(k))
        return registry.get(self.name).grid(k)

    def _params(self, params: Any) -> torch.Tensor:
        if self.name in PILLOW_COLOUR:  # the registry's units and checks
            return registry.get(self.name)._params(params).to("cpu")
        p = torch.as_tensor(params, dtype=torch.float32, device="cpu")
        m = self.param_dim
        if m > 1 and p.dim() == 1 and p.shape[0] == m:
            p = p.reshape(1, m)
        if m == 1 and p.dim() == 0:
            p = p.reshape(1)
        if p.dim() != (1 if m == 1 else 2) or (m > 1 and p.shape[1] != m) or not p.shape[0]:
            raise ValueError(
                f"{self.name} (ericsson protocol): params must have shape "
                f"{'[P]' if m == 1 else f'[P, {m}]'}, got {tuple(p.shape)}"
            )
        if not bool(torch.isfinite(p).all()):
            raise ValueError(f"{self.name}: params contain NaN/Inf")
        first = p if p.dim() == 1 else p[:, 0]
        if self.name in ("scale", "deform") and bool((first <= 0).any()):
            raise ValueError(f"{self.name}: {'the factor' if self.name == 'scale' else 'sigma'} must be > 0")
        if self.name == "blur" and bool((first < 0).any()):
            raise ValueError("blur: sigma must be >= 0")
        if self.name == "crop" and bool((p[:, 2:] <= 0).any()):
            raise ValueError("crop (ericsson protocol): height and width (pixels) must be > 0")
        if self.name == "shear" and bool((torch.cos(torch.deg2rad(p.double())).abs() < 1e-6).any()):
            raise ValueError("shear: angles of +-90 degrees (mod 180) are degenerate (infinite shear)")
        if self.name == "posterize" and (not bool((p == p.round()).all()) or bool(((p < 1) | (p > 8)).any())):
            raise ValueError("posterize: bits must be integers in 1..8")
        return p

    def is_identity(self, params: Any) -> torch.Tensor:
        """bool [P]: rotation by a multiple of 360°, shear (0, 0) and posterize 8 are copies; the 1° shear makes
        no scale/translation view an identity, no crop view is one (every box is resized); blur is one when the
        kernel's off-centre weights vanish (sigma < 0.135 px); deform never is."""
        p = self._params(params)
        if self.name in PILLOW_COLOUR:
            return registry.get(self.name).is_identity(p)
        if self.name == "blur":
            return torch.exp(-0.5 / p.double().clamp_min(1e-12) ** 2) < 1e-12
        if self.name == "rotation":
            return torch.remainder(p.double(), 360.0) == 0
        if self.name == "shear":
            return (p == 0).all(dim=1)
        if self.name == "posterize":
            return p == 8
        return torch.zeros(p.shape[0], dtype=torch.bool, device="cpu")

    def apply(self, images: torch.Tensor, params: Any, fill: Any = 0.0) -> torch.Tensor:
        """[B, 3, H, W] uint8 or float images -> [B, P, 3, H, W] in their dtype ([B, P, 3, crop, crop] for
        the crop transform)."""
        images = as_images(images)
        p = self._params(params)
        if self.name in _AFFINE:
            return _apply_nearest(self.name, images, p, fill)
        if self.name == "crop":
            return _apply_crop(images, p, self.crop)
        if self.name == "posterize" or (self.name in PILLOW_COLOUR and images.dtype != torch.uint8):
            return registry.get(self.name).apply(images, p)
        if self.name in PILLOW_COLOUR:
            return pillow_colour(self.name, images, p)
        if self.name == "blur" and images.dtype == torch.uint8:
            return _blur(images, p)
        x = Fn.to_float(images)
        if self.name == "blur":
            return Fn.from_float(_blur(x, p), images.dtype)
        H, W = x.shape[-2:]
        m, d = elastic_params(p[:, 0].double(), p[:, 1].double(), (H, W), self.seed, device=x.device)
        return Fn.from_float(elastic_apply(x, m, d), images.dtype)

    def __call__(self, images: torch.Tensor, params: Any, fill: Any = 0.0) -> torch.Tensor:
        return self.apply(images, params, fill)


def get(name: str, seed: int = 0, resize: int = 256, crop: int = 224) -> Any:
    """The transform called ``name`` under the original protocol: an :class:`EricssonTransform` for the names
    in :data:`ERICSSON_CHANGED`, the registry's transform otherwise. ``resize``, ``crop``: the protocol's
    Resize + CenterCrop sizes."""
    t = registry.get(name)
    if name not in ERICSSON_CHANGED:
        return t
    if crop > resize:
        raise ValueError(f"crop ({crop}) must not exceed resize ({resize})")
    return EricssonTransform(
        name=name, family=t.family, param_dim=_DIMS.get(name, 1), seed=seed, resize=int(resize), crop=int(crop)
    )
