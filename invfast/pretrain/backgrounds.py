"""Pretraining views whose backgrounds tell nothing about the image: each view of an object is composited anew
over its own freshly drawn background, so the two views of a pair share the object and nothing else.

Without it, a policy without a crop (Appearance) sees the same background pixels in both views, and
instance discrimination can be solved from the background alone (docs/reproduce.md, issue 56).
"""

from __future__ import annotations

from typing import Any

import torch

from invfast.ops.synth import composite

__all__ = ["as_layers", "uniform_noise", "FreshBackgrounds"]


def as_layers(layers: torch.Tensor) -> torch.Tensor:
    """Premultiplied RGBA object layers [B, 4, H, W] as float32 in [0, 1] (uint8 0..255 is divided by 255)."""
    if not isinstance(layers, torch.Tensor) or layers.dim() != 4 or layers.shape[1] != 4:
        shape = tuple(layers.shape) if isinstance(layers, torch.Tensor) else type(layers).__name__
        raise ValueError(f"object layers must be premultiplied RGBA [B, 4, H, W], got {shape}")
    if layers.dtype == torch.uint8:
        return layers.to(torch.float32) / 255.0
    if layers.dtype != torch.float32:
        raise TypeError(f"object layers must be uint8 (0..255) or float32 (0..1), got {layers.dtype}")
    return layers


def uniform_noise(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """uint8 uniform pixel noise of ``shape``, drawn on the generator's device (so a CPU generator gives the same
    pixels whatever ``device``) and placed on ``device``."""
    gdev = generator.device if generator is not None else torch.device("cpu")
    return torch.randint(0, 256, shape, generator=generator, device=gdev, dtype=torch.uint8).to(device)


class FreshBackgrounds:
    """A two-view augmentation over object layers: ``augment(layers, generator) -> (view1, view2)``.

    ``layers``: premultiplied RGBA [B, 4, H, W] (uint8 or float32, :func:`as_layers`). Each view composites the
    layers over its own uniform-noise background [B, 3, H, W] drawn from ``generator``, then applies
    ``policy.view`` (any invfast policy: :func:`invfast.transforms.policy`). Views as the policy's: float
    [B, 3, size, size], normalised as it normalises.
    """

    def __init__(self, policy: Any) -> None:
        if not callable(getattr(policy, "view", None)):
            raise TypeError(
                f"FreshBackgrounds wraps a policy with a view(images, generator) method, got {type(policy).__name__}"
            )
        self.policy = policy
        self.config = getattr(policy, "config", None)
        self.name = getattr(policy, "name", "custom")

    def __repr__(self) -> str:
        return f"FreshBackgrounds({self.policy!r})"

    def composite_view(self, layers: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The layers over one fresh noise background: uint8 images [B, 3, H, W]."""
        x = as_layers(layers).contiguous()
        B, _, H, W = x.shape
        noise = uniform_noise((B, 3, H, W), generator, x.device)
        return composite(x, noise, torch.arange(B, device=x.device))

    def __call__(
        self, layers: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        v1 = self.policy.view(self.composite_view(layers, generator), generator=generator)
        v2 = self.policy.view(self.composite_view(layers, generator), generator=generator)
        return v1, v2
