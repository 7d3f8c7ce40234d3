"""The amortised stages (Chavhan et al. 2023): the AI-MoCo model's invariance as its descriptor i
moves from Spatial to Appearance (``amortised-interpolation``) and i learned per task with a linear
head (``amortised-learned-i``, :class:`invfast.probes.InvarianceProbe`). The model itself is trained
by :func:`invfast.reproduce.stages.pretraining.pretrain_amortised`."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from invfast.reproduce.stages.context import Context, extract, normalise, stage_seed
from invfast.reproduce.stages.data import TASKS, task_set
from invfast.reproduce.stages.measurement import measure_one, reference_stats

__all__ = ["interpolation_points", "amortised_interpolation", "amortised_learned_i"]


def interpolation_points(n: int) -> list[list[float]]:
    """Descriptors i(t) = (1 − t, t) from Spatial [1, 0] to Appearance [0, 1], ``n`` evenly spaced t."""
    return [[round(1.0 - t, 6), round(t, 6)] for t in np.linspace(0.0, 1.0, n).tolist()]


def amortised_interpolation(ctx: Context) -> dict[str, Any]:
    """Invariance of the amortised model as i moves from Spatial to Appearance (and at Default [1, 1])."""
    from invfast.measure import WithDescriptor

    model = ctx.model("amortised")
    points = interpolation_points(ctx.cfg.interp_points) + [[1.0, 1.0]]
    rows = []
    for i in points:
        name = f"i=({i[0]:.2f},{i[1]:.2f})"
        at_i = WithDescriptor(model, i).eval()
        file = f"amortised_{i[0]:.4f}_{i[1]:.4f}"
        stats = None
        if not os.path.exists(ctx.path("measure", f"{file}.json")):
            stats, _ = reference_stats(extract(at_i, ctx.images("probe")))
        r = measure_one(ctx, at_i, name, file, stats)
        fam: dict[str, list[float]] = {}
        for t in r.transforms.values():
            if t.mean_cosine is not None:
                fam.setdefault(t.family, []).append(t.mean_cosine)
        rows.append(
            {
                "i": i,
                "name": name,
                "cosine": r.means("cosine"),
                "family_cosine": {f: float(np.mean(v)) for f, v in fam.items()},
            }
        )
    return {"points": rows}


def amortised_learned_i(ctx: Context) -> dict[str, Any]:
    """Learn a linear head and i per task on the frozen amortised model (InvarianceProbe), i from 0.5;
    fit on the first 80% of ``ip_n`` probe images, score on the rest."""
    from invfast.probes import InvarianceProbe

    cfg = ctx.cfg
    model = ctx.model("amortised")
    n = min(cfg.ip_n, cfg.n_probe)
    cut = int(round(0.8 * n))
    out = {}
    inputs = {split: normalise(ctx.images(split)[:n]) for split in {task_set(t) for t in TASKS}}
    for task, (kind, _) in TASKS.items():
        x = inputs[task_set(task)]
        y = ctx.array("data", f"probe_target_{task}.npy")[:n]
        if kind == "classification":
            yt = torch.from_numpy(y).long()
        else:
            mu, sd = y[:cut].mean(0), y[:cut].std(0) + 1e-12
            yt = torch.from_numpy((y - mu) / sd).float()
        probe = InvarianceProbe(
            model, task=kind, epochs=cfg.ip_epochs, batch_size=64, seed=stage_seed(cfg.seed, f"ip/{task}")
        )
        probe.fit(x[:cut], yt[:cut])
        out[task] = {
            "i": [float(v) for v in probe.i_],
            "score": float(probe.score(x[cut:], yt[cut:])),
            "i_history": probe.i_history_.tolist(),
            "n_fit": cut,
            "n_test": n - cut,
        }
    return out
