"""The verdict rules of Speicher et al.'s findings S1-S8 (docs/findings.md).

Each ``judge_sN(results)`` reads ONE seed's stage results (stage name -> the dict the stage returned) and
gives that seed's :class:`~invfast.evidence.SeedVerdict`. A number the rule needs that the stages do not
keep (yet) makes the seed *not testable: needs <what>* (:class:`~invfast.reproduce.rules.common.Missing`,
caught here); a precondition of the rule that the numbers can check is a :class:`~invfast.evidence.Precondition`.
The learning preconditions (a model "learned") are added by the caller.

The statistics are small pure functions of arrays (``*_statistic``, :func:`resample_means`,
:func:`share_interval`, :func:`spearman_rows`) so the tests can check them against numpy/scipy.

Own-data accuracy (S1, S5, S8: "trained to ≥ 0.9 / native ≥ 0.8 on its own data", docs/findings.md: "on their own
test data"): a model's training record (``transfer-train-<source>``, or ``models[key]`` of a training stage)
gives ``test_accuracy`` (its classifier on held-out images of its own task) where the stage keeps it, else
``ncm_trained`` (:func:`invfast.reproduce.stages.supervised.learned_check`: nearest-class-mean accuracy of its
features on held-out images of its own task). The detail of the precondition says which number it read.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from invfast.evidence import (
    DEFAULT_RESAMPLES,
    Criterion,
    Interval,
    Precondition,
    SeedVerdict,
    bootstrap,
    judge,
    not_testable,
)
from invfast.reproduce.rules.common import (
    Missing,
    accuracy_difference,
    accuracy_interval,
    correct,
    need,
    seed_of,
    sensitivity_difference,
    sensitivity_terms,
)

__all__ = [
    "judge_s1",
    "judge_s2",
    "judge_s3",
    "judge_s4",
    "judge_s5",
    "judge_s6",
    "judge_s7",
    "judge_s8",
    "s3_criteria",
    "s4_beside",
    "S3_COMPARISON",
    "HARD_CATEGORIES",
    "MIN_PAIRS",
    "own_accuracy",
    "training_record",
    "resample_means",
    "percentile_interval",
    "share_interval",
    "spearman_rows",
    "s1_excess_statistic",
    "s2_contrast_statistic",
    "s4_statistic",
    "transfer_statistic",
    "s7_statistics",
]

#: docs/findings.md: at least this many sensitivity pairs per (model, feature) record
MIN_PAIRS = 2000
#: the categories Speicher et al. found hard to transfer to (``sections.categories.HARD``)
HARD_CATEGORIES = ("translate", "rotate", "hue+brightness+contrast")
NONE, UNTRAINED = "none", "untrained"
#: S7: the two directions (model kinds) and the three OOD levels of ``s7-sensitivity``
S7_KINDS = ("image", "random")
S7_LEVELS = ("in distribution", "mild OOD", "strong OOD")
#: S1 and S8: every model compared is trained to this own-data accuracy (held-out images of its own task)
TRAINED_LEVEL = 0.9
#: S1: each factor's required values (a count for size and arch, the four relations for the classes)
S1_VALUES: dict[str, int | tuple[str, ...]] = {
    "size": 3,
    "arch": 3,
    "classes": ("subset", "disjoint", "same", "superset"),
}
#: S3: for each probed label, the model trained on the OTHER label that never saw the irrelevant feature
S3_COMPARISON = {"objects": "C/C", "base": "O/O"}

Results = Mapping[str, Any]


def _rule(fn: Callable[[Results], SeedVerdict]) -> Callable[[Results], SeedVerdict]:
    """A missing number makes the seed *not testable: needs <what>*."""

    @functools.wraps(fn)
    def wrapper(results: Results) -> SeedVerdict:
        try:
            return fn(results)
        except Missing as e:
            return not_testable(f"needs {e.args[0] if e.args else 'a number the stages do not keep'}")

    return wrapper


# ---------------------------------------------------------------------------------------------- helpers
def resample_means(x: Any, seed: int, n_resamples: int = DEFAULT_RESAMPLES) -> np.ndarray:
    """Bootstrap means of the columns of ``x`` [n, k] (units along axis 0, resampled together: paired):
    [R, k]. The draw is :func:`invfast.evidence.bootstrap`'s (``integers(0, n, (R, n))`` on
    ``default_rng(seed)``), as resample counts times ``x``, so many columns cost one matrix product."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 1:
        a = a[:, None]
    n = a.shape[0]
    if n < 2:
        raise ValueError(f"resampling needs at least 2 units, got {n}")
    if int(n_resamples) < 1000:
        raise ValueError(f"n_resamples must be at least 1000 (docs/findings.md), got {n_resamples}")
    idx = np.random.default_rng(seed).integers(0, n, (int(n_resamples), n))
    counts = np.bincount((idx + n * np.arange(int(n_resamples))[:, None]).ravel(), minlength=int(n_resamples) * n)
    return counts.reshape(int(n_resamples), n).astype(np.float64) @ a / n


def percentile_interval(estimate: float, theta: Any, n: int, confidence: float = 0.95) -> Interval:
    """The percentile interval of bootstrap values ``theta`` [R] around the observed ``estimate``."""
    t = np.asarray(theta, dtype=np.float64).reshape(-1)
    if not np.isfinite(t).all() or not np.isfinite(estimate):
        raise ValueError("the statistic is NaN or infinite on some resample")
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(t, [100 * alpha, 100 * (1 - alpha)])
    return Interval(float(estimate), float(low), float(high), confidence, "bootstrap", int(n))


