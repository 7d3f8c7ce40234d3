"""``cv_results_``: the record of a cross-validated search in ``GridSearchCV``'s layout, the ranks,
and the index of the best candidate (the first with the highest mean score, as GridSearchCV)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np


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
            warnings.warn(
                f"cv_results_[{key!r}] is a deprecated key and will be removed in the next release; "
                "cv_results_ now has GridSearchCV's keys (mean_test_score, std_test_score, "
                "split{k}_test_score, params, param_*, rank_test_score) and the estimator has "
                "best_index_, best_score_ and best_params_",
                FutureWarning,
                stacklevel=2,
            )
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


def search_results(
    params: list[dict[str, float]],
    fold_scores: np.ndarray,
    legacy_values: np.ndarray,
    extra: dict[str, np.ndarray] | None = None,
    legacy: dict[str, Any] | None = None,
    param_columns: dict[str, np.ndarray] | None = None,
) -> tuple[CVResults, int]:
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
