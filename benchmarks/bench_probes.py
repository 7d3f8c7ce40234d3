"""Probe benchmarks: invfast vs the scikit-learn search a user would otherwise run, same run.

    python -m pytest benchmarks/bench_probes.py --benchmark-only -o addopts="" -s

Sizes (issue 5): RidgeCV n=10000, d=2048, 10 targets, 45 λ × 5 folds vs GridSearchCV(Ridge);
LogisticCV n=10000, d=512, 10 classes, 45 C × 5 folds vs the LogisticRegression(lbfgs) loop;
KernelRidgeCV 40 (α, γ) × 5 folds vs GridSearchCV over StandardScaler + KernelRidge (n=2000, d=512:
a 10000-sample kernel needs 8000³ factorisations per fit, beyond a shared CPU box).

Environment:
  INVFAST_BENCH_PROBES=small   smaller sizes (runs in about a minute); default "full".
  INVFAST_BENCH_STRIDE=k       time the scikit-learn baseline on every k-th grid value only and
                               extrapolate linearly to the whole grid (each value is an independent
                               cold fit there, so its cost is additive). Default: 15 for ridge and
                               9 for logistic at full size, 1 (no extrapolation) at small size.

On a shared machine run both sides on one thread (OMP_NUM_THREADS=1): oversubscribed OpenMP threads
slow torch and OpenBLAS by large, unequal factors.
"""
from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pytest

import invfast.probes as P

FULL = os.environ.get("INVFAST_BENCH_PROBES", "full") != "small"
SIZES = {
    "ridge": (10000, 2048, 10) if FULL else (2000, 256, 10),
    "logistic": (10000, 512, 10) if FULL else (2000, 128, 10),
    "kernel": (2000, 512) if FULL else (500, 64),
}


def _stride(default_full: int) -> int:
    return int(os.environ.get("INVFAST_BENCH_STRIDE", default_full if FULL else 1))


def _report(benchmark, name: str, ours_s: float, base_s: float, extrapolated: bool | str, **extra) -> None:
    ratio = base_s / ours_s
    benchmark.extra_info.update({"invfast_s": ours_s, "baseline_s": base_s, "speedup": ratio,
                                 "baseline_extrapolated": extrapolated, **extra})
    note = "" if not extrapolated else (" (baseline extrapolated from a subset of the grid)"
                                        if extrapolated is True else f" ({extrapolated})")
    print(f"\n[{name}] invfast {ours_s:.2f} s, scikit-learn {base_s:.2f} s -> {ratio:.1f}x{note}; {extra}")


def _regression_data(n, d, t, seed=0):
    rng = np.random.default_rng(seed)
    x = np.maximum(rng.normal(size=(n, d)) @ (rng.normal(size=(d, d)) / np.sqrt(d)), 0).astype(np.float32)
    y = x @ rng.normal(size=(d, t)) / np.sqrt(d) + rng.normal(size=(n, t))
    return x, y


