"""Augment ops: the batched warps behind the geometric test transforms, and the fused policy view.

``warp_affine(images [B, C, H, W], matrix [P, 2, 3], out_h, out_w, fill [C]) -> [B, P, C, out_h, out_w]``:
output pixel (x, y) samples the source at ``matrix[p] @ (x, y, 1)`` (pixel-centre units), bilinear, with
``fill`` (image units: 0..255 for uint8) for neighbours outside; uint8 rounds half up. The compiled CPU
kernel computes each output row's coordinates once and reuses them for all B*C planes; the torch
reference goes through :func:`warp`.

``warp_coords(images, coords [P, Ho, Wo, 2], fill)``: the same sampler at arbitrary source points (the
elastic ``deform``: identity plus a displacement field).

``augment_views(images, matrix [B, 2, 3], ...)``: one pretraining view per image in one op: crop + resize +
flip as one bilinear map, ColorJitter in each image's order, grayscale, Gaussian blur, solarize and the
normalisation (see :func:`augment_views`).

Dispatch: the one dispatch table (:mod:`invfast.dispatch`, ``invfast info``) decides per op and device. Under
backend ``auto`` on CPU: ``warp_affine`` compiled (measured faster; integral maps keep the exact torch gather,
which copies faster), ``warp_coords`` the torch warp (the kernel measured no faster), ``augment_views`` as the
table says. On CUDA the three kernels of ``csrc/augment/augment_cuda.cu`` serve under ``auto``: measured faster
than their torch references on an H200 (``augment_views`` 58.8x, ``warp_affine`` 9.7x, ``warp_coords`` 8.0x,
docs/gpu.md); ``invfast.backend.use("reference")`` keeps the torch path.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from invfast import _loader, backend
from invfast._validate import compiling
from invfast.ops.color import adjust_hue, blend, luma
from invfast.ops.kernels import gaussian_taps, separable_filter_per_image

__all__ = [
    "fill_vector",
    "warp",
    "warp_affine_reference",
    "warp_affine",
    "warp_coords_reference",
    "warp_coords",
    "augment_views_reference",
    "augment_views",
]


def fill_vector(
    fill: float | Sequence[float] | torch.Tensor, channels: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """``fill`` (one value, or one per channel) as a float32 ``[channels]`` vector on ``device``; ValueError for
    another count."""
    f = torch.as_tensor(fill, dtype=torch.float32, device=device).flatten()
    if f.numel() == 1:
        f = f.expand(channels)
    if f.numel() != channels:
        raise ValueError(f"fill must be one value or {channels} values (one per channel), got {f.numel()}")
    return f


def warp(
    images: torch.Tensor, coords: torch.Tensor, fill: float | Sequence[float] | torch.Tensor = 0.0
) -> torch.Tensor:
    """Bilinear sampling of ``images`` at source coordinates, with a constant fill outside.

    Args:
        images: float [B, C, H, W].
        coords: float [P, Ho, Wo, 2] (the same warps for every image) or [B, P, Ho, Wo, 2] (per image);
            ``coords[..., 0]`` is the source x, ``coords[..., 1]`` the source y, in pixel-centre units.
        fill: value(s) (numbers or a tensor) in image units for samples whose bilinear neighbours fall
            outside the image (each of the four neighbours outside contributes ``fill`` with its bilinear weight).

    Returns:
        [B, P, C, Ho, Wo] in the dtype of ``images``. Warps whose source coordinates are all integers
        (flips, 90-degree rotations, integer translations) copy pixels exactly (a gather); the others
        go through one ``grid_sample`` call over all images and warps at once.
    """
    B, C, H, W = images.shape
    per_image = coords.dim() == 5
    P, Ho, Wo = coords.shape[-4], coords.shape[-3], coords.shape[-2]
    fillv = fill_vector(fill, C, device=images.device).to(images.dtype)
    c = coords if per_image else coords.unsqueeze(0)
    integer = (c == torch.round(c)).flatten(2).all(dim=2).all(dim=0)  # [P]
    if compiling():  # no data-dependent branch in a torch.compile graph: both samplers, each warp picks its own
        return torch.where(integer.view(1, P, 1, 1, 1), _gather_nearest(images, c, fillv), _bilinear(images, c, fillv))
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
    if compiling() or bool((fillv != 0).any()):  # (a zero fill adds exact zeros)
        ones = torch.ones((G, 1, H, W), dtype=images.dtype, device=images.device)
        covered = F.grid_sample(ones, g, mode="bilinear", padding_mode="zeros", align_corners=False)
        covered = covered.reshape(G, P, 1, Ho, Wo)
        res = res + (1.0 - covered) * fillv.view(1, 1, C, 1, 1)
    return res


@backend.register_reference("warp_affine")
def warp_affine_reference(
    images: torch.Tensor, matrix: torch.Tensor, out_h: int, out_w: int, fill: torch.Tensor
) -> torch.Tensor:
    m = matrix.to(torch.float64)
    u = torch.arange(out_w, dtype=torch.float64, device=m.device).view(1, 1, out_w)
    v = torch.arange(out_h, dtype=torch.float64, device=m.device).view(1, out_h, 1)
    sx = m[:, 0, 0].view(-1, 1, 1) * u + m[:, 0, 1].view(-1, 1, 1) * v + m[:, 0, 2].view(-1, 1, 1)
    sy = m[:, 1, 0].view(-1, 1, 1) * u + m[:, 1, 1].view(-1, 1, 1) * v + m[:, 1, 2].view(-1, 1, 1)
    coords = torch.stack([sx, sy], dim=-1).to(torch.float32)
    if compiling():  # one graph: the sampling path, which copies integral maps exactly as well
        if images.dtype == torch.uint8:
            out = warp(images.to(torch.float32), coords, fill.to(torch.float32))
            return out.add_(0.5).clamp_(0, 255).to(torch.uint8)
        return warp(images, coords, fill)
    if bool((coords == torch.round(coords)).all()):  # pure pixel copies: an exact gather in any dtype
        f = torch.floor(fill.to(torch.float64) + 0.5) if images.dtype == torch.uint8 else fill
        return warp(images, coords, f.tolist())
    if images.dtype == torch.uint8:
        out = warp(images.to(torch.float32), coords, (fill.to(torch.float32)).tolist())
        return out.add_(0.5).clamp_(0, 255).to(torch.uint8)
    return warp(images, coords, fill.tolist())


def warp_affine(images: torch.Tensor, matrix: torch.Tensor, out_h: int, out_w: int, fill: torch.Tensor) -> torch.Tensor:
    """The compiled kernel (all P maps in one pass) where the dispatch table picks it, the torch reference
    otherwise. The table's CPU row keeps integral maps (flips, 90-degree rotations, integer shifts) on the exact
    torch gather under backend 'auto', measured faster than the sampling kernel for pure pixel copies."""
    fn = backend.compiled_for("warp_affine", images, matrix)
    if fn is None:
        return warp_affine_reference(images, matrix, out_h, out_w, fill)
    return fn(images, matrix, int(out_h), int(out_w), fill)


@backend.register_reference("warp_coords")
def warp_coords_reference(images: torch.Tensor, coords: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    c = coords.to(device=images.device, dtype=torch.float32)
    if images.dtype == torch.uint8:
        if bool((c == torch.round(c)).all()):
            return warp(images, c, torch.floor(fill.to(torch.float64) + 0.5).tolist())
        out = warp(images.to(torch.float32), c, fill.to(torch.float32).tolist())
        return out.add_(0.5).clamp_(0, 255).to(torch.uint8)
    return warp(images, c, fill.tolist())


def warp_coords(images: torch.Tensor, coords: torch.Tensor, fill: torch.Tensor) -> torch.Tensor:
    """Bilinear sampling of every image at P coordinate fields.

    Args:
        images: [B, C, H, W] uint8 (0..255), float32 or float64.
        coords: [P, Ho, Wo, 2] source (x, y) of every output pixel, pixel-centre units.
        fill: [C] in image units, for neighbours outside the image.

    Returns:
        [B, P, C, Ho, Wo] in the images' dtype (uint8 rounded half up). The compiled kernel where the
        dispatch table picks it, the torch warp otherwise.
    """
    if coords.dim() != 4 or coords.shape[-1] != 2:
        raise ValueError(f"coords must be [P, Ho, Wo, 2], got shape {tuple(coords.shape)}")
    return backend.call("warp_coords", images, coords, fill)


# ----------------------------------------------------------------------------------------------
# fused policy views


def _blur(x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Separable blur of x [B, 3, H, W] with per-image taps [B, 2R+1], reflect padding."""
    if taps.shape[1] == 1:
        return x
    return separable_filter_per_image(x, taps)


