"""Multinomial L2 logistic regression with cross-validation over a penalty path.

All folds are solved together by one batched L-BFGS (``invfast.probes.lbfgs``), and the path is
walked from strong to weak regularisation, each value warm-started from the previous solution.
The two products with X run in ``dtype`` (float32 by default); logits are promoted to float64 for
the loss and softmax, and the optimiser state is float64.

Objective per fold (n training samples), identical up to the factor 1/n to scikit-learn's::

    (1/n) Σ_i CE(y_i, W x_i + b)  +  λ/(2n) ‖W‖²        λ = alpha = 1 / C

Two classes use the binomial model (one weight vector, as ``LogisticRegression``), more use the
full softmax parameterisation.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from invfast.probes._base import (DEPRECATED, ClassifierMixin, ConvergenceWarning, ProbeBase, ProbeTagsMixin,
                                  as_class_labels, check_features, check_is_fitted, check_positive,
                                  deprecated_attribute, output_like, renamed_param, require_y, score_columns,
                                  search_results)
from invfast.probes.folds import resolve_cv
from invfast.probes.grids import alpha_grid
from invfast.probes.lbfgs import lbfgs

__all__ = ["LogisticCV", "ConvergenceWarning", "class_scores"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _design(x: torch.Tensor, fit_intercept: bool) -> torch.Tensor:
    return torch.cat([x, torch.ones(x.shape[0], 1, dtype=x.dtype, device=x.device)], 1) if fit_intercept else x


def _fold_weights(n: int, index_sets: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """[F, n] sample weights: 1/|train_f| on fold f's training samples, 0 elsewhere."""
    w = torch.zeros((len(index_sets), n), dtype=torch.float64, device=device)
    for f, idx in enumerate(index_sets):
        w[f, idx] = 1.0 / idx.numel()
    return w


