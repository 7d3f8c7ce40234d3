"""Shared pieces of the probe estimators, built on scikit-learn: input validation (scikit-learn's own
``check_array`` / ``validate_data`` for array-likes, the same checks on device for torch tensors),
the estimator tags and the exception types.

Fitted attributes and predictions come back in the type the estimator was given: numpy in,
numpy out; torch in, torch out on the input's device.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning, DataConversionWarning
from sklearn.exceptions import NotFittedError as _SkNotFittedError
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, column_or_1d
from sklearn.utils.validation import check_is_fitted as _sk_check_is_fitted

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - scikit-learn 1.3-1.5

    def _validate_data(est: Any, X: Any = "no_validation", **kw: Any) -> Any:
        return est._validate_data(X, **kw)


__all__ = [
    "ConvergenceWarning",
    "DataConversionWarning",
    "NotFittedError",
    "ProbeTagsMixin",
    "as_class_labels",
    "as_targets",
    "as_tensor",
    "check_features",
    "check_is_fitted",
    "check_positive",
    "output_like",
]


class NotFittedError(_SkNotFittedError):
    """A fitted-only method was called before ``fit``: scikit-learn's ``NotFittedError`` (a ValueError
    and AttributeError)."""


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

    def _more_tags(self) -> dict[str, Any]:  # pragma: no cover - scikit-learn < 1.6
        return {"allow_nan": False, "multioutput": self._multi_output, "requires_y": True, "X_types": ["2darray"]}


def _check_tensor(x: torch.Tensor, name: str, ndim: int | None) -> torch.Tensor:
    """``check_array``'s checks for a tensor, on its device: dense, real, ``ndim``-D, non-empty, finite."""
    if x.is_sparse or x.layout != torch.strided:
        raise TypeError(
            f"Sparse data was passed for {name}, but dense data is required. Use '.to_dense()' to "
            "convert to a dense tensor."
        )
    if x.is_complex():
        raise ValueError(f"Complex data not supported: {name} has dtype {x.dtype}")
    if ndim == 2 and x.dim() != 2:
        raise ValueError(
            f"Expected a 2-D array [n_samples, n_features] for {name}, got shape {tuple(x.shape)}. "
            "Reshape your data with X.reshape(-1, 1) if it has a single feature or "
            "X.reshape(1, -1) if it is a single sample."
        )
    if x.dim() >= 1 and x.shape[0] == 0:
        raise ValueError(f"Found array with 0 sample(s) (shape={tuple(x.shape)}) while a minimum of 1 is required.")
    if ndim == 2 and x.shape[1] == 0:
        raise ValueError(f"Found array with 0 feature(s) (shape={tuple(x.shape)}) while a minimum of 1 is required.")
    if not x.is_floating_point():
        x = x.double()
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"Input {name} contains NaN or infinity ({int((~torch.isfinite(x)).sum())} values).")
    return x


def as_tensor(x: Any, name: str, ndim: int | None = 2) -> torch.Tensor:
    """Features/targets as a finite floating tensor: tensors stay on their device, everything else
    (arrays, lists, DataFrames) goes through ``sklearn.utils.validation.check_array`` (its errors)."""
    if x is None:
        raise ValueError(f"Expected array-like (array or non-string sequence), got None for {name}")
    if isinstance(x, torch.Tensor):
        return _check_tensor(x, name, ndim)
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be an array-like of numbers, got a {type(x).__name__}")
    arr = check_array(x, dtype=[np.float64, np.float32], ensure_2d=ndim == 2, allow_nd=ndim is None, input_name=name)
    arr = np.ascontiguousarray(arr)
    return torch.from_numpy(arr if arr.flags.writeable else arr.copy())


def check_features(est: Any, X: Any, reset: bool) -> torch.Tensor:
    """Validate X [n, d] for ``est``: on fit (``reset``) record ``n_features_in_`` (and
    ``feature_names_in_`` for DataFrames); otherwise require the fitted number of features."""
    if reset or getattr(X, "ndim", 2) == 2:
        # feature names before values: a DataFrame with renamed columns is reindexed to NaN columns,
        # and "feature names should match" is the error that explains it
        _validate_data(est, X, reset=reset, skip_check_array=True)
    x = as_tensor(X, "X")
    if reset:
        est.n_features_in_ = int(x.shape[1])
    elif x.shape[1] != est.n_features_in_:
        raise ValueError(
            f"X has {x.shape[1]} features, but {type(est).__name__} is expecting "
            f"{est.n_features_in_} features as input."
        )
    _check_scale(x, type(est).__name__)
    return x