@backend.register_reference("augment_views")
def augment_views_reference(
    images: torch.Tensor,
    matrix: torch.Tensor,
    out_h: int,
    out_w: int,
    jitter: torch.Tensor | None,
    factors: torch.Tensor,
    order: torch.Tensor,
    grayscale: torch.Tensor | None,
    blur: torch.Tensor | None,
    sigma: torch.Tensor,
    solarize: torch.Tensor | None,
    threshold: float,
    mean: torch.Tensor,
    std: torch.Tensor,
    dtype: torch.dtype,
    channels_last: bool,
) -> torch.Tensor:
    """Torch reference of ``augment_views``: every op on every image, kept where its mask is set
    (``torch.where``, no per-op index sync); one host read for the blur radius."""
    dev = images.device
    B = images.shape[0]
    x = images.to(torch.float32).div_(255.0) if images.dtype == torch.uint8 else images.to(torch.float32)
    m = matrix.to(device=dev, dtype=torch.float32).view(B, 6, 1, 1)
    u = torch.arange(out_w, dtype=torch.float32, device=dev).view(1, 1, out_w)
    v = torch.arange(out_h, dtype=torch.float32, device=dev).view(1, out_h, 1)
    sx = m[:, 0] * u + m[:, 1] * v + m[:, 2]
    sy = m[:, 3] * u + m[:, 4] * v + m[:, 5]
    x = warp(x, torch.stack([sx, sy], dim=-1).unsqueeze(1)).squeeze(1).contiguous()
    if jitter is not None:
        on = jitter.to(device=dev, dtype=torch.bool)
        f = factors.to(device=dev, dtype=torch.float32)
        o = order.to(device=dev, dtype=torch.int64)
        for step in range(4):
            op = o[:, step]
            gray = luma(x)
            cands = (
                (x * f[:, 0].view(B, 1, 1, 1)).clamp_(0.0, 1.0),
                blend(x, gray.mean(dim=(1, 2, 3), keepdim=True), f[:, 1].view(B, 1, 1, 1)),
                blend(x, gray, f[:, 2].view(B, 1, 1, 1)),
                adjust_hue(x, f[:, 3].view(-1, 1, 1)),
            )
            for k, cand in enumerate(cands):
                x = torch.where((on & (op == k)).view(B, 1, 1, 1), cand, x)
    if grayscale is not None:
        g = grayscale.to(device=dev, dtype=torch.bool).view(B, 1, 1, 1)
        x = torch.where(g, luma(x).expand_as(x), x)
    if blur is not None:
        on = blur.to(device=dev, dtype=torch.bool)
        s = torch.where(on, sigma.to(device=dev, dtype=torch.float64), 0.0)  # sigma 0: the identity tap
        x = _blur(x, gaussian_taps(s, max_radius=min(out_h, out_w) - 1).to(torch.float32))
    if solarize is not None:
        sol = solarize.to(device=dev, dtype=torch.bool).view(B, 1, 1, 1)
        x = torch.where(sol & (x >= threshold), 1.0 - x, x)
    mu = mean.to(device=dev, dtype=torch.float32).view(1, 3, 1, 1)
    sd = std.to(device=dev, dtype=torch.float32).view(1, 3, 1, 1)
    x = ((x - mu) / sd).to(dtype)
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def augment_views(
    images: torch.Tensor,
    matrix: torch.Tensor,
    out_size: tuple[int, int],
    *,
    jitter: torch.Tensor | None = None,
    factors: torch.Tensor | None = None,
    order: torch.Tensor | None = None,
    grayscale: torch.Tensor | None = None,
    blur: torch.Tensor | None = None,
    sigma: torch.Tensor | None = None,
    solarize: torch.Tensor | None = None,
    threshold: float = 0.5,
    mean: Sequence[float] | torch.Tensor = (0.0, 0.0, 0.0),
    std: Sequence[float] | torch.Tensor = (1.0, 1.0, 1.0),
    dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
) -> torch.Tensor:
    """One augmented view per image, fused.

    Args:
        images: [B, 3, H, W] uint8 (0..255) or float (0..1).
        matrix: [B, 2, 3]: output pixel (x, y) samples the source at ``matrix[b] @ (x, y, 1)`` (pixel-centre
            units), bilinear, zero outside: crop + resize + flip in one map.
        out_size: (Ho, Wo).
        jitter: [B] bool, ColorJitter on; then ``factors`` [B, 4] (brightness, contrast, saturation factors,
            hue shift in [-0.5, 0.5]) and ``order`` [B, 4] (permutation of 0..3: the op applied at each step).
        grayscale / blur / solarize: [B] bool masks (None: off for every image); ``sigma`` [B] blur std in px
            (radius int(3 sigma + 0.5), reflect padding); solarize maps v >= ``threshold`` to 1 - v.
        mean, std: 3 values each; the output is ``(v - mean) / std``.
        dtype: torch.float32 or torch.bfloat16; channels_last: NHWC memory.

    Returns:
        [B, 3, Ho, Wo] ``dtype``. The compiled kernel where the dispatch table picks it, the torch
        reference otherwise.
    """
    Ho, Wo = _check_view_args(images, matrix, out_size, dtype, jitter, factors, order, blur, sigma)
    factorsv, orderv, sigmav, meanv, stdv = _view_tensors(images.device, factors, order, sigma, mean, std)
    args = (
        images,
        matrix,
        Ho,
        Wo,
        jitter,
        factorsv,
        orderv,
        grayscale,
        blur,
        sigmav,
        solarize,
        float(threshold),
        meanv,
        stdv,
        dtype,
        bool(channels_last),
    )
    return backend.call("augment_views", *args)


