"""Batched image operations behind the test transforms and the pretraining policies.

All functions work on float32 images in [0, 1] shaped ``[..., 3, H, W]`` unless stated, and never
loop over images in Python. Geometry uses pixel-centre coordinates: pixel ``(x, y)`` is the point
``(x, y)``, the image centre is ``((W-1)/2, (H-1)/2)`` (the same point as torchvision's/PIL's
``(W/2, H/2)`` in corner coordinates).

Colour operations follow the torchvision definitions (``torchvision.transforms.functional``):
blending with a degenerate image (black / grey mean / grayscale / smoothed) and clamping to [0, 1].
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from invfast.ops.color import blend, luma
from invfast.ops.kernels import gaussian_taps, separable_filter, separable_filter_per_image
from invfast.ops.pillow import SMOOTH_KERNEL

# ----------------------------------------------------------------------------------------------
# dtype handling


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 0..255 -> float32 0..1; float64 stays float64, other floats -> float32 (values unchanged)."""
    if images.dtype == torch.uint8:
        return images.to(torch.float32).div_(255.0)
    if images.dtype == torch.float64:
        return images
    return images.to(torch.float32)


def from_float(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float 0..1 -> ``dtype`` (uint8: rounded to the nearest level and clamped; float: clamped)."""
    if dtype == torch.uint8:  # + 0.5 then truncation: round half up, one pass fewer than round()
        return x.mul(255.0).add_(0.5).clamp_(0, 255).to(torch.uint8)
    return x.clamp(0.0, 1.0).to(dtype)


def quantize(x: torch.Tensor) -> torch.Tensor:
    """float 0..1 -> uint8 levels (round to nearest), used by the integer-valued ops on float input."""
    return x.mul(255.0).round_().clamp_(0, 255).to(torch.uint8)


# ----------------------------------------------------------------------------------------------
# geometry: one sampler for every warp


def _snap(m: torch.Tensor, tol: float = 1e-9) -> torch.Tensor:
    """Round entries within ``tol`` of an integer (cos 90 deg = 6e-17 -> 0) so exact warps stay exact."""
    r = torch.round(m)
    return torch.where((m - r).abs() < tol, r, m)


def affine_coords(A: torch.Tensor, b: torch.Tensor, out_size: tuple[int, int]) -> torch.Tensor:
    """Source coordinates of an affine warp.

    ``src = A @ (p - c_out) + b`` for every output pixel ``p``, with ``c_out`` the output centre.

    Args:
        A: [..., 2, 2] inverse linear part (output -> source), float64 preferred.
        b: [..., 2] source point that the output centre maps to (pixel-centre units).
        out_size: (Ho, Wo).

    Returns:
        float32 [..., Ho, Wo, 2].
    """
    Ho, Wo = out_size
    A = _snap(A.to(torch.float64)).to(torch.float32)
    b = _snap(b.to(torch.float64)).to(torch.float32)
    u = torch.arange(Wo, dtype=torch.float32, device=A.device) - (Wo - 1) / 2.0
    v = torch.arange(Ho, dtype=torch.float32, device=A.device) - (Ho - 1) / 2.0
    lead = A.shape[:-2]
    A = A.reshape(*lead, 1, 1, 2, 2)
    b = b.reshape(*lead, 1, 1, 2)
    uu = u.view(1, Wo)
    vv = v.view(Ho, 1)
    sx = A[..., 0, 0] * uu + A[..., 0, 1] * vv + b[..., 0]
    sy = A[..., 1, 0] * uu + A[..., 1, 1] * vv + b[..., 1]
    return torch.stack([sx, sy], dim=-1)


def centre(h: int, w: int, device: torch.device | str | None = "cpu") -> torch.Tensor:
    """The image centre (x, y) in pixel-centre coordinates, float64 [2] on ``device``."""
    return torch.tensor([(w - 1) / 2.0, (h - 1) / 2.0], dtype=torch.float64, device=device)


def crop_box_affine(
    top: torch.Tensor, left: torch.Tensor, height: torch.Tensor, width: torch.Tensor, out_size: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A, b) that resize the box (top, left, height, width, in source pixels) to ``out_size``."""
    Ho, Wo = out_size
    top, left, height, width = (t.to(torch.float64) for t in (top, left, height, width))
    zero = torch.zeros_like(top)
    A = torch.stack([torch.stack([width / Wo, zero], -1), torch.stack([zero, height / Ho], -1)], -2)
    b = torch.stack([left + width / 2.0 - 0.5, top + height / 2.0 - 0.5], -1)
    return A, b


# ----------------------------------------------------------------------------------------------
# elastic deformation


def gaussian_smooth_periodic(noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Gaussian filter (std ``sigma`` px) with periodic boundaries, via the FFT.

    Args:
        noise: float [..., H, W].
        sigma: [P] standard deviations in pixels (> 0).

    Returns:
        float64 [P, ..., H, W].
    """
    H, W = noise.shape[-2:]
    spec = torch.fft.rfft2(noise.to(torch.float64))
    fy = torch.fft.fftfreq(H, dtype=torch.float64, device=noise.device).view(H, 1)
    fx = torch.fft.rfftfreq(W, dtype=torch.float64, device=noise.device).view(1, -1)
    s2 = sigma.to(device=noise.device, dtype=torch.float64).view(-1, *([1] * noise.dim())) ** 2
    transfer = torch.exp(-2.0 * math.pi**2 * s2 * (fx**2 + fy**2))
    return torch.fft.irfft2(spec.unsqueeze(0) * transfer, s=(H, W))


@torch.compiler.assume_constant_result  # torch.compile takes the noise as a constant (a Generator cannot be traced)
def _uniform_noise(seed: int, h: int, w: int) -> torch.Tensor:
    """U(0, 1) noise float64 [2, h, w] on the CPU from ``torch.Generator().manual_seed(seed)``."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.rand((2, h, w), generator=g, dtype=torch.float64, device="cpu")


def elastic_displacement(sigma: torch.Tensor, size: tuple[int, int], alpha: float, seed: int) -> torch.Tensor:
    """Smooth random displacement fields, one per ``sigma``, from one seeded white-noise draw.

    Uniform noise U(-1, 1) [2, H, W] (from a CPU ``torch.Generator().manual_seed(seed)``, so the noise is
    bit-identical on every device) is moved to ``sigma``'s device, smoothed there with a periodic
    Gaussian of std ``sigma`` and rescaled so the displacement has RMS ``alpha`` px.

    Returns:
        float64 [P, H, W, 2] displacements (dx, dy) in pixels, on ``sigma``'s device.
    """
    H, W = size
    noise = _uniform_noise(int(seed), int(H), int(W)).to(sigma.device) * 2.0 - 1.0
    field = gaussian_smooth_periodic(noise, sigma)  # [P, 2, H, W]
    rms = field.pow(2).mean(dim=(1, 2, 3), keepdim=True).sqrt().clamp_min(1e-12)
    return (field * (alpha / rms)).permute(0, 2, 3, 1)


def identity_coords(h: int, w: int, device: torch.device | str | None = "cpu") -> torch.Tensor:
    """Pixel-centre coordinates (x, y) of every pixel, float64 [h, w, 2] on ``device``."""
    ys, xs = torch.meshgrid(
        torch.arange(h, dtype=torch.float64, device=device),
        torch.arange(w, dtype=torch.float64, device=device),
        indexing="ij",
    )
    return torch.stack([xs, ys], dim=-1)


# ----------------------------------------------------------------------------------------------
# colour (torchvision semantics, float in [0, 1])


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return (x * factor).clamp_(0.0, 1.0)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor, gray_mean: torch.Tensor | None = None) -> torch.Tensor:
    """Blend with the per-image mean of the grayscale image."""
    if gray_mean is None:
        gray_mean = luma(x).mean(dim=(-3, -2, -1), keepdim=True)
    return blend(x, gray_mean, factor)


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor, gray: torch.Tensor | None = None) -> torch.Tensor:
    """Blend with the grayscale image."""
    if gray is None:
        gray = luma(x)
    return blend(x, gray, factor)


