"""RBF kernel ridge regression with cross-validation over (α, γ).

Features (and targets) are standardised on each training fold, as
``Pipeline([StandardScaler(), KernelRidge(kernel='rbf')])`` inside ``GridSearchCV`` would do.
Per fold the squared distances are computed once; per γ one eigendecomposition of the training
kernel K = U diag(s) Uᵀ gives the dual coefficients of every α as U diag(1/(s+α)) Uᵀ y.
``cv="loo"`` gives exact leave-one-out residuals e_i / (1 − H_ii) of every α from the same
eigendecomposition (H = U diag(s/(s+α)) Uᵀ), with X and y standardised once on all samples.
``solver='cholesky'`` instead factors K + αI for each α; that is cheaper for short α grids (the default
grid has 5 values and an eigendecomposition costs 7-20 Choleskys), so ``solver='auto'`` takes the
eigendecomposition from 16 α values up.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin

from invfast.probes._base import (
    ProbeTagsMixin,
    as_targets,
    check_features,
    check_is_fitted,
    check_positive,
    output_like,
    require_y,
)
from invfast.probes.cv_results import search_results
from invfast.probes.folds import resolve_cv
from invfast.probes.grids import KERNEL_ALPHAS, KERNEL_GAMMAS
from invfast.probes.ridge import mean_r2, r2_scores, scaled_products, sym_eigh
from invfast.runtime.progress import track

_F64 = torch.float64
# LAPACK's symmetric eigensolver costs 7x (n=400) to 20x (n=1600) one Cholesky factorisation
# (measured, one CPU thread), so one eigh per γ only pays off for long α grids.
_EIGH_MIN_ALPHAS = 16


def _scaler(a: torch.Tensor, on: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std (ddof=0; a zero std becomes 1, as StandardScaler) of the rows of ``a``."""
    if not on:
        return torch.zeros(a.shape[1], dtype=a.dtype, device=a.device), torch.ones(
            a.shape[1], dtype=a.dtype, device=a.device
        )
    mean = a.mean(0)
    std = a.std(0, unbiased=False)
    return mean, torch.where(std > 10 * torch.finfo(a.dtype).eps * mean.abs().clamp_min(1), std, torch.ones_like(std))


