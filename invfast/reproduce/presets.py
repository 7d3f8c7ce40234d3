"""The named configurations of ``invfast reproduce`` (:data:`PRESETS`, :func:`preset`) and the
``--set KEY=VALUE`` overrides; what each field means is :class:`~invfast.reproduce.config.ReproduceConfig`."""

from __future__ import annotations

import dataclasses
from typing import Any

from invfast.reproduce.config import REMOVED_FIELDS, ReproduceConfig

__all__ = ["PRESETS", "QUICK_MINUTES", "preset", "parse_override"]

#: ``--quick`` wall minutes on 2 idle CPU cores at 2 workers, per selection, as of :data:`QUICK_MEASURED`:
#: measured for speicher (30.5) and all (90.6, from an empty cache); ericsson and chavhan are half their stage
#: minutes in the run for all; default was measured before 0.6's S8 criterion training. The command's help and
#: the docs quote these (a test keeps them equal)
QUICK_MINUTES: dict[str, float] = {"default": 45.8, "ericsson": 30, "speicher": 30.5, "chavhan": 42, "all": 90.6}
QUICK_MEASURED = "2026-12-05"


#: the named configurations; ``quick`` (3 seeds): 45.8 minutes measured on 2 idle CPU cores (docs/reproduce.md)
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        seeds=2,
        threads=1,
        # stages in 2 processes: --paper all in 2.9 min on 2 idle cores (4.8 in one, over the 3-minute budget)
        workers=2,
        objects=4,
        n_pretrain=96,
        n_probe=60,
        n_measure=12,
        width=4,
        pretrain_epochs=1,
        batch_size=32,
        proj_dim=16,
        grid_size=3,
        folds=3,
        n_penalties=9,
        logistic_max_iter=100,
        transfer_objects=3,
        transfer_n_source=64,
        transfer_n_target=30,
        transfer_epochs=1,
        criterion_epochs=2,
        amortised_epochs=1,
        interp_points=3,
        ip_epochs=1,
        ip_n=24,
        nested_sizes=(1, 3, 6),
        s1_sizes=(0.5, 1.0),
        s1_archs=("resnet18-cifar", "vgg11-cifar", "vit"),
        s5_objects=2,
        irrelevant_n=64,
        alphas=(0.0, 0.5, 1.0),
        betas=(0.0, 0.5, 1.0),
        categories=("translate", "rotate", "hue+brightness+contrast"),
        category_objects=3,
        category_n=64,
        sensitivity_n=16,
        snapshot_images=6,
        snapshot_grid=3,
        cost_steps=1,
        fewshot_episodes=10,
        fewshot_splits=3,
        vit_dim=16,
        vit_depth=1,
        vit_heads=2,
        vit_epochs=1,
    ),
    # 3 seeds in 45.8 minutes on 2 idle CPU cores (2026-12-04, the default findings; 91 min of stage time: the
    # pretraining runs 68 of it, docs/reproduce.md, What the quick budget costs now): stages in
    # 2 processes of 1 thread each, a width-8 ResNet for 35 epochs, the amortised ones too (SPEC 5.2: at least a
    # specialist's epochs; they trained 8 before, which left C1, C2 and C4 not testable), learning curves every
    # 3 epochs; why these values: docs/reproduce.md
    "quick": dict(
        threads=1,
        workers=2,
        width=8,
        pretrain_epochs=35,
        curve_every=3,
        amortised_epochs=35,
        # E2's kernel ridge on 1 000 of the 3 000 probe images (SPEC 5.2's least): a few seconds per fit, where all
        # 3 000 would take minutes per seed on 1 thread
        kernel_probe_n=1000,
        # C4's few-shot settings on 1 000 probe images, 100 episodes and 10 splits: the amortised model learns its i
        # per episode (about 0.3 s a support set, 2-3 s a regression split on 1 core), which at the defaults (all
        # 3 000 images, 300 episodes, 30 splits) cost about 20 min per seed; chosen by cost, not by any result
        fewshot_n=1000,
        fewshot_episodes=100,
        fewshot_splits=10,
        # C1 and C7 read i at >= 7 points (about 20 s a seed more than 3)
        interp_points=7,
        ip_epochs=4,
        ip_n=400,
        # S3's 2 000 pairs cost about a minute per seed; S7's would cost over 14 min per seed (2 loaded cores,
        # 2026-12-04), so S7 stays below its 2 000-pair precondition here: not testable in quick
        category_sensitivity_n=200,
    ),
    # one H100, about 30 minutes (untested: see docs/reproduce.md): full-width ResNet-18 at 64 px,
    # all five findings including the amortised model
    "gpu": dict(
        device="cuda",
        threads=8,
        size=64,
        objects=18,
        n_pretrain=12000,
        n_probe=3000,
        n_measure=256,
        width=64,
        pretrain_epochs=30,
        batch_size=256,
        lr=0.06,
        proj_dim=128,
        grid_size=16,
        n_penalties=45,
        logistic_max_iter=300,
        transfer_objects=20,
        transfer_n_source=6000,
        transfer_n_target=2000,
        transfer_epochs=15,
        amortised_epochs=30,
        interp_points=9,
        ip_epochs=20,
        ip_n=1500,
    ),
    "full": dict(
        objects=18,
        n_pretrain=10000,
        n_probe=3000,
        n_measure=256,
        width=32,
        pretrain_epochs=30,
        batch_size=256,
        lr=0.06,
        grid_size=16,
        n_penalties=45,
        logistic_max_iter=500,
        transfer_objects=30,
        transfer_n_source=5000,
        transfer_n_target=2000,
        transfer_epochs=15,
        amortised_epochs=30,
        interp_points=9,
        ip_epochs=20,
        ip_n=1500,
    ),
}


