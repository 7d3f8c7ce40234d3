"""Augment ops: the batched affine warp behind the geometric test transforms.

``warp_affine(images [B, C, H, W], matrix [P, 2, 3], out_h, out_w, fill [C]) -> [B, P, C, out_h, out_w]``:
output pixel (x, y) samples the source at ``matrix[p] @ (x, y, 1)`` (pixel-centre units), bilinear, with
``fill`` (image units: 0..255 for uint8) for neighbours outside; uint8 rounds half up. The compiled CPU
kernel computes each output row's coordinates once and reuses them for all B*C planes; the torch
reference goes through :func:`invfast.transforms.functional.warp`.
"""
from __future__ import annotations

import torch

from invfast import _loader, backend


@backend.register_reference("warp_affine")
def warp_affine_reference(images: torch.Tensor, matrix: torch.Tensor, out_h: int, out_w: int,
                          fill: torch.Tensor) -> torch.Tensor:
    from invfast.transforms import functional as Fn

    m = matrix.to(torch.float64)
    u = torch.arange(out_w, dtype=torch.float64).view(1, 1, out_w)
    v = torch.arange(out_h, dtype=torch.float64).view(1, out_h, 1)
    sx = m[:, 0, 0].view(-1, 1, 1) * u + m[:, 0, 1].view(-1, 1, 1) * v + m[:, 0, 2].view(-1, 1, 1)
    sy = m[:, 1, 0].view(-1, 1, 1) * u + m[:, 1, 1].view(-1, 1, 1) * v + m[:, 1, 2].view(-1, 1, 1)
    coords = torch.stack([sx, sy], dim=-1).to(torch.float32)
    if bool((coords == torch.round(coords)).all()):  # pure pixel copies: an exact gather in any dtype
        f = torch.floor(fill.to(torch.float64) + 0.5) if images.dtype == torch.uint8 else fill
        return Fn.warp(images, coords, f.tolist())
    if images.dtype == torch.uint8:
        out = Fn.warp(images.to(torch.float32), coords, (fill.to(torch.float32)).tolist())
        return out.add_(0.5).clamp_(0, 255).to(torch.uint8)
    return Fn.warp(images, coords, fill.tolist())


def warp_affine(images: torch.Tensor, matrix: torch.Tensor, out_h: int, out_w: int,
                fill: torch.Tensor) -> torch.Tensor:
    """Compiled on CPU when the core is built, the torch reference otherwise (and on other devices)."""
    integral = bool((matrix == torch.round(matrix)).all())
    if images.device.type != "cpu" or integral:
        # flips / 90-degree rotations / integer shifts: the torch gather copies faster than the kernel samples
        return warp_affine_reference(images, matrix, out_h, out_w, fill)
    return backend.call("warp_affine", images, matrix, int(out_h), int(out_w), fill)


def _register_compiled() -> None:
    if _loader.load() is None:
        return
    try:
        torch.ops.invfast.warp_affine
    except (AttributeError, RuntimeError):
        return  # a core built before this op existed

    @torch.library.register_fake("invfast::warp_affine")
    def _(images, matrix, out_h, out_w, fill):
        return images.new_empty((images.shape[0], matrix.shape[0], images.shape[1], out_h, out_w))


_register_compiled()
