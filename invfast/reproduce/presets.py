"""The named configurations of ``invfast reproduce`` (:data:`PRESETS`, :func:`preset`) and the
``--set SECTION.FIELD=VALUE`` overrides; what each field means is :class:`~invfast.reproduce.config.ReproduceConfig`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from invfast.reproduce.config import ReproduceConfig

__all__ = ["PRESETS", "QUICK_MINUTES", "preset", "parse_override"]

#: ``--quick`` wall minutes on 2 idle CPU cores at 2 workers, per selection, as of :data:`QUICK_MEASURED`:
#: measured for speicher (30.5) and all (90.6, from an empty cache); ericsson and chavhan are half their stage
#: minutes in the run for all; default was measured before 0.6's S8 criterion training. The command's help and
#: the docs quote these (a test keeps them equal)
QUICK_MINUTES: dict[str, float] = {"default": 45.8, "ericsson": 30, "speicher": 30.5, "chavhan": 42, "all": 90.6}
QUICK_MEASURED = "2026-12-05"


#: the named configurations; ``quick`` (3 seeds): 45.8 minutes measured on 2 idle CPU cores (docs/reproduce.md)
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {
        "run.seeds": 2,
        "run.threads": 1,
        # stages in 2 processes: --paper all in 2.9 min on 2 idle cores (4.8 in one, over the 3-minute budget)
        "run.workers": 2,
        "data.objects": 4,
        "data.n_pretrain": 96,
        "data.n_probe": 60,
        "data.n_measure": 12,
        "pretrain.width": 4,
        "pretrain.epochs": 1,
        "pretrain.batch_size": 32,
        "pretrain.proj_dim": 16,
        "measurement.grid_size": 3,
        "probe.folds": 3,
        "probe.n_penalties": 9,
        "probe.logistic_max_iter": 100,
        "speicher.transfer_objects": 3,
        "speicher.transfer_n_source": 64,
        "speicher.transfer_n_target": 30,
        "speicher.transfer_epochs": 1,
        "speicher.criterion_epochs": 2,
        "chavhan.amortised_epochs": 1,
        "chavhan.interp_points": 3,
        "chavhan.ip_epochs": 1,
        "chavhan.ip_n": 24,
        "speicher.nested_sizes": (1, 3, 6),
        "speicher.s1_sizes": (0.5, 1.0),
        "speicher.s1_archs": ("resnet18-cifar", "vgg11-cifar", "vit"),
        "speicher.s5_objects": 2,
        "speicher.irrelevant_n": 64,
        "speicher.alphas": (0.0, 0.5, 1.0),
        "speicher.betas": (0.0, 0.5, 1.0),
        "speicher.categories": ("translate", "rotate", "hue+brightness+contrast"),
        "speicher.category_objects": 3,
        "speicher.category_n": 64,
        "speicher.sensitivity_n": 16,
        "measurement.snapshot_images": 6,
        "measurement.snapshot_grid": 3,
        "chavhan.cost_steps": 1,
        "chavhan.fewshot_episodes": 10,
        "chavhan.fewshot_splits": 3,
        "vit.dim": 16,
        "vit.depth": 1,
        "vit.heads": 2,
        "vit.epochs": 1,
    },
    # 3 seeds in 45.8 minutes on 2 idle CPU cores (2026-12-04, the default findings; 91 min of stage time: the
    # pretraining runs 68 of it, docs/reproduce.md, What the quick budget costs now): stages in
    # 2 processes of 1 thread each, a width-8 ResNet for 35 epochs, the amortised ones too (SPEC 5.2: at least a
    # specialist's epochs; they trained 8 before, which left C1, C2 and C4 not testable), learning curves every
    # 3 epochs; why these values: docs/reproduce.md
    "quick": {
        "run.threads": 1,
        "run.workers": 2,
        "pretrain.width": 8,
        "pretrain.epochs": 35,
        "pretrain.curve_every": 3,
        "chavhan.amortised_epochs": 35,
        # E2's kernel ridge on 1 000 of the 3 000 probe images (SPEC 5.2's least): a few seconds per fit, where all
        # 3 000 would take minutes per seed on 1 thread
        "probe.kernel_n": 1000,
        # C4's few-shot settings on 1 000 probe images, 100 episodes and 10 splits: the amortised model learns its i
        # per episode (about 0.3 s a support set, 2-3 s a regression split on 1 core), which at the defaults (all
        # 3 000 images, 300 episodes, 30 splits) cost about 20 min per seed; chosen by cost, not by any result
        "chavhan.fewshot_n": 1000,
        "chavhan.fewshot_episodes": 100,
        "chavhan.fewshot_splits": 10,
        # C1 and C7 read i at >= 7 points (about 20 s a seed more than 3)
        "chavhan.interp_points": 7,
        "chavhan.ip_epochs": 4,
        "chavhan.ip_n": 400,
        # S3's 2 000 pairs cost about a minute per seed; S7's would cost over 14 min per seed (2 loaded cores,
        # 2026-12-04), so S7 stays below its 2 000-pair precondition here: not testable in quick
        "speicher.category_sensitivity_n": 200,
    },
    # one H100, about 30 minutes (untested: see docs/reproduce.md): full-width ResNet-18 at 64 px,
    # all five findings including the amortised model
    "gpu": {
        "run.device": "cuda",
        "run.threads": 8,
        "data.size": 64,
        "data.objects": 18,
        "data.n_pretrain": 12000,
        "data.n_probe": 3000,
        "data.n_measure": 256,
        "pretrain.width": 64,
        "pretrain.epochs": 30,
        "pretrain.batch_size": 256,
        "pretrain.lr": 0.06,
        "pretrain.proj_dim": 128,
        "measurement.grid_size": 16,
        "probe.n_penalties": 45,
        "probe.logistic_max_iter": 300,
        "speicher.transfer_objects": 20,
        "speicher.transfer_n_source": 6000,
        "speicher.transfer_n_target": 2000,
        "speicher.transfer_epochs": 15,
        "chavhan.amortised_epochs": 30,
        "chavhan.interp_points": 9,
        "chavhan.ip_epochs": 20,
        "chavhan.ip_n": 1500,
    },
    "full": {
        "data.objects": 18,
        "data.n_pretrain": 10000,
        "data.n_probe": 3000,
        "data.n_measure": 256,
        "pretrain.width": 32,
        "pretrain.epochs": 30,
        "pretrain.batch_size": 256,
        "pretrain.lr": 0.06,
        "measurement.grid_size": 16,
        "probe.n_penalties": 45,
        "probe.logistic_max_iter": 500,
        "speicher.transfer_objects": 30,
        "speicher.transfer_n_source": 5000,
        "speicher.transfer_n_target": 2000,
        "speicher.transfer_epochs": 15,
        "chavhan.amortised_epochs": 30,
        "chavhan.interp_points": 9,
        "chavhan.ip_epochs": 20,
        "chavhan.ip_n": 1500,
    },
}


def preset(name: str, overrides: Mapping[str, Any] | None = None) -> ReproduceConfig:
    """The configuration called ``name`` ('tiny', 'quick', 'gpu', 'full') with ``overrides`` (values by
    ``section.field``: ``{"pretrain.epochs": 20}``) applied; ValueError (one line) naming an unknown preset or
    field, or a flat name of before the sections with its new name."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    if overrides is not None and not isinstance(overrides, Mapping):
        raise TypeError(f"preset overrides must be a mapping of section.field to value, got {overrides!r}")
    return ReproduceConfig().with_values({**PRESETS[name], **(overrides or {}), "run.preset": name})


