"""Augment ops: the batched affine warp behind the geometric test transforms.

``warp_affine(images [B, C, H, W], matrix [P, 2, 3], out_h, out_w, fill [C]) -> [B, P, C, out_h, out_w]``:
output pixel (x, y) samples the source at ``matrix[p] @ (x, y, 1)`` (pixel-centre units), bilinear, with
``fill`` (image units: 0..255 for uint8) for neighbours outside; uint8 rounds half up. The compiled CPU
kernel computes each output row's coordinates once and reuses them for all B*C planes; the torch
reference goes through :func:`warp`.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

from invfast import _loader, backend


def _fill_vector(fill: float | Sequence[float], channels: int, device: torch.device | str = "cpu") -> torch.Tensor:
    f = torch.as_tensor(fill, dtype=torch.float32, device=device).flatten()
    if f.numel() == 1:
        f = f.expand(channels)
    if f.numel() != channels:
        raise ValueError(f"fill must be one value or {channels} values (one per channel), got {f.numel()}")
    return f


def warp(images: torch.Tensor, coords: torch.Tensor, fill: float | Sequence[float] = 0.0) -> torch.Tensor:
    """Bilinear sampling of ``images`` at source coordinates, with a constant fill outside.

    Args:
        images: float [B, C, H, W].
        coords: float [P, Ho, Wo, 2] (the same warps for every image) or [B, P, Ho, Wo, 2] (per image);
            ``coords[..., 0]`` is the source x, ``coords[..., 1]`` the source y, in pixel-centre units.
        fill: value(s) in image units for samples whose bilinear neighbours fall outside the image
            (each of the four neighbours outside contributes ``fill`` with its bilinear weight).

    Returns:
        [B, P, C, Ho, Wo] in the dtype of ``images``. Warps whose source coordinates are all integers
        (flips, 90-degree rotations, integer translations) copy pixels exactly (a gather); the others
        go through one ``grid_sample`` call over all images and warps at once.
    """
    B, C, H, W = images.shape
    per_image = coords.dim() == 5
    P, Ho, Wo = coords.shape[-4], coords.shape[-3], coords.shape[-2]
    fillv = _fill_vector(fill, C, device=images.device).to(images.dtype)
    c = coords if per_image else coords.unsqueeze(0)
    integer = (c == torch.round(c)).flatten(2).all(dim=2).all(dim=0)  # [P]
    if bool(integer.all()):
        return _gather_nearest(images, c, fillv)
    if not bool(integer.any()):
        return _bilinear(images, c, fillv)
    ii = torch.nonzero(integer).flatten()
    jj = torch.nonzero(~integer).flatten()
    out = torch.empty((B, P, C, Ho, Wo), dtype=images.dtype, device=images.device)
    out.index_copy_(1, ii, _gather_nearest(images, c.index_select(1, ii), fillv))
    out.index_copy_(1, jj, _bilinear(images, c.index_select(1, jj), fillv))
    return out


def _gather_nearest(images: torch.Tensor, coords: torch.Tensor, fillv: torch.Tensor) -> torch.Tensor:
    """Exact copy for integer coordinates [1 or B, P, Ho, Wo, 2] -> [B, P, C, Ho, Wo]."""
    B, C, H, W = images.shape
    G, P, Ho, Wo = coords.shape[:4]
    n = H * W
    x = coords[..., 0].to(torch.int64)
    y = coords[..., 1].to(torch.int64)
    inside = (x >= 0) & (x < W) & (y >= 0) & (y < H)
    idx = torch.where(inside, y * W + x, torch.full_like(x, n))  # [G, P, Ho, Wo]
    table = torch.cat([images.reshape(B, C, n), fillv.view(1, C, 1).expand(B, C, 1)], dim=2)  # [B, C, n+1]
    if G == 1:
        res = table.reshape(B * C, n + 1).index_select(1, idx.reshape(-1))
        return res.reshape(B, C, P, Ho, Wo).transpose(1, 2)
    flat = table.transpose(0, 1).reshape(C, B * (n + 1))
    off = (torch.arange(B, dtype=torch.int64, device=images.device) * (n + 1)).view(B, 1, 1, 1)
    res = flat.index_select(1, (idx + off).reshape(-1))
    return res.reshape(C, B, P, Ho, Wo).permute(1, 2, 0, 3, 4)


def _bilinear(images: torch.Tensor, coords: torch.Tensor, fillv: torch.Tensor) -> torch.Tensor:
    """Bilinear sampling at coords [1 or B, P, Ho, Wo, 2] -> [B, P, C, Ho, Wo] via ``grid_sample``."""
    B, C, H, W = images.shape
    G, P, Ho, Wo = coords.shape[:4]
    g = torch.empty(coords.shape, dtype=images.dtype, device=images.device)
    g[..., 0] = (2.0 * coords[..., 0] + 1.0) / W - 1.0
    g[..., 1] = (2.0 * coords[..., 1] + 1.0) / H - 1.0
    g = g.reshape(G, P * Ho, Wo, 2)
    if G == 1:  # the same warps for all images: the images become channels of one sample
        inp = images.reshape(1, B * C, H, W)
    else:
        inp = images
    res = F.grid_sample(inp, g, mode="bilinear", padding_mode="zeros", align_corners=False)
    res = res.reshape(B, C, P, Ho, Wo).transpose(1, 2)
    if bool((fillv != 0).any()):
        ones = torch.ones((G, 1, H, W), dtype=images.dtype, device=images.device)
        covered = F.grid_sample(ones, g, mode="bilinear", padding_mode="zeros", align_corners=False)
        covered = covered.reshape(G, P, 1, Ho, Wo)
        res = res + (1.0 - covered) * fillv.view(1, 1, C, 1, 1)
    return res


@backend.register_reference("warp_affine")
def warp_affine_reference(images: torch.Tensor, matrix: torch.Tensor, out_h: int, out_w: int,
                          fill: torch.Tensor) -> torch.Tensor:
    m = matrix.to(torch.float64)
    u = torch.arange(out_w, dtype=torch.float64, device=m.device).view(1, 1, out_w)
    v = torch.arange(out_h, dtype=torch.float64, device=m.device).view(1, out_h, 1)
    sx = m[:, 0, 0].view(-1, 1, 1) * u + m[:, 0, 1].view(-1, 1, 1) * v + m[:, 0, 2].view(-1, 1, 1)
    sy = m[:, 1, 0].view(-1, 1, 1) * u + m[:, 1, 1].view(-1, 1, 1) * v + m[:, 1, 2].view(-1, 1, 1)
    coords = torch.stack([sx, sy], dim=-1).to(torch.float32)
    if bool((coords == torch.round(coords)).all()):  # pure pixel copies: an exact gather in any dtype
        f = torch.floor(fill.to(torch.float64) + 0.5) if images.dtype == torch.uint8 else fill
        return warp(images, coords, f.tolist())
    if images.dtype == torch.uint8:
        out = warp(images.to(torch.float32), coords, (fill.to(torch.float32)).tolist())
        return out.add_(0.5).clamp_(0, 255).to(torch.uint8)
    return warp(images, coords, fill.tolist())


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
