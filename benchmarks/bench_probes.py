"""Probe benchmarks: invfast vs the scikit-learn search a user would otherwise run, same run.

    python -m pytest benchmarks/bench_probes.py --benchmark-only -o addopts="" -s

Sizes (issue 5): RidgeCV n=10000, d=2048, 10 targets, 45 λ × 5 folds vs GridSearchCV(Ridge);
LogisticCV n=10000, d=512, 10 classes, 45 C × 5 folds vs the LogisticRegression(lbfgs) loop;
KernelRidgeCV 40 (α, γ) × 5 folds vs GridSearchCV over StandardScaler + KernelRidge (n=2000, d=512:
a 10000-sample kernel needs 8000³ factorisations per fit, beyond a shared CPU box).

Hard data (issue 27): ``photo_patch_features`` — random crops of the 19 photographs that ship with
scikit-image and scikit-learn, one class per photograph, through a fixed random 5×5 convolution,
ReLU and 4×4 average pooling, plus per-channel pixel statistics. Textures recur across photographs
(grass, gravel, brick, page, text), the features are unstandardised, correlated and nearly constant
in some directions (condition number of the covariance above 1e10): the kind of features on which
scikit-learn's L-BFGS runs to ``max_iter``. ``test_logistic_cv_hard_vs_logistic_regression_cv``
compares LogisticCV with ``LogisticRegressionCV`` at the same C grid (the 45 values of
``alpha_grid()``, C = 1/λ: both minimise Σ CE + ‖W‖²/(2C), SPEC §4), the same stratified folds,
tolerance (max |∇| of the mean loss <= 1e-4) and max_iter, both on one thread, and records the
ratio, both sides' unconverged fits and the accuracies at both chosen C.

Environment:
  INVFAST_BENCH_SMALL=1        smaller sizes (runs in a few minutes; also INVFAST_BENCH_PROBES=small).
  INVFAST_BENCH_STRIDE=k       time the scikit-learn baseline on every k-th grid value only and
                               extrapolate linearly to the whole grid (each value is an independent
                               cold fit there, so its cost is additive). Default: 15 for ridge and
                               9 for logistic at full size, 1 (no extrapolation) at small size.

On a shared machine run both sides on one thread (OMP_NUM_THREADS=1): oversubscribed OpenMP threads
slow torch and OpenBLAS by large, unequal factors. The machine load (``os.getloadavg``) is recorded
next to every ratio.
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pytest
import torch
from conftest import SMALL as BENCH_SMALL

import invfast.probes as P

SMALL = BENCH_SMALL or os.environ.get("INVFAST_BENCH_PROBES") == "small"
FULL = not SMALL
SIZES = {
    "ridge": (10000, 2048, 10) if FULL else (2000, 256, 10),
    "logistic": (10000, 512, 10) if FULL else (2000, 128, 10),
    "kernel": (2000, 512) if FULL else (500, 64),
    # (patches per photograph, photographs, random filters): n = 60 * 19 = 1140, d = 16 * 16 + 9 = 265
    "hard": (60, 19, 16) if FULL else (40, 10, 8),
}
PHOTOS = (
    "astronaut",
    "chelsea",
    "coffee",
    "rocket",
    "hubble_deep_field",
    "retina",
    "immunohistochemistry",
    "camera",
    "coins",
    "moon",
    "brick",
    "grass",
    "gravel",
    "cell",
    "clock",
    "page",
    "text",
)


def photo_patch_features(
    per_class: int, n_photos: int = 19, n_filters: int = 16, patch: int = 24, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Features [per_class * n_photos, 16 * n_filters + 9] (float32) of random ``patch``² crops of the
    photographs shipped with scikit-image and scikit-learn, and the photograph index as the label.

    Pixels in [0, 1] go through ``n_filters`` fixed random 5×5 filters (He-scaled, seed 1234), ReLU and
    4×4 adaptive average pooling; per-channel mean, std and 90th percentile are appended.
    """
    import skimage.data
    from sklearn.datasets import load_sample_images

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ims = [np.asarray(getattr(skimage.data, name)()) for name in PHOTOS] + list(load_sample_images().images)
    rng = np.random.default_rng(seed)
    crops, labels = [], []
    for c, im in enumerate(ims[:n_photos]):
        im = np.repeat(im[..., None], 3, 2) if im.ndim == 2 else im[..., :3]
        for _ in range(per_class):
            i, j = rng.integers(0, im.shape[0] - patch + 1), rng.integers(0, im.shape[1] - patch + 1)
            crops.append(im[i : i + patch, j : j + patch])
            labels.append(c)
    x = torch.from_numpy(np.stack(crops)).permute(0, 3, 1, 2).float() / 255
    filters = torch.randn(n_filters, 3, 5, 5, generator=torch.Generator().manual_seed(1234)) * (2 / 75) ** 0.5
    pooled = torch.nn.functional.adaptive_avg_pool2d(torch.relu(torch.nn.functional.conv2d(x, filters)), 4)
    stats = [x.mean((2, 3)), x.std((2, 3)), x.flatten(2).quantile(0.9, dim=2)]
    return torch.cat([pooled.flatten(1), *stats], 1).numpy(), np.asarray(labels)


