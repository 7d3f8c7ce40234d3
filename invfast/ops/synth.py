"""Synthetic-data ops (Transforms-2D): fused colour ops, separable blur and affine warp of premultiplied
RGBA objects, and alpha-compositing onto backgrounds. The compiled kernels loop per sample, so a
sample's result never depends on the batch it is computed in; the torch references below define
the semantics. CPU kernels only: on other devices the dispatch table (:mod:`invfast.dispatch`) sends every
call to the reference."""

from __future__ import annotations

import torch

from invfast import _loader, backend
from invfast._validate import require
from invfast.ops import synth_reference as ref

__all__ = [
    "synth_composite_reference",
    "COLOR_FLAGS",
    "synth_color_reference",
    "synth_blur_reference",
    "synth_warp_reference",
    "color",
    "blur",
    "warp_rgba",
    "composite",
]


def _check(obj: torch.Tensor, backgrounds: torch.Tensor, bg_index: torch.Tensor) -> None:
    if obj.dtype != torch.float32 or obj.dim() != 4 or obj.shape[1] != 4:
        raise ValueError(
            f"synth_composite: obj must be float32 [B, 4, H, W] premultiplied RGBA, got {obj.dtype} {tuple(obj.shape)}"
        )
    if backgrounds.dtype != torch.uint8 or backgrounds.dim() != 4 or backgrounds.shape[1] != 3:
        raise ValueError(
            f"synth_composite: backgrounds must be uint8 [N, 3, H, W], "
            f"got {backgrounds.dtype} {tuple(backgrounds.shape)}"
        )
    if backgrounds.shape[2:] != obj.shape[2:]:
        raise ValueError(
            f"synth_composite: background size {tuple(backgrounds.shape[2:])} differs from "
            f"object size {tuple(obj.shape[2:])}"
        )
    if bg_index.dtype != torch.int64 or bg_index.dim() != 1 or bg_index.shape[0] != obj.shape[0]:
        raise ValueError(
            f"synth_composite: bg_index must be int64 [B={obj.shape[0]}], got {bg_index.dtype} {tuple(bg_index.shape)}"
        )
    if bg_index.numel():
        inside = (bg_index.min() >= 0) & (bg_index.max() < backgrounds.shape[0])
        require(inside, f"synth_composite: bg_index out of range for {backgrounds.shape[0]} backgrounds")


@backend.register_reference("synth_composite")
def synth_composite_reference(obj: torch.Tensor, backgrounds: torch.Tensor, bg_index: torch.Tensor) -> torch.Tensor:
    """obj float32 [B, 4, H, W] (premultiplied RGBA in [0, 1]), backgrounds uint8 [N, 3, H, W],
    bg_index int64 [B] -> uint8 [B, 3, H, W]:
    ``round_half_even(clamp(bg * (1 - a) + rgb * 255, 0, 255))`` evaluated in float32 in exactly this order."""
    bg = backgrounds.index_select(0, bg_index).to(torch.float32)
    one_minus_a = 1.0 - obj[:, 3:4]
    out = bg * one_minus_a + obj[:, :3] * 255.0
    return out.clamp_(0.0, 255.0).round_().to(torch.uint8)


COLOR_FLAGS = {"hue": 1, "brightness": 2, "contrast": 4, "grayscale": 8, "posterize": 16, "invert": 32}


@backend.register_reference("synth_color")
def synth_color_reference(
    obj: torch.Tensor,
    hue: torch.Tensor,
    brightness: torch.Tensor,
    contrast: torch.Tensor,
    flags: torch.Tensor,
    posterize_bits: int,
) -> torch.Tensor:
    """Per-sample colour ops on the straight colour of premultiplied RGBA ``obj`` [B, 4, H, W], alpha kept.

    ``flags`` [B] int64 bitmask (COLOR_FLAGS) selects, in this order: hue shift by ``hue`` [B],
    brightness factor, contrast factor (blend with the alpha-weighted mean luma), grayscale,
    posterize to ``posterize_bits``, invert.
    """
    rgb, a = ref.unpremultiply(obj)

    def sel(name: str) -> torch.Tensor:
        return (flags & COLOR_FLAGS[name]) != 0

    for name, fn in (
        ("hue", lambda x, m: ref.hue_shift(x, hue[m])),
        ("brightness", lambda x, m: ref.brightness(x, brightness[m])),
        ("contrast", lambda x, m: ref.contrast(x, a[m], contrast[m])),
        ("grayscale", lambda x, m: ref.grayscale(x)),
        ("posterize", lambda x, m: ref.posterize(x, posterize_bits)),
        ("invert", lambda x, m: ref.invert(x)),
    ):
        m = sel(name)
        if bool(m.any()):
            rgb[m] = fn(rgb[m], m)
    return ref.premultiply(rgb, a)


