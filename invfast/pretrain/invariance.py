"""Invariance of the model being trained, measured on a held-out batch (Ericsson Fig. C.1 curves).

Standardised cosine (SPEC §1.2) between whitened features of the untransformed images and of the
same images under a few exact transforms, averaged over images and parameters.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from invfast.metrics import invariance_scores
from invfast.stats import FeatureStats

_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


def _gray(x: torch.Tensor) -> torch.Tensor:
    y = (0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2]).unsqueeze(1)
    return y.expand_as(x)


# name -> list of functions on float images [B, 3, H, W] in 0..1 (one per transform parameter)
BUILTIN_TRANSFORMS: dict[str, list[Callable[[torch.Tensor], torch.Tensor]]] = {
    "rot90": [lambda x, k=k: torch.rot90(x, k, dims=(2, 3)) for k in (1, 2, 3)],
    "hflip": [lambda x: torch.flip(x, dims=(3,))],
    "grayscale": [_gray],
    "brightness": [lambda x, f=f: (x * f).clamp(0, 1) for f in (0.5, 0.75, 1.25, 1.5)],
}
DEFAULT_TRANSFORMS = ("rot90", "hflip", "grayscale", "brightness")


def to_input(images: torch.Tensor, size: int) -> torch.Tensor:
    """uint8 or 0..1 float images [B, 3, H, W] -> float32 [B, 3, size, size], ImageNet-normalised."""
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    if x.shape[-1] != size or x.shape[-2] != size:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
    return (x - _MEAN.to(x.device)) / _STD.to(x.device)


def _variants(name: str, x: torch.Tensor) -> torch.Tensor:
    """``x`` (float 0..1, [B, 3, H, W]) under every parameter of transform ``name`` -> [B, P, 3, H, W]."""
    if name in BUILTIN_TRANSFORMS:
        return torch.stack([f(x) for f in BUILTIN_TRANSFORMS[name]], dim=1)
    try:
        from invfast import transforms as T
        t = T.get(name)
    except (ImportError, KeyError, ValueError) as e:
        raise ValueError(f"unknown invariance transform {name!r}: not one of {sorted(BUILTIN_TRANSFORMS)} "
                         f"nor an invfast.transforms test transform ({e})") from e
    grid = t.grid(k=8)
    keep = ~t.is_identity(grid)
    return t.apply(x, grid[keep])


@torch.no_grad()
def measure(features: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, size: int,
            transforms: tuple[str, ...] = DEFAULT_TRANSFORMS, device: torch.device | str = "cpu",
            chunk: int = 256) -> dict[str, float]:
    """Mean standardised cosine per transform for ``features`` on ``images [N, 3, H, W]``.

    Reference statistics (mean, Ledoit–Wolf-shrunk covariance) come from the untransformed
    features of the same images. Returns ``{name: mean cosine}`` (1 = invariant).
    """
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
    x = x.to(device)

    def feats(batch: torch.Tensor) -> torch.Tensor:
        return torch.cat([features(to_input(batch[i:i + chunk], size)).double() for i in range(0, batch.shape[0], chunk)])

    f_ref = feats(x)
    stats = FeatureStats().update(f_ref.cpu()).finalize(shrinkage="ledoit-wolf")
    out = {}
    for name in transforms:
        v = _variants(name, x)
        n, p = v.shape[:2]
        f_t = feats(v.reshape(n * p, *v.shape[2:])).view(n, p, -1)
        out[name] = float(invariance_scores(f_ref.cpu(), f_t.cpu(), stats)["cosine"].mean())
    return out
