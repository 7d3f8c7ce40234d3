"""S8 (Speicher et al. 2023, §5.2, Fig. 4): a superset of the needed invariances does not hurt, a
subset does. Nested transformation sets T_1 ⊂ ... ⊂ T_n (``cfg.speicher.nested_sizes``: the first k of the
target's types followed by the disjoint set's); one supervised model per set on the source objects,
each probed on the target objects under every set.

The sets of size |T| and 2|T| are the transfer experiment's ``same`` and ``superset`` sources: those
models are reused; ``s8-train`` trains the others."""

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
from invfast.reproduce.stages.transfer import transfer_dataset, transform_set

__all__ = ["reused_source", "nested_specs", "s8_train", "s8_probe"]


def reused_source(cfg: ReproduceConfig, k: int) -> str | None:
    """The transfer source whose types are the first ``k`` of the chain, if any ('same', 'superset')."""
    return {cfg.speicher.transfer_transforms: "same", 2 * cfg.speicher.transfer_transforms: "superset"}.get(k)


def nested_specs(cfg: ReproduceConfig) -> list[ModelSpec]:
    """The models of the chain that the transfer experiment does not train."""
    return [
        ModelSpec(
            f"s8-first-{k}",
            cfg.pretrain.arch,
            functools.partial(transfer_dataset, objects="source", transforms=f"first:{k}"),
            cfg.speicher.transfer_n_source,
            supervised_epochs(cfg),
            criterion_level(cfg),
        )
        for k in cfg.speicher.nested_sizes
        if reused_source(cfg, k) is None
    ]


def s8_train(ctx: Context) -> dict[str, Any]:
    return {"models": train_models(ctx, nested_specs(ctx.cfg))}


def s8_probe(ctx: Context) -> dict[str, Any]:
    """Accuracy of every chain model (rows: trained on T_i) on every chain target (columns: T_j)."""
    cfg = ctx.cfg
    loaders: dict[str, Any] = {s.key: functools.partial(load_trained, ctx, s) for s in nested_specs(cfg)}
    keys = {}
    for k in cfg.speicher.nested_sizes:
        src = reused_source(cfg, k)
        keys[k] = f"transfer-{src}" if src else f"s8-first-{k}"
        if src:
            loaders[keys[k]] = functools.partial(load_stage_model, ctx, keys[k])
    sets = {
        str(k): functools.partial(transfer_dataset, objects="target", transforms=f"first:{k}")
        for k in cfg.speicher.nested_sizes
    }
    ev = Evaluator(ctx, loaders, sets)
    matrix = {
        str(i): {str(j): ev.probe(keys[i], str(j)) for j in cfg.speicher.nested_sizes}
        for i in cfg.speicher.nested_sizes
    }
    return {
        "sizes": list(cfg.speicher.nested_sizes),
        "sets": {str(k): list(transform_set(cfg, f"first:{k}")) for k in cfg.speicher.nested_sizes},
        "models": {str(k): keys[k] for k in cfg.speicher.nested_sizes},
        "accuracy": matrix,
        "n_target": cfg.speicher.transfer_n_target,
    }
