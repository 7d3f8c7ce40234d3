"""The stages of ``invfast reproduce``, as data: :data:`STAGES` lists every stage as a
:class:`~invfast.reproduce.stage.Stage` record (name, the stages it needs, what it writes under
the cache, the function that makes it, and when it runs). The pipeline derives their order, caching,
progress and resume from this list and runs it once per seed; adding a stage is adding a record.

Each stage function takes a :class:`Context`, keeps its large outputs (images, checkpoints,
features, measurement results) under ``ctx.cache`` and returns a small JSON-able dict (its result,
cached as ``<cache>/stages/<name>.json``).

Everything built here comes from the invfast packages: ``invfast.synthetic`` (data and the
same-vs-different family), ``invfast.transforms`` (policies, colour ops), ``invfast.models``,
``invfast.pretrain`` (MoCo-v2, AI-MoCo, Supervised, Trainer), ``invfast.measure_invariance`` and
``invfast.probes``.
"""

from __future__ import annotations

import functools

from invfast.reproduce import disk
from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stage import Stage
from invfast.reproduce.stages.amortised import (
    amortised_cost,
    amortised_downstream,
    amortised_interpolation,
    amortised_learned_i,
    interpolation_points,
)
from invfast.reproduce.stages.categories import categories_train, category_specs, s6_probe, s7_sensitivity
from invfast.reproduce.stages.class_transfer import class_transfer_specs, s5_probe, s5_train
from invfast.reproduce.stages.context import (
    EXTRA_DEFAULTS,
    FUSIONS,
    LABELS,
    POLICIES,
    SIMCLR,
    VIT,
    Context,
    extract,
    load_stage_model,
    normalise,
    stage_seed,
)
from invfast.reproduce.stages.data import TASKS, colour_targets, main_objects, make_data, rotation_objects, task_set
from invfast.reproduce.stages.equivariance import s2_probe
from invfast.reproduce.stages.factors import FACTORS, factor_specs, s1_probe, s1_train
from invfast.reproduce.stages.irrelevant import s3_evaluate, s3_specs, s3_train, s4_kind_specs, s4_probe, s4_train
from invfast.reproduce.stages.measurement import measure
from invfast.reproduce.stages.nested import nested_specs, s8_probe, s8_train
from invfast.reproduce.stages.pretraining import pretrain_amortised, pretrain_policy
from invfast.reproduce.stages.probing import (
    feature_file,
    features,
    kernel_probes,
    probe_scores,
    probes,
    three_default_probes,
)
from invfast.reproduce.stages.specialisation import invariance_curves, invariance_transfer
from invfast.reproduce.stages.transfer import TRANSFER_SOURCES, transfer_data, transfer_probe, transfer_train

__all__ = [
    "STAGES",
    "Context",
    "LABELS",
    "FUSIONS",
    "POLICIES",
    "TASKS",
    "TRANSFER_SOURCES",
    "stage_seed",
    "extract",
    "normalise",
    "load_stage_model",
    "main_objects",
    "rotation_objects",
    "colour_targets",
    "task_set",
    "feature_file",
    "probe_scores",
    "interpolation_points",
]


_PRETRAINED = tuple(f"pretrain-{p}" for p in POLICIES)
_VIT_PRETRAINED = tuple(f"pretrain-{VIT}{p}" for p in POLICIES)


# what the stages write (invfast.reproduce.disk): module-level, so a record pickles into a worker process
def _data_mb(cfg: ReproduceConfig) -> float:
    return disk.images_mb(cfg.data.n_pretrain + 2 * cfg.data.n_probe + cfg.data.n_measure, cfg.data.size)


def _features_mb(cfg: ReproduceConfig) -> float:  # Random and the policies, on the probe and rotation images
    return disk.features_mb(cfg, 1 + len(POLICIES), 2)


def _three_default_mb(cfg: ReproduceConfig) -> float:
    return disk.features_mb(cfg, len(EXTRA_DEFAULTS), 2)


def _measure_mb(cfg: ReproduceConfig) -> float:
    return disk.measured_mb(1 + len(POLICIES))


def _interpolation_mb(cfg: ReproduceConfig) -> float:  # the points of i and the initialisation at both ends
    return disk.measured_mb(len(interpolation_points(cfg.chavhan.interp_points)) + 2)


def _transfer_data_mb(cfg: ReproduceConfig) -> float:
    return disk.images_mb(
        len(TRANSFER_SOURCES) * cfg.speicher.transfer_n_source + cfg.speicher.transfer_n_target, cfg.data.size
    )