def sq_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Squared Euclidean distances [n_a, n_b] (clamped at 0)."""
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T)
    return d.clamp_min_(0)


def _path_predict(
    k_tr: torch.Tensor, k_te: torch.Tensor, y: torch.Tensor, alphas: torch.Tensor, solver: str
) -> torch.Tensor:
    """Predictions [A, n_te, t] of kernel ridge for every α (standardised target space); k_tr is consumed."""
    if solver == "eigh":
        s, u = sym_eigh(k_tr)
        c = u.T @ y
        q = k_te @ u
        return scaled_products(q, c, 1.0 / (s[None, :] + alphas[:, None]))
    out = []
    eye = torch.eye(k_tr.shape[0], dtype=k_tr.dtype, device=k_tr.device)
    for a in alphas:
        chol = torch.linalg.cholesky(k_tr + a * eye)
        out.append(k_te @ torch.cholesky_solve(y, chol))
    return torch.stack(out)


def kernel_loo_predictions(k: torch.Tensor, y: torch.Tensor, alphas: torch.Tensor) -> torch.Tensor:
    """Exact leave-one-out predictions [A, n, t] of kernel ridge (no intercept) for every α in
    ``alphas`` [A], from one eigendecomposition of the kernel ``k`` [n, n] (consumed); y [n, t]."""
    s, u = sym_eigh(k)
    shrink = s.clamp_min(0)[None, :] / (s.clamp_min(0)[None, :] + alphas[:, None])  # [A, n]
    fitted = scaled_products(u, u.T @ y, shrink)  # [A, n, t]
    hat = (u * u) @ shrink.T  # [n, A]
    return y - (y - fitted) / (1.0 - hat.T[:, :, None]).clamp_min(1e-12)


class KernelRidgeCV(ProbeTagsMixin, RegressorMixin, BaseEstimator):
    """RBF kernel ridge regression with (α, γ) chosen by K-fold cross-validation (Ericsson et al. 2021 BMVC).

    Parameters
    ----------
    alphas : sequence of float or None — ridge α (scikit-learn's ``KernelRidge(alpha=...)`` on
        standardised targets). None: 1e-4 … 1e0 (5 values).
    gammas : sequence of float or None — RBF γ in exp(−γ‖x − x′‖²) on standardised features.
        None: 1e-5 … 1e2 (8 values).
    cv : int, splitter, iterable of (train, test) or "loo"; an int gives ``KFold(cv)`` folds; "loo" exact
        leave-one-out (features and targets standardised once on all samples; one "split" in
        ``cv_results_``).
    standardize : standardise features and targets with training-fold statistics (default True).
    solver : "eigh" (one eigendecomposition per γ gives all α), "cholesky" (one factorisation per
        (α, γ)) or "auto" (eigh from 16 α values up, Cholesky below). ``cv="loo"`` always uses eigh.
    shuffle, random_state, verbose : as in ``RidgeCV``.

    Fitted attributes: alpha_, gamma_, best_index_, best_score_ (mean CV R²), best_params_
    ({'alpha', 'gamma'}), dual_coef_ [n, t], cv_results_ (GridSearchCV's layout: ``params`` and
    ``param_alpha``/``param_gamma`` in GridSearchCV's order, α outer and γ inner, ``mean_test_score``,
    ``std_test_score``, ``split{k}_test_score``, ``rank_test_score``), cv_scores_per_target_
    (numpy [n_candidates, n_splits, t]), oof_predictions_ ([n] or [n, t] like y: every sample's held-out
    prediction at (alpha_, gamma_) in y's units), n_features_in_, feature_names_in_ (DataFrame input only).
    """

    _multi_output = True

    def __init__(
        self,
        alphas: Any = None,
        gammas: Any = None,
        cv: Any = 5,
        standardize: bool = True,
        solver: str = "auto",
        shuffle: bool = False,
        random_state: int | None = None,
        verbose: bool = False,
    ):
        self.alphas = alphas
        self.gammas = gammas
        self.cv = cv
        self.standardize = standardize
        self.solver = solver
        self.shuffle = shuffle
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X: Any, y: Any) -> KernelRidgeCV:
        """Cross-validate every (α, γ) on X [n, d], y [n] or [n, t]; refit on all data at the best pair."""
        if self.solver not in ("auto", "eigh", "cholesky"):
            raise ValueError(f"solver must be 'auto', 'eigh' or 'cholesky', got {self.solver!r}")
        require_y(self, y)
        self._numpy_in = not isinstance(X, torch.Tensor)
        x = check_features(self, X, reset=True)
        n = x.shape[0]
        yt, one_d = as_targets(y if not isinstance(y, torch.Tensor) else y.to(x.device), "y", n)
        x, yt = x.to(_F64), yt.to(device=x.device, dtype=_F64)
        alphas = check_positive(KERNEL_ALPHAS if self.alphas is None else self.alphas, "alphas")
        gammas = check_positive(KERNEL_GAMMAS if self.gammas is None else self.gammas, "gammas")
        solver = self.solver if self.solver != "auto" else ("eigh" if alphas.size >= _EIGH_MIN_ALPHAS else "cholesky")
        a_t = torch.as_tensor(alphas, dtype=_F64, device=x.device)
        if isinstance(self.cv, str):
            scores, held_out = self._loo_scores(x, yt, a_t, gammas)
        else:
            scores, held_out = self._fold_scores(x, yt, a_t, gammas, solver)
        per_target = scores.reshape(alphas.size * gammas.size, scores.shape[2], -1)
        pairs = np.array([(a_, g_) for a_ in alphas for g_ in gammas])
        self.cv_results_, best = search_results(
            [{"alpha": float(a_), "gamma": float(g_)} for a_, g_ in pairs],
            per_target.mean(-1),
        )
        self.cv_scores_per_target_ = per_target
        self.best_index_ = best
        self.best_params_ = self.cv_results_["params"][best]
        self.alpha_, self.gamma_ = float(pairs[best, 0]), float(pairs[best, 1])
        self.best_score_ = float(self.cv_results_["mean_test_score"][best])
        xm, xs = _scaler(x, self.standardize)
        ym, ys = _scaler(yt, self.standardize)
        xf = (x - xm) / xs
        k = torch.exp(-self.gamma_ * sq_distances(xf, xf))
        k.diagonal().add_(self.alpha_)
        dual = torch.linalg.solve(k, (yt - ym) / ys)
        self._state = (xf, xm, xs, ym, ys, dual, one_d)
        self.dual_coef_ = output_like(dual[:, 0] if one_d else dual, self._numpy_in)
        oof = held_out.reshape(alphas.size * gammas.size, n, -1)[best]
        self.oof_predictions_ = output_like(oof[:, 0] if one_d else oof, self._numpy_in)
        return self

    def _loo_scores(
        self, x: torch.Tensor, yt: torch.Tensor, a_t: torch.Tensor, gammas: np.ndarray
    ) -> tuple[np.ndarray, torch.Tensor]:
        """R² [A, G, 1, t] of exact leave-one-out predictions on data standardised once, and those
        predictions [A, G, n, t] in the target's units."""
        if self.cv != "loo":
            raise ValueError(f"cv must be an int, a splitter, a list of splits or 'loo', got {self.cv!r}")
        if x.shape[0] < 3:
            raise ValueError(f"leave-one-out needs at least 3 samples, got n_samples={x.shape[0]}")
        xm, xs = _scaler(x, self.standardize)
        ym, ys = _scaler(yt, self.standardize)
        a = (x - xm) / xs
        d, y_s = sq_distances(a, a), (yt - ym) / ys
        scores = np.zeros((a_t.numel(), gammas.size, 1, yt.shape[1]))
        held_out = yt.new_empty(a_t.numel(), gammas.size, *yt.shape)
        for g, gamma in enumerate(track(gammas, desc="kernel ridge LOO", disable=not self.verbose, leave=False)):
            pred = kernel_loo_predictions(torch.exp(-gamma * d), y_s, a_t) * ys + ym
            held_out[:, g] = pred
            scores[:, g, 0] = r2_scores(pred, yt).cpu().numpy()
        return scores, held_out

    def _fold_scores(
        self, x: torch.Tensor, yt: torch.Tensor, a_t: torch.Tensor, gammas: np.ndarray, solver: str
    ) -> tuple[np.ndarray, torch.Tensor]:
        """R² [A, G, folds, t] of every (α, γ) on every held-out fold, and the held-out predictions
        [A, G, n, t] in the target's units (each sample's from the last fold that tests it; NaN if none does)."""
        splits = resolve_cv(self.cv, x.shape[0], shuffle=self.shuffle, seed=self.random_state)
        scores = np.zeros((a_t.numel(), gammas.size, len(splits), yt.shape[1]))
        held_out = torch.full((a_t.numel(), gammas.size, *yt.shape), float("nan"), dtype=yt.dtype, device=yt.device)
        for f, (train, test) in enumerate(
            track(splits, desc="kernel ridge folds", disable=not self.verbose, leave=False)
        ):
            tr = torch.as_tensor(train, device=x.device)
            te = torch.as_tensor(test, device=x.device)
            xm, xs = _scaler(x[tr], self.standardize)
            ym, ys = _scaler(yt[tr], self.standardize)
            a, b = (x[tr] - xm) / xs, (x[te] - xm) / xs
            d_tr, d_te = sq_distances(a, a), sq_distances(b, a)
            y_s = (yt[tr] - ym) / ys
            for g, gamma in enumerate(gammas):
                pred = _path_predict(torch.exp(-gamma * d_tr), torch.exp(-gamma * d_te), y_s, a_t, solver) * ys + ym
                held_out[:, g, te] = pred
                scores[:, g, f] = r2_scores(pred, yt[te]).cpu().numpy()
        return scores, held_out

    def predict(self, X: Any) -> Any:
        """Predictions [n] (1-D y at fit) or [n, t]; numpy for numpy input, else a tensor."""
        check_is_fitted(self)
        xf, xm, xs, ym, ys, dual, one_d = self._state
        is_np = not isinstance(X, torch.Tensor)
        x = check_features(self, X, reset=False)
        xn = (x.to(device=xf.device, dtype=_F64) - xm) / xs
        p = torch.exp(-self.gamma_ * sq_distances(xn, xf)) @ dual * ys + ym
        p = p[:, 0] if one_d else p
        if not is_np:
            p = p.to(x.device)
        return output_like(p, is_np)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean R² over targets (``r2_score`` with uniform averaging)."""
        return mean_r2(self, X, y, sample_weight)