class _Multinomial:
    """Objective and gradient of the penalised softmax (or binomial) loss of F problems sharing X.

    Fold f sees every sample with weight ``weights[f]`` (zero off its training set), so the F weight
    matrices are stacked side by side and each evaluation is one GEMM X [n, D] @ [D, F·K] and one
    GEMM back, over row chunks that bound the float64 logits to about ``chunk_elems`` entries.
    """

    def __init__(self, x: torch.Tensor, codes: torch.Tensor, weights: torch.Tensor, n_classes: int,
                 fit_intercept: bool, chunk_elems: int = 1 << 24):
        self.x, self.codes, self.weights = x, codes, weights
        self.wt = weights.T.contiguous()                   # [n, F]
        self.binary = n_classes == 2
        self.k = n_classes
        self.nf = weights.shape[0]
        self.mask = torch.ones(x.shape[1], 1, dtype=torch.float64, device=x.device)
        if fit_intercept:
            self.mask[-1] = 0.0
        self.n = (weights > 0).sum(1).to(torch.float64)   # [F]
        self.lam = torch.zeros_like(self.n)                # [F], set per path value
        self.rows = max(1, chunk_elems // (self.nf * n_classes))
        self._last: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def _stack(self, w: torch.Tensor) -> torch.Tensor:
        return w.permute(1, 0, 2).reshape(w.shape[1], -1).to(self.x.dtype)   # [D, F*Kout]

    def _z(self, xc: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
        """float64 logits [r, F, K] of a row chunk (sample-major: no transposes on the hot path)."""
        z = (xc @ ws).to(torch.float64).view(xc.shape[0], self.nf, -1)
        return torch.cat([torch.zeros_like(z), z], -1) if self.binary else z

    def logits(self, w: torch.Tensor) -> torch.Tensor:
        """Logits [F, n, K] of every sample under every fold's weights."""
        ws = self._stack(w)
        z = torch.cat([self._z(self.x[i:i + self.rows], ws) for i in range(0, self.x.shape[0], self.rows)], 0)
        return z.transpose(0, 1)

    def __call__(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # logits, loss and softmax in float64 keep the line search exact enough for tight
        # tolerances; only the two products with X run in the compute dtype
        if self._last is not None and torch.equal(self._last[0], w):
            ce, gs = self._last[1], self._last[2]   # warm start: same point, only λ changed
        else:
            ce, gs = self._data_term(w)
            self._last = (w.clone(), ce, gs)
        reg = self.lam / self.n
        loss = ce + 0.5 * reg * ((w * self.mask) ** 2).sum((1, 2))
        grad = gs.view(w.shape[1], self.nf, -1).transpose(0, 1) + reg[:, None, None] * w * self.mask
        return loss, grad

    def _data_term(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Weighted mean cross-entropy [F] and its gradient, stacked [D, F*Kout] (float64)."""
        ws = self._stack(w)
        ce = torch.zeros(self.nf, dtype=torch.float64, device=w.device)
        gs = torch.zeros(ws.shape, dtype=torch.float64, device=w.device)
        for i in range(0, self.x.shape[0], self.rows):
            xc, cc, wc = self.x[i:i + self.rows], self.codes[i:i + self.rows], self.wt[i:i + self.rows]
            z = self._z(xc, ws)                                   # [r, F, K]
            lse = torch.logsumexp(z, -1, keepdim=True)
            idx = cc[:, None, None].expand(-1, self.nf, 1)
            ce += ((lse - z.gather(-1, idx))[..., 0] * wc).sum(0)
            p = torch.exp(z - lse)
            p.scatter_add_(-1, idx, -torch.ones_like(p[..., :1]))
            p *= wc[..., None]
            if self.binary:
                p = p[..., 1:]
            gs += (xc.T @ p.reshape(xc.shape[0], -1).to(xc.dtype)).to(torch.float64)
        return ce, gs


def class_scores(pred: torch.Tensor, truth: torch.Tensor, n_classes: int) -> tuple[float, float]:
    """Accuracy and mean per-class accuracy (recall averaged over classes present in ``truth``)."""
    acc = float((pred == truth).double().mean())
    hits = torch.bincount(truth[pred == truth], minlength=n_classes).double()
    counts = torch.bincount(truth, minlength=n_classes).double()
    present = counts > 0
    return acc, float((hits[present] / counts[present]).mean())


class LogisticCV(ProbeTagsMixin, ClassifierMixin, ProbeBase):
    """Multinomial L2 logistic regression, penalty chosen by stratified K-fold cross-validation.

    Parameters
    ----------
    alphas : sequence of float or None
        Penalties λ = 1/C of ``sklearn.linear_model.LogisticRegression`` (the grid is in λ so that it
        means the same as for ``RidgeCV``). None: ``alpha_grid(n_models)``.
    cv : int, splitter or iterable of (train, test)
        An int gives stratified folds identical to ``StratifiedKFold(cv)`` (shuffled with ``shuffle``),
        or plain K-fold with ``stratify=False`` (the fallback when a class has fewer members than folds).
    scoring : "accuracy" or "mean_per_class_accuracy"
        The CV score that picks the penalty; both are always reported in ``cv_results_``.
    tol, max_iter : L-BFGS stops when max |gradient| <= tol (scipy's gtol, as sklearn) or after max_iter
        iterations per penalty value. Fits that stop early are reported (``converged_``, a warning).
    dtype : "float32" or "float64"
        Precision of the two products with X (optimiser state is always float64). float32 gradients
        carry relative noise near 1e-7, so tolerances below about 1e-5 need "float64".
    path_continuation : bool
        Walk the grid from strong to weak regularisation, starting each value from the previous
        value's solution (default True); False starts every value from zero. This is not
        scikit-learn's ``warm_start`` (reuse of the previous ``fit`` call's solution), which
        LogisticCV does not offer.
    fit_intercept, n_models, shuffle, random_state, verbose : as in ``RidgeCV``.
    penalties, warm_start : deprecated spellings of ``alphas`` and ``path_continuation``
        (FutureWarning; removed in the next release).

    Fitted attributes: classes_, coef_ [K, d] ([1, d] for two classes), intercept_, alpha_ (λ), C_ (= 1/alpha_,
    a float), best_index_, best_score_, best_params_ ({'C': 1/λ}: the ``LogisticRegression`` keyword),
    cv_results_ (GridSearchCV's layout with ``param_alpha`` and ``param_C``; ``*_test_score`` is the
    ``scoring`` metric, ``*_test_accuracy`` and ``*_test_mean_per_class_accuracy`` are both metrics,
    ``split{k}_n_iter`` and ``split{k}_converged`` the optimiser's record), n_iter_, converged_,
    n_features_in_, feature_names_in_ (DataFrame input only). ``penalty_`` is a deprecated alias of ``alpha_``.
    """

    def __init__(self, alphas: Any = None, cv: Any = 5, scoring: str = "accuracy", tol: float = 1e-4,
                 max_iter: int = 500, dtype: str = "float32", fit_intercept: bool = True,
                 path_continuation: bool = True, n_models: int = 1, stratify: bool = True, shuffle: bool = False,
                 random_state: int | None = None, verbose: bool = False, penalties: Any = DEPRECATED,
                 warm_start: Any = DEPRECATED):
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
        self.penalties = penalties
        self.warm_start = warm_start

    penalty_ = deprecated_attribute("penalty_", "alpha_")

    def _solve(self, obj: _Multinomial, w0: torch.Tensor, lam: float):
        obj.lam = torch.full_like(obj.n, lam)
        return lbfgs(obj, w0, tol=self.tol, max_iter=self.max_iter)

    def fit(self, X: Any, y: Any) -> "LogisticCV":
        """Cross-validate every penalty on X [n, d] with labels y [n], then refit on all data at the best."""
        if self.scoring not in ("accuracy", "mean_per_class_accuracy"):
            raise ValueError(f"scoring must be 'accuracy' or 'mean_per_class_accuracy', got {self.scoring!r}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {self.dtype!r}")
        if not (self.tol > 0 and int(self.max_iter) >= 1):
            raise ValueError("tol must be > 0 and max_iter >= 1")
        alphas = renamed_param(self, "alphas", "penalties")
        continuation = renamed_param(self, "path_continuation", "warm_start")
        require_y(self, y)
        self._numpy_ = not isinstance(X, torch.Tensor)
        x = check_features(self, X, reset=True)
        n = x.shape[0]
        codes, classes = as_class_labels(y, "y", n)
        k = classes.size
        dev, dt = x.device, _DTYPES[self.dtype]
        codes = codes.to(dev)
        grid = alpha_grid(self.n_models) if alphas is None else check_positive(alphas, "alphas")
        splits = resolve_cv(self.cv, n, codes=codes.cpu().numpy() if self.stratify else None,
                            shuffle=self.shuffle, seed=self.random_state, classes=classes)
        xd = _design(x.to(dt), self.fit_intercept)
        tr = [torch.as_tensor(a, device=dev) for a, _ in splits]
        te = [torch.as_tensor(b, device=dev) for _, b in splits]
        obj = _Multinomial(xd, codes, _fold_weights(n, tr, dev), k, self.fit_intercept)
        nf, n_out = len(splits), (1 if k == 2 else k)
        order = np.argsort(-grid, kind="stable")  # strong -> weak
        w = torch.zeros(nf, xd.shape[1], n_out, dtype=torch.float64, device=dev)
        acc = np.zeros((grid.size, nf))
        bacc = np.zeros((grid.size, nf))
        n_iter = np.zeros((grid.size, nf), dtype=np.int64)
        conv = np.zeros((grid.size, nf), dtype=bool)
        best_j, best_w, best_score = -1, w, -np.inf
        for j in tqdm(order, desc="logistic path", disable=not self.verbose, leave=False):
            res = self._solve(obj, w if continuation else torch.zeros_like(w), float(grid[j]))
            w = res.x
            n_iter[j], conv[j] = res.n_iter.cpu().numpy(), res.converged.cpu().numpy()
            pred = obj.logits(w).argmax(-1)
            for f in range(nf):
                acc[j, f], bacc[j, f] = class_scores(pred[f, te[f]], codes[te[f]], k)
            # keep the solutions of the value search_results will pick (first in grid order among ties)
            score = (acc if self.scoring == "accuracy" else bacc)[j].mean()
            if score > best_score or (score == best_score and j < best_j):
                best_j, best_w, best_score = int(j), w, score
        sel = acc if self.scoring == "accuracy" else bacc
        extra = {**score_columns(acc, "accuracy"), **score_columns(bacc, "mean_per_class_accuracy")}
        extra.update({f"split{f}_n_iter": n_iter[:, f].copy() for f in range(nf)})
        extra.update({f"split{f}_converged": conv[:, f].copy() for f in range(nf)})
        self.cv_results_, best = search_results(
            [{"C": float(1.0 / lam)} for lam in grid], sel, grid, extra=extra, param_columns={"alpha": grid.copy()},
            legacy={"mean_accuracy": acc.mean(1), "std_accuracy": acc.std(1), "fold_accuracy": acc,
                    "mean_class_accuracy": bacc.mean(1), "std_class_accuracy": bacc.std(1),
                    "fold_class_accuracy": bacc, "n_iter": n_iter, "converged": conv})
        # best == best_j: same means, same tie rule
        self.best_index_ = best
        self.best_params_ = self.cv_results_["params"][best]
        self.alpha_ = float(grid[best])
        self.C_ = 1.0 / self.alpha_
        self.best_score_ = float(self.cv_results_["mean_test_score"][best])
        full = _Multinomial(xd, codes, _fold_weights(n, [torch.arange(n, device=dev)], dev), k, self.fit_intercept)
        res = self._solve(full, best_w.mean(0, keepdim=True), self.alpha_)
        self.n_iter_ = int(res.n_iter[0])
        self.converged_ = bool(res.converged[0])
        bad = int((~conv).sum()) + (0 if self.converged_ else 1)
        if bad:
            warnings.warn(f"LogisticCV: {bad} of {conv.size + 1} fits stopped before max|grad| <= tol={self.tol} "
                          f"(max_iter={self.max_iter}); see cv_results_['split<k>_converged'] and converged_. Raise max_iter, standardise "
                          "the features, or use dtype='float64' (float32 gradients bottom out near tol=1e-5).",
                          ConvergenceWarning, stacklevel=2)
        wf = res.x[0]
        self._w = wf
        self.classes_ = classes
        coef = (wf[:-1] if self.fit_intercept else wf).T
        icpt = wf[-1] if self.fit_intercept else torch.zeros(n_out, dtype=torch.float64, device=dev)
        self.coef_ = output_like(coef, self._numpy_)
        self.intercept_ = output_like(icpt, self._numpy_)
        return self

    def _logits(self, X: Any) -> torch.Tensor:
        check_is_fitted(self, "_w")
        x = check_features(self, X, reset=False)
        xd = _design(x.to(device=self._w.device, dtype=torch.float64), self.fit_intercept)
        z = xd @ self._w
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
        """Accuracy on (X, y)."""
        if sample_weight is not None:
            raise ValueError("sample_weight is not supported by invfast probes")
        pred = self.predict(X)
        pred = pred.cpu().numpy() if isinstance(pred, torch.Tensor) else pred
        truth = y.cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
        if truth.ndim == 2 and truth.shape[1] == 1:
            truth = truth[:, 0]
        if truth.shape[0] != pred.shape[0]:
            raise ValueError(f"y has {truth.shape[0]} labels but X has {pred.shape[0]} samples")
        return float((pred == truth).mean())
