"""Gaussian filter taps, the one home of the 1-D Gaussian kernel behind every blur in invfast: the blur
test transform, the policies' GaussianBlur (torch path and fused reference), the Ericsson-protocol blur
and elastic smoothing, and the Transforms-2D blur and elastic types."""

from __future__ import annotations

import torch

from invfast._validate import compiling

__all__ = ["gaussian_taps", "torchvision_gaussian_taps"]


def gaussian_taps(
    sigma: torch.Tensor, *, truncate: float = 3.0, max_radius: int | None = None, size: int | None = None
) -> torch.Tensor:
    """Normalised 1-D Gaussian taps ``exp(-x² / (2 sigma²))``, one row per sigma: float64 [P, K].

    Args:
        sigma: [P] standard deviations in pixels (>= 0; 0 gives the identity tap).
        truncate, max_radius: with ``size=None``, each row's radius is ``int(truncate * sigma + 0.5)``
            (scipy.ndimage's rule; the policies and the blur test transform use 3, scipy's own
            ``gaussian_filter`` 4), cut at ``max_radius``; rows are zero-padded to the largest radius R,
            ``K = 2R + 1``. Reading R is one host sync (it sets the shape).
        size: a fixed number of taps at ``x = -(size-1)/2 ... (size-1)/2`` whatever sigma
            (torchvision's ``_get_gaussian_kernel1d``: Transforms-2D's 7-tap blur, the Ericsson protocol's
            23 taps); no host sync.

    Returns:
        float64 [P, K] on ``sigma``'s device, each row summing to 1.
    """
    sigma = sigma.to(torch.float64).reshape(-1)
    s = sigma.clamp_min(1e-12).view(-1, 1)
    if size is not None:
        if max_radius is not None:
            raise ValueError("gaussian_taps: give either size (fixed taps) or max_radius (truncated taps), not both")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"gaussian_taps: size must be a positive int, got {size!r}")
        xs = torch.arange(size, dtype=torch.float64, device=sigma.device) - (size - 1) / 2.0
        k = torch.exp(-0.5 * (xs.view(1, -1) / s) ** 2)
        return k / k.sum(dim=1, keepdim=True)
    radius = (truncate * sigma + 0.5).floor().clamp(min=0.0)
    if max_radius is not None:
        radius = radius.clamp(max=float(max_radius))
    radius = radius.to(torch.int64)
    if max_radius is not None and compiling():  # torch.compile needs a static width: rows padded to max_radius
        R = int(max_radius)
    else:
        R = int(radius.max()) if radius.numel() else 0
    xs = torch.arange(-R, R + 1, dtype=torch.float64, device=sigma.device)
    k = torch.exp(-0.5 * (xs / s) ** 2)
    k = torch.where(xs.abs().view(1, -1) <= radius.view(-1, 1), k, torch.zeros_like(k))
    k[:, R] = torch.where(radius == 0, torch.ones_like(k[:, R]), k[:, R])
    return k / k.sum(dim=1, keepdim=True)


def torchvision_gaussian_taps(sigma: torch.Tensor, size: int) -> torch.Tensor:
    """The ``size`` taps of every sigma as torchvision evaluates them (``_get_gaussian_kernel1d``, the same in
    torchvision 0.10 and 0.29): float32 on the CPU, one sigma at a time, ``x = linspace(-(size-1)/2, (size-1)/2,
    size)``, ``pdf = exp(-0.5 * (x / sigma)²)``, ``pdf / pdf.sum()`` -- the same torch calls on the same shapes,
    so the bits are torchvision's on this torch (:func:`gaussian_taps` evaluates the formula in float64: within
    1 ulp of these once rounded to float32).

    sigma: [P] (each taken as the Python float torchvision receives; 0, which torchvision refuses, gives the
    identity tap) -> float32 [P, size] on the CPU.
    """
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"torchvision_gaussian_taps: size must be a positive int, got {size!r}")
    half = (size - 1) * 0.5
    x = torch.linspace(-half, half, steps=size, dtype=torch.float32, device="cpu")
    rows = []
    for s in sigma.detach().to("cpu").reshape(-1).tolist():  # host floats: the taps are built on the CPU
        pdf = torch.exp(-0.5 * (x / (s if s > 0 else 1e-12)).pow(2))  # sigma 0 (torchvision refuses it): a delta
        rows.append(pdf / pdf.sum())
    return torch.stack(rows) if rows else torch.zeros(0, size, dtype=torch.float32, device="cpu")
