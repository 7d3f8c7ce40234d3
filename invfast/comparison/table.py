"""Table 1 across models: the mean Mahalanobis distance and standardised cosine of every row per
transform and per family, the best row of each column, and ranks.

Conventions: cosine, higher = more invariant; distance, lower = more invariant. A family's value is the
mean over the family's transforms that every row measured (so family values compare like with like);
ranks are 1 for the most invariant row of a column, ties share the mean of their ranks, and a row
without a value in a column gets no rank there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from invfast.report.tables import FAMILY_ORDER, ordered_transforms

METRICS = ("cosine", "distance")
#: for each metric, whether a higher value means more invariant
HIGHER_IS_MORE_INVARIANT = {"cosine": True, "distance": False}
HEADINGS = {
    "cosine": "standardised cosine similarity (1 = invariant, higher = more invariant)",
    "distance": "Mahalanobis distance (0 = invariant, lower = more invariant)",
}


#: measures shown beside Table 1 without significance tests (no per-image values): name -> (TransformResult
#: attribute, heading); a comparison has the ones some row measured
MEASURES = {
    "normalized_variance": (
        "normalized_variance",
        "normalized variance (tmeasures's, per unit, averaged over the layer's units; 0 = invariant)",
    ),
    "same_equivariance": (
        "same_equivariance",
        "same-equivariance (tmeasures's: the normalized variance of the feature maps brought back by the transform; "
        "0 = they move exactly with the image)",
    ),
    "equivariance": (
        "mean_linear_equivariance",
        "linear equivariance (cross-validated R² of the best linear map from an image's features to its view's; "
        "1 = the transform acts linearly on the features)",
    ),
}


def check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    return metric


def invariance(values: np.ndarray, metric: str) -> np.ndarray:
    """``values`` oriented so that higher = more invariant (cosine as is, distance negated)."""
    return values if HIGHER_IS_MORE_INVARIANT[check_metric(metric)] else -values


def rank_columns(values: np.ndarray, metric: str) -> np.ndarray:
    """float64 [R, C]: the rank of each row within each column of ``values [R, C]`` (1 = most invariant,
    ties averaged); NaN where the value is NaN."""
    from scipy.stats import rankdata

    key = -invariance(np.asarray(values, dtype=np.float64), metric)
    out = np.full(key.shape, np.nan)
    for j in range(key.shape[1]):
        ok = np.isfinite(key[:, j])
        if ok.any():
            out[ok, j] = rankdata(key[ok, j], method="average")
    return out


@dataclass
class Table:
    """Mean scores of every row (model or layer) per transform, and per family.

    ``values[metric]`` is float64 ``[R, T]`` (NaN where a row lacks the transform), rows in ``labels``
    order, columns in ``columns`` order (``(name, family)``, spatial first, then appearance, then the rest).
    ``measures[name]`` the same for each of :data:`MEASURES` that some row has (mean over the transform's
    non-identity parameters where the measure has one value per parameter).
    """

    labels: list[str]
    columns: list[tuple[str, str]]
    values: dict[str, np.ndarray]
    measures: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_results(cls, labels: Sequence[str], results: Sequence[Any]) -> Table:
        """The table of ``results`` (InvarianceResult objects, one per label)."""
        cols = ordered_transforms(results)

        def grid(attr: str) -> np.ndarray:
            a = np.full((len(results), len(cols)), np.nan)
            for i, r in enumerate(results):
                for j, (name, _) in enumerate(cols):
                    t = r.transforms.get(name)
                    v = None if t is None else getattr(t, attr, None)
                    a[i, j] = np.nan if v is None else float(v)
            return a

        vals = {m: grid(f"mean_{m}") for m in METRICS}
        measures = {k: grid(attr) for k, (attr, _) in MEASURES.items()}
        measures = {k: a for k, a in measures.items() if np.isfinite(a).any()}
        return cls(list(labels), [(n, f) for n, f in cols], vals, measures)

    @property
    def families(self) -> list[str]:
        """The families of the columns: spatial, appearance, then any other, in that order."""
        fams = [f for f in FAMILY_ORDER if any(c[1] == f for c in self.columns)]
        return fams + sorted({f for _, f in self.columns} - set(fams))

    def family_members(self, family: str) -> list[int]:
        """Column indices of ``family``'s transforms that every row measured (both metrics)."""
        return [
            j
            for j, (_, f) in enumerate(self.columns)
            if f == family and all(np.isfinite(self.values[m][:, j]).all() for m in METRICS)
        ]

    def family_values(self, metric: str) -> np.ndarray:
        """float64 [R, F]: each row's mean ``metric`` over :meth:`family_members` (NaN for an empty family)."""
        v = self.values[check_metric(metric)]
        out = np.full((len(self.labels), len(self.families)), np.nan)
        for k, fam in enumerate(self.families):
            idx = self.family_members(fam)
            if idx:
                out[:, k] = v[:, idx].mean(axis=1)
        return out

    @property
    def column_names(self) -> list[str]:
        """Transform names, then family names: the columns of :meth:`all_values`."""
        return [n for n, _ in self.columns] + list(self.families)

    def all_values(self, metric: str) -> np.ndarray:
        """float64 [R, T + F]: the transform columns, then the family columns."""
        return np.concatenate([self.values[check_metric(metric)], self.family_values(metric)], axis=1)

    def ranks(self, metric: str) -> np.ndarray:
        """float64 [R, T + F]: ranks within each column of :meth:`all_values` (1 = most invariant)."""
        return rank_columns(self.all_values(metric), metric)

    def mean_rank(self, metric: str) -> np.ndarray:
        """float64 [R]: each row's mean rank over the transform columns it has (NaN if none)."""
        r = self.ranks(metric)[:, : len(self.columns)]
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(r)
            return np.where(ok.any(1), np.nansum(r, 1) / np.maximum(ok.sum(1), 1), np.nan)

    def best(self, metric: str) -> list[list[int]]:
        """For each column of :meth:`all_values`, the rows with the most invariant value (all of them on a
        tie; none when the column has no value)."""
        v = invariance(self.all_values(metric), metric)
        out = []
        for j in range(v.shape[1]):
            col = v[:, j]
            ok = np.isfinite(col)
            out.append([int(i) for i in np.flatnonzero(ok & (col == col[ok].max()))] if ok.any() else [])
        return out

    def to_dict(self) -> dict[str, Any]:
        def lst(a: np.ndarray) -> list[list[float | None]]:
            return [[None if not np.isfinite(x) else float(x) for x in row] for row in a]

        return {
            "labels": self.labels,
            "columns": [list(c) for c in self.columns],
            "families": self.families,
            "values": {m: lst(self.values[m]) for m in METRICS},
            "measures": {k: lst(a) for k, a in self.measures.items()},
            "family_values": {m: lst(self.family_values(m)) for m in METRICS},
            "family_members": {f: [self.columns[j][0] for j in self.family_members(f)] for f in self.families},
            "ranks": {m: lst(self.ranks(m)) for m in METRICS},
            "mean_rank": {m: [None if not np.isfinite(x) else float(x) for x in self.mean_rank(m)] for m in METRICS},
            "best": {
                m: {c: [self.labels[i] for i in b] for c, b in zip(self.column_names, self.best(m))} for m in METRICS
            },
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Table:
        def arr(rows: list[list[float | None]]) -> np.ndarray:
            return np.array([[np.nan if x is None else x for x in row] for row in rows], dtype=np.float64).reshape(
                len(d["labels"]), len(d["columns"])
            )

        vals = {m: arr(d["values"][m]) for m in METRICS}
        measures = {k: arr(v) for k, v in (d.get("measures") or {}).items() if k in MEASURES}
        return cls(list(d["labels"]), [(c[0], c[1]) for c in d["columns"]], vals, measures)
