"""The check of a saved measurement result before it is read (:meth:`InvarianceResult.from_dict`, and so
``invfast compare`` and every reader of ``result.json``): every field the reader uses, its JSON type and its
length, every value in its valid range (a standardised cosine in [-1, 1], a distance or a spread >= 0), and
each transform's mean against its own per-image values (``mean_cosine`` is their mean). A file edited by
hand, cut short or written by something else is one ``ValueError`` naming the first bad field, instead of
an error deep inside a comparison or a plot, or a number shown that its own data contradict.

Numbers may be ``null`` (or NaN) where a value is missing — invfast writes NaN as ``null`` — but never
±Infinity, which invfast does not write.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check_result_dict"]

_VECTORS = ("distance", "cosine", "distance_std", "cosine_std")
_UNIT_VECTORS = (
    "unit_transform_variance",
    "unit_sample_variance",
    "unit_view_std_sum",
    "unit_image_std_sum",
    "unit_same_view_std_sum",
    "unit_same_image_std_sum",
)
_OPTIONAL_VECTORS = ("per_image_distance", "per_image_cosine", *_UNIT_VECTORS)
_WANT: dict[type, str] = {str: "a string", dict: "an object", list: "a list"}
_OPTIONAL_NUMBERS = ("mean_distance", "mean_cosine", "identity_distance", "identity_cosine")


#: how far a stored cosine may lie outside [-1, 1] (float rounding of the whitened cosine)
_COSINE_SLACK = 1e-3
#: the valid range of every number field: (fields, low, high, what it must be)
_RANGES = (
    (("mean_cosine", "identity_cosine", "cosine", "per_image_cosine"), -1.0, 1.0, "a cosine in [-1, 1]"),
    (("mean_distance", "identity_distance", "distance", "per_image_distance"), 0.0, math.inf, "a distance >= 0"),
    (("distance_std", "cosine_std"), 0.0, math.inf, "a standard deviation >= 0"),
    (_UNIT_VECTORS, 0.0, math.inf, "a variance or a sum of standard deviations >= 0"),
    (("linear_equivariance", "mean_linear_equivariance"), -math.inf, 1.0 + 1e-9, "an R² <= 1"),
)


def _shown(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _bad(where: str, want: str, got: Any) -> ValueError:
    return ValueError(f"field {where} must be {want}, got {_shown(got)}")


def _number(v: Any, null: bool = True) -> bool:
    if v is None:
        return null
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isinf(v)


def _count(d: dict[str, Any], key: str, where: str, required: bool = True) -> None:
    v = d.get(key)
    if (required or v is not None) and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
        raise _bad(f"{where}{key}", "an integer >= 0", v)


def _of_type(d: dict[str, Any], key: str, kind: type, where: str, required: bool = False) -> None:
    v = d.get(key)
    if (required or v is not None) and not isinstance(v, kind):
        raise _bad(f"{where}{key}", _WANT[kind], v)


def _vector(v: Any, where: str, length: int | None) -> None:
    """A list of numbers (or nulls) of ``length`` or empty (not computed; any length when None)."""
    if not isinstance(v, list) or not all(_number(x) for x in v):
        raise _bad(where, "a list of numbers", v)
    if length is not None and len(v) not in (0, length):
        raise _bad(where, f"a list of {length} numbers (one per grid parameter)", f"{len(v)} numbers")


def _params(v: Any, where: str) -> int:
    """The grid: a list of numbers, or of equally long lists of numbers; returns its length."""
    if isinstance(v, list) and v and all(isinstance(row, list) for row in v):
        m = len(v[0])
        if m and all(len(row) == m and all(_number(x) for x in row) for row in v):
            return len(v)
        raise _bad(where, "a list of numbers or of equally long lists of numbers", v)
    _vector(v, where, None)
    return len(v)


def _transform(t: Any, where: str) -> None:
    if not isinstance(t, dict):
        raise _bad(where, "an object", t)
    w = f"{where}."
    for key in ("name", "family"):
        _of_type(t, key, str, w, required=True)
    if not t["name"]:
        raise _bad(f"{w}name", "a transform name", t["name"])
    _count(t, "n_images", w)
    _count(t, "n_pairs", w, required=False)
    _count(t, "n_views", w, required=False)
    for key in _OPTIONAL_NUMBERS:
        if not _number(t.get(key)):
            raise _bad(f"{w}{key}", "a number or null", t.get(key))
    p = _params(t.get("params"), f"{w}params")
    ident = t.get("identity")
    if not isinstance(ident, list) or len(ident) not in (0, p) or not all(isinstance(x, bool) for x in ident):
        raise _bad(f"{w}identity", f"a list of {p} true/false (one per grid parameter)", ident)
    for key in _VECTORS:
        _vector(t.get(key), f"{w}{key}", p)
    for key in _OPTIONAL_VECTORS:
        if t.get(key) is not None:
            _vector(t[key], f"{w}{key}", None)
    if t.get("linear_equivariance") is not None:
        _vector(t["linear_equivariance"], f"{w}linear_equivariance", p)
    _ranges(t, w)
    _means(t, w)
    scores = t.get("pair_scores")
    if scores is not None and (not isinstance(scores, dict) or not all(isinstance(x, str) for x in scores.values())):
        raise _bad(f"{w}pair_scores", "an object of file paths or null", scores)


def _ranges(t: dict[str, Any], w: str) -> None:
    """Every number of the transform's fields in its valid range (null and NaN stand for missing)."""
    for keys, lo, hi, want in _RANGES:
        slack = _COSINE_SLACK if hi == 1.0 else 0.0
        for key in keys:
            v = t.get(key)
            for i, x in enumerate(v if isinstance(v, list) else [v]):
                if x is not None and not math.isnan(x) and not lo - slack <= x <= hi + slack:
                    raise _bad(f"{w}{key}" + (f"[{i}]" if isinstance(v, list) else ""), want, x)


