"""Pretraining policies through the fused view op (:func:`invfast.ops.augment.augment_views`).

:class:`FusedPolicy` draws exactly the parameters of the torch :class:`~invfast.transforms.policies.Policy`
(same sampler, same generator order: a seed gives the same crops, factors, orders and masks) and applies
them in one op per view batch instead of one torch op per augmentation: crop + resize + flip as a single
bilinear 2x3 map read straight from uint8 (or float) images, ColorJitter in each image's order, grayscale,
blur, solarize and the normalisation, written as float32 or bfloat16, optionally channels_last.

It matches the torch path within one grey level (1/255) before normalisation (tests/test_augment_views.py).
Where it runs compiled: on CPU and on CUDA when the core is built with them (the dispatch table's rows: the
CUDA kernel measured 58.8x its torch reference on an H200, docs/gpu.md), the torch reference of the op otherwise.
The torch :class:`~invfast.transforms.policies.Policy` itself goes through :func:`fused_apply` wherever the
dispatch table runs the compiled ``augment_views`` kernel (CPU and CUDA by default):
``FusedPolicy`` adds the bfloat16 and channels_last outputs.

Policies without the crop (Appearance) resize the shorter side and centre-crop in torch first (antialiased,
like the torch path), then run the fused op with an identity (or flip) map.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from invfast.ops.augment import augment_views
from invfast.transforms import functional as Fn
from invfast.transforms._checks import as_images
from invfast.transforms.policy_config import PolicyConfig
from invfast.transforms.preprocess import center_crop, resize

__all__ = ["FusedPolicy", "fused_apply", "view_matrix"]


def view_matrix(config: PolicyConfig, params: dict[str, torch.Tensor], image_size: Sequence[int]) -> torch.Tensor:
    """float64 [B, 2, 3] map of each view (output pixel -> source point, pixel-centre units).

    With the crop: the box ``params['crop']`` (top, left, height, width) resized to ``config.size``, mirrored
    where ``params['flip']``; without it: identity or mirror on the already resized and centre-cropped image.
    """
    S = config.size
    flip = params["flip"].to(torch.bool)
    B = flip.shape[0]
    dev = flip.device
    if config.crop:
        box = params["crop"].to(torch.float64)
        A, b = Fn.crop_box_affine(box[:, 0], box[:, 1], box[:, 2], box[:, 3], (S, S))
        A = A.clone()
        A[:, 0, 0] = torch.where(flip, -A[:, 0, 0], A[:, 0, 0])
    else:
        A = torch.eye(2, dtype=torch.float64, device=dev).repeat(B, 1, 1)
        A[:, 0, 0] = torch.where(flip, -1.0, 1.0)
        b = torch.full((B, 2), (S - 1) / 2.0, dtype=torch.float64, device=dev)
    c = torch.full((2, 1), (S - 1) / 2.0, dtype=torch.float64, device=dev)
    offset = b - (A @ c).squeeze(-1)
    return torch.cat([A, offset.unsqueeze(-1)], dim=-1)


class FusedPolicy:
    """A torch :class:`~invfast.transforms.policies.Policy` applied through the fused view op.

    ``FusedPolicy(T.policy("default", size=224), dtype=torch.bfloat16, channels_last=True)`` (or
    ``T.policy(..., backend="fused")`` for float32 NCHW). Sampling is the wrapped policy's ``sample``.
    ``fused(images, generator)`` -> ``(view1, view2)`` [B, 3, size, size] in ``dtype`` (float32 default,
    or bfloat16), NHWC memory when ``channels_last``.
    """

    def __init__(self, policy: Any, dtype: torch.dtype = torch.float32, channels_last: bool = False) -> None:
        if not (hasattr(policy, "sample") and isinstance(getattr(policy, "config", None), PolicyConfig)):
            raise TypeError(
                "FusedPolicy wraps a torch policy (invfast.transforms.policy(name, backend='torch')), "
                f"got {type(policy).__name__}"
            )
        if dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"dtype must be torch.float32 or torch.bfloat16, got {dtype}")
        self.config: PolicyConfig = policy.config
        self.name: str = getattr(policy, "name", "custom")
        self.dtype = dtype
        self.channels_last = bool(channels_last)
        self._sampler = policy

    def __repr__(self) -> str:
        return (
            f"FusedPolicy({self.name!r}, size={self.config.size}, augmentations={self.config.augmentations}, "
            f"dtype={self.dtype}, channels_last={self.channels_last})"
        )

    def sample(
        self, batch: int, image_size: Sequence[int], generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """The torch Policy's per-sample parameters (see :meth:`Policy.sample`)."""
        return self._sampler.sample(batch, image_size, generator)

    def __call__(
        self, images: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        images = as_images(images)
        size = images.shape[-2:]
        v1 = self.apply(images, self.sample(images.shape[0], size, generator))
        v2 = self.apply(images, self.sample(images.shape[0], size, generator))
        return v1, v2

    def view(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """One augmented view [B, 3, size, size]."""
        images = as_images(images)
        return self.apply(images, self.sample(images.shape[0], images.shape[-2:], generator))

    def apply(self, images: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
        """Apply sampled ``params`` to ``images`` [B, 3, H, W] (uint8 0..255 or float 0..1) in one fused op.

        ``params`` may live on any device; they are moved once to the images' device.
        """
        return fused_apply(self.config, images, params, dtype=self.dtype, channels_last=self.channels_last)


def fused_apply(
    config: PolicyConfig,
    images: torch.Tensor,
    params: dict[str, torch.Tensor],
    *,
    dtype: torch.dtype = torch.float32,
    channels_last: bool = False,
) -> torch.Tensor:
    """One view of ``images`` [B, 3, H, W] (uint8 0..255 or float 0..1) under ``config`` with sampled ``params``
    (:meth:`Policy.sample <invfast.transforms.policies.Policy.sample>`), through the fused op
    :func:`~invfast.ops.augment.augment_views` -> [B, 3, size, size] ``dtype``."""
    c = config
    S = c.size
    dev = images.device
    params = {k: v.to(dev) for k, v in params.items()}
    src = images
    if not c.crop:
        x = Fn.to_float(images)
        src = center_crop(resize(x, max(S, int(round(S * c.resize_ratio)))), S).contiguous()
    elif src.dtype not in (torch.uint8, torch.float32):
        src = src.to(torch.float32)
    matrix = view_matrix(c, params, images.shape[-2:])
    mean = c.mean if c.normalize else (0.0, 0.0, 0.0)
    std = c.std if c.normalize else (1.0, 1.0, 1.0)
    return augment_views(
        src,
        matrix,
        (S, S),
        jitter=params["jitter"] if c.jitter else None,
        factors=params["factors"],
        order=params["order"],
        grayscale=params["grayscale"] if c.grayscale else None,
        blur=params["blur"] if c.blur else None,
        sigma=params["sigma"],
        solarize=params["solarize"] if c.solarize else None,
        threshold=c.solarize_threshold,
        mean=mean,
        std=std,
        dtype=dtype,
        channels_last=channels_last,
    )
