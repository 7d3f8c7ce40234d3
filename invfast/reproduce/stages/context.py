"""What every stage of ``invfast reproduce`` works with: the :class:`Context` (configuration, cache
folder, loaded models), stage seeds, the model names and the frozen feature extractors."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
from invfast.measure import FeatureExtractor
from invfast.reproduce.config import ReproduceConfig
from invfast.synthetic.rng import derive_seed

__all__ = [
    "LABELS",
    "AMORTISED",
    "SIMCLR",
    "VIT",
    "FUSIONS",
    "POLICIES",
    "Context",
    "DamagedCacheError",
    "stage_seed",
    "normalise",
    "extract",
    "encoder",
    "load_stage_model",
    "short_floats",
]


def short_floats(values: Any) -> list[float | None]:
    """Floats at 5 significant digits, None where not finite: the per-unit numbers (per image, per pair) a stage
    keeps for the verdicts, for every seed in results.json."""
    return [float(f"{v:.5g}") if np.isfinite(v) else None for v in np.asarray(values, np.float64).reshape(-1).tolist()]


class DamagedCacheError(ValueError):
    """A file of the reproduce cache that a finished stage wrote cannot be read back as it was written:
    ``path`` (under ``cache``), why, and (filled in by the pipeline, which knows the stages) the stage
    result that must go with it for the file to be written again."""

    def __init__(self, path: str, why: str, cache: str, owner: str | None = None) -> None:
        super().__init__(path, why, cache, owner)
        self.path, self.why, self.cache, self.owner = path, why, cache, owner

    def __str__(self) -> str:
        redo = f" and {os.path.join(self.cache, 'stages', self.owner + '.json')}" if self.owner else ""
        return (
            f"damaged cache file {self.path} ({self.why}); delete it{redo}, then rerun the same command to recompute it"
        )


#: model keys (cache names) -> labels in the report, in report order
LABELS = {"random": "Random", "default": "Default", "spatial": "Spatial", "appearance": "Appearance"}
#: the key prefix of the transformer models of C7 (Chavhan et al. Tab. 3): 'vit-random', 'vit-default', ...
#: are plain ViTs, 'vit-amortised' the Prompt-ViT
VIT = "vit-"
#: amortised model key -> K, the length of its invariance descriptor (Chavhan et al.: 2 groups, or 5 single
#: augmentations); AI-MoCo but for the :data:`SIMCLR` keys
AMORTISED = {"amortised": 2, "amortised-k5": 5, f"{VIT}amortised": 2, "amortised-simclr": 2, "amortised-simclr-k5": 5}
#: C5's AI-SimCLR models (Chavhan et al. Tab. 1, AI-SimCLR(2) and AI-SimCLR(5)): K = 2, then K = 5
SIMCLR = ("amortised-simclr", "amortised-simclr-k5")
#: the pretraining policies every run compares (the findings compare exactly these three)
POLICIES = ("default", "spatial", "appearance")
#: E3's control, 3×Default (Ericsson et al. 2021, Tab. 2): Default's features concatenated with those of two more
#: Default encoders trained the same way from other seeds (their init, queue and data order come from the key)
EXTRA_DEFAULTS = ("default-b", "default-c")
THREE_DEFAULT = "3×Default"
FUSIONS = {
    "spa+app": ("Spa+App", ("spatial", "appearance")),
    "def+spa+app": ("Def+Spa+App", ("default", "spatial", "appearance")),
}


def stage_seed(seed: int, name: str) -> int:
    """A stable 31-bit seed for stage ``name`` derived from the master seed."""
    return derive_seed(seed, name, bits=31)


@dataclass
class Context:
    """What every stage needs: the configuration, the cache folder and whether to show progress."""

    cfg: ReproduceConfig
    cache: str
    progress: bool = True
    _models: dict[str, torch.nn.Module] = field(default_factory=dict)

    def path(self, *parts: str) -> str:
        """``<cache>/<parts...>``, its parent folder created."""
        p = os.path.join(self.cache, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def array(self, *parts: str) -> np.ndarray:
        """A numeric array a stage saved under the cache; :class:`DamagedCacheError` (one line naming the file
        and the fix) when it no longer reads as one (truncated, replaced, an object array)."""
        path = os.path.join(self.cache, *parts)
        try:
            a = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise
        except (ValueError, OSError, EOFError) as exc:
            why = " ".join(str(exc).split()) or type(exc).__name__
            raise DamagedCacheError(path, why, self.cache) from None
        if a.dtype.kind not in "biuf":
            raise DamagedCacheError(path, f"holds {a.dtype} values, not numbers", self.cache)
        return a

    def images(self, split: str) -> torch.Tensor:
        """uint8 [N, 3, size, size] of a main-data split ('pretrain', 'probe', 'rotation', 'measure')."""
        return torch.from_numpy(self.array("data", f"{split}_images.npy"))

    def model(self, key: str) -> torch.nn.Module:
        """A frozen feature extractor in eval mode: 'random', a policy name, or 'amortised'."""
        if key not in self._models:
            self._models[key] = load_stage_model(self, key).to(self.cfg.run.device)
        return self._models[key]


def normalise(images: torch.Tensor) -> torch.Tensor:
    """uint8 [B, 3, H, W] -> float32 normalised with ImageNet mean/std (as the policies' views)."""
    mean = torch.tensor(IMAGENET_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=images.device).view(1, 3, 1, 1)
    return (images.float() / 255.0 - mean) / std


@torch.no_grad()
def extract(model: torch.nn.Module, images: torch.Tensor, batch: int = 256) -> np.ndarray:
    """Pooled features float32 [N, D] of uint8 images [N, 3, H, W]: the library's
    :class:`~invfast.measure.FeatureExtractor` (ImageNet normalisation, eval mode) in chunks of ``batch`` images,
    each one model call (no CPU sub-batches: the stages' numbers stay those of whole chunks)."""
    fx = FeatureExtractor(model, next(model.parameters()).device, forward_batch=batch, split_forward=False)
    try:
        (features,) = fx.features(images).values()
    finally:
        fx.close()
    return features.cpu().numpy()


def encoder(cfg: ReproduceConfig, key: str) -> torch.nn.Module:
    """A freshly initialised encoder for ``key`` (its initialisation seeded by the master seed and key):
    the Hyper-ResNet for 'amortised' (K = 2) and 'amortised-k5' (K = 5), the Prompt-ViT for 'vit-amortised',
    a plain ViT of the same size for any other 'vit-' key, the plain ResNet otherwise."""
    from invfast.models import create

    torch.manual_seed(stage_seed(cfg.run.seed, f"init/{key}"))
    if key.startswith(VIT):
        shape: dict[str, Any] = dict(img_size=cfg.data.size, patch=cfg.vit.patch, dim=cfg.vit.dim, depth=cfg.vit.depth)
        shape.update(heads=cfg.vit.heads, mlp_ratio=2.0)
        return create("prompt-vit", inv_dim=AMORTISED[key], **shape) if key in AMORTISED else create("vit", **shape)
    if key in AMORTISED:
        return create(f"hyper-{cfg.pretrain.arch}", width=cfg.pretrain.width, inv_dim=AMORTISED[key])
    return create(cfg.pretrain.arch, width=cfg.pretrain.width)


def load_stage_model(ctx: Context, key: str) -> torch.nn.Module:
    """The encoder called ``key``: 'random' / 'vit-random' (seeded initialisation), a policy, 'amortised' or
    their 'vit-' versions (weights from the pretraining run), a transfer source 'transfer-<source>'."""
    from invfast.models import load_checkpoint

    if key in ("random", f"{VIT}random"):
        return encoder(ctx.cfg, key).eval()
    if key.startswith("transfer-"):
        enc = encoder(ctx.cfg, "transfer")
        return load_checkpoint(enc, ctx.path("transfer", key[len("transfer-") :], "model.pt")).eval()
    return load_checkpoint(encoder(ctx.cfg, key), ctx.path("pretrain", key, "model.pt")).eval()
