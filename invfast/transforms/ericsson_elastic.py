"""The ``deform`` test transform of Ericsson et al.'s published code: albumentations' elastic transform.

The original (github.com/linusericsson/ssl-invariances, ``eval_synthetic_invariance.py``, ``deform``) calls
``albumentations.geometric.transforms.ElasticTransform(sigma=sigma, always_apply=True, approximate=True)``
with albumentations 1.0.3 (the README's tested versions), so ``alpha=1``, ``alpha_affine=50``, bilinear,
``BORDER_REFLECT_101``. Its ``elastic_transform`` (albumentations 1.0.3,
``albumentations/augmentations/geometric/functional.py``, lines 192-260):

1. a random affine warp: three points around the centre (``center_square = (h, w) // 2`` used as (x, y),
   ``square_size = min(h, w) // 3``) each moved by ``U(-alpha_affine, alpha_affine)`` px
   (``cv2.getAffineTransform``, ``cv2.warpAffine``);
2. a displacement field per axis: ``U(-1, 1)`` per pixel (float32), smoothed by
   ``cv2.GaussianBlur(dx, (17, 17), sigma)`` -- a **fixed 17x17** Gaussian kernel whatever sigma, the
   ``approximate=True`` path (lines 238-247), reflect-101 borders (OpenCV's default) -- times ``alpha``;
3. ``cv2.remap`` at ``(x + dx, y + dy)``.

With sigma >= 10 the 17 taps are nearly flat, so the field is close to a 17x17 box mean of U(-1, 1):
RMS ``sqrt(2/3) * sum(k_i^2)`` ~ 0.05 px at every sigma of the grid (10..50; 0.0501 px at sigma 10 and
0.0496 px at 50 on 256x256 images, reflect-101 borders included). ``approximate=False`` (lines 248-250,
scipy's ``gaussian_filter``) is not what the original runs: its RMS falls with sigma, 0.025 px at
sigma 10 to 0.006 px at 50 on 256x256 (0.022 to 0.004 with zero padding, invfast's field before).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import torch

from invfast.ops.kernels import gaussian_taps
from invfast.transforms import functional as Fn

__all__ = [
    "ALPHA_AFFINE",
    "ELASTIC_ALPHA",
    "ELASTIC_KSIZE",
    "elastic_apply",
    "elastic_params",
    "gaussian_blur_reflect101",
    "remap_reflect101",
]

ALPHA_AFFINE = 50.0  #: albumentations' default ``alpha_affine`` (pixels)
ELASTIC_ALPHA = 1.0  #: albumentations' default ``alpha``
ELASTIC_KSIZE = 17  #: the fixed kernel size of albumentations' ``approximate=True`` smoothing
CACHE_BYTES = 256 * 2**20  #: the most the fields kept between calls may hold (photos of many sizes, large ones)


def _reflect101(i: torch.Tensor, n: int) -> torch.Tensor:
    """Indices ``i`` folded into 0..n-1 by reflection without repeating the edge (OpenCV BORDER_REFLECT_101)."""
    if n == 1:
        return torch.zeros_like(i)
    period = 2 * (n - 1)
    i = torch.remainder(i, period)
    return torch.where(i > n - 1, period - i, i)


def gaussian_blur_reflect101(field: torch.Tensor, sigma: float, ksize: int = ELASTIC_KSIZE) -> torch.Tensor:
    """OpenCV ``cv2.GaussianBlur(field, (ksize, ksize), sigma)`` of [..., H, W] in float64: the separable
    kernel ``exp(-x²/(2σ²))`` on x = -(ksize-1)/2 .. (ksize-1)/2, normalised (``cv2.getGaussianKernel``),
    reflect-101 borders (any image size: indices reflect as often as needed)."""
    H, W = field.shape[-2:]
    k = gaussian_taps(torch.tensor([float(sigma)], dtype=torch.float64, device=field.device), size=ksize)[0].tolist()
    r = (ksize - 1) // 2
    f = field.to(torch.float64)
    cols = _reflect101(torch.arange(-r, W + r, device=field.device), W)
    rows = _reflect101(torch.arange(-r, H + r, device=field.device), H)
    padded = f[..., cols]
    f = sum(k[i] * padded[..., i : i + W] for i in range(ksize))  # correlation along x (the kernel is symmetric)
    padded = f[..., rows, :]
    return sum(k[i] * padded[..., i : i + H, :] for i in range(ksize))


def elastic_params(
    sigma: torch.Tensor,
    draw: torch.Tensor,
    size: tuple[int, int],
    seed: int = 0,
    alpha: float = ELASTIC_ALPHA,
    alpha_affine: float = ALPHA_AFFINE,
    device: Any = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """The random parts of albumentations' elastic transform, one per (sigma, draw).

    Args:
        sigma, draw: [P] smoothing std (px) and draw index (seeds the randomness with ``seed``).
        size: (H, W) of the images.

    Returns:
        (matrix float64 [P, 2, 3] mapping output pixel (x, y, 1) to its source in the input (the inverse
        of ``cv2.getAffineTransform(pts1, pts2)``), displacement float32 [P, H, W, 2] (dx, dy) in pixels).
        Each view's parts are computed once per process and size while they fit :data:`CACHE_BYTES` (the grid
        reuses them for every batch of same-sized images; the least recently used go first).
    """
    H, W = size
    parts = [
        _FIELDS.get((float(s), int(d), H, W, int(seed), float(alpha), float(alpha_affine)))
        for s, d in zip(sigma.tolist(), draw.tolist())
    ]
    return (torch.stack([m for m, _ in parts]).to(device), torch.stack([d for _, d in parts]).to(device))


class _FieldCache:
    """Least-recently-used cache of :func:`_elastic_one` bounded by bytes, not entries: one entry of a
    4000 x 3000 photo holds 96 MB, so a count bound (512 entries) could hold tens of GB."""

    def __init__(self) -> None:
        self._items: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._lock = threading.Lock()  # measure makes views on a background thread
        self.nbytes = 0

    def get(self, key: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        value = _elastic_one(*key)
        size = sum(v.numel() * v.element_size() for v in value)
        with self._lock:
            if key not in self._items:
                self._items[key] = value
                self.nbytes += size
            while self.nbytes > CACHE_BYTES and len(self._items) > 1:
                _, old = self._items.popitem(last=False)
                self.nbytes -= sum(v.numel() * v.element_size() for v in old)
        return value

    def __len__(self) -> int:
        return len(self._items)


_FIELDS = _FieldCache()


def _elastic_one(
    sigma: float, draw: int, H: int, W: int, seed: int, alpha: float, alpha_affine: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # albumentations' centre is (h, w) // 2, used as (x, y)
    cs = torch.tensor([H // 2, W // 2], dtype=torch.float64, device="cpu")
    sq = float(min(H, W) // 3)
    pts1 = torch.stack([cs + sq, torch.stack([cs[0] + sq, cs[1] - sq]), cs - sq]).to(torch.float32).double()
    g = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + draw)
    shift = (torch.rand(3, 2, generator=g, dtype=torch.float64, device="cpu") * 2 - 1) * alpha_affine
    pts2 = pts1 + shift.float().double()  # float32 like numpy's .astype(np.float32)
    # forward affine M (pts1 -> pts2), then its inverse: output -> source
    X = torch.cat([pts1, torch.ones(3, 1, dtype=torch.float64, device="cpu")], 1)
    M = torch.linalg.solve(X, pts2).T  # [2, 3]
    full = torch.cat([M, torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64, device="cpu")])
    noise = torch.rand(2, H, W, generator=g, dtype=torch.float64, device="cpu") * 2 - 1
    disp = (gaussian_blur_reflect101(noise, sigma).permute(1, 2, 0) * alpha).to(torch.float32).contiguous()
    return torch.linalg.inv(full)[:2].contiguous(), disp


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
        warped = remap_reflect101(x, src_aff[j : j + 1])[:, 0]
        out[:, j] = remap_reflect101(warped, (ident + disp[j].to(torch.float64)).unsqueeze(0))[:, 0]
    return out
