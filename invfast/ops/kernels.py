"""Gaussian filter taps, the one home of the 1-D Gaussian kernel behind every blur in invfast: the blur
test transform, the policies' GaussianBlur (torch path and fused reference), the Ericsson-protocol blur
and elastic smoothing, and the Transforms-2D blur and elastic types; and the torch path's separable filter
with reflect padding, as two matrix products per image (:func:`separable_filter`)."""

from __future__ import annotations

import torch

from invfast._validate import compiling

__all__ = [
    "gaussian_taps",
    "reflect_filter_matrix",
    "separable_filter",
    "separable_filter_per_image",
    "torchvision_gaussian_taps",
]


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


def reflect_filter_matrix(taps: torch.Tensor, n: int) -> torch.Tensor:
    """The 1-D filter ``taps`` [P, 2R + 1] over ``n`` samples with reflect padding (``F.pad(mode="reflect")``,
    scipy's ``mode="mirror"``), as matrices: ``(M[p] @ v)[i] = sum_t taps[p, R + t] * v[reflect(i + t)]``.

    Built without atomic adds (the same bits on every run and device): tap k of row i reads sample i + k - R,
    inside the signal or reflected once about either end, so ``M[i, j]`` sums at most three taps, those with
    i + k - R = j, -j (j >= 1) or 2(n - 1) - j (j <= n - 2); each of the three is a Hankel matrix in (i, j), a
    strided view of one row of 2n - 1 taps.

    Args:
        taps: float [P, 2R + 1], R < n (one reflection).
        n: the length filtered.

    Returns:
        [P, n, n] in ``taps``' dtype and device.
    """
    P, K = taps.shape
    R = (K - 1) // 2
    if R >= n:
        raise ValueError(f"reflect_filter_matrix: the radius {R} must be smaller than the length {n}")
    padded = torch.cat([taps, taps.new_zeros(P, 1)], dim=1)  # column K: the zero tap
    q = torch.arange(2 * n - 1, device=taps.device)  # i + j

    def hankel(k: torch.Tensor) -> torch.Tensor:
        """[P, n, n]: entry (i, j) is tap k[i + j] (zero where k falls outside the taps), a strided view."""
        row = padded[:, torch.where((k >= 0) & (k < K), k, K)]
        return row.as_strided((P, n, n), (row.stride(0), 1, 1))

    m = hankel(q - (n - 1) + R).flip(1)  # direct: row i is row n - 1 - i of the Hankel matrix of j - i
    m[:, :, 1:] += hankel(R - q)[:, :, 1:]
    m[:, :, : n - 1] += hankel(2 * (n - 1) + R - q)[:, :, : n - 1]
    return m


def separable_filter(x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Every image filtered with every row of ``taps`` along both axes, reflect padding.

    Two matrix products (:func:`reflect_filter_matrix`): columns with all P filters at once, then rows one
    filter at a time -- GEMMs, whose cost does not grow with the radius, where a direct convolution's does.

    Args:
        x: float [B, C, H, W]; taps: [P, 2R + 1] in ``x``'s dtype and device, R < min(H, W).

    Returns:
        [B, P, C, H, W], a permuted view of a [P, H, B, C, W] buffer (a consumer's ``reshape`` or change of
        memory format makes the one copy it needs).
    """
    B, C, H, W = x.shape
    P = taps.shape[0]
    cols = x.permute(2, 0, 1, 3).reshape(H, B * C * W)
    v = (reflect_filter_matrix(taps, H).reshape(P * H, H) @ cols).view(P, H * B * C, W)
    out = torch.bmm(v, reflect_filter_matrix(taps, W).transpose(1, 2))
    return out.view(P, H, B, C, W).permute(2, 0, 3, 1, 4)


def separable_filter_per_image(x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Image n filtered with ``taps[n]`` along both axes, reflect padding (as :func:`separable_filter`).

    Args:
        x: float [N, C, H, W]; taps: [N, 2R + 1] in ``x``'s dtype and device, R < min(H, W).

    Returns:
        [N, C, H, W], contiguous (as the fused-view kernel's output).
    """
    N, C, H, W = x.shape
    cols = x.permute(0, 2, 1, 3).reshape(N, H, C * W)
    v = torch.bmm(reflect_filter_matrix(taps, H), cols).view(N, H * C, W)
    out = torch.bmm(v, reflect_filter_matrix(taps, W).transpose(1, 2))
    return out.view(N, H, C, W).permute(0, 2, 1, 3).contiguous()
