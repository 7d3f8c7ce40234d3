"""Speicher et al.'s same-vs-different transformation experiment: the ``transfer-data`` stage (disjoint
source and target objects and transformation sets), one ``transfer-train-<source>`` stage per source
(supervised pretraining on the source task with :class:`invfast.pretrain.Supervised` through the
:class:`~invfast.pretrain.Trainer`), and ``transfer-probe`` (a linear probe on the target).

:func:`transfer_dataset` builds any dataset of that family by name (source / target objects, target /
other transformations, or the first k of both in order), for the experiments that reuse its sets:
S1 (factors), S2 (invariance vs equivariance), S5 (invariance across classes), S8 (nested sets)."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import torch

from invfast.io import atomic_save_npy
from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import Context, encoder, extract, load_stage_model
from invfast.reproduce.stages.pretraining import read_metrics, train_config
from invfast.reproduce.stages.probing import probe_scores

__all__ = [
    "TRANSFER_SOURCES",
    "transfer_data",
    "transfer_train",
    "transfer_probe",
    "split_of",
    "object_set",
    "transform_set",
    "transfer_dataset",
]

TRANSFER_SOURCES = ("same", "different", "superset")


@functools.lru_cache(maxsize=16)
def _split(seed: int, n_objects: int, n_transforms: int, size: int) -> Any:
    from invfast.synthetic.families import same_vs_different

    return same_vs_different(n_objects=n_objects, n_transforms=n_transforms, seed=seed, size=size)


def split_of(cfg: ReproduceConfig) -> Any:
    """The run's :class:`~invfast.synthetic.families.SameVsDifferent` sets (disjoint objects and types)."""
    return _split(cfg.run.seed, cfg.speicher.transfer_objects, cfg.speicher.transfer_transforms, cfg.data.size)


