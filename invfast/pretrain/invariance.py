"""Invariance of the model being trained, measured on a held-out batch (Ericsson Fig. C.1 curves).

Standardised cosine (Ericsson et al.) between whitened features of the untransformed images and of
the same images under the test transforms of :mod:`invfast.transforms` (the registry ``invfast
measure`` uses, so "brightness invariance" in a training log is the brightness ``invfast measure``
reports), averaged over images and parameters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
from invfast.metrics import invariance_scores
from invfast.stats import FeatureStats

#: transforms measured under a name of their own: name -> (invfast.transforms registry name, parameters)
NAMED_VIEWS: dict[str, tuple[str, tuple[float, ...]]] = {
    "rot90": ("rotation", (90.0, 180.0, 270.0)),  # exact quarter turns (counter-clockwise, as torch.rot90)
}
DEFAULT_TRANSFORMS = ("rot90", "hflip", "grayscale", "brightness")
GRID_POINTS = 8


def views(name: str) -> tuple[Any, torch.Tensor]:
    """(registry transform, parameters [P] or [P, m]) measured for ``name``.

    ``name`` is an :mod:`invfast.transforms` test transform (its published grid at
    ``GRID_POINTS`` points, identity parameters left out: brightness factors 0.25..5, the same as
    ``invfast measure``) or one of :data:`NAMED_VIEWS` (``rot90``: rotation by 90, 180, 270 degrees).
    """
    from invfast import transforms as T

    reg, params = NAMED_VIEWS.get(name, (name, None))
    try:
        t = T.get(reg)
    except (KeyError, ValueError) as e:
        raise ValueError(
            f"unknown invariance transform {name!r}: not one of {sorted(NAMED_VIEWS)} "
            f"nor an invfast.transforms test transform ({e})"
        ) from e
    if params is not None:
        return t, torch.tensor(params, dtype=torch.float32)
    grid = t.grid(k=GRID_POINTS)
    return t, grid[~t.is_identity(grid)]


def to_input(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 or 0..1 float images [B, 3, H, W] -> float32 [B, 3, size, size], ImageNet-normalised."""
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    if x.shape[-1] != size or x.shape[-2] != size:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


def _variants(name: str, x: torch.Tensor) -> torch.Tensor:
    """``x`` (float 0..1, [B, 3, H, W]) under every parameter of transform ``name`` -> [B, P, 3, H, W]."""
    t, params = views(name)
    return t.apply(x, params)


@torch.no_grad()
def measure_while_training(
    features: Callable[[torch.Tensor], torch.Tensor],
    images: torch.Tensor,
    size: int,
    transforms: tuple[str, ...] = DEFAULT_TRANSFORMS,
    device: torch.device | str = "cpu",
    chunk: int = 256,
) -> dict[str, float]:
    """Mean standardised cosine per transform for ``features`` on ``images [N, 3, H, W]``.

    Reference statistics (mean, Ledoit–Wolf-shrunk covariance) come from the untransformed
    features of the same images. Returns ``{name: mean cosine}`` (1 = invariant).
    """
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    x = x.to(device)

    def feats(batch: torch.Tensor) -> torch.Tensor:
        return torch.cat(
            [features(to_input(batch[i : i + chunk], size)).double() for i in range(0, batch.shape[0], chunk)]
        )

    f_ref = feats(x)
    stats = FeatureStats().update(f_ref.cpu()).finalize(shrinkage="ledoit-wolf")
    out = {}
    for name in transforms:
        v = _variants(name, x)
        n, p = v.shape[:2]
        f_t = feats(v.reshape(n * p, *v.shape[2:])).view(n, p, -1)
        out[name] = float(invariance_scores(f_ref.cpu(), f_t.cpu(), stats)["cosine"].mean())
    return out