def _stride(default_full: int) -> int:
    return int(os.environ.get("INVFAST_BENCH_STRIDE", default_full if FULL else 1))


def _report(benchmark, name: str, ours_s: float, base_s: float, extrapolated: bool | str, **extra) -> None:
    ratio = base_s / ours_s
    extra["load_average_1min"] = os.getloadavg()[0]
    benchmark.extra_info.update(
        {"invfast_s": ours_s, "baseline_s": base_s, "speedup": ratio, "baseline_extrapolated": extrapolated, **extra}
    )
    note = (
        ""
        if not extrapolated
        else (" (baseline extrapolated from a subset of the grid)" if extrapolated is True else f" ({extrapolated})")
    )
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
    _report(
        benchmark,
        f"RidgeCV n={n} d={d} t={t}, 45 λ x 5 folds",
        ours_s,
        base_s,
        stride > 1,
        max_abs_score_diff=diff,
        best_alpha=ours.alpha_,
    )


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
        ours = benchmark.pedantic(lambda: P.LogisticCV(tol=tol, max_iter=max_iter).fit(x, y), rounds=1, iterations=1)
        ours_s = time.perf_counter() - t0
        stride = _stride(9)
        sub = np.arange(0, grid.size, stride)
        t0 = time.perf_counter()
        sk = np.array(
            [
                cross_val_score(
                    LogisticRegression(C=1 / grid[j], tol=tol, max_iter=max_iter), x, y, cv=StratifiedKFold(5)
                ).mean()
                for j in sub
            ]
        )
        base_s = (time.perf_counter() - t0) * grid.size / sub.size
    diff = float(np.abs(sk - ours.cv_results_["mean_test_accuracy"][sub]).max())
    _report(
        benchmark,
        f"LogisticCV n={n} d={d} K={k}, 45 C x 5 folds",
        ours_s,
        base_s,
        stride > 1,
        max_abs_accuracy_diff=diff,
        best_accuracy=ours.best_score_,
        converged_fraction=float(np.mean([ours.cv_results_[k] for k in ours.cv_results_ if k.endswith("_converged")])),
        total_lbfgs_iterations=int(sum(ours.cv_results_[k].sum() for k in ours.cv_results_ if k.endswith("_n_iter"))),
    )


def _sklearn_logistic_cv(x, y, cs, tol, max_iter):
    """``LogisticRegressionCV`` with pure L2 at the given Cs; returns it, its scores and n_iter [Cs, folds]."""
    import inspect

    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.model_selection import StratifiedKFold

    params = inspect.signature(LogisticRegressionCV).parameters
    kw = {k: v for k, v in (("l1_ratios", (0.0,)), ("use_legacy_attributes", False)) if k in params}
    sk = LogisticRegressionCV(Cs=cs, cv=StratifiedKFold(5), tol=tol, max_iter=max_iter, scoring="accuracy", **kw).fit(
        x, y
    )

    def per_c(a):  # legacy layout {class: [folds, Cs]} or [folds, l1_ratios, Cs]
        a = np.asarray(next(iter(a.values()))) if isinstance(a, dict) else np.asarray(a)
        return a.reshape(a.shape[0], -1, a.shape[-1])[:, 0].T if a.ndim == 3 else a.T

    return sk, per_c(sk.scores_), per_c(sk.n_iter_)