def _classification_data(n, d, k, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    x = (0.12 * rng.normal(size=(k, d))[y] + rng.normal(size=(n, d))).astype(np.float32)  # not separable
    return x, y


def test_ridge_cv_vs_gridsearch(benchmark):
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GridSearchCV

    n, d, t = SIZES["ridge"]
    x, y = _regression_data(n, d, t)
    grid = P.alpha_grid()
    t0 = time.perf_counter()
    ours = benchmark.pedantic(lambda: P.RidgeCV().fit(x, y), rounds=1, iterations=1)
    ours_s = time.perf_counter() - t0
    stride = _stride(15)
    sub = grid[::stride]
    t0 = time.perf_counter()
    gs = GridSearchCV(Ridge(), {"alpha": sub}, cv=5).fit(x.astype(np.float64), y)
    base_s = (time.perf_counter() - t0) * grid.size / sub.size
    diff = float(np.abs(gs.cv_results_["mean_test_score"] - ours.cv_results_["mean_test_score"][::stride]).max())
    _report(benchmark, f"RidgeCV n={n} d={d} t={t}, 45 λ x 5 folds", ours_s, base_s, stride > 1,
            max_abs_score_diff=diff, best_alpha=ours.alpha_)


def test_logistic_cv_vs_sklearn_loop(benchmark):
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    n, d, k = SIZES["logistic"]
    x, y = _classification_data(n, d, k)
    grid = P.alpha_grid()
    tol, max_iter = 1e-4, 500
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        ours = benchmark.pedantic(lambda: P.LogisticCV(tol=tol, max_iter=max_iter).fit(x, y), rounds=1,
                                  iterations=1)
        ours_s = time.perf_counter() - t0
        stride = _stride(9)
        sub = np.arange(0, grid.size, stride)
        t0 = time.perf_counter()
        sk = np.array([cross_val_score(LogisticRegression(C=1 / grid[j], tol=tol, max_iter=max_iter),
                                       x, y, cv=StratifiedKFold(5)).mean() for j in sub])
        base_s = (time.perf_counter() - t0) * grid.size / sub.size
    diff = float(np.abs(sk - ours.cv_results_["mean_test_accuracy"][sub]).max())
    _report(benchmark, f"LogisticCV n={n} d={d} K={k}, 45 C x 5 folds", ours_s, base_s, stride > 1,
            max_abs_accuracy_diff=diff, best_accuracy=ours.best_score_,
            converged_fraction=float(np.mean([ours.cv_results_[k] for k in ours.cv_results_ if k.endswith("_converged")])),
            total_lbfgs_iterations=int(sum(ours.cv_results_[k].sum() for k in ours.cv_results_ if k.endswith("_n_iter"))))


def test_kernel_ridge_cv_vs_gridsearch(benchmark):
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    n, d = SIZES["kernel"]
    x, y = _regression_data(n, d, 2, seed=1)
    y = np.tanh(y)
    t0 = time.perf_counter()
    ours = benchmark.pedantic(lambda: P.KernelRidgeCV().fit(x, y), rounds=1, iterations=1)
    ours_s = time.perf_counter() - t0
    est = TransformedTargetRegressor(Pipeline([("s", StandardScaler()), ("k", KernelRidge(kernel="rbf"))]),
                                     transformer=StandardScaler())
    t0 = time.perf_counter()
    gs = GridSearchCV(est, {"regressor__k__alpha": list(P.KERNEL_ALPHAS),
                            "regressor__k__gamma": list(P.KERNEL_GAMMAS)}, cv=5).fit(x.astype(np.float64), y)
    base_s = time.perf_counter() - t0
    diff = float(np.abs(gs.cv_results_["mean_test_score"] - ours.cv_results_["mean_test_score"]).max())
    _report(benchmark, f"KernelRidgeCV n={n} d={d}, 40 (α,γ) x 5 folds", ours_s, base_s, False,
            max_abs_score_diff=diff, best=(ours.alpha_, ours.gamma_))


@pytest.mark.parametrize("k_shot", [1, 5])
def test_few_shot_episodes(benchmark, k_shot):
    """2000 5-way episodes as batched ridge problems vs a loop of scikit-learn Ridge fits (200 timed)."""
    from sklearn.linear_model import Ridge

    from invfast.probes.few_shot import sample_episodes

    x, y = _classification_data(5000 if FULL else 1000, 512 if FULL else 64, 50, seed=2)
    t0 = time.perf_counter()
    res = benchmark.pedantic(lambda: P.few_shot(x, y, n_way=5, k_shot=k_shot, episodes=2000), rounds=1,
                             iterations=1)
    ours_s = time.perf_counter() - t0
    sup, qry = sample_episodes(y, 5, k_shot, 15, 200, 0)
    t0 = time.perf_counter()
    for e in range(200):
        Ridge(alpha=1.0).fit(x[sup[e]], np.eye(5)[np.arange(5).repeat(k_shot)]).predict(x[qry[e]])
    base_s = (time.perf_counter() - t0) * 10
    _report(benchmark, f"few_shot 5-way {k_shot}-shot, 2000 episodes", ours_s, base_s,
            "baseline: 200 Ridge episodes timed, x10",
            accuracy=str(res))
