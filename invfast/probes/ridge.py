"""Ridge regression with exact cross-validation over a whole penalty grid.

Per fold, one eigendecomposition of the centred Gram matrix XᵀX (or of XXᵀ when the fold has
fewer samples than features) turns every λ into a diagonal rescale:

    W(λ) = V diag(1 / (s + λ)) Vᵀ Xᵀy          (XᵀX = V diag(s) Vᵀ)

so 45 penalties cost one factorisation plus 45 small matrix products. The full-data Gram is
formed once; each fold's training Gram is that minus the held-out block. Everything runs in
float64 on the input's device. Centring and the unpenalised intercept follow
``sklearn.linear_model.Ridge(fit_intercept=True)``; λ equals Ridge's ``alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
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
from invfast.probes.grids import alpha_grid
from invfast.runtime.progress import track

__all__ = [
    "r2_scores",
    "mean_r2",
    "sym_eigh",
    "scaled_products",
    "ridge_cv_predictions",
    "ridge_loo_predictions",
    "ridge_solve",
    "RidgeCV",
]

_F64 = torch.float64


def r2_scores(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """R² per target, as ``sklearn.metrics.r2_score(..., multioutput='raw_values')``.

    pred: [..., n, t], y: [n, t] -> [..., t]. A constant target scores 1 when predicted exactly,
    else 0 (scikit-learn's force_finite rule).
    """
    ss_res = ((y - pred) ** 2).sum(-2)
    ss_tot = ((y - y.mean(0)) ** 2).sum(0)
    ok = ss_tot > 0
    r2 = 1.0 - ss_res / torch.where(ok, ss_tot, torch.ones_like(ss_tot))
    const = torch.where(ss_res == 0, torch.ones_like(r2), torch.zeros_like(r2))
    return torch.where(ok, r2, const)


def mean_r2(est: Any, X: Any, y: Any, sample_weight: Any = None) -> float:
    """A fitted regressor's mean R² over targets on (X, y): scikit-learn's ``score`` of a regressor."""
    if sample_weight is not None:
        raise ValueError("sample_weight is not supported by invfast probes")
    check_is_fitted(est)
    p = torch.as_tensor(est.predict(X)).to(_F64).cpu()
    yt, _ = as_targets(y, "y", p.shape[0])
    p = p[:, None] if p.dim() == 1 else p
    return float(r2_scores(p, yt.to(_F64).cpu()).mean())


def sym_eigh(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvalues (ascending) and eigenvectors of the symmetric float64 matrix ``a`` (overwritten).

    On CPU this calls LAPACK's divide-and-conquer solver through SciPy (chosen over ``torch.linalg.eigh`` for
    its speed at d = 2048 on one thread; that timing is not kept in benchmarks/); elsewhere ``torch.linalg.eigh``.
    """
    if a.device.type == "cpu":
        s, v = scipy.linalg.eigh(a.numpy(), driver="evd", overwrite_a=True, check_finite=False)
        return torch.from_numpy(s), torch.from_numpy(v)
    return torch.linalg.eigh(a)


def scaled_products(left: torch.Tensor, right: torch.Tensor, inv: torch.Tensor) -> torch.Tensor:
    """``left @ diag(inv[p]) @ right`` for every row p of ``inv`` as one GEMM.

    left [k, r], right [r, t], inv [P, r] -> [P, k, t]. (Broadcasting ``left`` against a [P, r, t]
    stack would copy it P times.)
    """
    stacked = (right[None] * inv[:, :, None]).permute(1, 0, 2).reshape(right.shape[0], -1)  # [r, P*t]
    return (left @ stacked).view(left.shape[0], inv.shape[0], right.shape[1]).transpose(0, 1)


@dataclass
class _Centred:
    """Training statistics of one fold in a frame already centred on the full-data mean."""

    gram: torch.Tensor  # [d, d] centred XᵀX of the training fold
    xty: torch.Tensor  # [d, t] centred Xᵀy
    x_mean: torch.Tensor  # [d] training mean (in the shifted frame)
    y_mean: torch.Tensor  # [t]


def _path_predict_primal(st: _Centred, x_test: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """Predictions [P, k, t] on ``x_test`` [k, d] for every λ in ``lam`` [P] from one eigendecomposition."""
    s, v = sym_eigh(st.gram)
    s = s.clamp_min(0)
    b = v.T @ st.xty  # [d, t]
    proj = (x_test - st.x_mean) @ v  # [k, d]
    return scaled_products(proj, b, 1.0 / (s[None, :] + lam[:, None])) + st.y_mean


def _path_predict_dual(
    xc: torch.Tensor, yc: torch.Tensor, x_test_c: torch.Tensor, y_mean: torch.Tensor, lam: torch.Tensor
) -> torch.Tensor:
    """Kernel form for m < d: centred train xc [m, d], yc [m, t]; test x_test_c [k, d] -> [P, k, t]."""
    s, u = sym_eigh(xc @ xc.T)
    s = s.clamp_min(0)
    c = u.T @ yc  # [m, t]
    q = (x_test_c @ xc.T) @ u  # [k, m]
    return scaled_products(q, c, 1.0 / (s[None, :] + lam[:, None])) + y_mean


def ridge_cv_predictions(
    x: torch.Tensor,
    y: torch.Tensor,
    splits: list[tuple[np.ndarray, np.ndarray]],
    penalties: torch.Tensor,
    fit_intercept: bool = True,
    progress: bool = False,
    full_gram: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """Held-out predictions of ridge for every penalty and fold.

    x [n, d], y [n, t] (float64, same device), penalties [P]. Returns one [P, n_test_f, t] tensor per fold.
    ``full_gram``: (x0ᵀx0, x0ᵀy) with x0 = x centred on its mean (or x itself without intercept),
    if already computed.
    """
    n, d = x.shape
    x0 = x - x.mean(0) if fit_intercept else x
    out = []
    for train, test in track(splits, desc="ridge folds", disable=not progress, leave=False):
        tr = torch.as_tensor(train, device=x.device)
        te = torch.as_tensor(test, device=x.device)
        m = tr.numel()
        xtr, ytr, xte = x0[tr], y[tr], x0[te]
        mu = xtr.mean(0) if fit_intercept else torch.zeros(d, dtype=x.dtype, device=x.device)
        ym = ytr.mean(0) if fit_intercept else torch.zeros(y.shape[1], dtype=y.dtype, device=y.device)
        if m >= d:
            complement = m + te.numel() == n and bool(torch.unique(torch.cat([tr, te])).numel() == n)
            if complement:  # training Gram = full Gram minus the held-out block
                if full_gram is None:
                    full_gram = (x0.T @ x0, x0.T @ y)
                g = full_gram[0] - xte.T @ xte
                xy = full_gram[1] - xte.T @ y[te]
            else:
                g, xy = xtr.T @ xtr, xtr.T @ ytr
            if fit_intercept:
                g = g - m * torch.outer(mu, mu)
                xy = xy - m * torch.outer(mu, ym)
            out.append(_path_predict_primal(_Centred(g, xy, mu, ym), xte, penalties))
        else:
            out.append(_path_predict_dual(xtr - mu, ytr - ym, xte - mu, ym, penalties))
    return out


def ridge_loo_predictions(
    x: torch.Tensor, y: torch.Tensor, penalties: torch.Tensor, fit_intercept: bool = True
) -> torch.Tensor:
    """Exact leave-one-out predictions [P, n, t] for every penalty from one eigendecomposition,
    via e_loo = e / (1 − h_ii) with the hat matrix of the intercept-plus-ridge fit. The division costs
    digits near interpolation (n < d and a small penalty make 1 − h_ii ~ 1e-5): the error is about
    1e-12 · max|y| / (1 − h_ii) in float64, a relative 1e-5 at worst in the tests' data."""
    n, d = x.shape
    if fit_intercept:
        xm, ym = x.mean(0), y.mean(0)
        xc, yc, h0 = x - xm, y - ym, 1.0 / n
    else:
        xc, yc, ym, h0 = x, y, torch.zeros(y.shape[1], dtype=y.dtype, device=y.device), 0.0
    if n >= d:
        s, v = sym_eigh(xc.T @ xc)
        s = s.clamp_min(0)
        xv = xc @ v  # [n, d]
        b = v.T @ (xc.T @ yc)
        inv = 1.0 / (s[None, :] + penalties[:, None])  # [P, d]
        fitted = scaled_products(xv, b, inv) + ym
        hat = h0 + (xv**2) @ inv.T  # [n, P]
    else:
        s, u = sym_eigh(xc @ xc.T)
        s = s.clamp_min(0)
        c = u.T @ yc
        shrink = s[None, :] / (s[None, :] + penalties[:, None])  # [P, n]
        fitted = scaled_products(u, c, shrink) + ym
        hat = h0 + (u**2) @ shrink.T
    resid = (y - fitted) / (1.0 - hat.T[:, :, None]).clamp_min(1e-12)
    return y - resid


def ridge_solve(
    x: torch.Tensor,
    y: torch.Tensor,
    penalty: float,
    fit_intercept: bool = True,
    full_gram: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One ridge fit: coefficients [d, t] and intercept [t] (float64, primal or kernel form).

    ``full_gram`` as in :func:`ridge_cv_predictions` saves recomputing the Gram matrix."""
    n, d = x.shape
    if fit_intercept:
        xm, ym = x.mean(0), y.mean(0)
        xc, yc = x - xm, y - ym
    else:
        xm = torch.zeros(d, dtype=x.dtype, device=x.device)
        ym = torch.zeros(y.shape[1], dtype=y.dtype, device=y.device)
        xc, yc = x, y
    if n >= d:
        a, b = (xc.T @ xc, xc.T @ yc) if full_gram is None else (full_gram[0].clone(), full_gram[1])
        a.diagonal().add_(penalty)
        w = torch.linalg.solve(a, b)
    else:
        k = xc @ xc.T
        k.diagonal().add_(penalty)
        w = xc.T @ torch.linalg.solve(k, yc)
    return w, ym - xm @ w


class RidgeCV(ProbeTagsMixin, RegressorMixin, BaseEstimator):
    """Multi-output ridge regression, α chosen by K-fold (or exact leave-one-out) cross-validation.

    Parameters
    ----------
    alphas : sequence of float or None
        Penalties λ, each ``Ridge(alpha=λ)``. None: ``alpha_grid(n_models)``, the 45 values of Ericsson et al.
        (2021, App. E).
    cv : int, splitter, iterable of (train, test) or "loo"
        Folds. An int gives contiguous K-fold (identical to ``KFold(cv)``; shuffled with
        ``shuffle=True``); "loo" uses exact leave-one-out residuals from one eigendecomposition.
    fit_intercept : bool
        Centre X and y on each training fold and fit an unpenalised intercept (as scikit-learn).
    n_models : int
        Number of fused models, which shifts the default grid one decade per extra model.
    shuffle, random_state : shuffle samples before K-fold splitting.
    verbose : bool
        Progress bar over folds.

    Fitted attributes
    -----------------
    alpha_ : the selected λ. best_index_, best_score_ (mean CV R² over folds), best_params_ ({'alpha': λ}).
    cv_results_ : GridSearchCV's layout (``params``, ``param_alpha``, ``mean_test_score``,
        ``std_test_score``, ``split{k}_test_score``, ``rank_test_score``; R² averaged over targets).
    cv_scores_per_target_ : numpy [n_alphas, n_splits, t], CV R² of every target.
    r2_per_target_ : [t], CV R² per target at ``alpha_``.
    oof_predictions_ : [n, t] (or [n] for 1-D y), every sample's held-out (fold or LOO) prediction at ``alpha_``.
    coef_ [t, d] (or [d] for 1-D y), intercept_ [t] (or float), n_features_in_, feature_names_in_
    (DataFrame input only). Arrays are numpy when fit got numpy, tensors otherwise.
    """

    _multi_output = True

    def __init__(
        self,
        alphas: Any = None,
        cv: Any = 5,
        fit_intercept: bool = True,
        n_models: int = 1,
        shuffle: bool = False,
        random_state: int | None = None,
        verbose: bool = False,
    ):
        self.alphas = alphas
        self.cv = cv
        self.fit_intercept = fit_intercept
        self.n_models = n_models
        self.shuffle = shuffle
        self.random_state = random_state
        self.verbose = verbose

    def fit(self, X: Any, y: Any) -> RidgeCV:
        """Cross-validate every α, then refit on all of X [n, d], y [n] or [n, t] at the best one."""
        alphas = self.alphas
        require_y(self, y)
        self._numpy_in = not isinstance(X, torch.Tensor)
        x = check_features(self, X, reset=True)
        n, d = x.shape
        yt, one_d = as_targets(y if not isinstance(y, torch.Tensor) else y.to(x.device), "y", n)
        x = x.to(_F64)
        yt = yt.to(device=x.device, dtype=_F64)
        full_gram = None
        grid = alpha_grid(self.n_models) if alphas is None else check_positive(alphas, "alphas")
        lam = torch.as_tensor(grid, dtype=_F64, device=x.device)
        if isinstance(self.cv, str):
            if self.cv != "loo":
                raise ValueError(f"cv must be an int, a splitter, a list of splits or 'loo', got {self.cv!r}")
            if n < 3:
                raise ValueError(f"leave-one-out needs at least 3 samples, got n_samples={n}")
            pred = ridge_loo_predictions(x, yt, lam, self.fit_intercept)
            per_target = r2_scores(pred, yt)[:, None, :]  # [P, 1, t]
        else:
            splits = resolve_cv(self.cv, n, shuffle=self.shuffle, seed=self.random_state)
            if n > d:
                x0 = x - x.mean(0) if self.fit_intercept else x
                full_gram = (x0.T @ x0, x0.T @ yt)
            preds = ridge_cv_predictions(
                x, yt, splits, lam, self.fit_intercept, progress=self.verbose, full_gram=full_gram
            )
            te_idx = [torch.as_tensor(te, device=x.device) for _, te in splits]
            per_target = torch.stack([r2_scores(p, yt[te]) for p, te in zip(preds, te_idx)], dim=1)  # [P, F, t]
        per_target_np = per_target.cpu().numpy()
        self.cv_results_, best = search_results(
            [{"alpha": float(a)} for a in grid],
            per_target_np.mean(-1),
        )
        self.cv_scores_per_target_ = per_target_np
        self.best_index_ = best
        self.best_params_ = self.cv_results_["params"][best]
        self.alpha_ = float(grid[best])
        self.best_score_ = float(self.cv_results_["mean_test_score"][best])
        w, b = ridge_solve(x, yt, self.alpha_, self.fit_intercept, full_gram=full_gram)
        self._w, self._b, self._one_d = w, b, one_d
        r2t = torch.as_tensor(per_target_np.mean(1)[best])
        self.r2_per_target_ = output_like(r2t, self._numpy_in)
        coef = w.T[0] if one_d else w.T
        self.coef_ = output_like(coef, self._numpy_in)
        self.intercept_ = float(b[0]) if one_d else output_like(b, self._numpy_in)
        if isinstance(self.cv, str):
            held_out = pred[best]
        else:  # each sample from the fold that tested it (the last one if several did)
            held_out = torch.full_like(yt, float("nan"))
            for p, te in zip(preds, te_idx):
                held_out[te] = p[best]
        self.oof_predictions_ = output_like(held_out[:, 0] if one_d else held_out, self._numpy_in)
        return self

    def predict(self, X: Any) -> Any:
        """Predictions [n] (1-D y at fit) or [n, t]; numpy for numpy input, else a tensor on X's device."""
        check_is_fitted(self)
        is_np = not isinstance(X, torch.Tensor)
        x = check_features(self, X, reset=False)
        p = x.to(device=self._w.device, dtype=_F64) @ self._w + self._b
        p = p[:, 0] if self._one_d else p
        if not is_np:
            p = p.to(device=x.device, dtype=x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32)
        return output_like(p, is_np)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean R² over targets (``r2_score`` with uniform averaging)."""
        return mean_r2(self, X, y, sample_weight)
