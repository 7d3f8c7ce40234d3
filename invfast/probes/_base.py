"""Shared pieces of the probe estimators: input conversion with scikit-learn's error conventions,
the scikit-learn compatible base classes and tags, the warnings and errors they raise, the
``cv_results_`` record, and the helpers behind deprecated parameter names.

Fitted attributes and predictions come back in the type the estimator was given: numpy in,
numpy out; torch in, torch out on the input's device.
"""
from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np
import torch

from invfast import _validate

try:  # scikit-learn: with it the probes are genuine sklearn estimators and use its exception types
    from sklearn.base import BaseEstimator as _SkBase
    from sklearn.base import ClassifierMixin as _SkClassifier
    from sklearn.base import RegressorMixin as _SkRegressor
    from sklearn.exceptions import ConvergenceWarning as _SkConvergenceWarning
    from sklearn.exceptions import DataConversionWarning as _SkDataConversionWarning
    from sklearn.exceptions import NotFittedError as _SkNotFittedError
    HAVE_SKLEARN = True
except ImportError:  # pragma: no cover - exercised only without scikit-learn
    HAVE_SKLEARN = False

    class _SkConvergenceWarning(UserWarning):  # type: ignore[no-redef]
        """Stand-in for sklearn.exceptions.ConvergenceWarning."""

    class _SkDataConversionWarning(UserWarning):  # type: ignore[no-redef]
        """Stand-in for sklearn.exceptions.DataConversionWarning."""

    class _SkNotFittedError(ValueError, AttributeError):  # type: ignore[no-redef]
        """Stand-in for sklearn.exceptions.NotFittedError."""

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

try:  # scikit-learn >= 1.6: feature-name bookkeeping (feature_names_in_) for DataFrame input
    from sklearn.utils.validation import validate_data as _sk_validate_data
except ImportError:  # pragma: no cover - older or absent scikit-learn
    _sk_validate_data = None


class ConvergenceWarning(_SkConvergenceWarning):
    """Some iterative fits stopped before their tolerance was met.

    A subclass of ``sklearn.exceptions.ConvergenceWarning`` when scikit-learn is installed, so
    ``warnings.filterwarnings("ignore", category=sklearn.exceptions.ConvergenceWarning)`` covers it.
    """


class DataConversionWarning(_SkDataConversionWarning):
    """The input was converted to the layout the estimator expects (e.g. a column-vector y raveled).

    A subclass of ``sklearn.exceptions.DataConversionWarning`` when scikit-learn is installed.
    """


class NotFittedError(_SkNotFittedError, RuntimeError):
    """A fitted-only method was called before ``fit``.

    A subclass of ``sklearn.exceptions.NotFittedError`` (itself a ValueError and AttributeError)
    when scikit-learn is installed, and of RuntimeError, which earlier invfast releases raised.
    """


ProbeBase = _SkBase
ClassifierMixin = _SkClassifier
RegressorMixin = _SkRegressor

DEPRECATED = "deprecated"
"""Default of a renamed constructor parameter: any other value means the caller used the old name."""


class ProbeTagsMixin:
    """Declares to scikit-learn what the probes accept: dense 2-D numeric X only (no sparse
    matrices, no NaN, no strings). Subclasses set ``_multi_output`` for 2-D regression targets."""

    _multi_output = False

    def __sklearn_tags__(self):  # scikit-learn >= 1.6
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        tags.input_tags.string = False
        tags.target_tags.required = True
        tags.target_tags.multi_output = self._multi_output
        tags.target_tags.single_output = True
        return tags

    def _more_tags(self) -> dict[str, Any]:  # scikit-learn < 1.6
        return {"allow_nan": False, "multioutput": self._multi_output, "requires_y": True,
                "X_types": ["2darray"]}


def _sparse_error(name: str) -> TypeError:
    return TypeError(f"{name} is a sparse matrix, and sparse input is not supported by invfast probes; "
                     f"pass a dense array ({name}.toarray()) instead")