@backend.register_reference("synth_blur")
def synth_blur_reference(x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Separable blur of x [B, C, H, W] with per-sample odd taps [B, K] (reflect padding where it fits)."""
    return ref.separable_blur(x, taps)


@backend.register_reference("synth_warp")
def synth_warp_reference(
    x: torch.Tensor, inv: torch.Tensor, offset: torch.Tensor, premultiplied: bool = False
) -> torch.Tensor:
    """Bilinear affine warp (zeros outside, align_corners=False): output pixel p samples x at
    inv @ (p - offset), coordinates normalised to [-1, 1]; inv [B, 2, 2], offset [B, 2] float32.
    ``premultiplied`` only lets the compiled kernel skip fully transparent pixels (same result)."""
    return ref.affine_warp(x, inv, offset)


def color(
    obj: torch.Tensor,
    hue: torch.Tensor,
    brightness: torch.Tensor,
    contrast: torch.Tensor,
    flags: torch.Tensor,
    posterize_bits: int = 1,
) -> torch.Tensor:
    """See :func:`synth_color_reference` (compiled where the dispatch table says so)."""
    args = (
        obj.contiguous(),
        hue.to(torch.float32).contiguous(),
        brightness.to(torch.float32).contiguous(),
        contrast.to(torch.float32).contiguous(),
        flags.to(torch.int64).contiguous(),
    )
    return backend.call("synth_color", *args, int(posterize_bits))


def blur(x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """See :func:`synth_blur_reference` (compiled where the dispatch table says so)."""
    if taps.dim() != 2 or taps.shape[0] != x.shape[0] or taps.shape[1] % 2 != 1:
        raise ValueError(f"synth_blur: taps must be [B={x.shape[0]}, K odd], got {tuple(taps.shape)}")
    return backend.call("synth_blur", x.contiguous(), taps.to(torch.float32).contiguous())


def warp_rgba(x: torch.Tensor, inv: torch.Tensor, offset: torch.Tensor, premultiplied: bool = False) -> torch.Tensor:
    """See :func:`synth_warp_reference` (compiled where the dispatch table says so; on CPU the kernel measured
    slower than this reference, so `auto` runs the reference)."""
    return backend.call(
        "synth_warp",
        x.contiguous(),
        inv.to(torch.float32).contiguous(),
        offset.to(torch.float32).contiguous(),
        bool(premultiplied),
    )


def composite(obj: torch.Tensor, backgrounds: torch.Tensor, bg_index: torch.Tensor) -> torch.Tensor:
    """Alpha-composite premultiplied RGBA objects over backgrounds[bg_index] (compiled where the dispatch table
    says so)."""
    _check(obj, backgrounds, bg_index)
    obj = obj.contiguous()
    backgrounds = backgrounds.contiguous()
    bg_index = bg_index.contiguous()
    return backend.call("synth_composite", obj, backgrounds, bg_index)


def _register_compiled() -> None:
    if _loader.load() is None:
        return

    @torch.library.register_fake("invfast::synth_composite")
    def _(obj, backgrounds, bg_index):
        return obj.new_empty((obj.shape[0], 3, obj.shape[2], obj.shape[3]), dtype=torch.uint8)

    @torch.library.register_fake("invfast::synth_color")
    def _(obj, hue, brightness, contrast, flags, posterize_bits):
        return torch.empty_like(obj)

    @torch.library.register_fake("invfast::synth_blur")
    def _(x, taps):
        return torch.empty_like(x)

    @torch.library.register_fake("invfast::synth_warp")
    def _(x, inv, offset, premultiplied=False):
        return torch.empty_like(x)


_register_compiled()
