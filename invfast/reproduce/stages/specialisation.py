"""E4 and E5 (Ericsson et al. 2021, App. C.3 and D.1) from the pretraining runs' snapshots (the encoder
kept each time the held-out probe ran: every ``pretrain.curve_every`` epochs, :class:`Snapshots`).

``invariance-curves`` (E4): each policy's invariance to the test transforms at every snapshot, kept cheap:
the first ``measurement.snapshot_images`` measurement images at grid ``min(grid_size, snapshot_grid)``, reference
statistics from the snapshot's own features of the probe set (computed once per snapshot).
``invariance-transfer`` (E5, App. D.1): a population of final models that differ in their augmentations —
Random, Default, Spatial, Appearance and the amortised K = 5 model at each of its 26 descriptors — each with an
invariance per transform and a probe score per task, and the rank correlation across those models between each
transform's invariance and each task's score (:func:`invfast.comparison.transfer.spearman_rows`)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import torch

from invfast.io import atomic_write_text
from invfast.reproduce.stages.context import LABELS, POLICIES, Context, encoder, extract
from invfast.reproduce.stages.data import TASKS, task_set
from invfast.reproduce.stages.measurement import grid_side, per_image_cosines, reference_stats
from invfast.reproduce.stages.pretraining import snapshot_steps
from invfast.reproduce.stages.probing import probe_scores

__all__ = ["snapshot_model", "invariance_curves", "invariance_transfer"]


def snapshot_model(ctx: Context, key: str, step: int) -> torch.nn.Module:
    """Policy ``key``'s encoder as it was at ``step`` of its pretraining (eval mode, on the run's device)."""
    from invfast.io import load_verified

    path = os.path.join(ctx.cache, "pretrain", key, "snapshots", f"step-{step}.pt")
    model = encoder(ctx.cfg, key)
    model.load_state_dict(
        load_verified(path, what="pretraining snapshot", fix="delete the pretraining stage result to retrain")
    )
    return model.to(ctx.cfg.run.device).eval()


def _models(ctx: Context) -> list[tuple[str, str, int, torch.nn.Module]]:
    """(label, policy, step, model): Random, then every snapshot of every policy."""
    out = [("Random", "random", 0, ctx.model("random"))]
    for p in POLICIES:
        steps = snapshot_steps(ctx, p)
        if len(steps) < 2:
            raise ValueError(
                f"the {p} pretraining kept {len(steps)} snapshots; E4/E5 need its run with curve_every > 0 "
                f"(delete {os.path.join(ctx.cache, 'stages', f'pretrain-{p}.json')} and rerun to retrain it)"
            )
        out += [(f"{LABELS[p]}@{s}", p, s, snapshot_model(ctx, p, s)) for s in steps]
    return out


def _invariance(ctx: Context, model: torch.nn.Module, name: str) -> tuple[dict[str, float | None], dict[str, Any]]:
    from invfast.measure import measure_invariance

    cfg = ctx.cfg
    stats, _ = reference_stats(extract(model, ctx.images("probe")))
    r = measure_invariance(
        model,
        ctx.images("measure")[: cfg.measurement.snapshot_images],
        transforms=cfg.measurement.transforms,
        stats=stats,
        grid_size=min(cfg.measurement.grid_size, cfg.measurement.snapshot_grid),
        grid_side=grid_side(cfg),
        batch_size=16,
        forward_batch=256,
        device=cfg.run.device,
        name=name,
        progress=False,
    )
    return r.means("cosine"), per_image_cosines(r)


def invariance_curves(ctx: Context) -> dict[str, Any]:
    """Per model (Random, and each policy at each snapshot): mean standardised cosine per test transform."""
    import invfast.transforms as T

    steps_per_epoch = ctx.cfg.data.n_pretrain // ctx.cfg.pretrain.batch_size
    rows: list[dict[str, Any]] = []
    for label, p, s, m in _models(ctx):
        cosine, per_image = _invariance(ctx, m, label)
        rows.append(
            {
                "model": label,
                "policy": p,
                "step": s,
                "epoch": s / steps_per_epoch,
                "cosine": cosine,
                "per_image_cosine": per_image,
            }
        )
    families = {t: T.get(t).family for t in rows[0]["cosine"]}
    out = {"models": rows, "families": families, "images": ctx.cfg.measurement.snapshot_images}
    atomic_write_text(ctx.path("snapshots", "invariance.json"), json.dumps(out, allow_nan=False))
    return out


def _population(ctx: Context) -> list[tuple[str, torch.nn.Module]]:
    """E5's population of final models that differ in their augmentations: Random, the three policies' final
    encoders, and the amortised K = 5 model at each of its descriptors (label, frozen model)."""
    from invfast.measure import WithDescriptor
    from invfast.pretrain import descriptor_set
    from invfast.pretrain.descriptors import describe

    out = [(LABELS[k], ctx.model(k)) for k in ("random", *POLICIES)]
    amortised = ctx.model("amortised-k5")
    for row in descriptor_set("individual"):
        label = f"AI K=5 @ {describe('individual', row)}"
        out.append((label, WithDescriptor(amortised, row.tolist()).eval()))
    return out


def invariance_transfer(ctx: Context) -> dict[str, Any]:
    """E5 over the population of final models (:func:`_population`): each model's mean standardised cosine per
    test transform (measured as E4's snapshots: the first ``measurement.snapshot_images`` measurement images, grid
    ``min(grid_size, snapshot_grid)``) and probe score per task, and Spearman's ρ across the models between
    each transform's invariance and each task's score (``rho[transform][task]``, for the heat map)."""
    import invfast.transforms as T
    from invfast.comparison.transfer import spearman_rows

    cfg = ctx.cfg
    targets = {t: ctx.array("data", f"probe_target_{t}.npy") for t in TASKS}
    invariance: dict[str, dict[str, float | None]] = {}
    scores: dict[str, dict[str, float]] = {}
    for label, model in _population(ctx):
        invariance[label], _ = _invariance(ctx, model, label)
        feats = {split: extract(model, ctx.images(split)) for split in {task_set(t) for t in TASKS}}
        scores[label] = {
            t: probe_scores(feats[task_set(t)], targets[t], kind, 1, cfg)["mean"] for t, (kind, _) in TASKS.items()
        }
    names = list(invariance)
    transforms = list(invariance[names[0]])
    inv = np.array([[np.nan if invariance[m][t] is None else invariance[m][t] for m in names] for t in transforms])
    rho: dict[str, dict[str, float | None]] = {}
    for task in TASKS:
        y = np.array([scores[m][task] for m in names], np.float64)
        r = spearman_rows(inv, np.broadcast_to(y, inv.shape))
        for t, v in zip(transforms, r):
            rho.setdefault(t, {})[task] = None if not np.isfinite(v) else float(v)
    return {
        "population": "final models",
        "models": names,
        "invariance": invariance,
        "scores": scores,
        "rho": rho,
        "families": {t: T.get(t).family for t in transforms},
        "images": cfg.measurement.snapshot_images,
    }
