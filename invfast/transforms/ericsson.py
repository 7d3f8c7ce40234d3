"""The test transforms as Ericsson et al.'s (2021) published evaluation code applies them.

Used by ``protocol="ericsson"`` (:mod:`invfast.measure.protocol`); invfast's own registry
(:mod:`invfast.transforms.registry`) stays the default. Four transforms differ from the registry:

=========== ========== ===========================================================================
name        params     what the original code does
=========== ========== ===========================================================================
translation [P, 2]     (x, y) shift in pixels with a 1° x-shear, grid ``linspace(-16, 16, n+1)[:n]``
                       per axis (step 2 px at n = 16, includes 0)
scale       [P]        zoom factor about the centre with a 1° x-shear (grid as the registry's)
blur        [P]        Gaussian of std sigma on a fixed 23-tap kernel (taps -11..11, reflect
                       padding): its effective std saturates at sqrt((23²-1)/12) ≈ 6.6 px
deform      [P, 2]     (sigma, draw): albumentations ``ElasticTransform(alpha=1, sigma, alpha_affine=50)``:
                       a random affine warp (three points moved by U(-50, 50) px) then a
                       displacement ``alpha * gaussian_filter(U(-1, 1), sigma)`` (scipy, zero
                       padding, truncate 4), both bilinear with reflect-101 borders; sigma in
                       ``int(linspace(10, 50, 8))`` tiled over the grid; ``draw`` seeds the randomness
=========== ========== ===========================================================================

Every other name is the registry's transform. Randomness of ``deform`` comes from
``torch.Generator().manual_seed(seed * 1_000_003 + draw)`` (CPU, float64), moved to the data's
device, so a seed gives the same views on every device; the original draws fresh numbers for every
image and call, here every grid point has its own draw shared by all images.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from invfast.ops.geometry import shear_matrix
from invfast.ops.kernels import gaussian_taps
from invfast.transforms import functional as Fn
from invfast.transforms import registry
from invfast.transforms._checks import as_images
from invfast.transforms.transform import check_k

__all__ = ["ERICSSON_CHANGED", "EricssonTransform", "get", "translation_grid", "blur_kernels", "deform_grid",
           "elastic_params", "gaussian_filter_constant", "remap_reflect101", "elastic_apply", "SHEAR_DEG",
           "BLUR_TAPS", "ALPHA_AFFINE"]

SHEAR_DEG = 1.0       #: x-shear passed with every scale and translation view
BLUR_TAPS = 23        #: fixed Gaussian kernel length of the blur transform
ALPHA_AFFINE = 50.0   #: albumentations' default ``alpha_affine`` (pixels)
ELASTIC_ALPHA = 1.0   #: albumentations' default ``alpha``
ERICSSON_CHANGED = ("translation", "scale", "blur", "deform")


# ---------------------------------------------------------------------------------------------- grids
def translation_grid(k: int, max_shift: float = 16.0) -> torch.Tensor:
    """float32 [n², 2], n = round(sqrt(k)): per axis ``linspace(-s, s, n + 1)[:n]`` (step 2s/n, includes 0)."""
    n = registry._side(check_k(k), 2)
    a = torch.linspace(-max_shift, max_shift, n + 1, dtype=torch.float64)[:n].to(torch.float32)
    return torch.cartesian_prod(a, a).reshape(-1, 2)


def deform_grid(k: int) -> torch.Tensor:
    """float32 [k, 2]: (sigma, draw) with sigma ``int(linspace(10, 50, 8))`` tiled k times' worth, draw = 0..k-1."""
    k = check_k(k)
    sig = torch.linspace(10.0, 50.0, 8, dtype=torch.float64).floor()  # int() of positive values
    tiled = sig.repeat(math.ceil(k / 8))[:k]
    return torch.stack([tiled, torch.arange(k, dtype=torch.float64)], 1).to(torch.float32)