def share_interval(shown: int, opposite: int, total: int) -> Interval:
    """A share of units (columns) with the effect: estimate and low = the share whose interval shows it,
    high = the share NOT shown in the opposite direction (the most the undecided units could add). With
    :class:`Criterion` ``boundary`` b the rule is contradicted when more than 1 − b of the units are shown
    opposite (high < b)."""
    if total <= 0 or shown < 0 or opposite < 0 or shown + opposite > total:
        raise ValueError(f"bad counts: {shown} shown, {opposite} opposite of {total}")
    return Interval(shown / total, shown / total, 1.0 - opposite / total, 1.0, "share", int(total))


def spearman_rows(x: Any, y: Any) -> np.ndarray:
    """Spearman's ρ along the last axis of ``x`` and ``y`` (broadcast; ties get mean ranks); 0 where
    either side is constant (no order to correlate)."""
    from scipy.stats import rankdata

    xb, yb = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
    rx, ry = rankdata(xb, axis=-1), rankdata(yb, axis=-1)
    rx = rx - rx.mean(-1, keepdims=True)
    ry = ry - ry.mean(-1, keepdims=True)
    den = np.sqrt((rx * rx).sum(-1) * (ry * ry).sum(-1))
    num = (rx * ry).sum(-1)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def _correct_of(score: Any, what: str) -> np.ndarray:
    if not isinstance(score, Mapping):
        raise Missing(what)
    return correct(score, what=what)


def _pairs_of(record: Any, what: str) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(record, Mapping) or "num" not in record or "den" not in record:
        raise Missing(what)
    return sensitivity_terms(record)


def training_record(results: Results, key: str) -> Mapping[str, Any]:
    """The training record of model ``key``: ``results['transfer-train-<source>']`` for 'transfer-<source>',
    else ``models[key]`` of the training stage that trained it."""
    if key.startswith("transfer-"):
        rec = results.get(f"transfer-train-{key[len('transfer-') :]}")
        if isinstance(rec, Mapping):
            return rec
    for stage in results.values():
        models = stage.get("models") if isinstance(stage, Mapping) else None
        rec = models.get(key) if isinstance(models, Mapping) else None
        if isinstance(rec, Mapping):
            return rec
    raise Missing(f"the training record of {key}")


def own_accuracy(record: Mapping[str, Any], key: str) -> tuple[float, str]:
    """(accuracy on held-out images of its own task, which number it is) of a training record."""
    if record.get("test_accuracy") is not None:
        return float(record["test_accuracy"]), "test accuracy"
    if record.get("ncm_trained") is not None:
        return float(record["ncm_trained"]), "nearest-class-mean accuracy on its held-out images"
    raise Missing(f"own-data accuracy of {key}")


def _trained_to(results: Results, keys: Sequence[str], level: float) -> Precondition:
    """Every model of ``keys`` reaches ``level`` on its own held-out data."""
    below, read = [], set()
    for key in dict.fromkeys(keys):
        try:
            acc, what = own_accuracy(training_record(results, key), key)
        except Missing as e:
            raise Missing(f"own-data accuracy ≥ {level:g}: {e.args[0]}") from None
        read.add(what)
        if acc < level:
            below.append(f"{key} {acc:.3f}")
    detail = ("below: " + ", ".join(below) + "; " if below else "") + "read: " + " / ".join(sorted(read))
    return Precondition(f"every model trained to ≥ {level:g} on its own data", not below, detail)


def _enough_pairs(counts: Mapping[str, int]) -> Precondition:
    short = [f"{k} {n}" for k, n in counts.items() if n < MIN_PAIRS]
    detail = "fewer: " + ", ".join(short) if short else f"at least {min(counts.values())} pairs each"
    return Precondition(f"≥ {MIN_PAIRS} sensitivity pairs", not short, detail)


# ---------------------------------------------------------------------------------------------- S1
def s1_excess_statistic(same: np.ndarray, diff: np.ndarray) -> np.ndarray:
    """Per resample: mean over values of (same − different) minus the mean over pairs of values of
    |same_v − same_w|. ``same``, ``diff``: accuracies [R, V] (one column per factor value)."""
    gap = (same - diff).mean(axis=1)
    v = same.shape[1]
    pairs = list(itertools.combinations(range(v), 2))
    if not pairs:
        return gap
    spread = np.mean([np.abs(same[:, a] - same[:, b]) for a, b in pairs], axis=0)
    return gap - spread


def _s1_factor(factor: str, rows: Mapping[str, Any]) -> tuple[list[Criterion], list[str]]:
    crit, models = [], []
    columns = []
    for value, row in rows.items():
        same = need(row, "same", what=f"S1's {factor} = {value} 'same' model")
        diff = need(row, "different", what=f"S1's {factor} = {value} 'different' model")
        models += [str(same.get("model", "")), str(diff.get("model", ""))]
        cs = _correct_of(same, f"out-of-fold predictions of S1's {factor} = {value} 'same' model")
        cd = _correct_of(diff, f"out-of-fold predictions of S1's {factor} = {value} 'different' model")
        if cs.shape != cd.shape:
            raise ValueError(f"S1 {factor} = {value}: the pair was probed on different images")
        iv = accuracy_difference(same, diff, "S1", factor, value, "gap")
        crit.append(Criterion(f"{factor} = {value}: same − different", iv, minimum=0.0))
        columns.append((cs, cd))
    n = {c.shape[0] for pair in columns for c in pair}
    if len(n) != 1:
        raise ValueError(f"S1 {factor}: the values were probed on different target images")
    x = np.stack([c for pair in columns for c in pair], axis=1)  # [n, 2V]: same_0, diff_0, same_1, ...
    stat = lambda a: s1_excess_statistic(a[:, 0::2], a[:, 1::2])  # noqa: E731
    theta = stat(resample_means(x, seed_of("S1", factor, "excess")))
    iv = percentile_interval(float(stat(x.mean(axis=0)[None])[0]), theta, x.shape[0])
    crit.append(Criterion(f"{factor}: mean within-pair gap − mean |difference between values| (same models)", iv, 0.0))
    return crit, [m for m in models if m]


