"""S2 (Speicher et al., "Invariance makes a difference" §3.1, Fig. 2): invariance matters more than
equivariance. The model trained on (O1, T1) — the transfer experiment's ``same`` model: source objects
under the target's transformations — and the crossed one trained on (O1, T2) — its ``different`` model — are
probed on four datasets: D_all (O1, T1), D_transforms (O2, T1),
D_objects (O1, T2) and D_none (O2, T2), O2 the target objects, T2 the disjoint transformations."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from invfast.reproduce.stages.context import Context, load_stage_model
from invfast.reproduce.stages.supervised import Evaluator
from invfast.reproduce.stages.transfer import transfer_dataset

__all__ = ["EVALUATION_SETS", "S2_MODELS", "s2_probe"]

#: dataset name -> (object set, transformation set) of the transfer family
EVALUATION_SETS = {
    "all": ("source", "target"),
    "transforms": ("target", "target"),
    "objects": ("source", "other"),
    "none": ("target", "other"),
}


#: S2's crossed design: the models trained on (O1, T1) and on (O1, T2) — the transfer experiment's sources
S2_MODELS = ("same", "different")


def s2_probe(ctx: Context) -> dict[str, Any]:
    """Linear-probe accuracy of the ``same`` model (O1, T1) and of the crossed ``different`` model (O1, T2) on
    D_all, D_transforms, D_objects and D_none (``accuracy[model][set]``; ``scores`` is the same model's row)."""
    sets = {
        name: functools.partial(transfer_dataset, objects=o, transforms=t) for name, (o, t) in EVALUATION_SETS.items()
    }
    loaders: dict[str, Callable[[], torch.nn.Module]] = {
        m: functools.partial(load_stage_model, ctx, f"transfer-{m}") for m in S2_MODELS
    }
    ev = Evaluator(ctx, loaders, sets)
    accuracy = {m: {name: ev.probe(m, name) for name in EVALUATION_SETS} for m in S2_MODELS}
    return {"scores": accuracy["same"], "accuracy": accuracy, "n": ctx.cfg.speicher.transfer_n_target}