def _check_view_args(
    images: torch.Tensor,
    matrix: torch.Tensor,
    out_size: tuple[int, int],
    dtype: torch.dtype,
    jitter: torch.Tensor | None,
    factors: torch.Tensor | None,
    order: torch.Tensor | None,
    blur: torch.Tensor | None,
    sigma: torch.Tensor | None,
) -> tuple[int, int]:
    """Refuse ``augment_views`` arguments that do not fit together (ValueError, TypeError); returns (Ho, Wo) px."""
    if images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"images must be RGB [B, 3, H, W], got shape {tuple(images.shape)}")
    B = images.shape[0]
    if tuple(matrix.shape) != (B, 2, 3):
        raise ValueError(f"matrix must be [B, 2, 3] = [{B}, 2, 3] (one map per image), got {tuple(matrix.shape)}")
    if dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"dtype must be torch.float32 or torch.bfloat16, got {dtype}")
    Ho, Wo = (int(out_size[0]), int(out_size[1]))
    if Ho < 1 or Wo < 1:
        raise ValueError(f"out_size must be positive, got {out_size}")
    if jitter is not None and (factors is None or order is None):
        raise ValueError("jitter needs factors [B, 4] and order [B, 4]")
    if blur is not None and sigma is None:
        raise ValueError("blur needs sigma [B] (blur std in px)")
    if blur is not None and min(Ho, Wo) < 2:
        raise ValueError(f"blur needs an output of at least 2x2 px, got {Ho}x{Wo}")
    return Ho, Wo