def preset(name: str, **overrides: Any) -> ReproduceConfig:
    """The configuration called ``name`` ('tiny', 'quick', 'full') with ``overrides`` applied."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    values = {**PRESETS[name], **overrides, "preset": name}
    fields = {f.name for f in dataclasses.fields(ReproduceConfig)}
    removed = sorted(set(values) & set(REMOVED_FIELDS))
    if removed:
        raise ValueError(REMOVED_FIELDS[removed[0]].message(removed[0]))
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ValueError(f"unknown config field(s) {unknown}; fields are {', '.join(sorted(fields))}")
    return ReproduceConfig(**values)


def parse_override(
    cfg_fields: dict[str, dataclasses.Field], text: str, config: type[ReproduceConfig] = ReproduceConfig
) -> tuple[str, Any]:
    """``--set KEY=VALUE`` read as (field, value) of ``config``, typed as the field's default; ValueError (one
    line) for a malformed, unknown or removed field or a value that is not of the default's type."""
    if "=" not in text:
        raise ValueError(f"--set takes KEY=VALUE, got {text!r}")
    key, raw = (s.strip() for s in text.split("=", 1))
    if key in REMOVED_FIELDS:
        raise ValueError(f"--set: {REMOVED_FIELDS[key].message(key)}")
    if key not in cfg_fields or key in ("preset", "findings"):
        hint = " (select findings with --findings or --paper)" if key == "findings" else ""
        raise ValueError(
            f"--set: unknown config field {key!r}{hint}; fields are "
            f"{', '.join(sorted(k for k in cfg_fields if k not in ('preset', 'findings')))}"
        )
    default = getattr(config(), key)
    try:
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return key, raw.lower() in ("true", "1", "yes")
        if isinstance(default, int):
            return key, int(raw)
        if isinstance(default, float):
            return key, float(raw)
        if isinstance(default, tuple):
            items = [s.strip() for s in raw.replace("+", ",").split(",") if s.strip()]
            if key == "categories":  # a category joins types with '+': categories are split on ',' only
                items = [s.strip() for s in raw.split(",") if s.strip()]
            kind = type(default[0]) if default else str
            return key, tuple(kind(v) for v in items)
        return key, raw
    except ValueError:
        raise ValueError(f"--set {key}: cannot read {raw!r} as {type(default).__name__}") from None
