"""C4's few-shot settings (Chavhan et al. 2023, App. A.2): 5-way 1- and 5-shot episodes of a classification task
and few-shot regression at train fractions 0.05 and 0.2, scored per episode (per split) so that the rule resamples
episodes, every model on the same episodes. A fixed model's features are read once; an amortised model's i is
learned on each episode's support set (each split's train part) by :class:`invfast.probes.InvarianceProbe` — never
on the images it is scored on — and the readout runs on its features at that i."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import extract, normalise, short_floats

__all__ = [
    "FRACTIONS",
    "SHOTS",
    "RIDGE_ALPHA",
    "episode_shape",
    "few_shot_fixed",
    "few_shot_learned_i",
    "learned_i_probe",
]

#: few-shot regression's train fractions and the classification episodes' shots
FRACTIONS = (0.05, 0.2)
SHOTS = (1, 5)
#: the ridge readout's λ of every few-shot setting (the library's default)
RIDGE_ALPHA = 1.0


def episode_shape(y: np.ndarray, k_shot: int, cfg: ReproduceConfig) -> dict[str, Any]:
    """N-way K-shot episodes of labels ``y`` [N]: 5-way (fewer with fewer objects), up to 15 queries per class
    (as many as the smallest class leaves), ``chavhan.fewshot_episodes`` episodes."""
    smallest = int(np.bincount(y).min())
    n_way = min(5, cfg.data.objects)
    return {
        "n_way": n_way,
        "k_shot": k_shot,
        "n_query": max(1, min(15, smallest - k_shot)),
        "episodes": cfg.chavhan.fewshot_episodes,
    }


def few_shot_fixed(x: np.ndarray, y: np.ndarray, kind: str, cfg: ReproduceConfig, seed: int) -> dict[str, list]:
    """Per setting, the per-episode (per-split) scores of fixed features ``x`` [N, D]: query accuracy, or R²."""
    from invfast.probes import few_shot_classification, few_shot_regression

    if kind != "classification":
        fits = few_shot_regression(
            x, y, fractions=FRACTIONS, splits=cfg.chavhan.fewshot_splits, alpha=RIDGE_ALPHA, seed=seed
        )
        return {f"few-shot s={s:g}": short_floats(r.scores) for s, r in fits.items()}
    codes = np.unique(y, return_inverse=True)[1]
    return {
        f"5-way {k}-shot": short_floats(
            few_shot_classification(x, codes, alpha=RIDGE_ALPHA, seed=seed, **episode_shape(codes, k, cfg)).scores
        )
        for k in SHOTS
    }


def learned_i_probe(
    model: torch.nn.Module,
    kind: str,
    x: torch.Tensor,
    y: torch.Tensor,
    cfg: ReproduceConfig,
    seed: int,
    init: float,
    **kw: Any,
) -> Any:
    """An :class:`invfast.probes.InvarianceProbe` of the run's settings (``chavhan.ip_epochs``, batch 64) fitted on
    (``x``, ``y``), i from ``init`` (``lr_i=0.0``: i kept there)."""
    from invfast.probes import InvarianceProbe

    probe = InvarianceProbe(model, task=kind, epochs=cfg.chavhan.ip_epochs, batch_size=64, seed=seed, init=init, **kw)
    return probe.fit(x, y)


def _learn_i(
    model: torch.nn.Module, kind: str, x: torch.Tensor, y: torch.Tensor, cfg: ReproduceConfig, seed: int
) -> list:
    return [float(v) for v in learned_i_probe(model, kind, x, y, cfg, seed, 0.5).i_]


def _features(model: torch.nn.Module, i: list, images: torch.Tensor) -> torch.Tensor:
    from invfast.measure import WithDescriptor

    return torch.from_numpy(extract(WithDescriptor(model, i).eval(), images)).double()


def _episodes_learned_i(
    model: torch.nn.Module, images: torch.Tensor, y: np.ndarray, cfg: ReproduceConfig, seed: int, progress: bool
) -> dict[str, list]:
    from invfast.probes import episode_accuracy, sample_episodes
    from invfast.runtime.progress import track

    codes = np.unique(y, return_inverse=True)[1]
    x = normalise(images)
    out = {}
    for k in SHOTS:
        shape = episode_shape(codes, k, cfg)
        n_way = shape["n_way"]
        sup, qry = sample_episodes(codes, n_way, k, shape["n_query"], shape["episodes"], seed)
        local = torch.arange(n_way).repeat_interleave(k)
        scores = []
        for e in track(range(len(sup)), desc=f"{k}-shot episodes, i learned", disable=not progress, leave=False):
            i = _learn_i(model, "classification", x[sup[e]], local, cfg, seed + e)
            f = _features(model, i, images[np.concatenate([sup[e], qry[e]])])
            s, q = f[: sup.shape[1]], f[sup.shape[1] :]
            scores.append(float(episode_accuracy(s[None], q[None], n_way, RIDGE_ALPHA)[0]))
        out[f"5-way {k}-shot"] = short_floats(np.array(scores))
    return out


def _splits_learned_i(
    model: torch.nn.Module, images: torch.Tensor, y: np.ndarray, cfg: ReproduceConfig, seed: int, progress: bool
) -> dict[str, list]:
    from invfast.probes import regression_splits
    from invfast.probes.ridge import r2_scores, ridge_solve
    from invfast.runtime.progress import track

    t = torch.from_numpy(np.asarray(y, np.float64).reshape(len(y), -1))
    x = normalise(images)
    out = {}
    for frac, perms in regression_splits(len(y), FRACTIONS, cfg.chavhan.fewshot_splits, seed).items():
        m = int(round(frac * len(y)))
        scores = []
        for e, perm in enumerate(track(perms, desc=f"s={frac:g} splits, i learned", disable=not progress, leave=False)):
            tr, te = torch.from_numpy(perm[:m]), torch.from_numpy(perm[m:])
            mu, sd = t[tr].mean(0), t[tr].std(0) + 1e-12
            i = _learn_i(model, "regression", x[tr], ((t[tr] - mu) / sd).float(), cfg, seed + e)
            f = _features(model, i, images)
            w, b = ridge_solve(f[tr], t[tr], RIDGE_ALPHA)
            scores.append(float(r2_scores(f[te] @ w + b, t[te]).mean()))
        out[f"few-shot s={frac:g}"] = short_floats(np.array(scores))
    return out


def few_shot_learned_i(
    model: torch.nn.Module,
    images: torch.Tensor,
    y: np.ndarray,
    kind: str,
    cfg: ReproduceConfig,
    seed: int,
    progress: bool = False,
) -> dict[str, list]:
    """Per setting, the per-episode scores of the amortised ``model`` with i learned per episode: on the support
    set of each N-way K-shot episode (the labels local to the episode) or on the train part of each regression
    split (targets standardised on it), from i = 0.5 over ``chavhan.ip_epochs``; then the ridge readout of
    :func:`few_shot_fixed` on the model's features at that i. ``images`` uint8 [N, 3, H, W]; the same ``seed`` as
    :func:`few_shot_fixed` gives the same episodes and splits."""
    if kind == "classification":
        return _episodes_learned_i(model, images, y, cfg, seed, progress)
    return _splits_learned_i(model, images, y, cfg, seed, progress)