def parse_override(text: str, config: type[ReproduceConfig] = ReproduceConfig) -> tuple[str, Any]:
    """``--set SECTION.FIELD=VALUE`` read as (name, value) of ``config``, typed as the field's default; ValueError
    (one line) for a malformed, unknown, removed or flat field name or a value that is not of the default's
    type."""
    if "=" not in text:
        raise ValueError(f"--set takes SECTION.FIELD=VALUE, got {text!r}")
    key, raw = (s.strip() for s in text.split("=", 1))
    own = {"findings": "select findings with --findings or --paper", "preset": "choose it with --preset"}
    if key in own or key in (f"run.{k}" for k in own):  # set by their own options, flat or dotted
        raise ValueError(f"--set: config field {key!r} is not set with --set; {own[key.removeprefix('run.')]}")
    try:
        config.declaration(key)
    except ValueError as e:
        raise ValueError(f"--set: {e}") from None
    default = config.declaration(key).default
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
            if key == "speicher.categories":  # a category joins types with '+': categories are split on ',' only
                items = [s.strip() for s in raw.split(",") if s.strip()]
            kind = type(default[0]) if default else str
            return key, tuple(kind(v) for v in items)
        return key, raw
    except ValueError:
        raise ValueError(f"--set {key}: cannot read {raw!r} as {type(default).__name__}") from None
