"""The ``features`` and ``probes`` stages: frozen features of the probe sets and the linear probes of
every task (Ericsson et al. 2021, App. E) for every model and fusion."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from invfast.io import atomic_save_npy
from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import (
    EXTRA_DEFAULTS,
    FUSIONS,
    LABELS,
    THREE_DEFAULT,
    Context,
    extract,
    short_floats,
)
from invfast.reproduce.stages.data import TASKS, task_set

__all__ = [
    "feature_file",
    "features",
    "kernel_probe_scores",
    "kernel_probes",
    "probe_scores",
    "probes",
    "out_of_fold",
    "three_default_probes",
]

#: E2's kernel-ridge probes (Ericsson et al., BMVC Tab. 4): the regression tasks and the models probed
KERNEL_TASKS = ("position", "rotation", "colour")
KERNEL_MODELS = ("default", "spatial", "appearance")


def feature_file(model: str, split: str) -> tuple[str, str]:
    """Cache path parts of ``model``'s features of a probe split ('probe' or 'rotation')."""
    return ("features", f"{model}.npy" if split == "probe" else f"{split}-{model}.npy")


def features(ctx: Context, family: str = "") -> dict[str, Any]:
    """Frozen features of the probe and rotation-probe images for Random, Default, Spatial, Appearance (with
    ``family`` 'vit-': their transformers, files ``vit-<model>``)."""
    dims, sizes = {}, {}
    for split in sorted({task_set(t) for t in TASKS}):
        images = ctx.images(split)
        sizes[split] = int(images.shape[0])
        for k in LABELS:
            f = extract(ctx.model(family + k), images)
            if not np.isfinite(f).all():
                raise FloatingPointError(f"the {family}{LABELS[k]} model gave non-finite features")
            atomic_save_npy(ctx.path(*feature_file(family + k, split)), f)
            dims[LABELS[k]] = int(f.shape[1])
    return {"dims": dims, "n": sizes["probe"], "n_per_set": sizes}


def out_of_fold(oof: Any, y: np.ndarray, kind: str) -> dict[str, Any]:
    """The units a verdict resamples: ``oof_correct`` (1 where an image's out-of-fold prediction is its label)
    for classification, ``oof_prediction`` [n][t] for regression."""
    pred = np.asarray(oof)
    if kind == "classification":
        return {"oof_correct": (pred == np.asarray(y)).astype(int).tolist()}
    pred = pred.astype(np.float64).reshape(pred.shape[0], -1)
    return {"oof_prediction": [short_floats(row) for row in pred]}


def probe_scores(x: np.ndarray, y: np.ndarray, kind: str, n_models: int, cfg: ReproduceConfig) -> dict[str, Any]:
    """``cfg.probe.folds``-fold CV over the published grid (Ericsson et al. 2021, App. E; ``cfg.probe.n_penalties``
    values, shifted for fusions): mean ± std over folds at the best α. Logistic fits that stopped at
    ``probe.logistic_max_iter`` are counted (``not_converged``) rather than printed."""
    import warnings

    from invfast.probes import LogisticCV, RidgeCV, alpha_grid

    grid = alpha_grid(n_models, cfg.probe.n_penalties)
    if kind == "classification":
        est = LogisticCV(alphas=grid, cv=cfg.probe.folds, n_models=n_models, max_iter=cfg.probe.logistic_max_iter)
    else:
        est = RidgeCV(alphas=grid, cv=cfg.probe.folds, n_models=n_models)
    threads = torch.get_num_threads()
    try:
        # the solvers run many small ops; one thread avoids OpenMP overhead (10x on a loaded 2-core machine)
        torch.set_num_threads(1)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LogisticCV")
            est.fit(x, y)
    finally:
        torch.set_num_threads(threads)
    cv = est.cv_results_
    b = int(est.best_index_)
    folds = [float(cv[f"split{k}_test_score"][b]) for k in range(cfg.probe.folds)]
    out = {
        "mean": float(est.best_score_),
        "std": float(cv["std_test_score"][b]),
        "best_alpha": float(est.alpha_),
        "fold_scores": folds,
    }
    if "split0_converged" in cv:
        conv = np.stack(
            [np.asarray(cv[f"split{k}_converged"]) for k in range(cfg.probe.folds)], axis=1
        )  # [alphas, folds]
        out["not_converged"] = int(conv.size - conv.sum())
        out["not_converged_at_best"] = int(conv[b].size - conv[b].sum())
    out.update(out_of_fold(est.oof_predictions_, y, kind))
    per_target = getattr(est, "cv_scores_per_target_", None)
    if per_target is not None and np.asarray(per_target).ndim == 3:
        out["per_target"] = [float(v) for v in np.asarray(per_target).mean(1)[b]]
    return out


