"""Pretraining augmentation policies (Ericsson et al. 2021, App. A; Chavhan et al. 2023, App. C): MoCo-v2 Default,
Spatial, Appearance, Solarize-Default, custom lists, and the amortised-invariance descriptors (K = 2 groups,
K = 5 switches).

Every random choice is drawn per sample from the caller's ``torch.Generator`` in a fixed order, so the
same seed gives the same views. Sampling follows torchvision: RandomResizedCrop (10 attempts, then the
central fallback), ColorJitter (brightness/contrast/saturation/hue in a random order per sample),
RandomGrayscale, MoCo's GaussianBlur (sigma ~ U[0.1, 2]), RandomHorizontalFlip, Solarize (threshold 0.5).

Differences from torchvision on PIL images (documented, deliberate): images stay float between the
ops (no rounding to uint8 after each op), and the resized crop is one bilinear warp without an
antialiasing pre-filter (the crop is folded together with the flip into a single sampling pass).

Where it runs: :meth:`Policy.apply` is one fused op per view batch (:func:`invfast.transforms.fused.fused_apply`,
the compiled ``augment_views`` kernel) wherever the dispatch table runs that kernel for the images' device
(CPU by default, ``invfast info``), and the torch ops below elsewhere or under
``invfast.backend.use("reference")``. Both draw the same parameters and agree within one grey level (1/255)
before normalisation (tests/test_augment_views.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from invfast import backend as _backend
from invfast.ops.augment import warp
from invfast.ops.color import adjust_hue, luma
from invfast.transforms import functional as Fn
from invfast.transforms._checks import as_images
from invfast.transforms.fused import fused_apply
from invfast.transforms.policy_config import (
    SWITCHES_5,
    VALID_DESCRIPTORS,
    PolicyConfig,
    policy_config,
)
from invfast.transforms.preprocess import center_crop, resize


class Policy:
    """A pretraining augmentation policy producing two independently augmented views.

    ``policy(images, generator)`` -> ``(view1, view2)``, each float32 [B, 3, size, size], normalised with
    ``config.mean``/``config.std`` (when ``config.normalize``).
    """

    def __init__(self, config: PolicyConfig, name: str = "custom") -> None:
        self.config = config
        self.name = name

    def __repr__(self) -> str:
        return f"Policy({self.name!r}, size={self.config.size}, augmentations={self.config.augmentations})"

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        images = as_images(images)
        # the fused op reads uint8 directly; the torch ops want float
        x = images if _fused(images) else Fn.to_float(images)
        v1 = self.apply(x, self.sample(images.shape[0], x.shape[-2:], generator))
        v2 = self.apply(x, self.sample(images.shape[0], x.shape[-2:], generator))
        return v1, v2

    def view(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """One augmented view [B, 3, size, size]."""
        images = as_images(images)
        x = images if _fused(images) else Fn.to_float(images)
        return self.apply(x, self.sample(images.shape[0], x.shape[-2:], generator))

    # ------------------------------------------------------------------------------------------
    def sample(
        self, batch: int, image_size: Sequence[int], generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """Per-sample random parameters for ``batch`` images of ``image_size`` (H, W).

        Returns a dict of [B] (or [B, k]) tensors: 'crop' (top, left, height, width) in pixels,
        'flip', 'jitter', 'grayscale', 'blur', 'solarize' (bool: applied), 'factors' [B, 4]
        (brightness, contrast, saturation, hue), 'order' [B, 4] (jitter op order, a permutation of
        0..3), 'sigma' (blur std in px). All draws happen whatever the switches, in a fixed order, on
        the generator's device (the CPU when ``generator`` is None: torch's global CPU generator); the
        parameters stay there and :meth:`apply` moves them once to the images' device. A CPU generator
        therefore gives bit-identical parameters whatever device the images are on.
        """
        c = self.config
        H, W = int(image_size[0]), int(image_size[1])
        g = generator
        dev = g.device if g is not None else torch.device("cpu")
        B = batch
        u = functools.partial(_uniform, g, dev)
        top, left, h, w = _resized_crop(c, H, W, B, u)

        bs, cs, ss, hs = c.jitter_strength
        lo = torch.tensor([max(0.0, 1 - bs), max(0.0, 1 - cs), max(0.0, 1 - ss), -hs], dtype=torch.float64, device=dev)
        hi = torch.tensor([1 + bs, 1 + cs, 1 + ss, hs], dtype=torch.float64, device=dev)
        factors = lo + (hi - lo) * u(B, 4)
        order = torch.argsort(u(B, 4), dim=1)
        p_jit, p_gray, p_blur, p_flip, p_sol = u(B), u(B), u(B), u(B), u(B)
        scale = c.size / 224.0
        sigma = (c.blur_sigma[0] + (c.blur_sigma[1] - c.blur_sigma[0]) * u(B)) * scale
        return {
            "crop": torch.stack([top, left, h, w], dim=1),
            "jitter": (p_jit < c.p_jitter) & c.jitter,
            "factors": factors,
            "order": order,
            "grayscale": (p_gray < c.p_grayscale) & c.grayscale,
            "blur": (p_blur < c.p_blur) & c.blur,
            "sigma": sigma,
            "flip": (p_flip < c.p_flip) & c.flip,
            "solarize": (p_sol < c.p_solarize) & c.solarize,
        }

    # ------------------------------------------------------------------------------------------
    def apply(self, x: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """Apply sampled ``params`` to float images ``x`` [B, 3, H, W] in [0, 1] (or uint8 0..255 where the fused
        op serves) -> [B, 3, size, size].

        ``params`` may live on any device; they are moved once to ``x``'s device. One fused op where the dispatch
        table runs the compiled ``augment_views`` kernel on ``x``'s device, the torch ops otherwise.
        """
        if _fused(x):
            return fused_apply(self.config, x, params)
        x = Fn.to_float(x)
        c = self.config
        S = c.size
        B = x.shape[0]
        params = {k: v.to(x.device) for k, v in params.items()}
        flip = params["flip"]
        if c.crop:
            box = params["crop"]
            A, b = Fn.crop_box_affine(box[:, 0], box[:, 1], box[:, 2], box[:, 3], (S, S))
            A[:, 0, 0] = torch.where(flip, -A[:, 0, 0], A[:, 0, 0])
            x = warp(x, Fn.affine_coords(A, b, (S, S)).unsqueeze(1)).squeeze(1)
        else:
            x = center_crop(resize(x, max(S, int(round(S * c.resize_ratio)))), S)
            x = torch.where(flip.view(B, 1, 1, 1), x.flip(-1), x)  # a fresh tensor: safe to edit in place
        x = x.contiguous()
        if c.jitter:
            x = _jitter(x, params["jitter"], params["factors"].to(torch.float32), params["order"])
        if c.grayscale:
            x = _masked(x, params["grayscale"], lambda s: luma(s).expand_as(s))
        if c.blur:
            sig = params["sigma"]
            x = _masked(x, params["blur"], lambda s, idx: Fn.blur_per_image(s, sig[idx]), with_index=True)
        if c.solarize:
            t = c.solarize_threshold
            x = _masked(x, params["solarize"], lambda s: torch.where(s >= t, 1.0 - s, s))
        if c.normalize:
            mean = torch.tensor(c.mean, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
            std = torch.tensor(c.std, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
            x = (x - mean) / std
        return x


def _uniform(generator: torch.Generator | None, device: torch.device, *shape: int) -> torch.Tensor:
    """float64 draws ~ U[0, 1) of ``shape`` from ``generator`` on ``device``."""
    return torch.rand(shape, generator=generator, dtype=torch.float64, device=device)


def _resized_crop(
    c: PolicyConfig, H: int, W: int, B: int, u: Callable[..., torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """RandomResizedCrop boxes for ``B`` images of H x W: (top, left, height, width), each float64 [B] in
    pixels, from four draws of ``u`` (U[0, 1) of a shape); 10 attempts, the first that fits wins, else the
    central fallback."""
    area = H * W
    target = area * (c.crop_scale[0] + (c.crop_scale[1] - c.crop_scale[0]) * u(B, 10))
    lr = (math.log(c.crop_ratio[0]), math.log(c.crop_ratio[1]))
    ratio = torch.exp(lr[0] + (lr[1] - lr[0]) * u(B, 10))
    w = torch.round(torch.sqrt(target * ratio))
    h = torch.round(torch.sqrt(target / ratio))
    ok = (w > 0) & (w <= W) & (h > 0) & (h <= H)
    first = torch.argmax(ok.to(torch.int64), dim=1, keepdim=True)
    any_ok = ok.any(dim=1)
    w = w.gather(1, first).squeeze(1)
    h = h.gather(1, first).squeeze(1)
    fw, fh = _fallback_crop(c, H, W)
    w = torch.where(any_ok, w, torch.full_like(w, fw))
    h = torch.where(any_ok, h, torch.full_like(h, fh))
    ui, uj = u(B), u(B)
    top = torch.where(any_ok, torch.floor(ui * (H - h + 1)), torch.full_like(h, (H - fh) // 2))
    left = torch.where(any_ok, torch.floor(uj * (W - w + 1)), torch.full_like(w, (W - fw) // 2))
    return top, left, h, w


def _fallback_crop(c: PolicyConfig, H: int, W: int) -> tuple[int, int]:
    """(width, height) in pixels of RandomResizedCrop's central fallback: the whole H x W image, cut to
    the nearest allowed aspect ratio."""
    in_ratio = W / H
    if in_ratio < c.crop_ratio[0]:
        return W, int(round(W / c.crop_ratio[0]))
    if in_ratio > c.crop_ratio[1]:
        return int(round(H * c.crop_ratio[1])), H
    return W, H


def _fused(images: torch.Tensor) -> bool:
    """Whether the policy runs the fused view op on ``images``: the dispatch table's ``augment_views`` entry for
    their device under the current backend mode."""
    return _backend.uses_kernel("augment_views", images.device.type)


def _masked(x: torch.Tensor, mask: torch.Tensor, fn: Any, with_index: bool = False) -> torch.Tensor:
    idx = torch.nonzero(mask, as_tuple=False).flatten()
    if idx.numel() == 0:
        return x
    sub = x.index_select(0, idx)
    res = fn(sub, idx) if with_index else fn(sub)
    return x.index_copy_(0, idx, res.to(x.dtype))


def _jitter(x: torch.Tensor, on: torch.Tensor, f: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """torchvision ColorJitter with per-sample factors and op order (0 b, 1 c, 2 s, 3 h)."""
    for step in range(4):
        for op in range(4):
            mask = on & (order[:, step] == op)
            idx = torch.nonzero(mask, as_tuple=False).flatten()
            if idx.numel() == 0:
                continue
            sub = x.index_select(0, idx)
            fac = f.index_select(0, idx)[:, op].view(-1, 1, 1, 1)
            if op == 0:
                sub = Fn.adjust_brightness(sub, fac)
            elif op == 1:
                sub = Fn.adjust_contrast(sub, fac)
            elif op == 2:
                sub = Fn.adjust_saturation(sub, fac)
            else:
                sub = adjust_hue(sub, fac.view(-1, 1, 1))
            x.index_copy_(0, idx, sub)
    return x


def policy(name: str | Sequence[str], size: int = 224, backend: str = "torch", **overrides: Any) -> Any:
    """A pretraining policy by name ('default', 'spatial', 'appearance', 'solarize-default') or by a list
    of augmentations (subset of ``AUGMENTATIONS``: crop, flip, jitter, grayscale, blur, solarize).

    Args:
        size: output side in pixels (224 ImageNet-style, 32 for synthetic/CIFAR-style data).
        backend: 'torch' (any machine), 'dali' (needs nvidia-dali; see ``invfast.transforms.dali``) or
            'fused' (one fused op per view batch; see ``invfast.transforms.fused``).
        overrides: any other :class:`PolicyConfig` field (e.g. ``p_blur=0.0``).

    Returns:
        a :class:`Policy` (torch), ``invfast.transforms.dali.DaliPolicy`` or ``invfast.transforms.fused.FusedPolicy``.
    """
    config, label = policy_config(name, size, **overrides)
    if backend == "torch":
        return Policy(config, name=label)
    if backend == "dali":
        from invfast.transforms import dali

        return dali.DaliPolicy(config, name=label)
    if backend == "fused":
        from invfast.transforms.fused import FusedPolicy

        return FusedPolicy(Policy(config, name=label))
    raise ValueError(f"unknown backend {backend!r}; valid backends: 'torch', 'dali', 'fused'")


def policy_from_descriptor(
    i: int | Sequence[float] | torch.Tensor, size: int = 224, backend: str = "torch", **overrides: Any
) -> Any:
    """The policy of an amortised-invariance descriptor.

    ``i`` is either a binary vector of length 2 ([spatial, appearance]: [1, 1] default, [1, 0] spatial,
    [0, 1] appearance) or of length 5 (switches for crop, flip, jitter, grayscale, blur; at least two
    on), or an int index into ``VALID_DESCRIPTORS`` (the 26 valid K = 5 descriptors).
    """
    if isinstance(i, int) and not isinstance(i, bool):
        if not 0 <= i < len(VALID_DESCRIPTORS):
            raise ValueError(f"descriptor index must be in 0..{len(VALID_DESCRIPTORS) - 1}, got {i}")
        d = VALID_DESCRIPTORS[i]
    else:
        t = torch.as_tensor(i, dtype=torch.float64).flatten()
        if t.numel() not in (2, 5):
            raise ValueError(f"descriptor must have 2 (spatial, appearance) or 5 {SWITCHES_5} entries, got {t.numel()}")
        if not bool(((t == 0) | (t == 1)).all()):
            raise ValueError(f"descriptor entries must be 0 or 1 (binary), got {t.tolist()}")
        d = tuple(int(v) for v in t.tolist())
    if len(d) == 2:
        names = {(1, 1): "default", (1, 0): "spatial", (0, 1): "appearance"}
        if d not in names:
            raise ValueError(
                "descriptor [0, 0] switches every augmentation off; valid K=2 descriptors: "
                "[1, 1] default, [1, 0] spatial, [0, 1] appearance"
            )
        return policy(names[d], size=size, backend=backend, **overrides)
    if sum(d) < 2:
        raise ValueError(
            f"descriptor {list(d)} has fewer than two augmentations on; the 26 valid ones are "
            "invfast.transforms.VALID_DESCRIPTORS"
        )
    return policy([a for a, on in zip(SWITCHES_5, d) if on], size=size, backend=backend, **overrides)
