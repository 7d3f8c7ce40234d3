"""Shared pieces of the probe estimators: input conversion, output type, the scikit-learn
compatible base class and the cross-validation result record.

Fitted attributes and predictions come back in the type the estimator was given: numpy in,
numpy out; torch in, torch out on the input's device.
"""
from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from invfast import _validate

try:  # scikit-learn is optional; with it the probes are genuine sklearn estimators
    from sklearn.base import BaseEstimator as _SkBase
    from sklearn.base import ClassifierMixin as _SkClassifier
    from sklearn.base import RegressorMixin as _SkRegressor
    HAVE_SKLEARN = True
except ImportError:  # pragma: no cover - exercised only without scikit-learn
    HAVE_SKLEARN = False

    class _SkBase:  # type: ignore[no-redef]
        """Minimal stand-in for sklearn.base.BaseEstimator: get_params / set_params."""

        @classmethod
        def _get_param_names(cls) -> list[str]:
            sig = inspect.signature(cls.__init__)
            return sorted(p.name for p in sig.parameters.values()
                          if p.name != "self" and p.kind != p.VAR_KEYWORD)

        def get_params(self, deep: bool = True) -> dict[str, Any]:
            return {k: getattr(self, k) for k in self._get_param_names()}

        def set_params(self, **params: Any) -> "_SkBase":
            valid = self._get_param_names()
            for k, v in params.items():
                if k not in valid:
                    raise ValueError(f"invalid parameter {k!r} for {type(self).__name__}; valid: {valid}")
                setattr(self, k, v)
            return self

        def __repr__(self) -> str:
            args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
            return f"{type(self).__name__}({args})"

    class _SkClassifier:  # type: ignore[no-redef]
        _estimator_type = "classifier"

    class _SkRegressor:  # type: ignore[no-redef]
        _estimator_type = "regressor"


ProbeBase = _SkBase
ClassifierMixin = _SkClassifier
RegressorMixin = _SkRegressor


def as_tensor(x: Any, name: str, ndim: int | None = 2) -> torch.Tensor:
    """Features/targets as a finite floating tensor (numpy or torch input)."""
    if isinstance(x, (list, tuple)):
        x = np.asarray(x, dtype=np.float64)
    if isinstance(x, np.ndarray) and x.dtype.kind in "iub":
        x = x.astype(np.float64)
    if isinstance(x, torch.Tensor) and not x.is_floating_point():
        x = x.double()
    return _validate.as_features(x, name, ndim=ndim)


def as_targets(y: Any, name: str, n: int) -> tuple[torch.Tensor, bool]:
    """Regression targets as a finite float tensor [n, t]; also whether y was 1-D."""
    y = as_tensor(y, name, ndim=None)
    if y.dim() > 2:
        raise ValueError(f"{name} must be 1-D [n] or 2-D [n, targets], got shape {tuple(y.shape)}")
    if y.shape[0] != n:
        raise ValueError(f"{name} has {y.shape[0]} rows but X has {n} samples; they must match")
    one_d = y.dim() == 1
    return (y[:, None] if one_d else y), one_d


def as_class_labels(y: Any, name: str, n: int) -> tuple[torch.Tensor, np.ndarray]:
    """Class labels (any hashable numpy/torch values) as int64 codes [n] and the sorted classes."""
    if isinstance(y, torch.Tensor):
        if y.dim() != 1:
            raise ValueError(f"{name} must be 1-D class labels, got shape {tuple(y.shape)}")
        if y.is_floating_point() and not bool(torch.isfinite(y).all()):
            raise ValueError(f"{name} contains NaN/Inf labels; remove those samples first")
        arr = y.detach().cpu().numpy()
    else:
        arr = np.asarray(y)
        if arr.ndim != 1:
            raise ValueError(f"{name} must be 1-D class labels, got shape {arr.shape}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN/Inf labels; remove those samples first")
    if arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} labels but X has {n} samples; they must match")
    classes, codes = np.unique(arr, return_inverse=True)
    if classes.size < 2:
        raise ValueError(f"{name} holds a single class ({classes.tolist()}); a classifier needs at least two")
    return torch.from_numpy(codes.astype(np.int64)), classes


def output_like(value: torch.Tensor, like_numpy: bool) -> Any:
    """Return ``value`` as numpy when the estimator was given numpy, else as a tensor."""
    if like_numpy:
        return value.detach().cpu().numpy()
    return value


def check_penalties(penalties: Any, name: str = "penalties") -> np.ndarray:
    p = np.asarray(penalties, dtype=np.float64).ravel()
    if p.size == 0:
        raise ValueError(f"{name} is empty; give at least one value (e.g. invfast.probes.penalty_grid())")
    if not np.isfinite(p).all() or (p <= 0).any():
        raise ValueError(f"{name} must be finite and > 0, got {p.tolist()}")
    return p


def cv_record(penalties: np.ndarray, fold_scores: np.ndarray, **extra: Any) -> dict[str, Any]:
    """The ``cv_results_`` dict: per-value mean/std over folds, the best value and per-fold scores.

    fold_scores: [n_values, n_folds]; std is over folds with ddof=0, as GridSearchCV reports it.
    The best value is the first (in the given order) with the highest mean, as in GridSearchCV.
    """
    mean = fold_scores.mean(axis=1)
    std = fold_scores.std(axis=1)
    best = int(np.argmax(mean))
    out = {
        "penalties": penalties,
        "mean_score": mean,
        "std_score": std,
        "fold_scores": fold_scores,
        "best_index": best,
        "best_penalty": float(penalties[best]) if penalties.ndim == 1 else penalties[best],
        "best_score": float(mean[best]),
        "best_std": float(std[best]),
    }
    out.update(extra)
    return out