@_rule
def judge_s1(results: Results) -> SeedVerdict:
    """S1, invariance matters more than dataset size, architecture and class relationship: per factor, every
    value's within-pair gap acc(same) − acc(different) on the same target images has its CI > 0, and the mean
    gap exceeds the mean absolute difference between values of the same-transformation models
    (mean_v gap_v − mean_{v<w} |acc(same_v) − acc(same_w)| > 0, CI over the target images).

    Reads ``results['s1-probe']['factors'][factor][value]['same' | 'different']`` (probe score dicts with
    ``oof_correct`` and the ``model`` key) for factor ∈ size, arch, classes. Preconditions: ≥ 3 sizes, ≥ 3
    architectures, the class relations subset / disjoint / same / superset; every model trained to ≥ 0.9 on
    its own data (its training record, :func:`own_accuracy`)."""
    factors = need(results, "s1-probe", "factors", what="S1's probes (s1-probe)")
    crit: list[Criterion] = []
    pre: list[Precondition] = []
    models: list[str] = []
    for factor, required in S1_VALUES.items():
        rows = need(factors, factor, what=f"S1's {factor} factor")
        if isinstance(required, int):
            pre.append(Precondition(f"≥ {required} values of {factor}", len(rows) >= required, f"{len(rows)} values"))
        else:
            lacking = [v for v in required if v not in rows]
            detail = "lacks " + ", ".join(lacking) if lacking else f"{len(rows)} relations"
            pre.append(Precondition(f"class relations {' / '.join(required)}", not lacking, detail))
        c, m = _s1_factor(factor, rows)
        crit += c
        models += m
    pre.append(_trained_to(results, models, TRAINED_LEVEL))
    return judge(crit, pre)


# ---------------------------------------------------------------------------------------------- S2
def s2_contrast_statistic(same_t: np.ndarray, same_o: np.ndarray, diff_n: np.ndarray, diff_a: np.ndarray) -> np.ndarray:
    """C = ½{[same(O2, T1) − same(O1, T2)] + [diff(O2, T2) − diff(O1, T1)]} per resample, from per-image
    correctness [R, n] of the four probes."""
    m = [a.mean(axis=1) for a in (same_t, same_o, diff_n, diff_a)]
    return 0.5 * ((m[0] - m[1]) + (m[2] - m[3]))


#: S2: D_transforms may be this far below D_all and still count as "close" (``sections.equivariance.FEW_POINTS``)
S2_CLOSE = 0.05
S2_ALL_LEVEL = 0.9


@_rule
def judge_s2(results: Results) -> SeedVerdict:
    """S2, invariance matters more than equivariance, crossed design: the model trained on (O1, T1) ('same')
    and the one trained on (O1, T2) ('different'), each probed on D_all (O1, T1), D_transforms (O2, T1),
    D_objects (O1, T2), D_none (O2, T2). C = ½{[same(D_transforms) − same(D_objects)] + [diff(D_none) −
    diff(D_all)]} ≥ 0.05 with CI > 0 (each set resampled on its own: the four terms are on different images).
    Only where same(D_all) ≥ 0.9: "D_transforms close to D_all", non-inferiority same(D_transforms) −
    same(D_all) with lower bound > −0.05 (the report's "within a few points"); below 0.9 that part is not judged.

    Reads ``results['s2-probe']['accuracy'][model][set]`` (model 'same' / 'different', set 'all', 'transforms',
    'objects', 'none'; score dicts with ``oof_correct``); the same model may come from the current
    ``results['s2-probe']['scores'][set]``. Folders of invfast before 0.6 did not probe the crossed 'different'
    model: not testable."""
    s2 = need(results, "s2-probe", what="S2's probes (s2-probe)")
    acc = s2.get("accuracy") if isinstance(s2.get("accuracy"), Mapping) else {}
    same = acc.get("same") or s2.get("scores")
    if not isinstance(same, Mapping):
        raise Missing("S2's (O1, T1) model probed on the four sets")
    diff = need(acc, "different", what="the crossed S2 model: (O1, T2) probed on the four sets")

    def get(table: Mapping[str, Any], model: str, name: str) -> np.ndarray:
        what = f"out-of-fold predictions of S2's {model} model on D_{name}"
        return _correct_of(table.get(name), what)

    arrays = [get(same, "same", "transforms"), get(same, "same", "objects")]
    arrays += [get(diff, "different", "none"), get(diff, "different", "all")]
    c = bootstrap(s2_contrast_statistic, arrays, paired=False, seed=seed_of("S2", "contrast"))
    crit = [Criterion("C = ½{[same(O2,T1) − same(O1,T2)] + [diff(O2,T2) − diff(O1,T1)]}", c, minimum=0.05)]
    d_all = get(same, "same", "all")
    if float(d_all.mean()) >= S2_ALL_LEVEL:
        close = bootstrap(
            lambda t, a: t.mean(axis=1) - a.mean(axis=1),
            [arrays[0], d_all],
            paired=False,
            seed=seed_of("S2", "close"),
        )
        crit.append(Criterion("same(D_transforms) − same(D_all)", close, -S2_CLOSE, boundary=-S2_CLOSE))
    return judge(crit)


