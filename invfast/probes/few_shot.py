"""Few-shot readouts: N-way K-shot episodes and few-shot regression over train fractions.

Classification (Chavhan et al. A.2, following Lee et al. 2021): each episode draws N classes,
K support and Q query samples per class; a ridge readout on one-hot targets (with intercept,
kernel form since NK << d) is fit on the support set and scored on the queries. All episodes of a
batch are solved together as one batched linear system. Regression: for each train fraction s,
``splits`` random train/test splits, ridge on the train part, R² (mean over targets) on the rest.
Results are the mean with a 95% confidence interval (1.96 · std / sqrt(m)). Same seed, same episodes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from invfast.probes._base import as_class_labels, as_targets, as_tensor, check_positive
from invfast.probes.grids import alpha_grid
from invfast.probes.ridge import r2_scores, ridge_loo_predictions, ridge_solve
from invfast.runtime.progress import track

_F64 = torch.float64


@dataclass
class FewShotResult:
    """mean and ci95 (half-width of the 95% interval) of ``scores`` [m] (one per episode or split)."""

    mean: float
    ci95: float
    scores: np.ndarray
    settings: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{100 * self.mean:.2f} ± {100 * self.ci95:.2f}"


def _summary(scores: np.ndarray, **settings: Any) -> FewShotResult:
    m = scores.size
    ci = 1.96 * scores.std(ddof=1) / math.sqrt(m) if m > 1 else float("nan")
    return FewShotResult(float(scores.mean()), float(ci), scores, dict(settings))


def sample_episodes(
    codes: np.ndarray, n_way: int, k_shot: int, n_query: int, episodes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Episode indices: support [E, N*K] and query [E, N*Q], class-major (class j occupies block j).

    Only classes with at least K + Q members are drawn from.
    """
    counts = np.bincount(codes)
    eligible = np.flatnonzero(counts >= k_shot + n_query)
    if eligible.size < n_way:
        raise ValueError(
            f"{n_way}-way {k_shot}-shot episodes with {n_query} queries need {n_way} classes with at "
            f">= {k_shot + n_query} samples; only {eligible.size} have that many. Lower n_way, k_shot "
            "or n_query."
        )
    members = {int(c): np.flatnonzero(codes == c) for c in eligible}
    rng = np.random.default_rng(seed)
    sup = np.empty((episodes, n_way, k_shot), dtype=np.int64)
    qry = np.empty((episodes, n_way, n_query), dtype=np.int64)
    for e in range(episodes):
        for j, c in enumerate(rng.choice(eligible, n_way, replace=False)):
            pick = rng.choice(members[int(c)], k_shot + n_query, replace=False)
            sup[e, j], qry[e, j] = pick[:k_shot], pick[k_shot:]
    return sup.reshape(episodes, -1), qry.reshape(episodes, -1)


def episode_accuracy(support: torch.Tensor, query: torch.Tensor, n_way: int, alpha: float) -> torch.Tensor:
    """Query accuracy [E] of the ridge readout (λ = ``alpha``, one-hot targets centred, intercept by centring on
    the support mean, kernel form) of episodes given as features: ``support`` [E, N*K, d] and ``query``
    [E, N*Q, d], float64, class-major (class j occupies block j of each)."""
    e, nk, _ = support.shape
    k_shot, n_query = nk // n_way, query.shape[1] // n_way
    dev = support.device
    y_sup = torch.eye(n_way, dtype=_F64, device=dev).repeat_interleave(k_shot, 0)  # [NK, N]
    y_qry = torch.arange(n_way, device=dev).repeat_interleave(n_query)  # [NQ]
    mu = support.mean(1, keepdim=True)
    sc, qc = support - mu, query - mu
    k = sc @ sc.transpose(1, 2) + alpha * torch.eye(nk, dtype=_F64, device=dev)
    dual = torch.linalg.solve(k, (y_sup - 1.0 / n_way).expand(e, -1, -1))
    pred = (qc @ sc.transpose(1, 2) @ dual).argmax(-1)  # [E, NQ]
    return (pred == y_qry).double().mean(1)


def regression_splits(n: int, fractions: Sequence[float], splits: int, seed: int) -> dict[float, list[np.ndarray]]:
    """The random train/test splits of :func:`few_shot_regression`: per train fraction s, ``splits`` permutations
    of range(n) whose first round(s·n) entries are the train part (the same seed gives the same splits)."""
    if int(splits) != splits or splits < 1:
        raise ValueError(f"splits must be a positive integer, got {splits!r}")
    rng = np.random.default_rng(seed)
    out = {}
    for frac in fractions:
        m = int(round(frac * n))
        if not 0 < frac < 1 or m < 3 or n - m < 2:
            raise ValueError(
                f"train fraction {frac} of {n} samples leaves {m} train / {n - m} test samples; "
                "need >= 3 train and >= 2 test"
            )
        out[float(frac)] = [rng.permutation(n) for _ in range(splits)]
    return out


