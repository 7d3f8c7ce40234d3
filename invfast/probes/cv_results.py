"""``cv_results_``: the record of a cross-validated search in ``GridSearchCV``'s layout, the ranks,
and the index of the best candidate (the first with the highest mean score, as GridSearchCV)."""

from __future__ import annotations

from typing import Any

import numpy as np


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
    extra: dict[str, np.ndarray] | None = None,
    param_columns: dict[str, np.ndarray] | None = None,
) -> tuple[dict[str, Any], int]:
    """The ``cv_results_`` record and the index of the best candidate.

    ``cv_results_`` has GridSearchCV's layout, one entry per candidate in every column: ``params`` (list of
    dicts), ``param_<name>`` (one per searched parameter), ``mean_test_score``, ``std_test_score`` (over
    folds, ddof 0), ``split{k}_test_score``, ``rank_test_score`` (1 = best, ties share the lower rank);
    ``pandas.DataFrame(cv_results_)`` gives one row per candidate.

    params: one dict per candidate, in search order; fold_scores [candidates, folds]: the selection
    score; extra: more 1-D columns; param_columns: more ``param_<name>`` columns (other spellings of the
    searched values, e.g. logistic's λ beside C).
    The best candidate is the first with the highest mean score, as GridSearchCV picks it.
    """
    cols: dict[str, Any] = {"params": params}
    for key in params[0]:
        cols[f"param_{key}"] = np.asarray([p[key] for p in params], dtype=np.float64)
    cols.update({f"param_{k}": np.asarray(v) for k, v in (param_columns or {}).items()})
    cols.update(score_columns(fold_scores))
    cols.update(extra or {})
    return cols, int(np.argmax(cols["mean_test_score"]))