# ---------------------------------------------------------------------------------------------- S3
def s3_criteria(
    results: Results, comparison: Mapping[str, str] = S3_COMPARISON
) -> tuple[list[Criterion], Precondition]:
    """S3's criteria against the comparison models ``comparison`` ({'objects': model, 'base': model}) and
    the pair-count precondition. :func:`judge_s3` uses :data:`S3_COMPARISON`; the tests pass the models
    trained on the probed label ((O, O) for objects, (C, C) for base classes) to show that control passes
    where the rule does not."""
    s3 = need(results, "s3-evaluate", what="S3's evaluation (s3-evaluate)")
    acc = need(s3, "accuracy", what="S3's accuracy table")
    pairs = need(s3, "sensitivity_pairs", what="S3's per-pair sensitivity (sensitivity_pairs)")
    # probed label -> (the C+O model trained on the other label, its test set, the irrelevant feature)
    parts = {"objects": ("C+O/C", "C+O/O", "object"), "base": ("C+O/O", "C+O/C", "base")}
    label = {"objects": "objects", "base": "base classes"}
    crit: list[Criterion] = []
    counts: dict[str, int] = {}
    for part, (co, test, _feature) in parts.items():
        ref = comparison[part]
        a = need(acc, ref, test, what=f"S3's ({ref}) model probed on {test}")
        b = need(acc, co, test, what=f"S3's ({co}) model probed on {test}")
        _correct_of(a, f"out-of-fold predictions of ({ref}) on {test}")
        _correct_of(b, f"out-of-fold predictions of ({co}) on {test}")
        iv = accuracy_difference(a, b, "S3", part, ref, "accuracy")
        crit.append(Criterion(f"({ref}) − ({co}) on {label[part]} (C+O images)", iv, minimum=0.05))
    for part, (co, _test, feature) in parts.items():
        ref = comparison[part]
        pa = need(pairs, ref, feature, what=f"per-pair sensitivity of ({ref}) to the {feature}")
        pb = need(pairs, co, feature, what=f"per-pair sensitivity of ({co}) to the {feature}")
        na = _pairs_of(pa, f"per-pair sensitivity of ({ref}) to the {feature}")[0].shape[0]
        nb = _pairs_of(pb, f"per-pair sensitivity of ({co}) to the {feature}")[0].shape[0]
        counts[f"({ref}) {feature}"], counts[f"({co}) {feature}"] = na, nb
        iv = sensitivity_difference(pa, pb, "S3", part, ref, "sensitivity")
        crit.append(Criterion(f"sensitivity to the {feature}: ({ref}) − ({co})", iv, minimum=0.0))
    return crit, _enough_pairs(counts)


@_rule
def judge_s3(results: Results) -> SeedVerdict:
    """S3, irrelevant features make harmful invariances: the C+O model trained on label Y predicts the other
    label worse than the model trained on the same Y that never saw the irrelevant feature, on the C+O test
    images: acc['C/C']['C+O/O'] − acc['C+O/C']['C+O/O'] (objects) and acc['O/O']['C+O/C'] −
    acc['C+O/O']['C+O/C'] (base classes), each ≥ 0.05 with CI > 0 (paired over the test images); and its
    sensitivity to the irrelevant feature is below that model's: sens('C/C', object) − sens('C+O/C', object)
    and sens('O/O', base) − sens('C+O/O', base), CI > 0 (paired over the pairs).

    So (C, C) is the comparison on objects and (O, O) on base classes: the models trained on the OTHER label
    than the one probed, like the C+O model. The model trained on the probed label ((O, O) for objects) is
    not a comparison: it beats the C+O model whether or not the C+O model's invariance harms it.

    Reads ``results['s3-evaluate']['accuracy'][model][test_set]`` (keys 'X/Y'; score dicts with
    ``oof_correct``) and ``results['s3-evaluate']['sensitivity_pairs'][model]['object' | 'base']``
    ({'num', 'den'}). Precondition: ≥ 2 000 pairs per record."""
    crit, pre = s3_criteria(results)
    return judge(crit, [pre])


