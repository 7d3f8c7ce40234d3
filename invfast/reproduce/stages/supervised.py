"""Supervised models as data, for Speicher et al.'s experiments: a :class:`ModelSpec` says which
architecture learns which labelled dataset for how long; :func:`train_models` trains a list of them
(:class:`invfast.pretrain.Supervised` through the :class:`~invfast.pretrain.Trainer`: checkpoints and
exact resume, one folder per model under ``<cache>/supervised/``) and checks that each one learned;
:func:`evaluate` gives frozen features, linear probes and sensitivities of trained models.

Datasets are made by builders ``data(cfg, split, n)`` (module-level functions or partials of them, so
stages stay picklable) returning anything with ``generate(indices, view=0)`` -> (uint8 images, labels,
params) and ``num_classes``: :class:`invfast.synthetic.Transforms2D` and the families of
:mod:`invfast.synthetic.families`. Every sample is a pure function of the run's seed, so a stage that
trains a model and a stage that probes it see the same data without writing it to disk.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import Context, encoder, extract, short_floats, stage_seed
from invfast.reproduce.stages.pretraining import read_metrics, train_config

__all__ = [
    "ModelSpec",
    "Builder",
    "criterion_level",
    "supervised_epochs",
    "own_data_accuracy",
    "fit_supervised",
    "arch_kwargs",
    "optimisation",
    "make_encoder",
    "train_models",
    "load_trained",
    "ncm_accuracy",
    "learned_check",
    "LEARNED_RATIO",
    "probe",
    "sensitivity",
    "pair_terms",
    "Evaluator",
]

#: (cfg, split, n) -> a dataset with ``generate(indices, view=0)`` and ``num_classes``
Builder = Callable[[ReproduceConfig, str, int], Any]

#: a supervised model counts as learned when its features classify its own task's held-out images
#: (nearest class mean) at least this many times as well as its random initialisation's
LEARNED_RATIO = 1.2


@dataclass(frozen=True)
class ModelSpec:
    """One supervised model: ``arch`` (an :func:`invfast.models.create` name) trained on ``n`` images of
    ``data(cfg, 'train', n)`` for ``epochs`` epochs — or, with ``level`` and ``cfg.speicher.criterion_epochs``, until
    its own-data accuracy reaches ``level`` (:func:`fit_supervised`), at most ``epochs`` then; ``key`` names its cache
    folder and its row in the report. Models of the same architecture start from the same initialisation, so a
    pair differs only in its data."""

    key: str
    arch: str
    data: Builder
    n: int
    epochs: int
    level: float | None = None


def criterion_level(cfg: ReproduceConfig) -> float | None:
    """The own-data accuracy S1's and S8's models (and the transfer models they reuse) train to: the rules' level
    (:data:`invfast.reproduce.rules.speicher.TRAINED_LEVEL`), or None with ``speicher.criterion_epochs`` 0 (fixed
    epochs)."""
    from invfast.reproduce.rules.speicher import TRAINED_LEVEL

    return TRAINED_LEVEL if cfg.speicher.criterion_epochs else None


def supervised_epochs(cfg: ReproduceConfig) -> int:
    """Those models' epochs: the cap ``speicher.criterion_epochs`` when they train to the criterion, else
    ``speicher.transfer_epochs``."""
    return cfg.speicher.criterion_epochs or cfg.speicher.transfer_epochs


def arch_kwargs(arch: str, cfg: ReproduceConfig) -> dict[str, Any]:
    """Constructor arguments of ``arch`` at the run's scale: ResNets and VGG at ``cfg.pretrain.width``; the ViT with
    8 x width units (as wide as the ResNet's features), 4 blocks of 4 heads, 4-px patches."""
    if arch == "vit":
        return {"img_size": cfg.data.size, "patch": 4, "dim": 8 * cfg.pretrain.width, "depth": 4, "heads": 4}
    return {"width": cfg.pretrain.width}


def optimisation(arch: str) -> dict[str, Any]:
    """TrainConfig settings of an architecture: the transfer experiment's SGD (lr 0.05, weight decay 5e-4,
    cosine) for the convolutional nets; for the ViT, Speicher et al.'s (App. B.2): Adam at lr 1e-3, weight
    decay 1e-5, cosine decay (with SGD at lr 0.05 a small ViT's loss barely moved in 5 epochs)."""
    if arch == "vit":
        return {"optimizer": "adam", "lr": 1e-3, "weight_decay": 1e-5}
    return {"optimizer": "sgd", "lr": 0.05, "weight_decay": 5e-4}


def make_encoder(cfg: ReproduceConfig, arch: str) -> torch.nn.Module:
    """A fresh ``arch`` encoder, its initialisation seeded by the master seed and the architecture: for
    the run's architecture the initialisation of the transfer models (``encoder(cfg, 'transfer')``), so
    every supervised model of that architecture starts where they do."""
    from invfast.models import create

    if arch == cfg.pretrain.arch:
        return encoder(cfg, "transfer")
    torch.manual_seed(stage_seed(cfg.run.seed, f"init/supervised/{arch}"))
    return create(arch, **arch_kwargs(arch, cfg))


def _folder(ctx: Context, key: str) -> str:
    return os.path.dirname(ctx.path("supervised", key, "model.pt"))


def ncm_accuracy(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray) -> float:
    """Nearest-class-mean accuracy (Euclidean, float64) of features ``test_x`` [N, D] given ``train_x``."""
    classes = np.unique(train_y)
    a = np.asarray(train_x, np.float64)
    means = np.stack([a[train_y == c].mean(0) for c in classes])
    b = np.asarray(test_x, np.float64)
    d = (b * b).sum(1, keepdims=True) - 2 * b @ means.T + (means * means).sum(1)
    return float((classes[d.argmin(1)] == test_y).mean())


def _train_one(ctx: Context, spec: ModelSpec) -> dict[str, Any]:
    from invfast.pretrain import LabelledSource, Supervised, Trainer

    cfg = ctx.cfg
    dataset = spec.data(cfg, "train", spec.n)
    images, labels, _ = dataset.generate(range(spec.n))
    data = LabelledSource(images, labels, spec=f"reproduce:supervised:{spec.key}:{cfg.run.seed}:{spec.n}")
    method = Supervised(make_encoder(cfg, spec.arch), num_classes=int(dataset.num_classes))
    opt = optimisation(spec.arch)
    tc = train_config(
        ctx, f"supervised/{spec.key}", spec.epochs, spec.n, lr=opt["lr"], weight_decay=opt["weight_decay"]
    )
    steps_per_epoch = spec.n // cfg.pretrain.batch_size
    tc = dataclasses.replace(
        tc, optimizer=opt["optimizer"], log_every=steps_per_epoch, checkpoint_every=steps_per_epoch
    )
    out = _folder(ctx, spec.key)
    trainer = Trainer(method, data, tc, out=out, meta={"arch": spec.arch, "model": spec.key})
    stop = fit_supervised(ctx, trainer, spec.data, spec.n, spec.level)
    losses = [r["loss"] for r in read_metrics(out) if "loss" in r]
    return {"arch": spec.arch, "n": spec.n, "epochs": spec.epochs, "seed": tc.seed, "losses": losses, **stop}


def own_data_accuracy(ctx: Context, data: Builder, n: int) -> Callable[[torch.nn.Module], float]:
    """``accuracy(model)``: nearest-class-mean accuracy of the model's features on ``speicher.transfer_n_target``
    held-out images of ``data``, class means from its first ``min(n, 4 x transfer_n_target)`` training images (the
    images generated once here)."""
    cfg = ctx.cfg
    n_fit = min(n, 4 * cfg.speicher.transfer_n_target)
    fit_x, fit_y, _ = data(cfg, "train", n).generate(range(n_fit))
    n_test = cfg.speicher.transfer_n_target
    test_x, test_y, _ = data(cfg, "test", n_test).generate(range(n_test))

    def accuracy(model: torch.nn.Module) -> float:
        was_training = model.training
        model = model.to(cfg.run.device).eval()
        try:
            return ncm_accuracy(extract(model, fit_x), fit_y.numpy(), extract(model, test_x), test_y.numpy())
        finally:
            model.train(was_training)

    return accuracy


def fit_supervised(ctx: Context, trainer: Any, data: Builder, n: int, level: float | None) -> dict[str, Any]:
    """Run ``trainer`` (its model file under its output folder): to its end when ``level`` is None or
    ``speicher.criterion_epochs`` is 0 (``stopped``: 'epochs'); else epoch by epoch until the encoder's own-data
    accuracy (:func:`own_data_accuracy`) reaches ``level`` — then the run ends there (``stopped``: 'criterion') — or to
    its last epoch (``stopped``: 'cap'). Returns ``stopped``, ``epochs_trained`` and, with a level, ``level``.
    Resumable: a run killed between epochs resumes from its last checkpoint and stops where an uninterrupted one
    would."""
    steps_per_epoch = trainer.steps_per_epoch
    model_file = os.path.join(trainer.out, "model.pt")
    if level is None or not ctx.cfg.speicher.criterion_epochs:
        trainer.fit(resume=True)
        return {"stopped": "epochs", "epochs_trained": trainer.total_steps // steps_per_epoch}
    if os.path.exists(model_file):  # finished before (at the criterion or the cap): read where it stopped
        trainer.load_checkpoint(os.path.join(trainer.out, "checkpoint.pt"))
    else:
        accuracy = own_data_accuracy(ctx, data, n)
        while True:
            trainer.fit(resume=True, until_step=trainer.step + steps_per_epoch)
            if trainer.step >= trainer.total_steps:
                break
            if accuracy(trainer.method.encoder) >= level:
                trainer.finish()
                break
    stopped = "cap" if trainer.step >= trainer.total_steps else "criterion"
    return {"stopped": stopped, "epochs_trained": trainer.step // steps_per_epoch, "level": level}


def learned_check(
    ctx: Context, trained: torch.nn.Module, init: torch.nn.Module, data: Builder, n: int
) -> dict[str, Any]:
    """Did the model learn its own task? Nearest-class-mean accuracy of its features on ``speicher.transfer_n_target``
    held-out images of ``data`` (class means from its first ``n`` training images), over its initialisation's
    (:data:`LEARNED_RATIO`)."""
    accuracy = own_data_accuracy(ctx, data, n)
    scores = {"trained": accuracy(trained), "init": accuracy(init)}
    ratio = scores["trained"] / max(scores["init"], 1e-12)
    return {
        "ncm_trained": scores["trained"],
        "ncm_init": scores["init"],
        "ratio": ratio,
        "learned": ratio >= LEARNED_RATIO,
    }


def train_models(ctx: Context, specs: Sequence[ModelSpec]) -> dict[str, dict[str, Any]]:
    """Train every model of ``specs`` (each resumable, skipped when its ``model.pt`` exists) and check it
    learned: ``{key: {arch, n, epochs, seed, losses, ncm_trained, ncm_init, ratio, learned}}``."""
    keys = [s.key for s in specs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"model keys must be unique, got {keys}")
    return {
        s.key: {
            **_train_one(ctx, s),
            **learned_check(ctx, load_trained(ctx, s), make_encoder(ctx.cfg, s.arch), s.data, s.n),
        }
        for s in specs
    }


def load_trained(ctx: Context, spec: ModelSpec) -> torch.nn.Module:
    """The encoder of a trained model (its classifier head dropped), in eval mode."""
    from invfast.models import load_checkpoint

    return load_checkpoint(make_encoder(ctx.cfg, spec.arch), os.path.join(_folder(ctx, spec.key), "model.pt")).eval()


# ---------------------------------------------------------------------------------------------- evaluation
def probe(ctx: Context, features: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """The linear classification probe of the run (:func:`invfast.reproduce.stages.probing.probe_scores`)."""
    from invfast.reproduce.stages.probing import probe_scores

    if not np.isfinite(features).all():
        raise FloatingPointError("a model gave non-finite features")
    return probe_scores(features, labels, "classification", 1, ctx.cfg)


def sensitivity(
    model: torch.nn.Module, views: tuple[torch.Tensor, torch.Tensor], seed: int
) -> tuple[float, dict[str, list[float | None]]]:
    """Speicher's L2 sensitivity of ``model`` on two views of the same samples (uint8 [N, 3, H, W] each):
    mean distance between the views' features over the mean distance between random pairs; and its per-pair
    terms for the verdicts' intervals, ``{'num': [N], 'den': [N]}`` (:func:`pair_terms`)."""
    from invfast.metrics import sensitivity_ratio

    a, b = (torch.from_numpy(extract(model, v)) for v in views)
    return sensitivity_ratio(a, b, seed=seed), pair_terms(a, b, seed)


def pair_terms(a: torch.Tensor, b: torch.Tensor, seed: int) -> dict[str, list[float | None]]:
    """Per pair i: ``num`` = ‖a_i − b_i‖ (the two views of sample i) and ``den`` = ‖a_i − a_j‖ with j a seeded
    random other sample (j = i + U{1..N−1} mod N), in float64, 5 significant digits (results.json keeps them).
    The same ``seed`` gives the same partners for every model, so two models' terms are paired."""
    n = a.shape[0]
    gen = torch.Generator().manual_seed(int(seed))
    j = (torch.arange(n) + torch.randint(1, max(n, 2), (n,), generator=gen)) % n
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    num = torch.linalg.vector_norm(a64 - b64, dim=1)
    den = torch.linalg.vector_norm(a64 - a64[j], dim=1)
    return {"num": short_floats(num.numpy()), "den": short_floats(den.numpy())}


class Evaluator:
    """Features of the models of one stage on named evaluation sets, each set and each model's features
    computed once: ``images(name)`` -> (uint8 images, labels), ``features(model_key, set_name)``."""

    def __init__(self, ctx: Context, models: dict[str, Callable[[], torch.nn.Module]], sets: dict[str, Any]):
        self.ctx, self._models, self._sets = ctx, models, sets
        self._loaded: dict[str, torch.nn.Module] = {}
        self._images: dict[str, tuple[torch.Tensor, np.ndarray]] = {}
        self._features: dict[tuple[str, str], np.ndarray] = {}

    def model(self, key: str) -> torch.nn.Module:
        if key not in self._loaded:
            self._loaded[key] = self._models[key]().to(self.ctx.cfg.run.device).eval()
        return self._loaded[key]

    def images(self, name: str) -> tuple[torch.Tensor, np.ndarray]:
        if name not in self._images:
            n = self.ctx.cfg.speicher.transfer_n_target
            x, y, _ = self._sets[name](self.ctx.cfg, "val", n).generate(range(n))
            self._images[name] = (x, y.numpy())
        return self._images[name]

    def features(self, model: str, name: str) -> np.ndarray:
        if (model, name) not in self._features:
            self._features[(model, name)] = extract(self.model(model), self.images(name)[0])
        return self._features[(model, name)]

    def probe(self, model: str, name: str) -> dict[str, Any]:
        return probe(self.ctx, self.features(model, name), self.images(name)[1])
