"""S6 and S7: one supervised model per transformation category (``cfg.speicher.categories``; types joined by '+'
act together), plus a model trained without transformations ('none').

S6 (Speicher et al., "Invariance makes a difference" §4.3, Fig. 6): the image models are probed on every
category's dataset (the transfer matrix) and the between/within-class L2 distance ratio of their features
is measured on each. S7 (Speicher et al. 2023, §5.1, Tab. 2, App. D): the sensitivity of every model to
every category, in distribution, on mild OOD data (other objects, or other random patterns) and on
strong OOD data (random patterns for the image models, the image objects for the random models), for
models trained on image objects and models trained on random patterns."""

from __future__ import annotations

import functools
from typing import Any

from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import Context, stage_seed
from invfast.reproduce.stages.supervised import (
    Evaluator,
    ModelSpec,
    load_trained,
    make_encoder,
    sensitivity,
    train_models,
)

__all__ = [
    "KINDS",
    "category_dataset",
    "category_specs",
    "categories_train",
    "s6_probe",
    "s7_sensitivity",
    "OOD",
]

#: what a model trains on: image objects or random patterns (Speicher's strong-OOD data)
KINDS = ("image", "random")
#: model kind -> dataset category -> the data that category means for it
OOD = {
    "image": {"in distribution": "image", "mild OOD": "image-mild", "strong OOD": "random"},
    "random": {"in distribution": "random", "mild OOD": "random-mild", "strong OOD": "image"},
}
NONE = "none"


def _objects(cfg: ReproduceConfig) -> tuple[list[int], list[int]]:
    """The image objects and, disjoint from them, the mild-OOD objects (a seeded draw from the 61)."""
    from invfast.synthetic import rng

    perm = [int(i) for i in rng.permutation(cfg.run.seed, "categories/objects", 61)]
    k = cfg.speicher.category_objects
    return perm[:k], perm[k : 2 * k]


def category_dataset(cfg: ReproduceConfig, split: str, n: int, category: str, data: str) -> Any:
    """``category``'s types (none for 'none') on ``data``: 'image' / 'image-mild' (Transforms-2D objects on
    the built-in backgrounds) or 'random' / 'random-mild' (a random pattern per class on random pixels)."""
    from invfast.synthetic import Transforms2D, builtin_objects
    from invfast.synthetic.families import strong_ood

    types = () if category == NONE else tuple(category.split("+"))
    common: dict[str, Any] = dict(size=cfg.data.size, n=n, seed=cfg.run.seed, split=split)
    if data in ("image", "image-mild"):
        objs = _objects(cfg)[0 if data == "image" else 1]
        return Transforms2D(builtin_objects(61).subset(objs), types, **common)
    if data in ("random", "random-mild"):
        pattern_seed = stage_seed(cfg.run.seed, f"patterns/{data}")
        return strong_ood(cfg.speicher.category_objects, types, pattern_seed=pattern_seed, **common)
    raise ValueError(f"data must be image, image-mild, random or random-mild, got {data!r}")


def category_specs(cfg: ReproduceConfig, kind: str) -> list[ModelSpec]:
    """One model per category and one without transformations, trained on ``kind`` data."""
    return [
        ModelSpec(
            f"cat-{kind}-{c}",
            cfg.pretrain.arch,
            functools.partial(category_dataset, category=c, data=kind),
            cfg.speicher.category_n,
            cfg.speicher.transfer_epochs,
        )
        for c in (*cfg.speicher.categories, NONE)
    ]


def categories_train(ctx: Context, kind: str) -> dict[str, Any]:
    return {"kind": kind, "models": train_models(ctx, category_specs(ctx.cfg, kind))}


def _loaders(ctx: Context, kind: str) -> dict[str, Any]:
    loaders: dict[str, Any] = {
        s.key[len(f"cat-{kind}-") :]: functools.partial(load_trained, ctx, s) for s in category_specs(ctx.cfg, kind)
    }
    loaders["untrained"] = functools.partial(make_encoder, ctx.cfg, ctx.cfg.pretrain.arch)
    return loaders


def s6_probe(ctx: Context) -> dict[str, Any]:
    """Transfer matrix (linear-probe accuracy of each image model and of the untrained network, rows, on each
    category's image data, columns) and the class distance ratio of every model on every category: the untrained
    network is S6's control (the same relation in a network that learned nothing)."""
    import torch

    from invfast.metrics import class_distance_ratio

    cfg = ctx.cfg
    cats = list(cfg.speicher.categories)
    ev = Evaluator(
        ctx,
        _loaders(ctx, "image"),
        {c: functools.partial(category_dataset, category=c, data="image") for c in cats},
    )
    models = [*cats, NONE, "untrained"]
    accuracy = {m: {c: ev.probe(m, c) for c in cats} for m in models}
    ratio = {
        m: {
            c: class_distance_ratio(torch.from_numpy(ev.features(m, c)), torch.from_numpy(ev.images(c)[1]))
            for c in cats
        }
        for m in models
    }
    return {"categories": cats, "accuracy": accuracy, "distance_ratio": ratio}


def s7_sensitivity(ctx: Context) -> dict[str, Any]:
    """Sensitivity (L2 ratio, lower = more invariant) of every model of both kinds to every category, on
    pairs of ``speicher.category_sensitivity_n`` samples (0: ``speicher.sensitivity_n``) differing only in that
    category's transformation, per OOD level."""
    cfg = ctx.cfg
    n = cfg.speicher.category_sensitivity_n or cfg.speicher.sensitivity_n
    out: dict[str, Any] = {}
    pairs: dict[str, Any] = {}
    for kind in KINDS:
        models = {m: load().to(cfg.run.device).eval() for m, load in _loaders(ctx, kind).items()}
        per_level: dict[str, Any] = {}
        pairs[kind] = {}
        for level, data in OOD[kind].items():
            rows: dict[str, dict[str, float]] = {m: {} for m in models}
            terms: dict[str, dict[str, Any]] = {m: {} for m in models}
            for c in cfg.speicher.categories:
                ds = category_dataset(cfg, "test", n, c, data)
                views = (ds.generate(range(n))[0], ds.generate(range(n), view=1)[0])
                for m, model in models.items():
                    rows[m][c], terms[m][c] = sensitivity(model, views, stage_seed(cfg.run.seed, f"s7/{c}"))
            per_level[level] = rows
            pairs[kind][level] = terms
        out[kind] = per_level
    return {"categories": list(cfg.speicher.categories), "sensitivity": out, "sensitivity_pairs": pairs, "n": n}
