"""S5 (Speicher et al., "Invariance makes a difference" §4.2, Fig. 5): does invariance transfer between
classes? Objects O1 (the first ``speicher.s5_objects`` source objects) and O2 (as many target objects), types T1
(the target's) and T2 (the disjoint set); four datasets over O1 ∪ O2 — D_T1, D_T2, D_T1⊕T2 (O1 under T1,
O2 under T2) and D_T1∘T2 (every object under both) — one model trained on each, probed on each."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import Context
from invfast.reproduce.stages.supervised import Evaluator, ModelSpec, load_trained, train_models
from invfast.reproduce.stages.transfer import split_of

__all__ = ["DATASETS", "UNSEEN_GROUP", "class_transfer_dataset", "class_transfer_specs", "s5_train", "s5_probe"]

#: dataset key -> label in the report
DATASETS = {"T1": "D_T1", "T2": "D_T2", "oplus": "D_T1⊕T2", "circ": "D_T1∘T2"}


def class_transfer_dataset(cfg: ReproduceConfig, split: str, n: int, kind: str) -> Any:
    """One of the four datasets (:data:`DATASETS`); classes are O1's objects, then O2's."""
    from invfast.synthetic import Transforms2D
    from invfast.synthetic.families import PerClassTransforms

    sv = split_of(cfg)
    k = cfg.speicher.s5_objects
    o1, o2 = sv.source_objects[:k], sv.target_objects[:k]
    t1, t2 = tuple(sv.target_transforms), tuple(sv.other_transforms)
    common: dict[str, Any] = dict(size=cfg.data.size, n=n, seed=cfg.run.seed, split=split)
    if kind == "oplus":
        return PerClassTransforms([(sv.bank.subset(o1), t1), (sv.bank.subset(o2), t2)], **common)
    types = {"T1": t1, "T2": t2, "circ": t1 + t2}
    if kind not in types:
        raise ValueError(f"kind must be one of {sorted(DATASETS)}, got {kind!r}")
    return Transforms2D(sv.bank.subset(o1 + o2), types[kind], **common)


def class_transfer_specs(cfg: ReproduceConfig) -> list[ModelSpec]:
    return [
        ModelSpec(
            f"s5-{kind}",
            cfg.pretrain.arch,
            functools.partial(class_transfer_dataset, kind=kind),
            cfg.speicher.transfer_n_source,
            cfg.speicher.transfer_epochs,
        )
        for kind in DATASETS
    ]


def s5_train(ctx: Context) -> dict[str, Any]:
    return {"models": train_models(ctx, class_transfer_specs(ctx.cfg))}


#: S5's unseen pairs: on dataset d, the images of the object group the ⊕ model never saw under d's types
#: (D_T1: O2, classes s5_objects and up; D_T2: O1, the classes below)
UNSEEN_GROUP = {"T1": "O2", "T2": "O1"}


def s5_probe(ctx: Context) -> dict[str, Any]:
    """Accuracy of every model (rows: trained on) on every dataset (columns: probed on); and ``unseen[m][d]``:
    the T1, T2 and ⊕ models' out-of-fold correctness on the images of D_T1 showing O2 and of D_T2 showing O1 —
    the (object, transformation) pairs the ⊕ model never saw (the probe fitted on all of d, as in ``accuracy``)."""
    specs = class_transfer_specs(ctx.cfg)
    ev = Evaluator(
        ctx,
        {s.key[len("s5-") :]: functools.partial(load_trained, ctx, s) for s in specs},
        {kind: functools.partial(class_transfer_dataset, kind=kind) for kind in DATASETS},
    )
    sv = split_of(ctx.cfg)
    accuracy = {m: {d: ev.probe(m, d) for d in DATASETS} for m in DATASETS}
    k = ctx.cfg.speicher.s5_objects
    unseen: dict[str, dict[str, Any]] = {}
    for m in ("T1", "T2", "oplus"):
        unseen[m] = {}
        for d, group in UNSEEN_GROUP.items():
            labels = np.asarray(ev.images(d)[1])
            shows = labels >= k if group == "O2" else labels < k
            correct = np.asarray(accuracy[m][d]["oof_correct"])[shows]
            unseen[m][d] = {"mean": float(correct.mean()), "oof_correct": correct.astype(int).tolist(), "group": group}
    return {
        "accuracy": accuracy,
        "unseen": unseen,
        "T1": list(sv.target_transforms),
        "T2": list(sv.other_transforms),
        "objects_per_group": ctx.cfg.speicher.s5_objects,
    }