def probes(ctx: Context) -> dict[str, Any]:
    """Every task x (Random, Default, Spatial, Appearance, Spa+App, Def+Spa+App)."""
    from invfast.probes import fuse

    sets = {LABELS[k]: [k] for k in LABELS}
    sets.update({label: list(parts) for label, parts in FUSIONS.values()})
    out: dict[str, Any] = {}
    feats_of = {
        split: {k: ctx.array(*feature_file(k, split)) for k in LABELS} for split in {task_set(t) for t in TASKS}
    }
    for task, (kind, what) in TASKS.items():
        feats = feats_of[task_set(task)]
        y = ctx.array("data", f"probe_target_{task}.npy")
        rows = {}
        for label, parts in sets.items():
            x = feats[parts[0]] if len(parts) == 1 else fuse([feats[p] for p in parts])
            rows[label] = probe_scores(x, y, kind, len(parts), ctx.cfg)
        out[task] = {"kind": kind, "target": what, "scores": rows}
        if kind == "classification":
            out[task]["y"] = np.asarray(y).astype(int).tolist()
        else:
            out[task]["y"] = [short_floats(row) for row in np.asarray(y, np.float64).reshape(y.shape[0], -1)]
    return out


def kernel_probe_scores(x: np.ndarray, y: np.ndarray, cfg: ReproduceConfig) -> dict[str, Any]:
    """``cfg.probe.folds``-fold CV of an RBF kernel-ridge probe over the library's (α, γ) grid on standardised
    features x [n, D] and targets y [n, t]: mean ± std R² over folds at the best pair, the pair, and the
    out-of-fold predictions (:func:`out_of_fold`)."""
    from invfast.probes import KernelRidgeCV

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # many small solves, as in probe_scores
        est = KernelRidgeCV(cv=cfg.probe.folds).fit(x, y)
    finally:
        torch.set_num_threads(threads)
    cv = est.cv_results_
    b = int(est.best_index_)
    out = {
        "mean": float(est.best_score_),
        "std": float(cv["std_test_score"][b]),
        "best_alpha": float(est.alpha_),
        "best_gamma": float(est.gamma_),
        "fold_scores": [float(cv[f"split{k}_test_score"][b]) for k in range(cfg.probe.folds)],
    }
    out.update(out_of_fold(est.oof_predictions_, y, "regression"))
    return out


def kernel_probes(ctx: Context) -> dict[str, Any]:
    """E2's probes (Ericsson et al., BMVC Tab. 4): position, rotation and colour regressed from the Default,
    Spatial and Appearance features by RBF kernel ridge, on the first ``probe.kernel_n`` images of each task's
    probe set (all with 0). Each task as the ``probes`` stage records it, with ``probe`` 'kernel ridge'."""
    cfg = ctx.cfg
    out: dict[str, Any] = {}
    for task in KERNEL_TASKS:
        kind, what = TASKS[task]
        y = ctx.array("data", f"probe_target_{task}.npy")
        n = y.shape[0] if cfg.probe.kernel_n == 0 else min(cfg.probe.kernel_n, y.shape[0])
        y = np.asarray(y[:n], np.float64).reshape(n, -1)
        rows = {
            LABELS[k]: kernel_probe_scores(ctx.array(*feature_file(k, task_set(task)))[:n], y, cfg)
            for k in KERNEL_MODELS
        }
        out[task] = {
            "kind": kind,
            "probe": "kernel ridge",
            "target": what,
            "n": int(n),
            "scores": rows,
            "y": [short_floats(row) for row in y],
        }
    return out


def three_default_probes(ctx: Context) -> dict[str, Any]:
    """E3's control: every task probed on 3×Default, the Default encoder's features concatenated with those of
    the two more Default encoders of :data:`EXTRA_DEFAULTS` (fused and probed as Def+Spa+App is: the grid shifted
    for 3 models). ``models``: each extra encoder's identity probe (mean and fold scores), from which its
    learning number (over Random's) is read as the policies' is."""
    from invfast.probes import fuse

    fused: dict[str, np.ndarray] = {}
    for split in sorted({task_set(t) for t in TASKS}):
        images = ctx.images(split)
        parts = [ctx.array(*feature_file("default", split))]
        for k in EXTRA_DEFAULTS:
            f = extract(ctx.model(k), images)
            if not np.isfinite(f).all():
                raise FloatingPointError(f"the {k} model gave non-finite features")
            atomic_save_npy(ctx.path(*feature_file(k, split)), f)
            parts.append(f)
        fused[split] = fuse(parts)
    out: dict[str, Any] = {}
    for task, (kind, what) in TASKS.items():
        y = ctx.array("data", f"probe_target_{task}.npy")
        scores = probe_scores(fused[task_set(task)], y, kind, len(EXTRA_DEFAULTS) + 1, ctx.cfg)
        out[task] = {"kind": kind, "target": what, "scores": {THREE_DEFAULT: scores}}
    y = ctx.array("data", "probe_target_identity.npy")
    models = {}
    for k in EXTRA_DEFAULTS:
        score = probe_scores(ctx.array(*feature_file(k, "probe")), y, "classification", 1, ctx.cfg)
        models[k] = {"identity": {f: score[f] for f in ("mean", "std", "fold_scores")}}
    return {"tasks": out, "models": models}
