"""S2 (Speicher et al., "Invariance makes a difference" §3.1, Fig. 2): invariance matters more than
equivariance. The model trained on (O1, T1) — the transfer experiment's ``same`` model: source objects
under the target's transformations — is probed on four datasets: D_all (O1, T1), D_transforms (O2, T1),
D_objects (O1, T2) and D_none (O2, T2), O2 the target objects, T2 the disjoint transformations."""

from __future__ import annotations

import functools
from typing import Any

from invfast.reproduce.stages.context import Context, load_stage_model
from invfast.reproduce.stages.supervised import Evaluator
from invfast.reproduce.stages.transfer import transfer_dataset

__all__ = ["EVALUATION_SETS", "s2_probe"]

#: dataset name -> (object set, transformation set) of the transfer family
EVALUATION_SETS = {
    "all": ("source", "target"),
    "transforms": ("target", "target"),
    "objects": ("source", "other"),
    "none": ("target", "other"),
}


def s2_probe(ctx: Context) -> dict[str, Any]:
    """The ``same`` model's linear-probe accuracy on D_all, D_transforms, D_objects and D_none."""
    sets = {
        name: functools.partial(transfer_dataset, objects=o, transforms=t) for name, (o, t) in EVALUATION_SETS.items()
    }
    ev = Evaluator(ctx, {"same": functools.partial(load_stage_model, ctx, "transfer-same")}, sets)
    return {"scores": {name: ev.probe("same", name) for name in EVALUATION_SETS}, "n": ctx.cfg.transfer_n_target}