def _to_numeric_array(x: Any, name: str) -> np.ndarray:
    """Non-tensor input (list, array, DataFrame, array-like) as a numeric numpy array."""
    if hasattr(x, "tocsr") or type(x).__module__.startswith("scipy.sparse"):
        raise _sparse_error(name)
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be an array-like of numbers, got a {type(x).__name__}")
    arr = np.asarray(x)
    if arr.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {arr.dtype}")
    if arr.dtype.kind in "iub":
        arr = arr.astype(np.float64)
    elif arr.dtype.kind == "O":
        arr = arr.astype(np.float64)   # TypeError/ValueError naming the offending value if non-numeric
    elif arr.dtype.kind in "USV":
        raise ValueError(f"{name} must be numeric, got {arr.dtype} values such as {arr.ravel()[:1].tolist()}")
    if any(st < 0 for st in arr.strides):   # a reversed view (e.g. reordered DataFrame columns): torch needs a copy
        arr = arr.copy()
    return arr


def as_tensor(x: Any, name: str, ndim: int | None = 2) -> torch.Tensor:
    """Features/targets as a finite floating tensor.

    Accepts numpy arrays, torch tensors (kept on their device), lists and other array-likes
    (DataFrames, objects with ``__array__``). Integer and boolean values become float64. Raises
    ValueError for complex data, wrong dimensionality, no samples or no features, and TypeError for
    sparse matrices, with the wording scikit-learn's ``check_array`` uses.
    """
    if x is None:
        raise ValueError(f"Expected array-like (array or non-string sequence), got None for {name}")
    if isinstance(x, torch.Tensor):
        if x.is_sparse or x.layout != torch.strided:
            raise _sparse_error(name)
        if x.is_complex():
            raise ValueError(f"Complex data not supported: {name} has dtype {x.dtype}")
        if not x.is_floating_point():
            x = x.double()
    else:
        x = _to_numeric_array(x, name)
    if ndim == 2 and x.ndim != 2:
        raise ValueError(f"Expected a 2-D array [n_samples, n_features] for {name}, got shape {tuple(x.shape)}. "
                         "Reshape your data with X.reshape(-1, 1) if it has a single feature or "
                         "X.reshape(1, -1) if it is a single sample.")
    if x.ndim >= 1 and x.shape[0] == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape={tuple(x.shape)}) while a minimum of 1 is required "
                         f"({name}).")
    if ndim == 2 and x.shape[1] == 0:
        raise ValueError(f"Found array with 0 feature(s) (shape={tuple(x.shape)}) while a minimum of 1 is "
                         f"required ({name}).")
    return _validate.as_features(x, name, ndim=ndim)


def check_features(est: Any, X: Any, reset: bool) -> torch.Tensor:
    """Validate X [n, d] for ``est``: on fit (``reset``) record ``n_features_in_`` (and
    ``feature_names_in_`` for DataFrames); otherwise require the fitted number of features."""
    if _sk_validate_data is not None and (reset or getattr(X, "ndim", 2) == 2):
        # feature names before values: a DataFrame with renamed columns is reindexed to NaN columns,
        # and "feature names should match" is the error that explains it
        _sk_validate_data(est, X, reset=reset, skip_check_array=True)
    x = as_tensor(X, "X")
    if reset:
        est.n_features_in_ = int(x.shape[1])
    elif x.shape[1] != est.n_features_in_:
        raise ValueError(f"X has {x.shape[1]} features, but {type(est).__name__} is expecting "
                         f"{est.n_features_in_} features as input.")
    _check_scale(x, type(est).__name__)
    return x


def _check_scale(x: torch.Tensor, who: str) -> None:
    """ValueError when the Gram matrix of ``x`` would overflow float64 (the solvers would return
    nonsense, e.g. chance accuracy, or fail inside LAPACK)."""
    if x.numel() == 0:
        return
    big = float(x.abs().max())
    limit = (torch.finfo(torch.float64).max / (x.shape[0] * x.shape[1])) ** 0.5
    if big > limit:
        raise ValueError(f"{who}: features are too large (max |x| = {big:.3g}; their products overflow float64 "
                         f"above {limit:.3g}); standardise them first (e.g. sklearn.preprocessing.StandardScaler)")


def require_y(est: Any, y: Any) -> None:
    """Raise the scikit-learn style ValueError when a supervised fit gets ``y=None``."""
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y is None")


def check_is_fitted(est: Any, attribute: str) -> None:
    """Raise :class:`NotFittedError` unless ``est`` has ``attribute`` (set at the end of fit)."""
    if not hasattr(est, attribute):
        raise NotFittedError(f"This {type(est).__name__} instance is not fitted yet. Call 'fit' with "
                             "appropriate arguments before using this estimator.")


