"""S1 (Speicher et al. 2023, §4.1, Fig. 2-3): is invariance more important than dataset size,
architecture and the class relationship? Per value of each factor a pair of supervised models — one
trained under the target's transformations ("same"), one under the disjoint set ("different") — is
probed on the target task (the transfer family's target objects under the target transformations).

The pair at the default values (all ``speicher.transfer_n_source`` images, ``cfg.pretrain.arch``, source objects
disjoint from the target's) is the transfer experiment's ``transfer-train-same`` / ``-different``; the other values
train in ``s1-train-<factor>``; ``s1-probe`` probes every pair."""

from __future__ import annotations

import functools
from typing import Any

from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import Context, load_stage_model
from invfast.reproduce.stages.supervised import (
    Evaluator,
    ModelSpec,
    criterion_level,
    load_trained,
    supervised_epochs,
    train_models,
)
from invfast.reproduce.stages.transfer import transfer_dataset

__all__ = ["FACTORS", "CLASS_RELATIONS", "factor_values", "factor_specs", "pair_specs", "s1_train", "s1_probe"]

FACTORS = ("size", "arch", "classes")
#: source object set relative to the target's -> the transfer family's object set
CLASS_RELATIONS = {"subset": "target-half", "disjoint": "source", "same": "target", "superset": "source+target"}
PAIR = ("same", "different")


def factor_values(cfg: ReproduceConfig, factor: str) -> list[str]:
    """The values of ``factor`` as report labels: fractions of the source images, architectures, relations."""
    if factor == "size":
        return [f"{f:g}" for f in cfg.speicher.s1_sizes]
    if factor == "arch":
        return list(cfg.speicher.s1_archs)
    if factor == "classes":
        return list(CLASS_RELATIONS)
    raise ValueError(f"factor must be one of {FACTORS}, got {factor!r}")


def is_default(cfg: ReproduceConfig, factor: str, value: str) -> bool:
    """Whether (factor, value) is the transfer experiment's own setting (its pair is reused)."""
    return (factor, value) in (("size", "1"), ("arch", cfg.pretrain.arch), ("classes", "disjoint"))


def pair_specs(cfg: ReproduceConfig, factor: str, value: str) -> list[ModelSpec]:
    """The same / different models of one non-default factor value. A smaller source set trains for
    proportionally more epochs (the same number of steps): Speicher et al. train every model to near 100%
    training accuracy, and at a fixed epoch budget fewer images would also mean less training."""
    n, arch, objects, epochs = cfg.speicher.transfer_n_source, cfg.pretrain.arch, "source", supervised_epochs(cfg)
    if factor == "size":
        n = max(cfg.pretrain.batch_size, round(float(value) * cfg.speicher.transfer_n_source))
        epochs = max(1, round(supervised_epochs(cfg) * cfg.speicher.transfer_n_source / n))
    elif factor == "arch":
        arch = value
    else:
        objects = CLASS_RELATIONS[value]
    return [
        ModelSpec(
            f"s1-{factor}-{value}-{kind}",
            arch,
            functools.partial(transfer_dataset, objects=objects, transforms="target" if kind == "same" else "other"),
            n,
            epochs,
            criterion_level(cfg),
        )
        for kind in PAIR
    ]


def factor_specs(cfg: ReproduceConfig, factor: str) -> list[ModelSpec]:
    """The models S1 trains for ``factor``: the pair of every value but the default (the transfer models)."""
    return [s for v in factor_values(cfg, factor) if not is_default(cfg, factor, v) for s in pair_specs(cfg, factor, v)]


def s1_train(ctx: Context, factor: str) -> dict[str, Any]:
    """Train the pairs of every non-default value of ``factor``."""
    return {"factor": factor, "models": train_models(ctx, factor_specs(ctx.cfg, factor))}


def s1_probe(ctx: Context) -> dict[str, Any]:
    """Target accuracy (linear probe, mean ± std over folds) of every pair of every factor."""
    cfg = ctx.cfg
    loaders: dict[str, Any] = {f"transfer-{k}": functools.partial(load_stage_model, ctx, f"transfer-{k}") for k in PAIR}
    for factor in FACTORS:
        for spec in factor_specs(cfg, factor):
            loaders[spec.key] = functools.partial(load_trained, ctx, spec)
    ev = Evaluator(ctx, loaders, {"target": functools.partial(transfer_dataset, objects="target")})
    out: dict[str, Any] = {}
    for factor in FACTORS:
        rows = {}
        for value in factor_values(cfg, factor):
            keys = (
                [f"transfer-{k}" for k in PAIR]
                if is_default(cfg, factor, value)
                else [s.key for s in pair_specs(cfg, factor, value)]
            )
            rows[value] = {kind: {"model": key, **ev.probe(key, "target")} for kind, key in zip(PAIR, keys)}
        out[factor] = rows
    return {"factors": out, "n_target": cfg.speicher.transfer_n_target}