def _view_tensors(
    device: torch.device,
    factors: torch.Tensor | None,
    order: torch.Tensor | None,
    sigma: torch.Tensor | None,
    mean: Sequence[float] | torch.Tensor,
    std: Sequence[float] | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The op's tensor inputs: factors [B, 4], order [B, 4], sigma [B] (empty [0] when absent), mean and std
    [3] float32 on ``device``."""
    empty = torch.empty(0, device=device)
    meanv = torch.as_tensor(mean, dtype=torch.float32, device=device)
    stdv = torch.as_tensor(std, dtype=torch.float32, device=device)
    return (
        factors if factors is not None else empty,
        order if order is not None else empty,
        sigma if sigma is not None else empty,
        meanv,
        stdv,
    )


def _register_compiled() -> None:
    if _loader.load() is None:
        return

    @torch.library.register_fake("invfast::warp_affine")
    def _(images, matrix, out_h, out_w, fill):
        return images.new_empty((images.shape[0], matrix.shape[0], images.shape[1], out_h, out_w))

    @torch.library.register_fake("invfast::warp_coords")
    def _(images, coords, fill):
        return images.new_empty((images.shape[0], coords.shape[0], images.shape[1], coords.shape[1], coords.shape[2]))

    @torch.library.register_fake("invfast::augment_views")
    def _(
        images,
        matrix,
        out_h,
        out_w,
        jitter,
        factors,
        order,
        grayscale,
        blur,
        sigma,
        solarize,
        threshold,
        mean,
        std,
        dtype,
        channels_last,
    ):
        out = images.new_empty((images.shape[0], 3, out_h, out_w), dtype=dtype)
        return out.contiguous(memory_format=torch.channels_last) if channels_last else out


_register_compiled()