#: every stage of one seed; the pipeline runs them in an order that respects ``needs``
STAGES: tuple[Stage, ...] = (
    Stage("data", make_data, writes=("data/",), disk_mb=_data_mb),
    *(
        Stage(
            f"pretrain-{p}",
            functools.partial(pretrain_policy, policy=p),
            needs=("data",),
            writes=(f"pretrain/{p}/",),
            disk_mb=functools.partial(disk.encoder_mb, key=p, copies=disk.CONTRASTIVE_COPIES),
        )
        for p in POLICIES
    ),
    Stage("features", features, needs=("data", *_PRETRAINED), writes=("features/",), disk_mb=_features_mb),
    Stage("measure", measure, needs=("data", "features", *_PRETRAINED), writes=("measure/",), disk_mb=_measure_mb),
    Stage("probes", probes, needs=("data", "features")),
    Stage("probes-kernel", kernel_probes, needs=("data", "features")),
    *(
        Stage(
            f"pretrain-{k}",
            functools.partial(pretrain_policy, policy="default", key=k),
            needs=("data",),
            writes=(f"pretrain/{k}/",),
            disk_mb=functools.partial(disk.encoder_mb, key=k, copies=disk.CONTRASTIVE_COPIES),
        )
        for k in EXTRA_DEFAULTS
    ),
    Stage(
        "probes-3xdefault",
        three_default_probes,
        needs=("data", "features", *(f"pretrain-{k}" for k in EXTRA_DEFAULTS)),
        writes=("features/",),
        disk_mb=_three_default_mb,
    ),
    Stage("transfer-data", transfer_data, writes=("transfer/",), disk_mb=_transfer_data_mb),
    *(
        Stage(
            f"transfer-train-{s}",
            functools.partial(transfer_train, source=s),
            needs=("transfer-data",),
            writes=(f"transfer/{s}/",),
            disk_mb=functools.partial(disk.encoder_mb, key="transfer", copies=disk.SUPERVISED_COPIES),
        )
        for s in TRANSFER_SOURCES
    ),
    Stage("transfer-probe", transfer_probe, needs=tuple(f"transfer-train-{s}" for s in TRANSFER_SOURCES)),
    Stage(
        "pretrain-amortised",
        pretrain_amortised,
        needs=("data",),
        writes=("pretrain/amortised/",),
        disk_mb=functools.partial(disk.encoder_mb, key="amortised", copies=disk.AMORTISED_COPIES),
    ),
    Stage(
        "pretrain-amortised-k5",
        functools.partial(pretrain_amortised, key="amortised-k5"),
        needs=("data",),
        writes=("pretrain/amortised-k5/",),
        disk_mb=functools.partial(disk.encoder_mb, key="amortised-k5", copies=disk.AMORTISED_COPIES),
    ),
    Stage(
        "amortised-interpolation",
        amortised_interpolation,
        needs=("data", "pretrain-amortised"),
        writes=("measure/",),
        disk_mb=_interpolation_mb,
    ),
    Stage(
        "amortised-learned-i",
        amortised_learned_i,
        needs=("data", "pretrain-amortised"),
        writes=("amortised/",),
        disk_mb=disk.small_mb,
    ),
    Stage("amortised-cost", amortised_cost, needs=("data",)),
    Stage("amortised-downstream", amortised_downstream, needs=("features", "amortised-learned-i")),
    # C5: AI-SimCLR at K = 2 and K = 5, i learned once per task, compared on the many-shot probes
    *(
        Stage(
            f"pretrain-{k}",
            functools.partial(pretrain_amortised, key=k),
            needs=("data",),
            writes=(f"pretrain/{k}/",),
            disk_mb=functools.partial(disk.encoder_mb, key=k, copies=disk.AMORTISED_COPIES),
        )
        for k in SIMCLR
    ),
    *(
        Stage(
            f"{k}-learned-i",
            functools.partial(amortised_learned_i, key=k, restarts=1),
            needs=("data", f"pretrain-{k}"),
            writes=("amortised/",),
            disk_mb=disk.small_mb,
        )
        for k in SIMCLR
    ),
    Stage(
        "amortised-simclr-downstream",
        functools.partial(amortised_downstream, keys=SIMCLR, fixed=False, few_shot=False),
        needs=("data", *(f"{k}-learned-i" for k in SIMCLR)),
    ),
    # C7: C1-C4 with transformers (plain ViTs for the policies, a Prompt-ViT for the amortised model)
    *(
        Stage(
            f"pretrain-{VIT}{p}",
            functools.partial(pretrain_policy, policy=p, key=f"{VIT}{p}"),
            needs=("data",),
            writes=(f"pretrain/{VIT}{p}/",),
            disk_mb=functools.partial(disk.encoder_mb, key=f"{VIT}{p}", copies=disk.CONTRASTIVE_COPIES),
        )
        for p in POLICIES
    ),
    Stage(
        f"pretrain-{VIT}amortised",
        functools.partial(pretrain_amortised, key=f"{VIT}amortised"),
        needs=("data", f"pretrain-{VIT}default"),
        writes=(f"pretrain/{VIT}amortised/",),
        disk_mb=functools.partial(disk.encoder_mb, key=f"{VIT}amortised", copies=disk.AMORTISED_COPIES),
    ),
    Stage(
        f"{VIT}features",
        functools.partial(features, family=VIT),
        needs=("data", *_VIT_PRETRAINED),
        writes=(f"features/{VIT}", f"features/rotation-{VIT}"),
        disk_mb=functools.partial(disk.features_mb, models=1 + len(POLICIES), tasks=2, key=f"{VIT}default"),
    ),
    Stage(
        f"{VIT}measure",
        functools.partial(measure, family=VIT),
        needs=("data", f"{VIT}features", *_VIT_PRETRAINED),
        writes=(f"measure/{VIT}",),
        disk_mb=_measure_mb,
    ),
    Stage(
        f"{VIT}interpolation",
        functools.partial(amortised_interpolation, key=f"{VIT}amortised"),
        needs=("data", f"pretrain-{VIT}amortised"),
        writes=(f"measure/{VIT}amortised_",),
        disk_mb=_interpolation_mb,
    ),
    Stage(
        f"{VIT}learned-i",
        functools.partial(amortised_learned_i, key=f"{VIT}amortised"),
        needs=("data", f"pretrain-{VIT}amortised"),
        writes=(f"amortised/{VIT}",),
        disk_mb=disk.small_mb,
    ),
    Stage(
        f"{VIT}downstream",
        functools.partial(amortised_downstream, keys=(f"{VIT}amortised",), family=VIT),
        needs=(f"{VIT}features", f"{VIT}learned-i"),
    ),
    # Ericsson et al.'s E4 / E5 from the pretraining runs' snapshots
    Stage(
        "invariance-curves",
        invariance_curves,
        needs=("data", *_PRETRAINED),
        writes=("snapshots/",),
        disk_mb=disk.small_mb,
    ),
    Stage("invariance-transfer", invariance_transfer, needs=("data", *_PRETRAINED, "pretrain-amortised-k5")),
    # Speicher et al.'s supervised experiments (S1-S8); trained models go under supervised/<key>/
    *(
        Stage(
            f"s1-train-{f}",
            functools.partial(s1_train, factor=f),
            writes=("supervised/",),
            disk_mb=functools.partial(disk.supervised_mb, specs_of=factor_specs, args=(f,)),
        )
        for f in FACTORS
    ),
    Stage(
        "s1-probe",
        s1_probe,
        needs=(*(f"s1-train-{f}" for f in FACTORS), "transfer-train-same", "transfer-train-different"),
    ),
    Stage("s2-probe", s2_probe, needs=("transfer-train-same", "transfer-train-different")),
    Stage(
        "s3-train", s3_train, writes=("supervised/",), disk_mb=functools.partial(disk.supervised_mb, specs_of=s3_specs)
    ),
    Stage("s3-evaluate", s3_evaluate, needs=("s3-train",)),
    *(
        Stage(
            f"s4-train-{k}",
            functools.partial(s4_train, kind=k),
            writes=("supervised/",),
            disk_mb=functools.partial(disk.supervised_mb, specs_of=s4_kind_specs, args=(k,)),
        )
        for k in ("alpha", "beta")
    ),
    Stage("s4-probe", s4_probe, needs=("s4-train-alpha", "s4-train-beta")),
    Stage(
        "s5-train",
        s5_train,
        writes=("supervised/",),
        disk_mb=functools.partial(disk.supervised_mb, specs_of=class_transfer_specs),
    ),
    Stage("s5-probe", s5_probe, needs=("s5-train",)),
    *(
        Stage(
            f"categories-train-{k}",
            functools.partial(categories_train, kind=k),
            writes=("supervised/",),
            disk_mb=functools.partial(disk.supervised_mb, specs_of=category_specs, args=(k,)),
        )
        for k in ("image", "random")
    ),
    Stage("s6-probe", s6_probe, needs=("categories-train-image",)),
    Stage("s7-sensitivity", s7_sensitivity, needs=("categories-train-image", "categories-train-random")),
    Stage(
        "s8-train",
        s8_train,
        writes=("supervised/",),
        disk_mb=functools.partial(disk.supervised_mb, specs_of=nested_specs),
    ),
    Stage("s8-probe", s8_probe, needs=("s8-train", "transfer-train-same", "transfer-train-superset")),
)