def sharpness_degenerate(x: torch.Tensor, quantise: bool) -> torch.Tensor:
    """torchvision/PIL SMOOTH filter (3x3, centre 5, /13) on the interior; the border is kept."""
    lead = x.shape[:-2]
    H, W = x.shape[-2:]
    k = torch.tensor(SMOOTH_KERNEL, dtype=x.dtype, device=x.device).view(3, 3)
    k /= k.sum()
    flat = x.reshape(-1, 1, H, W)
    smooth = F.conv2d(flat, k.view(1, 1, 3, 3))
    if quantise:
        smooth = smooth.mul(255.0).round_().div_(255.0)
    out = flat.clone()
    out[:, :, 1:-1, 1:-1] = smooth
    return out.reshape(*lead, H, W)


def blur_grid(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Gaussian blur of every image with every sigma, reflect padding (torchvision ``gaussian_blur``).

    Args:
        x: float [B, C, H, W]; sigma: [P] (px, >= 0).

    Returns:
        float32 [B, P, C, H, W].
    """
    B, C, H, W = x.shape
    P = sigma.shape[0]
    k = gaussian_taps(sigma, max_radius=min(H, W) - 1).to(torch.float32).to(device=x.device, dtype=x.dtype)
    if k.shape[1] == 1:
        return x.unsqueeze(1).expand(B, P, C, H, W).clone()
    return separable_filter(x, k)


def blur_per_image(x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """Gaussian blur with one sigma per image: x [N, C, H, W], sigma [N] -> [N, C, H, W]."""
    N = x.shape[0]
    if N == 0:
        return x
    k = gaussian_taps(sigma, max_radius=min(x.shape[2:]) - 1).to(torch.float32).to(device=x.device, dtype=x.dtype)
    if k.shape[1] == 1:
        return x.clone()
    return separable_filter_per_image(x, k)


# ----------------------------------------------------------------------------------------------
# integer-valued ops (uint8 levels)


def equalize_u8(v: torch.Tensor) -> torch.Tensor:
    """Per-channel histogram equalisation of uint8 images [..., H, W] (PIL ``ImageOps.equalize``)."""
    shape = v.shape
    H, W = shape[-2:]
    n = H * W
    flat = v.reshape(-1, n).to(torch.int64)
    N = flat.shape[0]
    hist = torch.zeros(N, 256, dtype=torch.int64, device=v.device).scatter_add_(1, flat, torch.ones_like(flat))
    last = flat.amax(dim=1, keepdim=True)  # last non-empty bin
    step = (n - hist.gather(1, last)) // 255  # [N, 1]
    safe = step.clamp_min(1)
    lut = (torch.cumsum(hist, 1) + safe // 2) // safe
    lut = torch.cat([torch.zeros(N, 1, dtype=torch.int64, device=v.device), lut[:, :-1]], dim=1).clamp_(0, 255)
    out = lut.gather(1, flat)
    out = torch.where(step == 0, flat, out)
    return out.to(torch.uint8).reshape(shape)


def posterize_u8(v: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Keep the ``bits`` most significant bits: v [B, C, H, W] uint8, bits [P] -> [B, P, C, H, W]."""
    mask = (255 - (2 ** (8 - bits.to(device=v.device, dtype=torch.int64)) - 1)).to(torch.uint8).view(1, -1, 1, 1, 1)
    return v.unsqueeze(1) & mask