def few_shot_classification(
    features: Any,
    labels: Any,
    n_way: int = 5,
    k_shot: int = 1,
    n_query: int = 15,
    episodes: int = 2000,
    alpha: float = 1.0,
    normalize: bool = False,
    seed: int = 0,
    batch_size: int = 200,
    progress: bool = False,
) -> FewShotResult:
    """Mean query accuracy of ridge readouts over ``episodes`` N-way K-shot episodes, with 95% CI.

    features [n, d] (numpy or tensor, any device), labels [n]. ``alpha`` is ridge's λ (``Ridge(alpha=λ)``)
    on one-hot targets; ``normalize`` L2-normalises features first. Scores [episodes] in ``.scores``.
    """
    x = as_tensor(features, "features")
    codes, _ = as_class_labels(labels, "labels", x.shape[0])
    for name, v in (("n_way", n_way), ("k_shot", k_shot), ("n_query", n_query), ("episodes", episodes)):
        if int(v) != v or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if n_way < 2:
        raise ValueError("n_way must be at least 2")
    lam = float(check_positive([alpha], "alpha")[0])
    x = x.to(_F64)
    if normalize:
        x = torch.nn.functional.normalize(x, dim=1)
    sup, qry = sample_episodes(codes.numpy(), n_way, k_shot, n_query, episodes, seed)
    acc = []
    for start in track(range(0, episodes, batch_size), desc="episodes", disable=not progress, leave=False):
        s = x[torch.as_tensor(sup[start : start + batch_size], device=x.device)]  # [E, NK, d]
        q = x[torch.as_tensor(qry[start : start + batch_size], device=x.device)]  # [E, NQ, d]
        acc.append(episode_accuracy(s, q, n_way, lam).cpu())
    return _summary(
        torch.cat(acc).numpy(), n_way=n_way, k_shot=k_shot, n_query=n_query, episodes=episodes, alpha=lam, seed=seed
    )


def few_shot_regression(
    features: Any,
    targets: Any,
    fractions: Sequence[float] = (0.05, 0.1, 0.2),
    splits: int = 100,
    alpha: float | str = 1.0,
    seed: int = 0,
    progress: bool = False,
) -> dict[float, FewShotResult]:
    """R² (mean over targets) of ridge trained on a random fraction s of the data, tested on the rest.

    For each s in ``fractions``: ``splits`` random splits; returns {s: FewShotResult}. ``alpha`` is
    ridge's λ, or "loo" to pick λ from ``alpha_grid()`` by exact leave-one-out on each train part.
    """
    x = as_tensor(features, "features").to(_F64)
    n = x.shape[0]
    y, _ = as_targets(targets if not isinstance(targets, torch.Tensor) else targets.to(x.device), "targets", n)
    y = y.to(device=x.device, dtype=_F64)
    if isinstance(alpha, str):
        if alpha != "loo":
            raise ValueError(f"alpha must be a positive number or 'loo', got {alpha!r}")
        grid = torch.as_tensor(alpha_grid(), dtype=_F64, device=x.device)
    else:
        lam = float(check_positive([alpha], "alpha")[0])
    out = {}
    for frac, perms in regression_splits(n, fractions, splits, seed).items():
        m = int(round(frac * n))
        scores = np.empty(splits)
        for i in track(range(splits), desc=f"s={frac}", disable=not progress, leave=False):
            perm = torch.as_tensor(perms[i], device=x.device)
            tr, te = perm[:m], perm[m:]
            if isinstance(alpha, str):
                loo = ridge_loo_predictions(x[tr], y[tr], grid)
                lam_i = float(grid[int(r2_scores(loo, y[tr]).mean(1).argmax())])
            else:
                lam_i = lam
            w, b = ridge_solve(x[tr], y[tr], lam_i)
            scores[i] = float(r2_scores(x[te] @ w + b, y[te]).mean())
        out[float(frac)] = _summary(scores, fraction=float(frac), splits=splits, alpha=alpha, seed=seed)
    return out


def few_shot(features: Any, labels: Any, task: str = "classification", **kwargs: Any):
    """Few-shot evaluation: ``task='classification'`` -> :func:`few_shot_classification` (one
    FewShotResult), ``task='regression'`` -> :func:`few_shot_regression` ({fraction: FewShotResult})."""
    if task == "classification":
        return few_shot_classification(features, labels, **kwargs)
    if task == "regression":
        return few_shot_regression(features, labels, **kwargs)
    raise ValueError(f"task must be 'classification' or 'regression', got {task!r}")