def _means(t: dict[str, Any], w: str) -> None:
    """``mean_<metric>`` is the mean of the readable ``per_image_<metric>`` values (how measure computes it)."""
    for metric in ("cosine", "distance"):
        mean, per = t.get(f"mean_{metric}"), t.get(f"per_image_{metric}")
        vals = [x for x in per if x is not None and not math.isnan(x)] if isinstance(per, list) else []
        if mean is None or math.isnan(mean) or not vals:
            continue
        want = math.fsum(vals) / len(vals)
        if abs(mean - want) > 1e-4 * max(abs(x) for x in vals) + 1e-9:
            raise _bad(f"{w}mean_{metric}", f"the mean of its per_image_{metric} values ({want:.6g})", mean)


def _part(part: dict[str, Any], where: str) -> None:
    """The fields a result and each of its layers share: stats and the list of transforms."""
    _of_type(part, "stats", dict, where)
    for key in ("n", "dim"):
        _count(part.get("stats") or {}, key, f"{where}stats.", required=False)
    ts = part.get("transforms")
    if not isinstance(ts, list):
        raise _bad(f"{where}transforms", "a list", ts)
    for i, t in enumerate(ts):
        _transform(t, f"{where}transforms[{i}]")
    names = [t["name"] for t in ts]
    if len(set(names)) != len(names):
        raise _bad(f"{where}transforms", "distinct transforms", sorted(n for n in names if names.count(n) > 1)[0])


def check_result_dict(d: Any) -> None:
    """Raise ValueError naming the first field of the result document ``d`` (``InvarianceResult.to_dict()``,
    as read from ``result.json``) that is missing or of the wrong type or length."""
    if not isinstance(d, dict):
        raise ValueError(f"the result must be a JSON object, got {type(d).__name__}")
    _of_type(d, "model", str, "", required=True)
    _count(d, "n_images", "")
    _of_type(d, "layer", str, "")
    for key in ("errors", "meta"):
        _of_type(d, key, dict, "")
    meta = d.get("meta") or {}
    for key in ("images", "config"):
        _of_type(meta, key, dict, "meta.")
    _part(d, "")
    layers = d.get("layers")
    if layers is None:
        return
    if not isinstance(layers, list):
        raise _bad("layers", "a list", layers)
    for i, part in enumerate(layers):
        if not isinstance(part, dict):
            raise _bad(f"layers[{i}]", "an object", part)
        _of_type(part, "layer", str, f"layers[{i}].", required=True)
        _part(part, f"layers[{i}].")