def as_targets(y: Any, name: str, n: int) -> tuple[torch.Tensor, bool]:
    """Regression targets as a finite float tensor [n, t]; also whether y was 1-D."""
    if not isinstance(y, torch.Tensor):
        arr = np.asarray(y) if not (hasattr(y, "tocsr") or type(y).__module__.startswith("scipy.sparse")) else y
        if isinstance(arr, np.ndarray) and arr.dtype.kind in "USV":
            raise ValueError(f"{name} must hold numeric regression targets, got {arr.dtype} values such as "
                             f"{arr.ravel()[:1].tolist()}; for class labels use a classifier (LogisticCV, "
                             "or --task classification on the command line)")
    y = as_tensor(y, name, ndim=None)
    if y.dim() > 2:
        raise ValueError(f"{name} must be 1-D [n] or 2-D [n, targets], got shape {tuple(y.shape)}")
    if y.shape[0] != n:
        raise ValueError(f"{name} has {y.shape[0]} rows but X has {n} samples; they must match")
    one_d = y.dim() == 1
    return (y[:, None] if one_d else y), one_d


def as_class_labels(y: Any, name: str, n: int) -> tuple[torch.Tensor, np.ndarray]:
    """Class labels (any hashable numpy/torch values) as int64 codes [n] and the sorted classes.

    A column vector [n, 1] is raveled with a :class:`DataConversionWarning`, as scikit-learn does.
    Non-integral floating labels raise "Unknown label type: continuous".
    """
    if isinstance(y, torch.Tensor):
        if y.is_floating_point() and not bool(torch.isfinite(y).all()):
            raise ValueError(f"{name} contains NaN/Inf labels; remove those samples first")
        arr = y.detach().cpu().numpy()
    else:
        arr = np.asarray(y)
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN/Inf labels; remove those samples first")
    if arr.ndim == 2 and arr.shape[1] == 1:
        warnings.warn("A column-vector y was passed when a 1d array was expected. Please change the shape of y "
                      "to (n_samples,), for example using ravel().", DataConversionWarning, stacklevel=3)
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D class labels, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ValueError(f"{name} has {arr.shape[0]} labels but X has {n} samples; they must match")
    if arr.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} has dtype {arr.dtype}")
    if arr.dtype.kind == "f" and not np.array_equal(arr, np.round(arr)):
        raise ValueError(f"Unknown label type: continuous. {name} holds non-integer values; a classifier needs "
                         "class labels (for continuous targets use RidgeCV or KernelRidgeCV)")
    classes, codes = np.unique(arr, return_inverse=True)
    if classes.size < 2:
        raise ValueError(f"{name} holds only one class ({classes.tolist()}); a classifier needs at least two")
    return torch.from_numpy(codes.reshape(-1).astype(np.int64)), classes


def output_like(value: torch.Tensor, like_numpy: bool) -> Any:
    """Return ``value`` as numpy when the estimator was given numpy, else as a tensor."""
    if like_numpy:
        return value.detach().cpu().numpy()
    return value


def check_positive(values: Any, name: str) -> np.ndarray:
    """``values`` as a non-empty float64 [k] array of finite values > 0 (a grid of α, λ or γ)."""
    p = np.asarray(values, dtype=np.float64).ravel()
    if p.size == 0:
        raise ValueError(f"{name} is empty; give at least one value (e.g. invfast.probes.alpha_grid())")
    if not np.isfinite(p).all() or (p <= 0).any():
        raise ValueError(f"{name} must be finite and > 0, got {p.tolist()}")
    return p


def renamed_param(est: Any, new: str, old: str) -> Any:
    """Value of constructor parameter ``new``, honouring the deprecated spelling ``old``.

    Warns (FutureWarning, as scikit-learn does for API changes) when ``old`` was set; refuses both.
    """
    old_value, new_value = getattr(est, old), getattr(est, new)
    if isinstance(old_value, str) and old_value == DEPRECATED:
        return new_value
    cls = type(est).__name__
    warnings.warn(f"{cls}({old}=...) is deprecated and will be removed in the next release; use {cls}({new}=...)",
                  FutureWarning, stacklevel=3)
    default = inspect.signature(type(est).__init__).parameters[new].default
    if new_value is not default and not (isinstance(default, str) and new_value == default):
        raise ValueError(f"{cls}: give {new}= only ({old}= is its deprecated spelling), not both")
    return old_value


