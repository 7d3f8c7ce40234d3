"""S3 and S4 (Speicher et al. 2023, §4.2, Tab. 1, App. C.3; "Invariance makes a difference" §3.2, §4.1):
small objects pasted on base images (a CIFAR-like set: the shipped photographs cut into classes, or a
user's ImageFolder with ``base_images=folder:PATH``).

S3 trains one model per (input X, label Y): (C, C) base images alone, (C+O, C) and (C+O, O) base images
with a random object, (O, O) objects on black; probes each on each; and measures each model's
sensitivity to the pasted object and to the base image. S4 trains models on C+O data whose object
correlates with the base class (α sweep) or is present only on a fraction β of the images (β sweep),
and probes them on C+O images for both labels."""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import Context, stage_seed
from invfast.reproduce.stages.supervised import Evaluator, ModelSpec, load_trained, sensitivity, train_models
from invfast.reproduce.validation import base_images_source

__all__ = [
    "TASKS_XY",
    "base_set",
    "irrelevant_dataset",
    "s3_specs",
    "s4_kind_specs",
    "s4_specs",
    "s3_train",
    "s3_evaluate",
    "s4_train",
    "s4_probe",
]

#: S3's (X, Y) datasets: C = base images, O = pasted objects
TASKS_XY = (("C", "C"), ("C+O", "C"), ("C+O", "O"), ("O", "O"))
N_OBJECTS = 10


