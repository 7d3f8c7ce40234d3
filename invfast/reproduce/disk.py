"""What a reproduce stage writes to its seed's cache folder, in MiB, from the models and images it makes: each
:class:`~invfast.reproduce.stage.Stage` that writes declares ``disk_mb(cfg)`` with these helpers, and
:func:`invfast.reproduce.pipeline.disk_estimate_mb` sums them over the stages a run selects on every seed — so a
new finding's stages bring their own disk need, with no list of finding ids beside them.

The bytes per parameter are those of the files the training runs keep (measured on the tiny preset's cache: a
MoCo run 9.9, a supervised run 4.8, a Hyper-ResNet run 7.1 bytes per float32 parameter's 4), rounded up."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = [
    "CONTRASTIVE_COPIES",
    "SUPERVISED_COPIES",
    "AMORTISED_COPIES",
    "MEASURED_MODEL_MB",
    "SMALL_MB",
    "encoder_mb",
    "images_mb",
    "supervised_mb",
    "features_mb",
    "measured_mb",
    "small_mb",
]

#: float32 copies of a contrastive run's encoder in its files: model.pt (encoder, key encoder, heads),
#: checkpoint.pt (the same with the optimiser's momentum) and the snapshots E4 reads
CONTRASTIVE_COPIES = 10
#: the same for a supervised run: model.pt (encoder, head) and checkpoint.pt (with the momentum)
SUPERVISED_COPIES = 5
#: the same for an amortised run of the Hyper-ResNet or Prompt-ViT (its parameters: the hypernetwork's)
AMORTISED_COPIES = 7
#: one measured model's files under measure/ (its result, state and finished-transform files) at the presets'
#: sizes: 0.2 MiB on the tiny preset, rounded up
MEASURED_MODEL_MB = 1.0
#: a stage that writes only small arrays or JSON results
SMALL_MB = 1.0


def _mb(n_bytes: float) -> float:
    return float(n_bytes) / 2**20


@functools.lru_cache(maxsize=64)
def _shape(cfg: Any, key: str | None, arch: str | None) -> tuple[int, int]:
    """(parameters, feature width) of the encoder called ``key`` (``encoder(cfg, key)``), else of a fresh
    supervised ``arch`` (``make_encoder``)."""
    from invfast.reproduce.stages.context import encoder
    from invfast.reproduce.stages.supervised import make_encoder

    with torch.random.fork_rng(devices=[]):  # the encoders seed their initialisation; the caller's RNG stays
        model = encoder(cfg, key) if key is not None else make_encoder(cfg, str(arch))
    width = int(model.feature_dim)  # type: ignore[arg-type]  # every invfast encoder says how wide its features are
    return sum(p.numel() for p in model.parameters()), width


def encoder_mb(cfg: Any, key: str, copies: int) -> float:
    """MiB of a training run's files for the encoder called ``key`` (``encoder(cfg, key)``: a policy, an amortised
    model, a 'vit-' one), ``copies`` float32 copies of its parameters."""
    return _mb(4 * copies * _shape(cfg, key, None)[0])


def supervised_mb(cfg: Any, specs_of: Callable[..., Iterable[Any]], args: tuple[Any, ...] = ()) -> float:
    """MiB of the supervised runs ``specs_of(cfg, *args)`` (:class:`~invfast.reproduce.stages.supervised.ModelSpec`s:
    each its architecture's parameters x :data:`SUPERVISED_COPIES`)."""
    return sum(_mb(4 * SUPERVISED_COPIES * _shape(cfg, None, s.arch)[0]) for s in specs_of(cfg, *args))


def images_mb(n: int, size: int, channels: int = 3) -> float:
    """MiB of ``n`` uint8 images of ``size`` x ``size`` pixels."""
    return _mb(n * channels * size * size)


def features_mb(cfg: Any, models: int, tasks: int, key: str = "default") -> float:
    """MiB of the float32 features of ``models`` encoders as wide as the one called ``key`` on ``tasks`` probe sets
    of ``data.n_probe`` images."""
    return _mb(4 * models * tasks * cfg.data.n_probe * _shape(cfg, key, None)[1])


def measured_mb(models: int) -> float:
    """MiB of ``models`` measured models' files under measure/ (:data:`MEASURED_MODEL_MB` each)."""
    return models * MEASURED_MODEL_MB


def small_mb(cfg: Any) -> float:
    """A stage whose files are a few small arrays or JSON results (learned descriptors, snapshot results)."""
    return SMALL_MB