def test_logistic_cv_hard_vs_logistic_regression_cv(benchmark):
    """Photo-patch features (ill-conditioned, many classes): LogisticCV vs LogisticRegressionCV, same grid,
    folds, tolerance and max_iter, one thread each."""
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    per_class, photos, filters = SIZES["hard"]
    x, y = photo_patch_features(per_class, photos, filters)
    grid = P.alpha_grid()  # λ ascending; C = 1/λ
    cs = np.sort(1.0 / grid)  # scikit-learn walks its Cs in the given order: strong -> weak, as LogisticCV
    tol, max_iter = 1e-4, 500
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1), warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # both sides' convergence is recorded below
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            ours = benchmark.pedantic(
                lambda: P.LogisticCV(tol=tol, max_iter=max_iter).fit(x, y), rounds=1, iterations=1
            )
            ours_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            sk, sk_scores, sk_iter = _sklearn_logistic_cv(x, y, cs, tol, max_iter)
            base_s = time.perf_counter() - t0
    finally:
        torch.set_num_threads(threads)
    ours_acc = ours.cv_results_["mean_test_accuracy"][::-1]  # in scikit-learn's C order
    # load-independent work: rows x classes through the two GEMMs. scikit-learn: one evaluation per
    # iteration (a lower bound) over its training rows; invfast: every batched evaluation counted as all
    # 5 folds over all n rows (an upper bound: converged folds leave the batch)
    n_train = x.shape[0] * 4 / 5
    work_ratio = sk_iter.sum() * n_train / (ours.n_loss_evaluations_ * 5 * x.shape[0])
    sk_acc = sk_scores.mean(1)
    j_sk, j_ours = int(np.argmax(sk_acc)), len(grid) - 1 - ours.best_index_
    _report(
        benchmark,
        f"LogisticCV hard photo patches n={x.shape[0]} d={x.shape[1]} K={photos}, 45 C x 5 folds "
        "vs LogisticRegressionCV",
        ours_s,
        base_s,
        False,
        load_average_at_start=load,
        invfast_unconverged=f"{int((~ours.cv_converged_).sum()) + (not ours.converged_)} of "
        f"{ours.cv_converged_.size + 1}",
        sklearn_at_max_iter=f"{int((sk_iter >= max_iter).sum())} of {sk_iter.size}",
        invfast_C=ours.C_,
        sklearn_C=float(sk.C_),
        invfast_best_accuracy=float(ours_acc[j_ours]),
        sklearn_best_accuracy=float(sk_acc[j_sk]),
        invfast_accuracy_at_sklearn_C=float(ours_acc[j_sk]),
        max_abs_accuracy_diff=float(np.abs(ours_acc - sk_acc).max()),
        invfast_loss_evaluations=ours.n_loss_evaluations_,
        sklearn_iterations=int(sk_iter.sum()),
        work_ratio_lower_bound=float(work_ratio),
    )


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
    est = TransformedTargetRegressor(
        Pipeline([("s", StandardScaler()), ("k", KernelRidge(kernel="rbf"))]), transformer=StandardScaler()
    )
    t0 = time.perf_counter()
    gs = GridSearchCV(
        est, {"regressor__k__alpha": list(P.KERNEL_ALPHAS), "regressor__k__gamma": list(P.KERNEL_GAMMAS)}, cv=5
    ).fit(x.astype(np.float64), y)
    base_s = time.perf_counter() - t0
    diff = float(np.abs(gs.cv_results_["mean_test_score"] - ours.cv_results_["mean_test_score"]).max())
    _report(
        benchmark,
        f"KernelRidgeCV n={n} d={d}, 40 (α,γ) x 5 folds",
        ours_s,
        base_s,
        False,
        max_abs_score_diff=diff,
        best=(ours.alpha_, ours.gamma_),
    )


@pytest.mark.parametrize("k_shot", [1, 5])
def test_few_shot_episodes(benchmark, k_shot):
    """2000 5-way episodes as batched ridge problems vs a loop of scikit-learn Ridge fits (200 timed)."""
    from sklearn.linear_model import Ridge

    from invfast.probes.few_shot import sample_episodes

    x, y = _classification_data(5000 if FULL else 1000, 512 if FULL else 64, 50, seed=2)
    t0 = time.perf_counter()
    res = benchmark.pedantic(lambda: P.few_shot(x, y, n_way=5, k_shot=k_shot, episodes=2000), rounds=1, iterations=1)
    ours_s = time.perf_counter() - t0
    sup, qry = sample_episodes(y, 5, k_shot, 15, 200, 0)
    t0 = time.perf_counter()
    for e in range(200):
        Ridge(alpha=1.0).fit(x[sup[e]], np.eye(5)[np.arange(5).repeat(k_shot)]).predict(x[qry[e]])
    base_s = (time.perf_counter() - t0) * 10
    _report(
        benchmark,
        f"few_shot 5-way {k_shot}-shot, 2000 episodes",
        ours_s,
        base_s,
        "baseline: 200 Ridge episodes timed, x10",
        accuracy=str(res),
    )