@functools.lru_cache(maxsize=8)
def _base(source: str, size: int, seed: int, split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    from invfast.synthetic import rng
    from invfast.synthetic.families import builtin_base_set, load_image_folder

    folder = base_images_source(source)
    if folder is None:
        x, y, names = builtin_base_set(math.ceil(n / 10), size=size, seed=seed)
        if x.shape[0] < n:  # fewer photographs than the usual ten
            x, y, names = builtin_base_set(math.ceil(n / len(names)), size=size, seed=seed)
    else:
        x, y, names = load_image_folder(folder, size=size)
        held_out = torch.arange(x.shape[0]) % 5 == 0  # every fifth image is test data
        keep = held_out if split == "test" else ~held_out
        x, y = x[keep], y[keep]
        if x.shape[0] < n:
            raise ValueError(
                f"speicher.base_images {source!r} has {x.shape[0]} {split} images; at least {n} are needed "
                "(lower speicher.irrelevant_n or speicher.transfer_n_target)"
            )
    perm = torch.from_numpy(rng.permutation(seed, f"base/{split}", x.shape[0]))
    return x[perm][:n].contiguous(), y[perm][:n].contiguous()


def base_set(cfg: ReproduceConfig, split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` base images uint8 [n, 3, size, size] and their class labels, shuffled; 'train' and the
    held-out splits never share an image (other random crops of the photographs, other files)."""
    seed = cfg.run.seed if split == "train" else stage_seed(cfg.run.seed, f"base/{split}")
    return _base(cfg.speicher.base_images, cfg.data.size, seed, "train" if split == "train" else "test", n)


def irrelevant_dataset(
    cfg: ReproduceConfig,
    split: str,
    n: int,
    x: str,
    y: str,
    alpha: float | None = None,
    beta: float | None = None,
    position: str = "random",
) -> Any:
    """An :class:`~invfast.synthetic.families.IrrelevantFeatureDataset` of input ``x`` ('C', 'C+O', 'O') and
    label ``y`` ('C': base class, 'O': object), with correlation ``alpha`` or availability ``beta``."""
    from invfast.synthetic.families import IrrelevantFeatureDataset

    n = max(n, 4 * cfg.probe.folds * N_OBJECTS)  # every class in every fold of the probes
    images, labels = base_set(cfg, split, n)
    if x == "O":
        images = torch.zeros_like(images)
    if x == "C":
        beta = 0.0
    seed = cfg.run.seed if split == "train" else stage_seed(cfg.run.seed, f"irrelevant/{split}")
    return IrrelevantFeatureDataset(
        images,
        labels,
        objects=N_OBJECTS,
        alpha=alpha,
        beta=beta,
        task={"C": "base", "O": "object"}[y],
        position=position,
        seed=seed,
        size=cfg.data.size,
    )


def s3_specs(cfg: ReproduceConfig) -> list[ModelSpec]:
    return [
        ModelSpec(
            f"s3-{x}-{y}",
            cfg.pretrain.arch,
            functools.partial(irrelevant_dataset, x=x, y=y),
            cfg.speicher.irrelevant_n,
            cfg.speicher.transfer_epochs,
        )
        for x, y in TASKS_XY
    ]


def s4_specs(cfg: ReproduceConfig) -> list[ModelSpec]:
    """α models (correlation), then β models (availability); β = 1 is α = 0 (a random object on every image)."""
    specs = [
        ModelSpec(
            f"s4-alpha-{a:g}",
            cfg.pretrain.arch,
            functools.partial(irrelevant_dataset, x="C+O", y="C", alpha=a, position="upper-right"),
            cfg.speicher.irrelevant_n,
            cfg.speicher.transfer_epochs,
        )
        for a in cfg.speicher.alphas
    ]
    specs += [
        ModelSpec(
            f"s4-beta-{b:g}",
            cfg.pretrain.arch,
            functools.partial(irrelevant_dataset, x="C+O", y="C", beta=b, position="upper-right"),
            cfg.speicher.irrelevant_n,
            cfg.speicher.transfer_epochs,
        )
        for b in cfg.speicher.betas
        if not (b == 1.0 and 0.0 in cfg.speicher.alphas)
    ]
    return specs


def s4_model_key(cfg: ReproduceConfig, kind: str, value: float) -> str:
    """The model trained at ``value`` of the α or β sweep."""
    if kind == "beta" and value == 1.0 and 0.0 in cfg.speicher.alphas:
        return "s4-alpha-0"
    return f"s4-{kind}-{value:g}"


def s3_train(ctx: Context) -> dict[str, Any]:
    return {"models": train_models(ctx, s3_specs(ctx.cfg))}


def s4_kind_specs(cfg: ReproduceConfig, kind: str) -> list[ModelSpec]:
    """S4's models of one sweep: ``kind`` 'alpha' (correlation) or 'beta' (availability)."""
    return [s for s in s4_specs(cfg) if s.key.startswith(f"s4-{kind}-")]


def s4_train(ctx: Context, kind: str) -> dict[str, Any]:
    return {"models": train_models(ctx, s4_kind_specs(ctx.cfg, kind))}


def _views(cfg: ReproduceConfig, vary: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Two views of ``speicher.sensitivity_n`` held-out C+O images differing only in ``vary`` ('object' or 'base')."""
    ds = irrelevant_dataset(cfg, "test", cfg.speicher.sensitivity_n, "C+O", "C")
    idx = range(min(cfg.speicher.sensitivity_n, len(ds)))
    return ds.generate(idx)[0], ds.generate(idx, view=1, vary=vary)[0]


def s3_evaluate(ctx: Context) -> dict[str, Any]:
    """Accuracy of every model on every (X, Y) test set; each model's sensitivity to the pasted object and
    to the base image (Speicher's L2 ratio on C+O pairs differing only in that)."""
    cfg = ctx.cfg
    specs = s3_specs(cfg)
    ev = Evaluator(
        ctx,
        {s.key: functools.partial(load_trained, ctx, s) for s in specs},
        {f"{x}/{y}": functools.partial(irrelevant_dataset, x=x, y=y) for x, y in TASKS_XY},
    )
    views = {vary: _views(cfg, vary) for vary in ("object", "base")}
    acc: dict[str, Any] = {}
    sens: dict[str, dict[str, float]] = {}
    pairs: dict[str, dict[str, Any]] = {}
    for s, (x, y) in zip(specs, TASKS_XY):
        model = f"{x}/{y}"
        acc[model] = {f"{tx}/{ty}": ev.probe(s.key, f"{tx}/{ty}") for tx, ty in TASKS_XY}
        sens[model], pairs[model] = {}, {}
        for vary, v in views.items():
            sens[model][vary], pairs[model][vary] = sensitivity(
                ev.model(s.key), v, stage_seed(cfg.run.seed, f"s3/{vary}")
            )
    return {"accuracy": acc, "sensitivity": sens, "sensitivity_pairs": pairs, "base_images": cfg.speicher.base_images}


def s4_probe(ctx: Context) -> dict[str, Any]:
    """Object and base-class accuracy on held-out C+O images (a random object, upper right) of every model."""
    cfg = ctx.cfg
    specs = s4_specs(cfg)
    ev = Evaluator(
        ctx,
        {s.key: functools.partial(load_trained, ctx, s) for s in specs},
        {y: functools.partial(irrelevant_dataset, x="C+O", y=y, position="upper-right") for y in ("O", "C")},
    )
    out: dict[str, Any] = {}
    for kind, values in (("alpha", cfg.speicher.alphas), ("beta", cfg.speicher.betas)):
        out[kind] = [
            {
                "value": float(v),
                "model": s4_model_key(cfg, kind, v),
                **{f"accuracy_{y}": ev.probe(s4_model_key(cfg, kind, v), y) for y in ("O", "C")},
            }
            for v in values
        ]
    return out