# ---------------------------------------------------------------------------------------------- S4
def s4_statistic(a1: np.ndarray, a0: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """|acc(α = 1) − acc(α = 0)| − |acc(β = 0) − acc(β = 1)| per resample (per-image correctness [R, n])."""
    m = [x.mean(axis=1) for x in (a1, a0, b0, b1)]
    return np.abs(m[0] - m[1]) - np.abs(m[2] - m[3])


def _s4_row(s4: Mapping[str, Any], kind: str, value: float) -> Mapping[str, Any]:
    rows = need(s4, kind, what=f"S4's {kind} sweep")
    for r in rows:
        if isinstance(r, Mapping) and abs(float(r.get("value", float("nan"))) - value) < 1e-9:
            return r
    raise Missing(f"S4's model at {'α' if kind == 'alpha' else 'β'} = {value:g}")


def _s4_object(s4: Mapping[str, Any], kind: str, value: float) -> np.ndarray:
    sym = "α" if kind == "alpha" else "β"
    row = _s4_row(s4, kind, value)
    return _correct_of(row.get("accuracy_O"), f"out-of-fold object predictions at {sym} = {value:g}")


@_rule
def judge_s4(results: Results) -> SeedVerdict:
    """S4, relevance matters more than availability: object accuracy on C+O images, |acc(α = 1) − acc(α = 0)|
    − |acc(β = 0) − acc(β = 1)| ≥ 0.05 with CI > 0 (paired over the probe images: every model probed on the
    same images). The Spearman over α, the drop at the first β > 0 and a random network's object accuracy
    (the floor) are reported beside it (:func:`s4_beside`), they decide nothing.

    Reads ``results['s4-probe']['alpha' | 'beta']`` rows ``{'value', 'accuracy_O'}`` (score dicts with
    ``oof_correct``) at α = 0, 1 and β = 0, 1."""
    s4 = need(results, "s4-probe", what="S4's probes (s4-probe)")
    arrays = [_s4_object(s4, "alpha", 1.0), _s4_object(s4, "alpha", 0.0)]
    arrays += [_s4_object(s4, "beta", 0.0), _s4_object(s4, "beta", 1.0)]
    if len({a.shape for a in arrays}) != 1:
        raise ValueError("S4's models were probed on different images")
    iv = bootstrap(s4_statistic, arrays, seed=seed_of("S4", "relevance - availability"))
    return judge([Criterion("|acc(α=1) − acc(α=0)| − |acc(β=0) − acc(β=1)| (objects)", iv, minimum=0.05)])


def s4_beside(results: Results) -> dict[str, Any]:
    """What S4 reports beside its rule: Spearman of object accuracy over α, the drop acc(β = 0) − acc(first
    β > 0) with its interval, and a random network's object accuracy (``results['s4-probe']['random']
    ['accuracy_O']``, None where the stage does not probe one)."""
    s4 = need(results, "s4-probe", what="S4's probes (s4-probe)")
    alpha = need(s4, "alpha", what="S4's α sweep")
    values = [float(r["value"]) for r in alpha]
    accs = [float(_s4_object(s4, "alpha", v).mean()) for v in values]
    rho = float(spearman_rows(values, accs))
    betas = sorted(float(r["value"]) for r in need(s4, "beta", what="S4's β sweep"))
    first = next((b for b in betas if b > 0), None)
    drop = None
    if first is not None:
        r0, r1 = _s4_row(s4, "beta", 0.0), _s4_row(s4, "beta", first)
        drop = accuracy_difference(r0["accuracy_O"], r1["accuracy_O"], "S4", "beta drop")
    rnd = s4.get("random")
    floor = None
    if isinstance(rnd, Mapping) and isinstance(rnd.get("accuracy_O"), Mapping):
        floor = accuracy_interval(rnd["accuracy_O"], "S4", "random floor")
    return {"spearman_alpha": rho, "first_beta": first, "drop_first_beta": drop, "random_floor": floor}


# ---------------------------------------------------------------------------------------------- S5
def transfer_statistic(oplus: np.ndarray, native: np.ndarray, other: np.ndarray) -> np.ndarray:
    """(⊕ − other) / (native − other) per resample (per-image correctness [R, n] on the same images); a
    resample where native ≤ other gets the denominator 1e-9 (a huge value of the numerator's sign)."""
    o, n, t = oplus.mean(axis=1), native.mean(axis=1), other.mean(axis=1)
    return (o - t) / np.maximum(n - t, 1e-9)


#: S5: the no-transfer value of the ratio (docs/findings.md) and the minimum transfer
S5_NO_TRANSFER, S5_MIN_TRANSFER, S5_NATIVE_LEVEL = 0.5, 0.7, 0.8
#: S5: on D_d the pairs the ⊕ model never saw, and the native / other model there
S5_UNSEEN = {"T1": ("O2 under T1", "T1", "T2"), "T2": ("O1 under T2", "T2", "T1")}


@_rule
def judge_s5(results: Results) -> SeedVerdict:
    """S5, invariance transfers between classes: on the (object, transformation) pairs the ⊕ model never saw
    (O2 under T1 on D_T1, O1 under T2 on D_T2), transfer = (⊕ − other) / (native − other) ≥ 0.7 with CI above
    0.5 (the rule: 0.5 is what no transfer gives), one criterion per pair (native: the T1 model on O2 under T1,
    other: the T2 model; and vice versa); and the ∘ model beats ⊕ on D_T1∘T2 by ≥ 0.05, CI > 0. Paired over
    the images of each set.

    Reads ``results['s5-probe']['unseen'][model][d]`` (model 'T1', 'T2', 'oplus'; d 'T1': the images of D_T1
    showing O2, d 'T2': those of D_T2 showing O1; score dicts with ``oof_correct``, the same images for every
    model; folders of invfast before 0.6 did not score those pairs: not testable) and
    ``results['s5-probe']['accuracy']['circ' | 'oplus']['circ']``. Preconditions: the native T1 and T2 models
    ≥ 0.8 on their own data; native above other on each unseen set (CI > 0: else the ratio has no scale)."""
    s5 = need(results, "s5-probe", what="S5's probes (s5-probe)")
    unseen = need(s5, "unseen", what="S5's scores on the (object, transformation) pairs the ⊕ model never saw")
    pre = [_trained_to(results, ["s5-T1", "s5-T2"], S5_NATIVE_LEVEL)]
    crit = []
    for d, (pairs, native, other) in S5_UNSEEN.items():

        def get(model: str, d: str = d, pairs: str = pairs) -> Mapping[str, Any]:
            score = need(unseen, model, d, what=f"S5's {model} model on {pairs} (unseen by ⊕)")
            _correct_of(score, f"out-of-fold predictions of S5's {model} model on {pairs}")
            return score

        o, nat, oth = get("oplus"), get(native), get(other)
        gap = accuracy_difference(nat, oth, "S5", d, "native - other")
        pre.append(Precondition(f"native above other on {pairs}", gap.low > 0, f"native − other {gap}"))
        arrays = [correct(o), correct(nat), correct(oth)]
        if len({a.shape for a in arrays}) != 1:
            raise ValueError(f"S5: the models were scored on different images of {pairs}")
        iv = bootstrap(transfer_statistic, arrays, seed=seed_of("S5", d, "transfer"))
        name = f"transfer on {pairs}: (⊕ − {other}) / ({native} − {other})"
        crit.append(Criterion(name, iv, minimum=S5_MIN_TRANSFER, boundary=S5_NO_TRANSFER))
    acc = need(s5, "accuracy", what="S5's accuracy table")
    circ = need(acc, "circ", "circ", what="S5's ∘ model on D_T1∘T2")
    oplus = need(acc, "oplus", "circ", what="S5's ⊕ model on D_T1∘T2")
    _correct_of(circ, "out-of-fold predictions of S5's ∘ model on D_T1∘T2")
    _correct_of(oplus, "out-of-fold predictions of S5's ⊕ model on D_T1∘T2")
    crit.append(Criterion("∘ − ⊕ on D_T1∘T2", accuracy_difference(circ, oplus, "S5", "circ - oplus"), 0.05))
    return judge(crit, pre)


# ---------------------------------------------------------------------------------------------- S6
#: S6: the share of resamples at which the hard three count as the three lowest columns, and below which
#: they count as contradicted (the data reject "the three lowest" at the one-sided 95 % level)
S6_SHARE, S6_REJECT = 0.8, 0.05


def _s6_means(
    acc: Mapping[str, Any], cats: Sequence[str], rows: Sequence[str]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], int]:
    """Per column c: the observed accuracies [1, M] and their bootstrap resamples [R, M] of the models ``rows``
    and the untrained network on c's images (resampled jointly), and the number of images over the columns."""
    means_obs, means_r = {}, {}
    n_images = 0
    for c in cats:
        cols = []
        for m in [*rows, UNTRAINED]:
            score = need(acc, m, c, what=f"S6's {m} model probed on {c}")
            cols.append(_correct_of(score, f"out-of-fold predictions of S6's {m} model on {c}"))
        if len({a.shape for a in cols}) != 1:
            raise ValueError(f"S6: the models were probed on different images of {c}")
        x = np.stack(cols, axis=1)
        means_obs[c], means_r[c] = x.mean(axis=0)[None], resample_means(x, seed_of("S6", c))
        n_images += x.shape[0]
    return means_obs, means_r, n_images


