"""Multinomial L2 logistic regression with cross-validation over a penalty path.

All folds are solved together by one batched, preconditioned L-BFGS (``invfast.probes.lbfgs`` on
``invfast.probes.softmax``), walking the path from strong to weak regularisation: each value starts
from the previous value's solution and curvature pairs. Features are centred on their mean (an
exact change of variables, the intercept being unpenalised) and the preconditioner inverts the
Kronecker approximation A ⊗ XᵀX/n + λ/n of the Hessian, so ill-conditioned features (raw pixel
statistics, ReLU maps) cost few iterations. The two products with X run in ``dtype`` (float32 by
default); logits, loss and optimiser state are float64, and a float32 fit that stalls above ``tol``
is finished with float64 products.

Objective per fold (n training samples), identical up to the factor 1/n to scikit-learn's::

    (1/n) Σ_i CE(y_i, W x_i + b)  +  λ/(2n) ‖W‖²        λ = alpha = 1 / C

Two classes use the binomial model (one weight vector, as ``LogisticRegression``), more use the
full softmax parameterisation. Convergence: max |∂/∂(W, b)| <= tol in the original coordinates
(scikit-learn's ``gtol``); every fit that stops short is recorded and reported.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import accuracy_score

from invfast.probes._base import (
    ConvergenceWarning,
    ProbeTagsMixin,
    as_class_labels,
    check_features,
    check_is_fitted,
    check_positive,
    label_array,
    output_like,
    require_y,
)
from invfast.probes.cv_results import score_columns, search_results
from invfast.probes.folds import resolve_cv
from invfast.probes.grids import alpha_grid
from invfast.probes.lbfgs import LBFGSResult, lbfgs
from invfast.probes.softmax import KroneckerPreconditioner, SoftmaxLoss
from invfast.runtime.progress import track

__all__ = ["LogisticCV", "class_scores"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_F64 = torch.float64
# relative roundoff of the float64 loss when the logits come from float32 / float64 products
_F_RTOL = {torch.float32: 1e-6, torch.float64: 1e-13}


def class_scores(pred: torch.Tensor, truth: torch.Tensor, n_classes: int) -> tuple[float, float]:
    """Accuracy and mean per-class accuracy (recall averaged over classes present in ``truth``)."""
    acc = float((pred == truth).double().mean())
    hits = torch.bincount(truth[pred == truth], minlength=n_classes).double()
    counts = torch.bincount(truth, minlength=n_classes).double()
    present = counts > 0
    return acc, float((hits[present] / counts[present]).mean())


class _Design:
    """The centred design [n, D(+1)] in the compute dtype (and lazily in float64), its mean, and the
    eigenpairs of XᵀX/n (its nonzero ones, from the n×n Gram, when n < D).

    Built in row chunks: the only full-size copy is the design itself.
    """

    def __init__(self, x: torch.Tensor, fit_intercept: bool, dtype: torch.dtype, chunk_elems: int = 1 << 22):
        n, d, dev = x.shape[0], x.shape[1], x.device
        self.mu = x.sum(0, dtype=_F64) / n if fit_intercept else torch.zeros(d, dtype=_F64, device=dev)
        self.fit_intercept, self.d, self._source = fit_intercept, d, x
        self.rows = max(1, chunk_elems // d)
        gram = torch.zeros(d, d, dtype=_F64, device=dev) if n >= d else None
        self.x = self._build(dtype, gram)
        self._x64 = self.x if dtype == _F64 else None
        if gram is not None:
            self.eig_s, self.eig_v = torch.linalg.eigh(gram / n)
        else:  # XᵀX/n = V diag(s) Vᵀ with V = Xᵀ U diag(1/sqrt(n s)) from X Xᵀ/n = U diag(s) Uᵀ
            xc = self.x[:, :d].to(_F64)
            s, u = torch.linalg.eigh(xc @ xc.T / n)
            keep = s > 1e-12 * s.max().clamp_min(1e-300)
            self.eig_s, self.eig_v = s[keep], (xc.T @ u[:, keep]) / (n * s[keep]).sqrt()

    def _build(self, dtype: torch.dtype, gram: torch.Tensor | None = None) -> torch.Tensor:
        x = self._source
        out = torch.ones(x.shape[0], self.d + self.fit_intercept, dtype=dtype, device=x.device)
        for i in range(0, x.shape[0], self.rows):
            xc = x[i : i + self.rows].to(_F64) - self.mu
            out[i : i + self.rows, : self.d] = xc
            if gram is not None:
                gram += xc.T @ xc
        return out

    def float64(self) -> torch.Tensor:
        if self._x64 is None:
            self._x64 = self._build(_F64)
        return self._x64

    def grad_norm(self, g: torch.Tensor) -> torch.Tensor:
        """max |gradient| [a] in the original coordinates (W, b) of gradients [a, Dp, Kout] taken in the
        centred ones (W, b' = b + W μ)."""
        if not self.fit_intercept:
            return g.abs().amax((1, 2))
        gw = g[:, : self.d] + self.mu[None, :, None] * g[:, self.d :]
        return torch.maximum(gw.abs().amax((1, 2)), g[:, self.d :].abs().amax((1, 2)))

    def to_original(self, w: torch.Tensor) -> torch.Tensor:
        """[Dp, Kout] weights in the centred coordinates -> the same model on uncentred X."""
        if not self.fit_intercept:
            return w
        return torch.cat([w[: self.d], w[self.d :] - self.mu[None] @ w[: self.d]], 0)


class _Path:
    """The losses of one set of problems: in the compute dtype, and in float64 once that is needed."""

    def __init__(self, design: _Design, pre: KroneckerPreconditioner, loss: SoftmaxLoss):
        self.design, self.pre, self.loss = design, pre, loss
        self.precise = loss.x.dtype == _F64
        self._exact: SoftmaxLoss | None = loss if self.precise else None

    def current(self) -> SoftmaxLoss:
        if not self.precise:
            return self.loss
        if self._exact is None:
            self._exact = self.loss.retyped(self.design.float64())
        return self._exact

    def n_evals(self) -> int:
        return self.loss.n_evals + (self._exact.n_evals if self._exact not in (None, self.loss) else 0)


class LogisticCV(ProbeTagsMixin, ClassifierMixin, BaseEstimator):
    """Multinomial L2 logistic regression, penalty chosen by stratified K-fold cross-validation.

    Parameters
    ----------
    alphas : sequence of float or None
        Penalties λ = 1/C of ``sklearn.linear_model.LogisticRegression`` (the grid is in λ so that it
        means the same as for ``RidgeCV``). None: ``alpha_grid(n_models)``.
    cv : int, splitter or iterable of (train, test)
        An int gives ``StratifiedKFold(cv)`` folds (shuffled with ``shuffle``), or ``KFold(cv)`` with
        ``stratify=False``. As in scikit-learn, a class with fewer members than folds gives a warning.
    scoring : "accuracy" or "mean_per_class_accuracy"
        The CV score that picks the penalty; both are always reported in ``cv_results_``.
    tol, max_iter : L-BFGS stops when max |gradient| <= tol (scipy's gtol, as scikit-learn, on the
        mean loss) or after max_iter iterations per penalty value. Fits that stop early are
        recorded (``cv_converged_``, ``converged_``) and named in one ``ConvergenceWarning``.
    dtype : "float32" or "float64"
        Precision of the two products with X (optimiser state is always float64). A float32 fit that
        cannot resolve ``tol`` (gradient noise near 1e-7 relative) is finished in float64.
    path_continuation : bool
        Walk the grid from strong to weak regularisation, starting each value from the previous
        value's solution (default True); False starts every value from zero. This is not
        scikit-learn's ``warm_start`` (reuse of the previous ``fit`` call's solution), which
        LogisticCV does not offer.
    fit_intercept, n_models, shuffle, random_state, verbose : as in ``RidgeCV``.
    stratify : stratified folds for an int ``cv`` (default True).

    Fitted attributes: classes_, coef_ [K, d] ([1, d] for two classes), intercept_, alpha_ (λ), C_ (= 1/alpha_,
    a float), best_index_, best_score_, best_params_ ({'C': 1/λ}: the ``LogisticRegression`` keyword),
    cv_results_ (GridSearchCV's layout with ``param_alpha`` and ``param_C``; ``*_test_score`` is the
    ``scoring`` metric, ``*_test_accuracy`` and ``*_test_mean_per_class_accuracy`` are both metrics,
    ``split{k}_n_iter`` and ``split{k}_converged`` the optimiser's record), cv_n_iter_ and
    cv_converged_ (numpy [n_alphas, n_splits]: iterations and convergence of every CV fit),
    oof_predictions_ ([n] labels from ``classes_``: each sample's held-out prediction at ``alpha_``),
    n_iter_ and converged_ (the refit on all data), n_loss_evaluations_ (batched loss and gradient
    evaluations of the whole fit: the solver's work), n_features_in_, feature_names_in_ (DataFrame
    input only).
    """

    def __init__(
        self,
        alphas: Any = None,
        cv: Any = 5,
        scoring: str = "accuracy",
        tol: float = 1e-4,
        max_iter: int = 500,
        dtype: str = "float32",
        fit_intercept: bool = True,
        path_continuation: bool = True,
        n_models: int = 1,
        stratify: bool = True,
        shuffle: bool = False,
        random_state: int | None = None,
        verbose: bool = False,
    ):
        self.alphas = alphas
        self.cv = cv
        self.scoring = scoring
        self.tol = tol
        self.max_iter = max_iter
        self.dtype = dtype
        self.fit_intercept = fit_intercept
        self.path_continuation = path_continuation
        self.n_models = n_models
        self.stratify = stratify
        self.shuffle = shuffle
        self.random_state = random_state
        self.verbose = verbose

    def _check_params(self) -> None:
        if self.scoring not in ("accuracy", "mean_per_class_accuracy"):
            raise ValueError(f"scoring must be 'accuracy' or 'mean_per_class_accuracy', got {self.scoring!r}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {self.dtype!r}")
        if not (float(self.tol) > 0 and int(self.max_iter) >= 1):
            raise ValueError(f"tol must be > 0 and max_iter >= 1, got tol={self.tol!r}, max_iter={self.max_iter!r}")

    def _solve(self, path: _Path, w0: torch.Tensor, lam: float, memory: list | None = None) -> LBFGSResult:
        """Minimise every problem of ``path`` at penalty ``lam`` from ``w0``. In float32, a problem whose
        loss stops resolving progress above ``tol`` is finished with float64 products, and the rest of
        the path runs in float64 (weaker penalties only make the weights, and the rounding, larger)."""
        loss = path.current()
        loss.lam = torch.full_like(loss.n_train, lam)
        path.pre.update(loss.start(w0), loss.lam / loss.n_train)
        tol, grad_norm = float(self.tol), path.design.grad_norm
        single = loss.x.dtype == _F64
        res = lbfgs(
            loss,
            w0,
            tol=tol,
            max_iter=int(self.max_iter),
            memory=memory,
            f_rtol=_F_RTOL[loss.x.dtype],
            stop_on_noise=not single,
            precond=path.pre,
            grad_norm=grad_norm,
        )
        stalled = torch.nonzero(res.stalled).flatten()
        left = int(self.max_iter) - int(res.n_iter[stalled].max()) if stalled.numel() else 0
        if left > 0 and not single:
            path.precise = True
            exact = path.current()
            exact.lam = loss.lam
            more = lbfgs(
                lambda w, i: exact(w, stalled[i]),
                res.x[stalled],
                tol=tol,
                max_iter=left,
                f_rtol=_F_RTOL[_F64],
                precond=lambda v, i: path.pre(v, stalled[i]),
                grad_norm=grad_norm,
            )
            res.x[stalled], res.loss[stalled], res.grad_norm[stalled] = more.x, more.loss, more.grad_norm
            res.n_iter[stalled] += more.n_iter
            res.converged[stalled] = more.converged
            res.memory = []
        return res

    def fit(self, X: Any, y: Any) -> LogisticCV:
        """Cross-validate every penalty on X [n, d] with labels y [n], then refit on all data at the best."""
        self._check_params()
        alphas, continuation = self.alphas, self.path_continuation
        require_y(self, y)
        self._numpy_in = not isinstance(X, torch.Tensor)
        x = check_features(self, X, reset=True)
        n = x.shape[0]
        codes, classes = as_class_labels(y, "y", n)
        k, dev = classes.size, x.device
        grid = alpha_grid(self.n_models) if alphas is None else check_positive(alphas, "alphas")
        splits = resolve_cv(
            self.cv, n, y=codes.numpy(), classifier=bool(self.stratify), shuffle=self.shuffle, seed=self.random_state
        )
        codes = codes.to(dev)
        design = _Design(x, self.fit_intercept, _DTYPES[self.dtype])
        pre = KroneckerPreconditioner(design.eig_s, design.eig_v, self.fit_intercept)
        tr = [torch.as_tensor(a, device=dev) for a, _ in splits]
        te = [torch.as_tensor(b, device=dev) for _, b in splits]
        path = _Path(design, pre, SoftmaxLoss(design.x, codes, tr, k, self.fit_intercept))
        loss = path.loss
        nf, n_out = len(splits), loss.kout
        w = torch.zeros(nf, design.x.shape[1], n_out, dtype=_F64, device=dev)
        acc, bacc = np.zeros((grid.size, nf)), np.zeros((grid.size, nf))
        n_iter, conv = np.zeros((grid.size, nf), dtype=np.int64), np.zeros((grid.size, nf), dtype=bool)
        # out-of-fold class codes of every penalty, on the host in the narrowest type that holds them
        held_out = np.zeros((grid.size, n), dtype=np.int16 if k <= np.iinfo(np.int16).max else np.int32)
        sols: dict[int, torch.Tensor] = {}
        memory: list | None = None
        prev: float | None = None
        mask = loss.mask.expand(-1, n_out).reshape(1, -1)
        for j in track(np.argsort(-grid, kind="stable"), desc="logistic path", disable=not self.verbose, leave=False):
            lam = float(grid[j])
            if continuation and memory and prev is not None:
                # curvature pairs of the previous value, its penalty swapped for this one
                shift = ((lam - prev) / loss.n_train)[:, None] * mask
                memory = [(s, yv + shift * s) for s, yv in memory]
            res = self._solve(path, w if continuation else torch.zeros_like(w), lam, memory if continuation else None)
            w, memory, prev = res.x, res.memory, lam
            n_iter[j], conv[j] = res.n_iter.cpu().numpy(), res.converged.cpu().numpy()
            for f in range(nf):
                pred = path.current().logits(w[f], te[f]).argmax(-1)
                held_out[j, splits[f][1]] = pred.cpu().numpy()
                acc[j, f], bacc[j, f] = class_scores(pred, codes[te[f]], k)
            sols[int(j)] = w.mean(0, keepdim=True)
        self._record(grid, acc, bacc, n_iter, conv)
        self._keep_out_of_fold(classes[held_out[self.best_index_]], dev)
        full = _Path(design, pre, SoftmaxLoss(design.x, codes, [torch.arange(n, device=dev)], k, self.fit_intercept))
        res = self._solve(full, sols[self.best_index_], self.alpha_)
        self.n_iter_, self.converged_ = int(res.n_iter[0]), bool(res.converged[0])
        self.n_loss_evaluations_ = path.n_evals() + full.n_evals()
        self._warn_unconverged()
        self._w = design.to_original(res.x[0])
        self.classes_ = classes
        coef = (self._w[:-1] if self.fit_intercept else self._w).T
        icpt = self._w[-1] if self.fit_intercept else torch.zeros(n_out, dtype=_F64, device=dev)
        self.coef_ = output_like(coef, self._numpy_in)
        self.intercept_ = output_like(icpt, self._numpy_in)
        return self

    def _keep_out_of_fold(self, oof: np.ndarray, dev: torch.device) -> None:
        """``oof_predictions_``: numpy for numpy input or non-numeric labels, else a tensor on ``dev``."""
        numeric = oof.dtype.kind in "iufb"
        self.oof_predictions_ = torch.as_tensor(oof, device=dev) if numeric and not self._numpy_in else oof

    def _record(
        self, grid: np.ndarray, acc: np.ndarray, bacc: np.ndarray, n_iter: np.ndarray, conv: np.ndarray
    ) -> None:
        nf = acc.shape[1]
        sel = acc if self.scoring == "accuracy" else bacc
        extra = {**score_columns(acc, "accuracy"), **score_columns(bacc, "mean_per_class_accuracy")}
        extra.update({f"split{f}_n_iter": n_iter[:, f].copy() for f in range(nf)})
        extra.update({f"split{f}_converged": conv[:, f].copy() for f in range(nf)})
        self.cv_results_, best = search_results(
            [{"C": float(1.0 / lam)} for lam in grid],
            sel,
            extra=extra,
            param_columns={"alpha": grid.copy()},
        )
        self.cv_n_iter_, self.cv_converged_ = n_iter, conv
        self.best_index_ = best
        self.best_params_ = self.cv_results_["params"][best]
        self.alpha_ = float(grid[best])
        self.C_ = 1.0 / self.alpha_
        self.best_score_ = float(self.cv_results_["mean_test_score"][best])

    def unconverged_summary(self) -> str | None:
        """'N of M fits ... at C = ...' for the fits that stopped before tol, or None when all converged."""
        bad = ~self.cv_converged_
        total = int(bad.sum()) + (not self.converged_)
        if not total:
            return None
        cs = np.sort(1.0 / self.cv_results_["param_alpha"][bad.any(1)])
        where = (
            ", ".join(f"{c:.3g}" for c in cs) if cs.size <= 5 else f"{cs.size} values from {cs[0]:.3g} to {cs[-1]:.3g}"
        )
        refit = "" if self.converged_ else f"{' and' if cs.size else ''} the refit at C = {self.C_:.3g}"
        at = f" at C = {where}" if cs.size else ""
        return f"{total} of {bad.size + 1} fits stopped before max|grad| <= tol{at}{refit}"

    def _warn_unconverged(self) -> None:
        """One ConvergenceWarning line naming how many fits stopped short and at which C."""
        summary = self.unconverged_summary()
        if summary:
            warnings.warn(
                f"LogisticCV: {summary} (tol={self.tol:g}, max_iter={self.max_iter}); cv_converged_ and "
                "converged_ say which. Raise max_iter, or tol for a looser fit.",
                ConvergenceWarning,
                stacklevel=3,
            )

    def _logits(self, X: Any) -> torch.Tensor:
        check_is_fitted(self)
        x = check_features(self, X, reset=False).to(device=self._w.device, dtype=_F64)
        z = x @ self._w[:-1] + self._w[-1] if self.fit_intercept else x @ self._w
        return torch.cat([torch.zeros_like(z), z], 1) if self._w.shape[1] == 1 else z

    def decision_function(self, X: Any) -> Any:
        """Class scores [n, K] ([n] for two classes, as scikit-learn)."""
        z = self._logits(X)
        z = z[:, 1] if self.classes_.size == 2 else z
        return output_like(z, not isinstance(X, torch.Tensor))

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities [n, K]."""
        return output_like(torch.softmax(self._logits(X), 1), not isinstance(X, torch.Tensor))

    def predict(self, X: Any) -> Any:
        """Predicted labels [n] (values from ``classes_``; a tensor for tensor input when labels are numeric)."""
        idx = self._logits(X).argmax(1).cpu().numpy()
        labels = self.classes_[idx]
        if isinstance(X, torch.Tensor) and labels.dtype.kind in "iufb":
            return torch.as_tensor(labels, device=X.device)
        return labels

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Accuracy on (X, y), as ``sklearn.metrics.accuracy_score``; NaN labels raise a ValueError."""
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported by invfast probes")
        truth = label_array(y, "y")
        pred = self.predict(X)
        pred = pred.cpu().numpy() if isinstance(pred, torch.Tensor) else pred
        if truth.shape[0] != pred.shape[0]:
            raise ValueError(f"y has {truth.shape[0]} labels but X has {pred.shape[0]} samples; they must match")
        return float(accuracy_score(truth, pred))