def object_set(cfg: ReproduceConfig, name: str) -> list[int]:
    """Built-in object indices: 'source', 'target', 'target-half' (its first half, at least two objects: a
    classifier needs two classes), 'source+target'."""
    sv = split_of(cfg)
    sets = {
        "source": sv.source_objects,
        "target": sv.target_objects,
        "target-half": sv.target_objects[: max(2, len(sv.target_objects) // 2)],
        "source+target": sv.source_objects + sv.target_objects,
    }
    if name not in sets:
        raise ValueError(f"object set must be one of {sorted(sets)}, got {name!r}")
    return list(sets[name])


def transform_set(cfg: ReproduceConfig, name: str) -> tuple[str, ...]:
    """Transformation types: 'target', 'other' (the disjoint set), 'target+other', or 'first:k', the first
    k of the target's types followed by the other set's (so first:|T| is the target's, first:2|T| both)."""
    sv = split_of(cfg)
    chain = tuple(sv.target_transforms) + tuple(sv.other_transforms)
    if name.startswith("first:"):
        k = int(name[len("first:") :])
        if not 0 <= k <= len(chain):
            raise ValueError(f"transform set {name!r}: k must be in 0..{len(chain)}")
        return chain[:k]
    sets = {"target": tuple(sv.target_transforms), "other": tuple(sv.other_transforms), "target+other": chain}
    if name not in sets:
        raise ValueError(f"transform set must be one of {sorted(sets)} or 'first:k', got {name!r}")
    return sets[name]


def transfer_dataset(
    cfg: ReproduceConfig, split: str, n: int, objects: str = "target", transforms: str = "target"
) -> Any:
    """A Transforms-2D set of the transfer family: ``objects`` under ``transforms`` (names as
    :func:`object_set` / :func:`transform_set`), the run's seed and size."""
    from invfast.synthetic import Transforms2D

    sv = split_of(cfg)
    bank = sv.bank.subset(object_set(cfg, objects))
    return Transforms2D(bank, transform_set(cfg, transforms), size=cfg.data.size, n=n, seed=cfg.run.seed, split=split)


def transfer_data(ctx: Context) -> dict[str, Any]:
    """Speicher's same/different-transformation family: disjoint source/target objects; sources under
    the target's transformations (same), a disjoint set (different) and their union (superset)."""
    from invfast.synthetic import Transforms2D
    from invfast.synthetic.families import same_vs_different

    cfg = ctx.cfg
    sv = same_vs_different(
        n_objects=cfg.speicher.transfer_objects,
        n_transforms=cfg.speicher.transfer_transforms,
        seed=cfg.run.seed,
        size=cfg.data.size,
    )
    superset = tuple(sv.target_transforms) + tuple(sv.other_transforms)
    sources = {
        "same": sv.source_same("train", n=cfg.speicher.transfer_n_source),
        "different": sv.source_different("train", n=cfg.speicher.transfer_n_source),
        "superset": Transforms2D(
            sv.bank.subset(sv.source_objects),
            superset,
            size=cfg.data.size,
            n=cfg.speicher.transfer_n_source,
            seed=cfg.run.seed,
            split="train",
        ),
    }
    target = sv.target("val", n=cfg.speicher.transfer_n_target)
    for name, ds in [*sources.items(), ("target", target)]:
        images, labels, _ = ds.generate(range(len(ds)))
        atomic_save_npy(ctx.path("transfer", f"{name}_images.npy"), images.numpy())
        atomic_save_npy(ctx.path("transfer", f"{name}_labels.npy"), labels.numpy())
    return {
        "source_objects": sv.source_objects,
        "target_objects": sv.target_objects,
        "target_transforms": list(sv.target_transforms),
        "other_transforms": list(sv.other_transforms),
        "sources": {k: list(v.transforms) for k, v in sources.items()},
        "target": list(target.transforms),
    }


def transfer_train(ctx: Context, source: str) -> dict[str, Any]:
    """Supervised pretraining on one source (object classification, cross-entropy, SGD at lr 0.05 with
    weight decay 5e-4 and cosine decay, no augmentation beyond the data's own transformations), every
    source from the same initialisation; resumable inside the stage (Trainer checkpoints)."""
    from invfast.pretrain import LabelledSource, Supervised, Trainer

    cfg = ctx.cfg
    images = torch.from_numpy(ctx.array("transfer", f"{source}_images.npy"))
    labels = torch.from_numpy(ctx.array("transfer", f"{source}_labels.npy")).long()
    data = LabelledSource(images, labels, spec=f"reproduce:transfer:{source}:{cfg.run.seed}:{images.shape[0]}")
    from invfast.reproduce.stages.supervised import criterion_level, fit_supervised, learned_check, supervised_epochs

    method = Supervised(encoder(cfg, "transfer"), num_classes=data.num_classes)
    epochs = supervised_epochs(cfg)
    tc = train_config(ctx, f"transfer/{source}", epochs, len(data), lr=0.05, weight_decay=5e-4)
    steps_per_epoch = len(data) // cfg.pretrain.batch_size
    tc = dataclasses.replace(tc, log_every=steps_per_epoch, checkpoint_every=steps_per_epoch)
    out = os.path.dirname(ctx.path("transfer", source, "model.pt"))
    trainer = Trainer(
        method,
        data,
        tc,
        out=out,
        meta={"arch": cfg.pretrain.arch, "width": cfg.pretrain.width, "model": f"transfer-{source}"},
    )
    types = {"same": "target", "different": "other", "superset": "target+other"}[source]
    builder = functools.partial(transfer_dataset, objects="source", transforms=types)
    stop = fit_supervised(ctx, trainer, builder, len(data), criterion_level(cfg))
    losses = [r["loss"] for r in read_metrics(out) if "loss" in r]  # one record per epoch: its mean loss
    return {
        "source": source,
        "epochs": epochs,
        **stop,
        "steps": trainer.total_steps,
        "seed": tc.seed,
        "losses": losses,
        "train_accuracy": method.accuracy(data),
        **learned_check(ctx, method.encoder, encoder(cfg, "transfer"), builder, len(data)),
    }


def transfer_probe(ctx: Context) -> dict[str, Any]:
    """Linear probe (object classification) on the target for each source model and Random."""
    images = torch.from_numpy(ctx.array("transfer", "target_images.npy"))
    labels = ctx.array("transfer", "target_labels.npy")
    out = {}
    for key in ("random", *TRANSFER_SOURCES):
        model = ctx.model("random") if key == "random" else load_stage_model(ctx, f"transfer-{key}")
        out[key] = probe_scores(extract(model, images), labels, "classification", 1, ctx.cfg)
    return {"scores": out, "n_target": int(images.shape[0])}