def _s6_column_means(means: Mapping[str, np.ndarray], cats: Sequence[str]) -> np.ndarray:
    """[R, C] per column c the mean over the other category models of acc(m, c) / acc(c, c), from the per-column
    accuracies ``means[c]`` [R, M] (models in the order of the categories first)."""
    out = []
    for k, c in enumerate(cats):
        a = means[c]
        others = [i for i in range(len(cats)) if i != k]
        out.append((a[:, others] / np.maximum(a[:, [k]], 1e-12)).mean(axis=1))
    return np.stack(out, axis=1)  # [R, C]


def _s6_hard_criterion(means_r: Mapping[str, np.ndarray], cats: Sequence[str]) -> Criterion:
    """The share of resamples in which the hard three are the three lowest normalised column means
    (:func:`_s6_column_means` of ``means_r`` [R, M] per column)."""
    hard = sorted(cats.index(h) for h in HARD_CATEGORIES)
    lowest = np.sort(np.argsort(_s6_column_means(means_r, cats), axis=1, kind="stable")[:, : len(hard)], axis=1)
    share = float((lowest == np.asarray(hard)).all(axis=1).mean())
    return Criterion(
        "the hard three are the three lowest normalised column means (share of resamples)",
        Interval.exact(share, DEFAULT_RESAMPLES),
        minimum=S6_SHARE,
        boundary=S6_REJECT,
    )


def _s6_rho_bar(
    ratio: Mapping[str, Any], cats: Sequence[str], rows: Sequence[str], means: Mapping[str, np.ndarray]
) -> np.ndarray:
    """[R] ρ̄: the mean over the columns of the Spearman over the trained models ``rows`` of distance ratio with
    accuracy (``means[c]`` [R, M], the trained models first)."""
    per_col = []
    for c in cats:
        r = np.asarray([float(need(ratio, m, c, what=f"S6's distance ratio of {m} on {c}")) for m in rows])
        per_col.append(spearman_rows(r, means[c][:, : len(rows)]))
    return np.mean(per_col, axis=0)


def _s6_rho_untrained(
    ratio: Mapping[str, Any], cats: Sequence[str], n_rows: int, means: Mapping[str, np.ndarray]
) -> np.ndarray:
    """[R] ρ(untrained): the Spearman over the columns of the untrained network's distance ratio with its accuracy
    (column ``n_rows`` of ``means[c]`` [R, M])."""
    r = np.asarray([float(need(ratio, UNTRAINED, c, what=f"S6's distance ratio of untrained on {c}")) for c in cats])
    a = np.stack([means[c][:, n_rows] for c in cats], axis=1)
    return spearman_rows(r, a)


def _s6_rho_criteria(
    ratio: Mapping[str, Any],
    cats: Sequence[str],
    rows: Sequence[str],
    means_obs: Mapping[str, np.ndarray],
    means_r: Mapping[str, np.ndarray],
    n_images: int,
) -> list[Criterion]:
    """S6's rank criteria: ρ̄ > 0 and ρ̄ − ρ(untrained) > 0 (with ρ(untrained) as control), their intervals from
    the resampled accuracies ``means_r`` (observed: ``means_obs``) over ``n_images`` images."""
    rb, ru = _s6_rho_bar(ratio, cats, rows, means_r), _s6_rho_untrained(ratio, cats, len(rows), means_r)
    rb0 = float(_s6_rho_bar(ratio, cats, rows, means_obs)[0])
    ru0 = float(_s6_rho_untrained(ratio, cats, len(rows), means_obs)[0])
    iv_rb = percentile_interval(rb0, rb, n_images)
    iv_ru = percentile_interval(ru0, ru, n_images)
    return [
        Criterion("ρ̄ = mean within-column Spearman(distance ratio, accuracy)", iv_rb, minimum=0.0),
        Criterion("ρ̄ − ρ(untrained)", percentile_interval(rb0 - ru0, rb - ru, n_images), minimum=0.0, control=iv_ru),
    ]


