"""What the findings' rules share: reading the per-unit numbers the stages keep (out-of-fold probe
predictions, per-image invariance, per-pair sensitivity) and turning them into intervals
(:mod:`invfast.evidence`). Every interval of a rule is seeded from the finding and the statistic's name, so a
rejudged folder gives the same intervals.

Per-unit formats (one seed's stage results):

- a probe score dict (``probe_scores``: ``results['probes'][task]['scores'][model]``, Speicher's accuracy
  tables) holds ``oof_correct`` (classification: 1 where the out-of-fold prediction is the label, per probe
  image) or ``oof_prediction`` ([n][t], regression; the targets are the task's ``y``);
- ``results['measure']['per_image_cosine'][model][transform]``: the standardised cosine of each measurement
  image (mean over the non-identity parameters; None where undefined), the same images for every model;
- ``sensitivity_pairs[model][key] = {'num': [N], 'den': [N]}`` beside a stage's ``sensitivity``: per pair the
  distance between the two views and between two random images; the sensitivity is mean(num) / mean(den).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from invfast.evidence import Interval, Precondition, accuracy_statistic, bootstrap, r2_statistic

__all__ = [
    "seed_of",
    "correct",
    "accuracy_interval",
    "accuracy_difference",
    "r2_difference",
    "sensitivity_terms",
    "sensitivity_difference",
    "per_image",
    "Missing",
    "need",
    "grids_scaled",
]


class Missing(LookupError):
    """A number a rule needs is not in the seed's results; the rule becomes *not testable: needs …*."""


def need(mapping: Mapping[str, Any] | None, *keys: str, what: str) -> Any:
    """``mapping[k0][k1]...``, or :class:`Missing` naming ``what`` when any level is absent."""
    cur: Any = mapping
    for k in keys:
        if not isinstance(cur, Mapping) or k not in cur or cur[k] is None:
            raise Missing(what)
        cur = cur[k]
    return cur


def seed_of(*names: str) -> int:
    """A bootstrap seed fixed by the statistic's names ('S3', 'objects'): stable across runs and rejudging."""
    return zlib.crc32("/".join(names).encode()) & 0x7FFFFFFF


def correct(score: Mapping[str, Any], what: str = "out-of-fold probe predictions") -> np.ndarray:
    """Per-image correctness (0/1 float [n]) of a classification probe score dict."""
    v = need(score, "oof_correct", what=what)
    return np.asarray(v, dtype=np.float64)


def accuracy_interval(score: Mapping[str, Any], *seed: str) -> Interval:
    """The probe's out-of-fold accuracy with its bootstrap interval over images."""
    return bootstrap(accuracy_statistic, [correct(score)], seed=seed_of(*seed))


def accuracy_difference(a: Mapping[str, Any], b: Mapping[str, Any], *seed: str, paired: bool = True) -> Interval:
    """acc(a) − acc(b) over images: paired when both probes scored the same images (the same test set)."""
    ca, cb = correct(a), correct(b)
    if paired and ca.shape != cb.shape:
        raise ValueError(f"paired accuracies need the same images, got {ca.size} and {cb.size}")
    return bootstrap(
        lambda x, y: accuracy_statistic(x) - accuracy_statistic(y), [ca, cb], paired=paired, seed=seed_of(*seed)
    )


def r2_difference(
    y: Sequence[Any], pred_a: Mapping[str, Any], pred_b: Mapping[str, Any], *seed: str
) -> tuple[Interval, Interval, Interval]:
    """R²(a) − R²(b) of two regression probes on the same images (paired), and each R² with its interval."""
    t = np.asarray(y, dtype=np.float64)
    pa = np.asarray(need(pred_a, "oof_prediction", what="out-of-fold probe predictions"), dtype=np.float64)
    pb = np.asarray(need(pred_b, "oof_prediction", what="out-of-fold probe predictions"), dtype=np.float64)
    t, pa, pb = (v.reshape(v.shape[0], -1) for v in (t, pa, pb))
    s = seed_of(*seed)
    diff = bootstrap(lambda tt, x, z: r2_statistic(tt, x) - r2_statistic(tt, z), [t, pa, pb], seed=s)
    ia = bootstrap(r2_statistic, [t, pa], seed=s)
    ib = bootstrap(r2_statistic, [t, pb], seed=s)
    return diff, ia, ib


def sensitivity_terms(pairs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(num [N], den [N]) of one model's per-pair sensitivity record."""
    num = np.asarray(need(pairs, "num", what="per-pair sensitivity"), dtype=np.float64)
    den = np.asarray(need(pairs, "den", what="per-pair sensitivity"), dtype=np.float64)
    return num, den


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return num.mean(axis=1) / den.mean(axis=1)


def sensitivity_difference(a: Mapping[str, Any], b: Mapping[str, Any], *seed: str) -> Interval:
    """sensitivity(a) − sensitivity(b) on the same pairs (paired over pairs): negative = a more invariant."""
    na, da = sensitivity_terms(a)
    nb, db = sensitivity_terms(b)
    return bootstrap(lambda w, x, y, z: _ratio(w, x) - _ratio(y, z), [na, da, nb, db], seed=seed_of(*seed))


def per_image(measure: Mapping[str, Any], model: str, transforms: Sequence[str]) -> np.ndarray:
    """[N, T] per-image standardised cosines of ``model`` on ``transforms`` (NaN where undefined)."""
    table = need(measure, "per_image_cosine", model, what="per-image invariance of the measurement")
    cols = []
    for t in transforms:
        v = table.get(t)
        if v is None:
            raise Missing(f"per-image invariance of {model} to {t}")
        cols.append([np.nan if x is None else float(x) for x in v])
    n = max((len(c) for c in cols), default=0)
    # a transform undefined on every image is kept as [] by the stage: a column of NaN
    return np.asarray([c if c else [np.nan] * n for c in cols], dtype=np.float64).reshape(len(cols), n).T


def grids_scaled(measure: Mapping[str, Any]) -> Precondition:
    """'test-transform grids scaled to the image': the measurement recorded the side its pixel grids were scaled
    to (``grid_side``); a measurement made before 0.5, or with ``measurement.scale_grids`` off, used the 224-px
    grids."""
    side = measure.get("grid_side")
    detail = (
        f"scaled to {side} px"
        if side
        else "the 224-px grids, unscaled (a run before 0.5 or measurement.scale_grids off)"
    )
    return Precondition("test-transform grids scaled to the image", bool(side), detail)
