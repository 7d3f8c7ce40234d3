"""The ``measure`` stage: invariance of Random, Default, Spatial and Appearance to the test transforms
(Table 1, :func:`invfast.measure_invariance`), with reference statistics from the probe-set features."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from invfast.reproduce.stages.context import LABELS, Context, short_floats
from invfast.reproduce.stages.probing import feature_file

__all__ = ["measure", "measure_one", "reference_stats", "per_image_cosines", "grid_side"]


def grid_side(cfg: Any) -> int | None:
    """The measurements' ``grid_side``: the image size when the run scales the pixel grids
    (``measurement.scale_grids``)."""
    return int(cfg.data.size) if cfg.measurement.scale_grids else None


def reference_stats(feats: np.ndarray) -> tuple[Any, str]:
    """FeatureStats of the probe-set features (a larger reference set than the measured images, as the
    paper allows): trace shrinkage ε = 1e-6 when there are at least 4 samples per dimension, Ledoit-Wolf below."""
    from invfast.stats import FeatureStats

    shrink = "trace" if feats.shape[0] >= 4 * feats.shape[1] else "ledoit-wolf"
    stats = FeatureStats().update(torch.from_numpy(np.ascontiguousarray(feats)))
    stats.finalize(shrinkage=shrink)
    return stats, shrink


def measure_one(ctx: Context, model: Any, name: str, file: str, stats: Any = None) -> Any:
    """``model``'s invariance result on the measurement images (cached as ``measure/<file>.json``;
    the measurement itself resumes from ``measure/<file>.state``)."""
    from invfast.measure import InvarianceResult, measure_invariance

    path = ctx.path("measure", f"{file}.json")
    if os.path.exists(path):
        return InvarianceResult.from_json(path)
    r = measure_invariance(
        model,
        ctx.images("measure"),
        transforms=ctx.cfg.measurement.transforms,
        stats=stats,
        grid_size=ctx.cfg.measurement.grid_size,
        grid_side=grid_side(ctx.cfg),
        batch_size=16,
        forward_batch=256,
        device=ctx.cfg.run.device,
        state_path=ctx.path("measure", f"{file}.state"),
        name=name,
        progress=ctx.progress,
    )
    r.to_json(path)
    return r


def per_image_cosines(result: Any) -> dict[str, list[float | None]]:
    """Transform -> the standardised cosine of every measurement image (mean over the non-identity parameters;
    None where undefined; 5 significant digits): the units the verdicts' intervals resample."""
    out: dict[str, list[float | None]] = {}
    for name, t in result.transforms.items():
        v = t.per_image_cosine
        out[name] = [] if v is None else short_floats(v.detach().cpu().numpy())
    return out


def measure(ctx: Context, family: str = "") -> dict[str, Any]:
    """Invariance of Random, Default, Spatial, Appearance to the test transforms (Table 1); the
    reference statistics of each model come from its features of the probe images. With ``family`` 'vit-':
    of their transformers (files ``measure/vit-<model>``; the tables keep the labels Random, Default, ...)."""
    from invfast import report

    results, shrinkage = [], {}
    for k in LABELS:
        key = family + k
        stats, shrinkage[LABELS[k]] = reference_stats(ctx.array(*feature_file(key, "probe")))
        results.append(measure_one(ctx, ctx.model(key), LABELS[k], key, stats))
    return {
        "files": {LABELS[k]: f"measure/{family}{k}.json" for k in LABELS},
        "reference": {"images": "probe set", "n": ctx.cfg.data.n_probe, "shrinkage": shrinkage},
        "cosine": {r.model: r.means("cosine") for r in results},
        "distance": {r.model: r.means("distance") for r in results},
        "per_image_cosine": {r.model: per_image_cosines(r) for r in results},
        "grid_side": grid_side(ctx.cfg),
        "families": {t.name: t.family for t in results[0].transforms.values()},
        "best": report.significance(results),
    }