@_rule
def judge_s6(results: Results) -> SeedVerdict:
    """S6, some invariances are harder to acquire: with r(m, c) = acc(m, c) / acc(c, c) (columns normalised by
    their native model) and the column mean over the other category models m ≠ c, the three hard categories
    (translate, rotate, colour jitter) are the three lowest column means in ≥ 80 % of bootstrap resamples
    (images resampled within each column's test set, jointly for every model probed on it; contradicted
    below 5 %); the within-column Spearman over the trained models (the categories' and 'none') of distance
    ratio with accuracy, averaged over the columns (ρ̄), is > 0 (CI) and above the untrained model's
    (ρ̄ − ρ_untrained > 0, CI), ρ_untrained being the Spearman over the columns of the untrained network's
    distance ratio with its own probe accuracy (the same relation in a network that learned nothing).
    The distance ratios are single numbers: the intervals carry the accuracies' sampling error only.

    Reads ``results['s6-probe']``: ``categories``, ``accuracy[m][c]`` (score dicts with ``oof_correct``, the
    same images for every m on column c; m over the categories, 'none' and 'untrained'; folders of invfast
    before 0.6 did not probe the untrained network: not testable) and ``distance_ratio[m][c]``."""
    s6 = need(results, "s6-probe", what="S6's probes (s6-probe)")
    cats = list(need(s6, "categories", what="S6's categories"))
    lacking = [h for h in HARD_CATEGORIES if h not in cats]
    if lacking or len(cats) <= len(HARD_CATEGORIES):
        return not_testable("needs the categories translate, rotate, colour jitter and at least one other")
    acc = need(s6, "accuracy", what="S6's transfer matrix")
    ratio = need(s6, "distance_ratio", what="S6's distance ratios")
    rows = [*cats, NONE]
    means_obs, means_r, n_images = _s6_means(acc, cats, rows)
    crit = [_s6_hard_criterion(means_r, cats)]
    crit += _s6_rho_criteria(ratio, cats, rows, means_obs, means_r, n_images)
    return judge(crit)


# ---------------------------------------------------------------------------------------------- S7
#: S7: the share of columns that must show the effect, and the boundary of the share NOT shown opposite
#: (contradicted when a majority of the columns show some part in the opposite direction)
S7_SHARE, S7_MAJORITY = 0.75, 0.5


def _s7_terms(block: Mapping[str, Any], cats: Sequence[str], c: str) -> np.ndarray:
    """Column ``c``'s per-pair terms [n, 2k]: the num of the own model, the other category models, none and
    untrained, then their den in the same order."""
    models = [c, *(m for m in cats if m != c), NONE, UNTRAINED]
    terms = []
    for m in models:
        rec = need(block, m, c, what=f"per-pair sensitivity of the {m} model to {c}")
        terms.append(_pairs_of(rec, f"per-pair sensitivity of the {m} model to {c}"))
    n = {t[0].shape[0] for t in terms} | {t[1].shape[0] for t in terms}
    if len(n) != 1:
        raise ValueError(f"S7: the models' pairs for {c} differ in number: {sorted(n)}")
    return np.concatenate([np.stack([t[0] for t in terms], axis=1), np.stack([t[1] for t in terms], axis=1)], axis=1)


def s7_statistics(means: np.ndarray) -> np.ndarray:
    """[R, 3] oriented differences min(other) − own, none − own, untrained − own of the sensitivities
    mean(num) / mean(den), from the column means [R, 2k] of :func:`_s7_terms`'s layout."""
    k = means.shape[1] // 2
    s = means[:, :k] / means[:, k:]
    own = s[:, 0]
    return np.stack([s[:, 1 : k - 2].min(axis=1) - own, s[:, k - 2] - own, s[:, k - 1] - own], axis=1)


def _s7_block(block: Mapping[str, Any], cats: Sequence[str], seed: int) -> dict[str, tuple[list[Interval], int]]:
    """Per column: the three oriented intervals and the number of pairs. Every model of a column is
    resampled on the same pairs; the columns of a block share one draw of pair positions when they have as
    many pairs (their pairs are different, independent units, so each column's interval is unchanged and
    one draw costs one matrix product)."""
    xs = {c: _s7_terms(block, cats, c) for c in cats}
    sizes = {x.shape[0] for x in xs.values()}
    if len(sizes) == 1:
        big = np.concatenate(list(xs.values()), axis=1)
        res_all = resample_means(big, seed)
        width = next(iter(xs.values())).shape[1]
        res = {c: res_all[:, i * width : (i + 1) * width] for i, c in enumerate(cats)}
    else:
        res = {c: resample_means(x, seed_of(str(seed), c)) for c, x in xs.items()}
    out = {}
    for c, x in xs.items():
        obs, theta = s7_statistics(x.mean(axis=0)[None])[0], s7_statistics(res[c])
        out[c] = ([percentile_interval(float(obs[i]), theta[:, i], x.shape[0]) for i in range(3)], x.shape[0])
    return out