def _check_scale(x: torch.Tensor, who: str) -> None:
    """ValueError when the Gram matrix of ``x`` would overflow float64 (the solvers would return
    nonsense, e.g. chance accuracy, or fail inside LAPACK)."""
    big = float(x.abs().max())
    limit = (torch.finfo(torch.float64).max / (x.shape[0] * x.shape[1])) ** 0.5
    if big > limit:
        raise ValueError(
            f"{who}: features are too large (max |x| = {big:.3g}; their products overflow float64 "
            f"above {limit:.3g}); standardise them first (e.g. sklearn.preprocessing.StandardScaler)"
        )


def require_y(est: Any, y: Any) -> None:
    """Raise scikit-learn's ValueError when a supervised fit gets ``y=None``."""
    if y is None:
        raise ValueError(f"{type(est).__name__} requires y to be passed, but the target y is None")


def check_is_fitted(est: Any) -> None:
    """``sklearn.utils.validation.check_is_fitted``, raising invfast's :class:`NotFittedError`."""
    try:
        _sk_check_is_fitted(est)
    except _SkNotFittedError as e:
        raise NotFittedError(str(e)) from None


def _check_length(got: int, n: int, name: str, what: str) -> None:
    if got != n:
        raise ValueError(f"{name} has {got} {what} but X has {n} samples; they must match")


def as_targets(y: Any, name: str, n: int) -> tuple[torch.Tensor, bool]:
    """Regression targets as a finite float tensor [n, t]; also whether y was 1-D."""
    if not isinstance(y, torch.Tensor) and not hasattr(y, "tocsr"):
        arr = np.asarray(y)
        if arr.dtype.kind in "USV" or (arr.dtype.kind == "O" and any(isinstance(v, str) for v in arr.ravel()[:1])):
            raise ValueError(
                f"{name} must hold numeric regression targets, got {arr.dtype} values such as "
                f"{arr.ravel()[:1].tolist()}; for class labels use a classifier (LogisticCV, "
                "or --task classification on the command line)"
            )
    y = as_tensor(y, name, ndim=None)
    if y.dim() > 2:
        raise ValueError(f"{name} must be 1-D [n] or 2-D [n, targets], got shape {tuple(y.shape)}")
    _check_length(y.shape[0], n, name, "rows")
    big, limit = float(y.abs().max()), (torch.finfo(torch.float64).max / y.numel()) ** 0.5
    if big > limit:  # their squares would overflow: R² and the residuals become NaN
        raise ValueError(
            f"{name} is too large (max |y| = {big:.3g}; its squares overflow float64 above {limit:.3g}); "
            "rescale the targets first (e.g. sklearn.preprocessing.StandardScaler)"
        )
    one_d = y.dim() == 1
    return (y[:, None] if one_d else y), one_d


def label_array(y: Any, name: str) -> np.ndarray:
    """Class labels as a 1-D numpy array: NaN/Inf refused (``check_array``), a column vector raveled
    with a :class:`DataConversionWarning` (``column_or_1d``), continuous values refused
    (``check_classification_targets``: "Unknown label type: continuous")."""
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    arr = check_array(y, ensure_2d=False, dtype=None, input_name=name)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = column_or_1d(arr, warn=True)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D class labels, got shape {arr.shape}")
    check_classification_targets(arr)
    return arr


def as_class_labels(y: Any, name: str, n: int) -> tuple[torch.Tensor, np.ndarray]:
    """Class labels (any hashable values) as int64 codes [n] and the sorted classes (at least two)."""
    arr = label_array(y, name)
    _check_length(arr.shape[0], n, name, "labels")
    classes, codes = np.unique(arr, return_inverse=True)
    if classes.size < 2:
        raise ValueError(f"{name} holds only one class ({classes.tolist()}); a classifier needs at least two")
    return torch.from_numpy(codes.reshape(-1).astype(np.int64)), classes


def output_like(value: torch.Tensor, like_numpy: bool) -> Any:
    """Return ``value`` as numpy when the estimator was given numpy, else as a tensor."""
    return value.detach().cpu().numpy() if like_numpy else value


def check_positive(values: Any, name: str) -> np.ndarray:
    """``values`` as a non-empty float64 [k] array of finite values > 0 (a grid of α, λ or γ)."""
    p = np.asarray(values, dtype=np.float64).ravel()
    if p.size == 0:
        raise ValueError(f"{name} is empty; give at least one value (e.g. invfast.probes.alpha_grid())")
    if not np.isfinite(p).all() or (p <= 0).any():
        raise ValueError(f"{name} must be finite and > 0, got {p.tolist()}")
    return p