# ---------------------------------------------------------------------------------------------- affine
def _shear_affine_matrix(name: str, p: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """[P, 2, 3] source-from-output matrices (pixel-centre units) of torchvision's
    ``affine(translate=t, scale=s, shear=(1°, 0))`` about the image centre."""
    pd = p.to(torch.float64)
    n = pd.shape[0]
    sh = shear_matrix(torch.full((n,), SHEAR_DEG, dtype=torch.float64), torch.zeros(n, dtype=torch.float64),
                      inverse=True)
    c = Fn.centre(H, W)
    if name == "scale":
        A, t = sh / pd.view(-1, 1, 1), torch.zeros(n, 2, dtype=torch.float64)
    else:
        A, t = sh, pd
    # source = c + A (p - c - t)
    offset = c - (A @ (c.view(1, 2, 1) + t.unsqueeze(-1))).squeeze(-1)
    return torch.cat([A, offset.unsqueeze(-1)], -1)


def _apply_affine(name: str, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
    from invfast.ops.augment import warp_affine

    B, C, H, W = images.shape
    fillv = Fn._fill_vector(fill, C).to(torch.float64)
    m = _shear_affine_matrix(name, p, H, W)
    if images.dtype == torch.uint8:
        return warp_affine(images.contiguous(), m, H, W, fillv * 255.0)
    x = images if images.dtype in (torch.float32, torch.float64) else images.to(torch.float32)
    return warp_affine(x.contiguous(), m, H, W, fillv).to(images.dtype)


# ---------------------------------------------------------------------------------------------- blur
def blur_kernels(sigma: torch.Tensor, taps: int = BLUR_TAPS) -> torch.Tensor:
    """float64 [P, taps]: the protocol's fixed-length kernel, ``exp(-x²/(2σ²))`` on x = -(taps-1)/2 .. (taps-1)/2,
    normalised (torchvision's kernel; :func:`invfast.ops.kernels.gaussian_taps` with ``size=taps``)."""
    return gaussian_taps(sigma, size=taps)


def _blur(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    B, C, H, W = x.shape
    R = (BLUR_TAPS - 1) // 2
    if min(H, W) <= R:
        raise ValueError(f"blur (ericsson protocol): images must be larger than {R} px for the {BLUR_TAPS}-tap "
                         f"kernel's reflect padding, got {H}x{W}")
    P = sigma.shape[0]
    k = blur_kernels(sigma).to(device=x.device, dtype=x.dtype)
    flat = x.reshape(B * C, 1, H, W)
    h = F.conv2d(F.pad(flat, (R, R, 0, 0), mode="reflect"), k.view(P, 1, 1, -1))
    v = F.conv2d(F.pad(h, (0, 0, R, R), mode="reflect"), k.view(P, 1, -1, 1), groups=P)
    return v.reshape(B, C, P, H, W).transpose(1, 2)


# ---------------------------------------------------------------------------------------------- elastic
def gaussian_filter_constant(field: torch.Tensor, sigma: float) -> torch.Tensor:
    """scipy ``ndimage.gaussian_filter(field, sigma, mode='constant', cval=0, truncate=4)`` of [..., H, W]
    (float64, separable)."""
    H, W = field.shape[-2:]
    k = gaussian_taps(torch.tensor([float(sigma)], dtype=torch.float64), truncate=4.0)[0].to(field.device)
    r = (k.numel() - 1) // 2
    f = field.to(torch.float64).reshape(-1, 1, H, W)
    f = F.conv2d(F.pad(f, (r, r, 0, 0)), k.view(1, 1, 1, -1))
    f = F.conv2d(F.pad(f, (0, 0, r, r)), k.view(1, 1, -1, 1))
    return f.reshape(field.shape)


def elastic_params(sigma: torch.Tensor, draw: torch.Tensor, size: tuple[int, int], seed: int = 0,
                   alpha: float = ELASTIC_ALPHA, alpha_affine: float = ALPHA_AFFINE,
                   device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """The random parts of albumentations' elastic transform, one per (sigma, draw).

    Returns:
        (matrix float64 [P, 2, 3] mapping output pixel (x, y, 1) to its source in the input (the inverse
        of ``cv2.getAffineTransform(pts1, pts2)``), displacement float32 [P, H, W, 2] (dx, dy) in pixels).
        Each view's parts are computed once per process and size (the grid reuses them for every batch).
    """
    H, W = size
    parts = [_elastic_one(float(s), int(d), H, W, int(seed), float(alpha), float(alpha_affine))
             for s, d in zip(sigma.tolist(), draw.tolist())]
    return (torch.stack([m for m, _ in parts]).to(device), torch.stack([d for _, d in parts]).to(device))


@functools.lru_cache(maxsize=512)
def _elastic_one(sigma: float, draw: int, H: int, W: int, seed: int, alpha: float,
                 alpha_affine: float) -> tuple[torch.Tensor, torch.Tensor]:
    cs = torch.tensor([H // 2, W // 2], dtype=torch.float64)  # albumentations' (h, w) centre, used as (x, y)
    sq = float(min(H, W) // 3)
    pts1 = torch.stack([cs + sq, torch.stack([cs[0] + sq, cs[1] - sq]), cs - sq]).to(torch.float32).double()
    g = torch.Generator().manual_seed(seed * 1_000_003 + draw)
    pts2 = pts1 + ((torch.rand(3, 2, generator=g, dtype=torch.float64) * 2 - 1) * alpha_affine).float().double()
    # forward affine M (pts1 -> pts2), then its inverse: output -> source
    X = torch.cat([pts1, torch.ones(3, 1, dtype=torch.float64)], 1)
    M = torch.linalg.solve(X, pts2).T  # [2, 3]
    full = torch.cat([M, torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)])
    noise = torch.rand(2, H, W, generator=g, dtype=torch.float64) * 2 - 1
    disp = (gaussian_filter_constant(noise, sigma).permute(1, 2, 0) * alpha).to(torch.float32).contiguous()
    return torch.linalg.inv(full)[:2].contiguous(), disp


def _reflect101(i: torch.Tensor, n: int) -> torch.Tensor:
    if n == 1:
        return torch.zeros_like(i)
    period = 2 * (n - 1)
    i = torch.remainder(i, period)
    return torch.where(i > n - 1, period - i, i)


def remap_reflect101(x: torch.Tensor, coords: torch.Tensor) -> torch.Tensor:
    """Bilinear sampling with reflect-101 borders (cv2 ``remap(INTER_LINEAR, BORDER_REFLECT_101)``).

    Args:
        x: float [B, C, H, W]; coords: [P, H', W', 2] source (x, y) in pixel-centre units.

    Returns:
        [B, P, C, H', W'] in the dtype of ``x``.
    """
    B, C, H, W = x.shape
    P, Ho, Wo, _ = coords.shape
    cx, cy = coords[..., 0].to(torch.float64), coords[..., 1].to(torch.float64)
    x0, y0 = torch.floor(cx), torch.floor(cy)
    fx, fy = (cx - x0).to(x.dtype), (cy - y0).to(x.dtype)
    x0, y0 = x0.long(), y0.long()
    flat = x.reshape(B, C, H * W)
    out = torch.zeros(B, P, C, Ho, Wo, dtype=x.dtype, device=x.device)
    for dy, wy in ((0, 1 - fy), (1, fy)):
        yy = _reflect101(y0 + dy, H)
        for dx, wx in ((0, 1 - fx), (1, fx)):
            xx = _reflect101(x0 + dx, W)
            idx = (yy * W + xx).reshape(1, 1, -1).expand(B, C, -1)
            vals = torch.gather(flat, 2, idx).reshape(B, C, P, Ho, Wo).transpose(1, 2)
            out += vals * (wy * wx).view(1, P, 1, Ho, Wo)
    return out


def elastic_apply(x: torch.Tensor, matrix: torch.Tensor, disp: torch.Tensor) -> torch.Tensor:
    """albumentations' elastic transform with given random parts: affine warp, then displacement remap.

    x: float [B, C, H, W]; matrix [P, 2, 3]; disp [P, H, W, 2] -> [B, P, C, H, W].
    """
    B, C, H, W = x.shape
    P = matrix.shape[0]
    ident = Fn.identity_coords(H, W).to(x.device)  # [H, W, 2] (x, y) float64
    homo = torch.cat([ident, torch.ones(H, W, 1, dtype=torch.float64, device=x.device)], -1)
    src_aff = torch.einsum("pij,hwj->phwi", matrix.to(torch.float64), homo)
    out = torch.empty(B, P, C, H, W, dtype=x.dtype, device=x.device)
    for j in range(P):
        warped = remap_reflect101(x, src_aff[j:j + 1])[:, 0]
        out[:, j] = remap_reflect101(warped, (ident + disp[j].to(torch.float64)).unsqueeze(0))[:, 0]
    return out


# ---------------------------------------------------------------------------------------------- transforms
@dataclass(frozen=True)
class EricssonTransform:
    """A test transform as the original evaluation code applies it (same interface as
    :class:`invfast.transforms.registry.TestTransform`: ``grid``, ``is_identity``, ``apply``)."""

    __test__ = False

    name: str
    family: str
    param_dim: int
    seed: int = 0

    def grid(self, k: int = 256) -> torch.Tensor:
        if self.name == "translation":
            return translation_grid(k)
        if self.name == "deform":
            return deform_grid(k)
        return registry.get(self.name).grid(k)

    def _params(self, params: Any) -> torch.Tensor:
        p = torch.as_tensor(params, dtype=torch.float32)
        if self.param_dim == 2 and p.dim() == 1 and p.shape[0] == 2:
            p = p.reshape(1, 2)
        if self.param_dim == 1 and p.dim() == 0:
            p = p.reshape(1)
        if p.dim() != (1 if self.param_dim == 1 else 2) or (self.param_dim == 2 and p.shape[1] != 2) or not p.shape[0]:
            raise ValueError(f"{self.name} (ericsson protocol): params must have shape "
                             f"{'[P]' if self.param_dim == 1 else '[P, 2]'}, got {tuple(p.shape)}")
        if not bool(torch.isfinite(p).all()):
            raise ValueError(f"{self.name}: params contain NaN/Inf")
        first = p if p.dim() == 1 else p[:, 0]
        if self.name in ("scale", "deform") and bool((first <= 0).any()):
            raise ValueError(f"{self.name}: {'the factor' if self.name == 'scale' else 'sigma'} must be > 0")
        if self.name == "blur" and bool((first < 0).any()):
            raise ValueError("blur: sigma must be >= 0")
        return p

    def is_identity(self, params: Any) -> torch.Tensor:
        """bool [P]: the 1° shear makes no scale/translation view an identity; blur is one when the
        kernel's off-centre weights vanish (sigma < 0.135 px); deform never is."""
        p = self._params(params)
        if self.name == "blur":
            return torch.exp(-0.5 / p.double().clamp_min(1e-12) ** 2) < 1e-12
        return torch.zeros(p.shape[0], dtype=torch.bool)

    def apply(self, images: torch.Tensor, params: Any, fill: Any = 0.0) -> torch.Tensor:
        """[B, 3, H, W] uint8 or float images -> [B, P, 3, H, W] in their dtype."""
        images = as_images(images)
        p = self._params(params)
        if self.name in ("scale", "translation"):
            return _apply_affine(self.name, images, p, fill)
        x = Fn.to_float(images)
        if self.name == "blur":
            y = _blur(x, p.to(x.device))
        else:
            H, W = x.shape[-2:]
            m, d = elastic_params(p[:, 0].double(), p[:, 1].double(), (H, W), self.seed, device=x.device)
            y = elastic_apply(x, m, d)
        return Fn.from_float(y, images.dtype)

    def __call__(self, images: torch.Tensor, params: Any, fill: Any = 0.0) -> torch.Tensor:
        return self.apply(images, params, fill)


def get(name: str, seed: int = 0) -> Any:
    """The transform called ``name`` under the original protocol: an :class:`EricssonTransform` for
    translation, scale, blur and deform, the registry's transform otherwise."""
    t = registry.get(name)
    if name not in ERICSSON_CHANGED:
        return t
    return EricssonTransform(name=name, family=t.family, param_dim=2 if name in ("translation", "deform") else 1,
                             seed=seed)