@_rule
def judge_s7(results: Results) -> SeedVerdict:
    """S7, invariance transfers out of distribution: for each direction (image / random models) and level (in
    distribution, mild OOD, strong OOD), in ≥ 75 % of the category columns, the own model's sensitivity is
    below min(other category models), the none model's and the untrained network's, each CI excluding 0
    (paired over the pairs, which every model shares). Per (direction, level) the criterion is the share of
    columns shown, with as its upper end the share not shown opposite (some part's CI entirely on the wrong
    side): reproduced at ≥ 0.75, contradicted when more than half of the columns are shown opposite.

    Reads ``results['s7-sensitivity']``: ``categories`` and ``sensitivity_pairs[kind][level][model][category]``
    ({'num', 'den'}; model over the categories, 'none', 'untrained'). Precondition: ≥ 2 000 pairs."""
    s7 = need(results, "s7-sensitivity", what="S7's sensitivities (s7-sensitivity)")
    cats = list(need(s7, "categories", what="S7's categories"))
    if len(cats) < 2:
        return not_testable("needs at least two categories")
    pairs = need(s7, "sensitivity_pairs", what="S7's per-pair sensitivity (sensitivity_pairs)")
    crit, counts = [], {}
    for kind in S7_KINDS:
        for level in S7_LEVELS:
            block = need(pairs, kind, level, what=f"S7's per-pair sensitivity, {kind} models, {level}")
            shown = opposite = 0
            for c, (ivs, n) in _s7_block(block, cats, seed_of("S7", kind, level)).items():
                counts[f"{kind}/{level}/{c}"] = n
                shown += all(iv.low > 0 for iv in ivs)
                opposite += any(iv.high < 0 for iv in ivs)
            name = f"{kind} models, {level}: share of columns with own < min(other), none, untrained"
            iv = share_interval(shown, opposite, len(cats))
            crit.append(Criterion(name, iv, minimum=S7_SHARE, boundary=S7_MAJORITY))
    return judge(crit, [_enough_pairs(counts)])


# ---------------------------------------------------------------------------------------------- S8
#: S8: non-inferiority margin of the superset part, minimum effect of the subset part
S8_MARGIN, S8_SUBSET = 0.03, 0.05


def _implied_additions(chain: Sequence[set[str]], sizes: Sequence[str]) -> list[str]:
    """'T<k>: <type>' for each type a step of the chain adds whose variation the rest of that set already makes."""
    from invfast.synthetic.recipe import implied_types

    out = []
    for k, (before, now) in zip(sizes, zip([set(), *chain], chain)):
        out += [f"T{k}: {t}" for t in implied_types(now) if t in now - before]
    return out


@_rule
def judge_s8(results: Results) -> SeedVerdict:
    """S8, a superset of the needed invariances does not hurt, a subset does: on each target T_j, for every
    T_i ⊃ T_j, acc(T_i on T_j) − acc(T_j on T_j) has its lower CI bound above −0.03 (non-inferiority), and for
    every T_i ⊂ T_j, acc(T_j on T_j) − acc(T_i on T_j) ≥ 0.05 with CI > 0 (paired over T_j's images).

    Reads ``results['s8-probe']``: ``sizes``, ``sets`` (the types of each T_k), ``models`` (k -> model key) and
    ``accuracy[i][j]`` (score dicts with ``oof_correct``). Preconditions: the sets are strictly nested; no type a
    step adds is implied by the rest of its set (:func:`invfast.synthetic.recipe.implied_types`: else the larger
    set adds no invariance); every chain model trained to ≥ 0.9 on its own data."""
    s8 = need(results, "s8-probe", what="S8's probes (s8-probe)")
    sizes = [str(k) for k in need(s8, "sizes", what="S8's chain")]
    acc = need(s8, "accuracy", what="S8's accuracy table")
    sets = need(s8, "sets", what="S8's transformation sets")
    models = need(s8, "models", what="S8's chain models")
    chain = [set(need(sets, k, what=f"the types of T{k}")) for k in sizes]
    nested = all(a < b for a, b in zip(chain, chain[1:]))
    implied = _implied_additions(chain, sizes)
    pre = [
        Precondition("strictly nested sets T_1 ⊂ … ⊂ T_n", nested and len(sizes) >= 2, f"sizes {sizes}"),
        Precondition(
            "each added type not implied by the others (a full rotation with one flip gives the other flip)",
            not implied,
            "; ".join(implied) or "none implied",
        ),
        _trained_to(results, [str(need(models, k, what=f"the model of T{k}")) for k in sizes], TRAINED_LEVEL),
    ]
    crit = []
    for b, j in enumerate(sizes):
        native = need(acc, j, j, what=f"T{j}'s model on T{j}")
        _correct_of(native, f"out-of-fold predictions of T{j}'s model on T{j}")
        for a, i in enumerate(sizes):
            if a == b:
                continue
            other = need(acc, i, j, what=f"T{i}'s model on T{j}")
            _correct_of(other, f"out-of-fold predictions of T{i}'s model on T{j}")
            if a > b:
                iv = accuracy_difference(other, native, "S8", i, j, "superset")
                name = f"T{i} ⊃ T{j}: acc(T{i} on T{j}) − acc(T{j} on T{j})"
                crit.append(Criterion(name, iv, minimum=-S8_MARGIN, boundary=-S8_MARGIN))
            else:
                iv = accuracy_difference(native, other, "S8", i, j, "subset")
                name = f"T{i} ⊂ T{j}: acc(T{j} on T{j}) − acc(T{i} on T{j})"
                crit.append(Criterion(name, iv, minimum=S8_SUBSET))
    return judge(crit, pre)