def deprecated_attribute(old: str, new: str) -> property:
    """A read-only property ``old`` that returns attribute ``new`` with a FutureWarning."""
    def getter(self: Any) -> Any:
        value = getattr(self, new)   # AttributeError when unfitted, so hasattr() stays False
        warnings.warn(f"{type(self).__name__}.{old} is deprecated and will be removed in the next release; "
                      f"use {new}", FutureWarning, stacklevel=2)
        return value
    return property(getter, doc=f"Deprecated alias of ``{new}``.")


class CVResults(dict):
    """``cv_results_``: GridSearchCV's layout, one entry per candidate in every column.

    Keys: ``params`` (list of dicts), ``param_<name>`` (one per searched parameter),
    ``mean_test_score``, ``std_test_score`` (over folds, ddof 0), ``split{k}_test_score``,
    ``rank_test_score`` (1 = best, ties share the lower rank); estimators add more 1-D columns.
    ``pandas.DataFrame(cv_results_)`` gives one row per candidate.

    The keys of invfast 0.1 ('mean_score', 'best_penalty', ...) still answer ``in`` and are readable
    with ``[]`` and ``get`` for one release, with a FutureWarning on reading; they are not listed
    among the keys (iteration, ``keys()``, ``len``), so they never become DataFrame columns.
    """

    def __init__(self, columns: dict[str, Any], legacy: dict[str, Any]):
        super().__init__(columns)
        self._legacy = legacy

    def __missing__(self, key: str) -> Any:
        if key in self._legacy:
            warnings.warn(f"cv_results_[{key!r}] is a deprecated key and will be removed in the next release; "
                          "cv_results_ now has GridSearchCV's keys (mean_test_score, std_test_score, "
                          "split{k}_test_score, params, param_*, rank_test_score) and the estimator has "
                          "best_index_, best_score_ and best_params_", FutureWarning, stacklevel=2)
            return self._legacy[key]
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self._legacy

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default


def _rank(mean: np.ndarray) -> np.ndarray:
    """GridSearchCV's ranks: 1 for the highest mean, ties share the smallest rank ("min" method)."""
    order = np.sort(-mean)
    return (np.searchsorted(order, -mean, side="left") + 1).astype(np.int32)


def score_columns(fold_scores: np.ndarray, metric: str = "score") -> dict[str, np.ndarray]:
    """``mean_test_<metric>``, ``std_test_<metric>``, ``split{k}_test_<metric>`` and ``rank_test_<metric>``
    of fold scores [candidates, folds] (std with ddof 0, as GridSearchCV)."""
    mean = fold_scores.mean(axis=1)
    cols = {f"mean_test_{metric}": mean, f"std_test_{metric}": fold_scores.std(axis=1)}
    for k in range(fold_scores.shape[1]):
        cols[f"split{k}_test_{metric}"] = np.ascontiguousarray(fold_scores[:, k])
    cols[f"rank_test_{metric}"] = _rank(mean)
    return cols


def search_results(params: list[dict[str, float]], fold_scores: np.ndarray, legacy_values: np.ndarray,
                   extra: dict[str, np.ndarray] | None = None, legacy: dict[str, Any] | None = None,
                   param_columns: dict[str, np.ndarray] | None = None) -> tuple[CVResults, int]:
    """The ``cv_results_`` record and the index of the best candidate.

    params: one dict per candidate, in search order; fold_scores [candidates, folds]: the selection
    score; legacy_values: the searched values as invfast 0.1 reported them under 'penalties';
    extra: more 1-D columns; legacy: more invfast 0.1 keys and their values; param_columns: more
    ``param_<name>`` columns (other spellings of the searched values, e.g. logistic's λ beside C).
    The best candidate is the first with the highest mean score, as GridSearchCV picks it.
    """
    cols: dict[str, Any] = {"params": params}
    for key in params[0]:
        cols[f"param_{key}"] = np.asarray([p[key] for p in params], dtype=np.float64)
    cols.update({f"param_{k}": np.asarray(v) for k, v in (param_columns or {}).items()})
    cols.update(score_columns(fold_scores))
    cols.update(extra or {})
    best = int(np.argmax(cols["mean_test_score"]))
    old = {
        "penalties": legacy_values,
        "mean_score": cols["mean_test_score"],
        "std_score": cols["std_test_score"],
        "fold_scores": fold_scores,
        "best_index": best,
        "best_penalty": float(legacy_values[best]) if legacy_values.ndim == 1 else legacy_values[best],
        "best_score": float(cols["mean_test_score"][best]),
        "best_std": float(cols["std_test_score"][best]),
    }
    old.update(legacy or {})
    return CVResults(cols, old), best
