"""The verdict rules of Ericsson et al. 2021 (E1–E5, docs/findings.md) on one seed's stage results.

Each ``judge_eX(results)`` reads the stage results named in its docstring, builds the rule's statistics with
their 95 % bootstrap intervals (seeded by :func:`~invfast.reproduce.rules.common.seed_of`) and returns
:func:`~invfast.evidence.judge`'s :class:`~invfast.evidence.SeedVerdict`. A number the rule needs that the seed
lacks raises :class:`~invfast.reproduce.rules.common.Missing` (the caller reports *not testable: needs …*); a
precondition of the rule that the numbers can check (test-set sizes, equal budgets, the population) is a
:class:`~invfast.evidence.Precondition`. The learning preconditions (a model "learned") are the caller's.

The statistics are small pure functions of arrays (``family_per_image``, ``position_statistic``,
``normalised_scores``, ``spearman_blocks``, ...) so the tests can check them against numpy / scipy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from invfast.evidence import (
    DEFAULT_RESAMPLES,
    Criterion,
    Interval,
    Precondition,
    SeedVerdict,
    accuracy_statistic,
    bootstrap,
    difference_interval,
    judge,
    mean_interval,
    not_testable,
)
from invfast.reproduce.rules.common import Missing, correct, grids_scaled, need, per_image, seed_of
from invfast.reproduce.stages.context import THREE_DEFAULT

__all__ = [
    "FAMILIES",
    "FAMILY_SIZES",
    "OWN",
    "OTHER",
    "MIN_MEASURE_IMAGES",
    "MIN_PROBE_IMAGES",
    "KERNEL_RIDGE",
    "FUSION",
    "E3_MODELS",
    "FINAL_MODELS",
    "POSE",
    "family_per_image",
    "position_statistic",
    "shifted",
    "budget_precondition",
    "is_kernel_ridge",
    "max_minus_statistic",
    "r2_difference_interval",
    "set_counts",
    "weighted_task_scores",
    "normalised_scores",
    "spearman_blocks",
    "block_contrast",
    "judge_e1",
    "judge_e2",
    "judge_e3",
    "judge_e4",
    "judge_e5",
]

#: the two test-transform families and, per family, its specialist (own) and the other specialist
FAMILIES = ("spatial", "appearance")
OWN = {"spatial": "Spatial", "appearance": "Appearance"}
OTHER = {"spatial": "Appearance", "appearance": "Spatial"}
#: docs/findings.md: family means are over the 18 test transforms (spatial 8, appearance 10)
FAMILY_SIZES = {"spatial": 8, "appearance": 10}
#: docs/findings.md, the experiment standards: enough test data for the intervals
MIN_MEASURE_IMAGES = 96
MIN_PROBE_IMAGES = 1000
#: the policies' pretraining stages (their ``steps``: the budgets compared, docs/findings.md, the experiment standards)
POLICY_STAGES = ("pretrain-default", "pretrain-spatial", "pretrain-appearance")

# E1 (Tab. 1)
E1_MIN_DELTA = 0.10
E1_RANGE = (0.2, 1.2)
E1_PAPER_DELTA = {"spatial": 0.35, "appearance": 0.37}
E1_PAPER_POSITION = {"spatial": 0.72, "appearance": 0.73}

# E2 (BMVC Tab. 4)
KERNEL_RIDGE = "kernel ridge"
#: regression task -> (the model expected better, the other, the paper's R² difference better − other)
E2_REGRESSION = {
    "position": ("Appearance", "Spatial", 0.06),
    "rotation": ("Appearance", "Spatial", 0.16),
    "colour": ("Spatial", "Appearance", 0.37),
}
E2_MIN_R2 = 0.03
E2_MIN_ACC = 0.02

# E3 (Tab. 2)
FUSION = "Def+Spa+App"
#: the self-supervised models whose min–max range normalises each task's score (Tab. 2 without Random and
#: Supervised; with it the paper's worst-task scores 0.92 / 0.69 come out)
E3_MODELS = ("Default", "Spatial", "Appearance", "Spa+App", FUSION, THREE_DEFAULT)
E3_MIN_WORST = 0.02
E3_MARGIN = 0.02
E3_PAPER_WORST = (0.92, 0.69)
E3_PAPER_MEAN = (0.71, 0.69)

# E4 (App. C.3)
E4_MIN_END = 0.05
E4_MIN_CHECKPOINTS = 8
E4_FROM = 0.3
E4_GAPS = {"G_S": ("spatial", "spatial"), "G_A": ("appearance", "appearance")}  # name -> (policy, family)

# E5 (App. D.1)
E5_MIN_B = 0.1
#: the population's named members; the amortised K = 5 model adds one member per descriptor
FINAL_MODELS = ("Random", "Default", "Spatial", "Appearance")
E5_DESCRIPTORS = 26
FINAL_POPULATION = "final models"
POSE = ("position", "rotation")


# ---------------------------------------------------------------------------------------------- shared
def budget_precondition(results: Mapping[str, Any], stages: Sequence[str]) -> list[Precondition]:
    """'equal budgets' over the ``steps`` the pretraining ``stages`` recorded; none when fewer than two
    of them are in ``results`` (nothing to compare)."""
    steps = {}
    for s in stages:
        r = results.get(s)
        if isinstance(r, Mapping) and r.get("steps") is not None:
            steps[s] = int(r["steps"])
    if len(steps) < 2:
        return []
    detail = ", ".join(
        f"{s[len('pretrain-') :] if s.startswith('pretrain-') else s} {n} steps" for s, n in steps.items()
    )
    return [Precondition("equal budgets", len(set(steps.values())) == 1, detail)]


def _percentile(estimate: float, theta: np.ndarray, n: int, confidence: float = 0.95) -> Interval:
    theta = np.asarray(theta, dtype=np.float64)
    if not np.isfinite(theta).all() or not np.isfinite(estimate):
        raise ValueError("the statistic is NaN or infinite on some resample")
    a = (1.0 - confidence) / 2.0
    low, high = np.percentile(theta, [100 * a, 100 * (1 - a)])
    return Interval(float(estimate), float(low), float(high), confidence, "bootstrap", int(n))


def shifted(iv: Interval, offset: float, sign: float = 1.0) -> Interval:
    """The interval of ``sign · statistic + offset`` (``sign`` ±1): a range's bound written as an effect."""
    lo, hi = sorted((sign * iv.low + offset, sign * iv.high + offset))
    return Interval(sign * iv.estimate + offset, lo, hi, iv.confidence, iv.method, iv.n)


# ---------------------------------------------------------------------------------------------- E1
def family_per_image(values: np.ndarray, families: Sequence[str], family: str) -> np.ndarray:
    """[N] per-image mean over ``family``'s columns of ``values`` [N, T] (``families[j]`` the family of column
    j), skipping NaN; NaN for an image with no finite value in the family."""
    v = np.asarray(values, dtype=np.float64)
    cols = np.array([f == family for f in families], dtype=bool)
    if not cols.any():
        raise ValueError(f"no {family} transform among the columns")
    sub = v[:, cols]
    ok = np.isfinite(sub)
    count = ok.sum(axis=1)
    total = np.where(ok, sub, 0.0).sum(axis=1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def position_statistic(d: np.ndarray, own: np.ndarray, other: np.ndarray) -> np.ndarray:
    """(mean d − mean other) / (mean own − mean other) per resample (arrays [R, n]): 0 = Default as the other
    specialist, 1 = as the family's own specialist (a ratio of means over the same images)."""
    den = own.mean(axis=1) - other.mean(axis=1)
    den = np.where(den == 0, np.finfo(np.float64).tiny, den)
    return (d.mean(axis=1) - other.mean(axis=1)) / den


def _e1_family_means(measure: Mapping[str, Any]) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, int]]:
    families = need(measure, "families", what="the test transforms' families of the measurement")
    transforms = list(families)
    fams = [families[t] for t in transforms]
    counts = {f: sum(1 for x in fams if x == f) for f in FAMILIES}
    if min(counts.values()) == 0:
        missing = [f for f, c in counts.items() if c == 0]
        raise Missing(f"the measurement of the {' and '.join(missing)} test transforms")
    out: dict[str, dict[str, np.ndarray]] = {}
    for model in ("Default", "Spatial", "Appearance"):
        v = per_image(measure, model, transforms)
        out[model] = {f: family_per_image(v, fams, f) for f in FAMILIES}
    return out, counts


def _e1_preconditions(results: Mapping[str, Any], n: int, counts: Mapping[str, int]) -> list[Precondition]:
    """E1's preconditions: ``n`` measurement images ≥ 96, the family ``counts`` (family -> number of test
    transforms) at least the 18 test transforms' (8 spatial, 10 appearance), and equal budgets of the policies'
    pretraining stages."""
    return [
        Precondition(f"≥ {MIN_MEASURE_IMAGES} measurement images", n >= MIN_MEASURE_IMAGES, f"{n} images"),
        Precondition(
            "the 18 test transforms (spatial 8, appearance 10)",
            all(counts[f] >= FAMILY_SIZES[f] for f in FAMILIES),
            ", ".join(f"{counts[f]} {f}" for f in FAMILIES),
        ),
        *budget_precondition(results, POLICY_STAGES),
    ]


def _e1_deltas(v: Mapping[str, Mapping[str, np.ndarray]]) -> list[Criterion]:
    """E1's two specialist gaps Δ_spa and Δ_app (minimum 0.10), paired over the images, from ``v[model][family]``
    (per-image family means [n] of the images kept)."""
    return [
        Criterion(
            "Δ_spa = spatial(Spatial) − spatial(Appearance)",
            difference_interval(v["Spatial"]["spatial"], v["Appearance"]["spatial"], seed=seed_of("E1", "Δ_spa")),
            E1_MIN_DELTA,
            paper=E1_PAPER_DELTA["spatial"],
        ),
        Criterion(
            "Δ_app = appearance(Appearance) − appearance(Spatial)",
            difference_interval(v["Appearance"]["appearance"], v["Spatial"]["appearance"], seed=seed_of("E1", "Δ_app")),
            E1_MIN_DELTA,
            paper=E1_PAPER_DELTA["appearance"],
        ),
    ]


def _e1_positions(v: Mapping[str, Mapping[str, np.ndarray]]) -> list[Criterion]:
    """Per family, Default's position (:func:`position_statistic`, bootstrapped over the images) as the two
    criteria position − 0.2 ≥ 0 and 1.2 − position ≥ 0, from ``v[model][family]`` (per-image family means [n])."""
    crit = []
    lo, hi = E1_RANGE
    for f in FAMILIES:
        own, other = OWN[f][0], OTHER[f][0]
        formula = f"(D − {other})/({own} − {other})"
        pos = bootstrap(
            position_statistic,
            [v["Default"][f], v[OWN[f]][f], v[OTHER[f]][f]],
            seed=seed_of("E1", f"Default's position, {f}"),
        )
        paper = E1_PAPER_POSITION[f]
        crit += [
            Criterion(
                f"Default's position on {f} transforms {formula} − {lo}",
                shifted(pos, -lo),
                0.0,
                paper=paper - lo,
                on_estimate=True,
            ),
            Criterion(
                f"{hi} − Default's position on {f} transforms {formula}",
                shifted(pos, hi, -1.0),
                0.0,
                paper=hi - paper,
                on_estimate=True,
            ),
        ]
    return crit


def judge_e1(results: Mapping[str, Any]) -> SeedVerdict:
    """E1 (Ericsson Tab. 1): Δ_spa = spatial(Spatial) − spatial(Appearance) ≥ 0.10 and Δ_app =
    appearance(Appearance) − appearance(Spatial) ≥ 0.10, each with its CI over images > 0; and Default's
    position in each family within [0.2, 1.2].

    Reads ``results['measure']['per_image_cosine'][model][transform]`` (Default, Spatial, Appearance) and
    ``results['measure']['families']`` (transform -> 'spatial' / 'appearance'); ``results['pretrain-<policy>']
    ['steps']`` where present (equal budgets). A model's family value of an image is the mean of its
    standardised cosines over that family's transforms (NaN skipped); images undefined for some model or
    family are left out. Intervals: paired percentile bootstrap over the measurement images.

    Default's position is measured from the other family's specialist (0) to the family's own specialist (1):
    (D − A)/(S − A) on spatial transforms, (D − S)/(A − S) on appearance ones. The rule writes (D − A)/(S − A) "in
    each family"; the paper's 0.72 / 0.73 are these oriented positions (the literal formula gives 0.27 on
    appearance). The position is a ratio of means bootstrapped over the same images. "Within [0.2, 1.2] (CI
    reported)" is two criteria per family, position − 0.2 and 1.2 − position, each with minimum 0, decided on the
    point estimate (``on_estimate``; the interval is reported): reproduced when the position lies in the range,
    contradicted when it lies outside.

    Preconditions: ≥ 96 images; the 18 test transforms (spatial 8, appearance 10); equal
    budgets; the grids scaled to the image (``measure['grid_side']``).
    """
    measure = need(results, "measure", what="the invariance measurement")
    fm, counts = _e1_family_means(measure)
    arrays = [fm[m][f] for m in ("Default", "Spatial", "Appearance") for f in FAMILIES]
    keep = np.logical_and.reduce([np.isfinite(a) for a in arrays])
    n = int(keep.sum())
    pre = [*_e1_preconditions(results, n, counts), grids_scaled(measure)]
    if n < 2:
        return judge((), [*pre, Precondition("images with a defined family invariance", False, f"{n} images")])
    v = {m: {f: fm[m][f][keep] for f in FAMILIES} for m in fm}
    return judge([*_e1_deltas(v), *_e1_positions(v)], pre)


# ---------------------------------------------------------------------------------------------- E2
def is_kernel_ridge(task_result: Mapping[str, Any]) -> bool:
    """Whether a probe task's result records a kernel-ridge probe (§4): ``probe`` (or ``kind``) 'kernel ridge'."""
    return task_result.get("probe") == KERNEL_RIDGE or task_result.get("kind") == KERNEL_RIDGE


def max_minus_statistic(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """max(acc(a), acc(b)) − acc(c) per resample (per-image correctness [R, n])."""
    return np.maximum(accuracy_statistic(a), accuracy_statistic(b)) - accuracy_statistic(c)


def r2_difference_interval(
    y: Sequence[Any], pred_a: Mapping[str, Any], pred_b: Mapping[str, Any], *seed: str
) -> Interval:
    """R²(a) − R²(b) on the same images (paired): the interval of
    :func:`~invfast.reproduce.rules.common.r2_difference` (the same draws, the same statistic), computed from
    per-image sums (:func:`weighted_task_scores`) instead of gathered resamples."""
    t = np.asarray(y, dtype=np.float64)
    t = t.reshape(t.shape[0], -1)
    res = []
    for p in (pred_a, pred_b):
        v = np.asarray(need(p, "oof_prediction", what="out-of-fold probe predictions"), dtype=np.float64)
        v = v.reshape(v.shape[0], -1)
        if v.shape != t.shape:
            raise ValueError(f"predictions {v.shape} do not match the targets {t.shape}")
        res.append((t - v) ** 2)
    units = np.concatenate([t, t**2, *res], axis=1)
    n, k = t.shape
    est = weighted_task_scores(np.ones((1, n)), units, "regression", 2, k)[0]
    theta = weighted_task_scores(set_counts([n], seed_of(*seed))[0], units, "regression", 2, k)
    return _percentile(float(est[0] - est[1]), theta[:, 0] - theta[:, 1], n)


def _score(probes: Mapping[str, Any], task: str, model: str) -> Mapping[str, Any]:
    return need(probes, task, "scores", model, what=f"the {task} probe of {model}")


def judge_e2(results: Mapping[str, Any]) -> SeedVerdict:
    """E2 (Ericsson §4, BMVC Tab. 4): R²(Appearance) − R²(Spatial) ≥ 0.03 on position and on rotation;
    R²(Spatial) − R²(Appearance) ≥ 0.03 on colour; max(acc(Default), acc(Spatial)) − acc(Appearance) ≥ 0.02 on
    identity; each CI > 0 (paired bootstrap over the out-of-fold predictions of the probe images).

    Reads, for position, rotation and colour, the kernel-ridge probe (RBF, §4) of ``results['probes-kernel'][task]``
    (the stage of that name), which records ``probe == 'kernel ridge'`` (or ``kind == 'kernel ridge'``) — without
    it the seed is not testable (the linear ridge probe is not the paper's test):
    ``['scores'][model]['oof_prediction']`` [n][t] and the targets ``['y']`` [n][t]; for identity (logistic)
    ``results['probes']['identity']['scores'][model]['oof_correct']`` [n]. Preconditions: ≥ 1 000 probe images
    per task; equal budgets.
    """
    probes = need(results, "probes", what="the probes")
    kernel = results.get("probes-kernel", {})
    for task in E2_REGRESSION:
        if task not in kernel or not is_kernel_ridge(kernel[task]):
            return not_testable("needs kernel-ridge regression probes (BMVC Tab. 4)")
    ident = [correct(_score(probes, "identity", m)) for m in ("Default", "Spatial", "Appearance")]
    if len({c.shape for c in ident}) != 1:
        raise ValueError(f"the identity probes scored different images: {[c.size for c in ident]}")
    sizes = {"identity": int(ident[0].size)}
    crit = [
        Criterion(
            "identity: max(Default, Spatial) − Appearance (accuracy)",
            bootstrap(max_minus_statistic, ident, seed=seed_of("E2", "identity")),
            E2_MIN_ACC,
        )
    ]
    for task, (better, other, paper) in E2_REGRESSION.items():
        y = need(kernel, task, "y", what=f"the {task} kernel probe's targets")
        diff = r2_difference_interval(y, _score(kernel, task, better), _score(kernel, task, other), "E2", task)
        sizes[task] = diff.n
        crit.append(Criterion(f"{task}: {better} − {other} (R², kernel ridge)", diff, E2_MIN_R2, paper=paper))
    small = {t: n for t, n in sizes.items() if n < MIN_PROBE_IMAGES}
    pre = [
        Precondition(
            f"≥ {MIN_PROBE_IMAGES} probe images per task",
            not small,
            ", ".join(f"{t} {n}" for t, n in sizes.items()),
        ),
        *budget_precondition(results, POLICY_STAGES),
    ]
    return judge(crit, pre)


# ---------------------------------------------------------------------------------------------- E3
def set_counts(sizes: Sequence[int], seed: int, n_resamples: int = DEFAULT_RESAMPLES) -> list[np.ndarray]:
    """Per image set, how often each image is drawn in each resample ([R, n_k] float): the draws of
    :func:`~invfast.evidence.bootstrap` with ``paired=False`` on one array per set, in order (the sets are
    resampled independently, the tasks and models of a set share its draw), as counts so that every sum over a
    resample is one matrix product."""
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        idx = rng.integers(0, n, (int(n_resamples), n))
        flat = (idx + n * np.arange(int(n_resamples))[:, None]).ravel()
        out.append(np.bincount(flat, minlength=int(n_resamples) * n).reshape(int(n_resamples), n).astype(np.float64))
    return out


def _task_units(probes: Mapping[str, Any], task: str, models: Sequence[str]) -> tuple[str, np.ndarray, int]:
    """(kind, per-image terms [n, W], t) of a task: classification: correctness [n, M]; regression: y, y² and
    each model's squared residuals, [n, (2 + M)·t] (R² is a function of their sums)."""
    scores = [_score(probes, task, m) for m in models]
    if probes[task].get("kind") == "classification" or "oof_correct" in scores[0]:
        c = np.stack([correct(s) for s in scores], axis=1)
        return "classification", c, 0
    y = np.asarray(need(probes, task, "y", what=f"the {task} probe's targets"), dtype=np.float64)
    y = y.reshape(y.shape[0], -1)
    res = []
    for m, s in zip(models, scores):
        p = np.asarray(need(s, "oof_prediction", what=f"out-of-fold {task} predictions of {m}"), dtype=np.float64)
        p = p.reshape(p.shape[0], -1)
        if p.shape != y.shape:
            raise ValueError(f"{task}: {m}'s predictions {p.shape} do not match the targets {y.shape}")
        res.append((y - p) ** 2)
    return "regression", np.concatenate([y, y**2, *res], axis=1), int(y.shape[1])


def weighted_task_scores(w: np.ndarray, units: np.ndarray, kind: str, n_models: int, t: int) -> np.ndarray:
    """[R, M] scores of a task from image counts ``w`` [R, n] and its per-image terms (:func:`_task_units`):
    accuracy, or the mean over targets of R² (as :func:`~invfast.evidence.r2_statistic`)."""
    s = w @ units  # [R, W]
    n = w.sum(axis=1, keepdims=True)
    if kind == "classification":
        return s / n
    sy, syy = s[:, :t], s[:, t : 2 * t]
    ss_tot = syy - sy**2 / n  # [R, t]
    ss_res = s[:, 2 * t :].reshape(s.shape[0], n_models, t)
    ok = ss_tot > 1e-12 * np.maximum(syy, 1e-300)
    r2 = np.where(
        ok[:, None, :],
        1.0 - ss_res / np.where(ok, ss_tot, 1.0)[:, None, :],
        np.where(ss_res == 0, 1.0, 0.0),
    )
    return r2.mean(axis=-1)


def normalised_scores(scores: np.ndarray) -> np.ndarray:
    """Min–max normalisation of ``scores`` [..., K tasks, M models] over the models, per task (0 = the worst
    model on the task, 1 = the best; 1 for every model where all are equal)."""
    lo = scores.min(axis=-1, keepdims=True)
    hi = scores.max(axis=-1, keepdims=True)
    span = hi - lo
    return np.where(span > 0, (scores - lo) / np.where(span > 0, span, 1.0), 1.0)


def _e3_blocks(
    probes: Mapping[str, Any], models: Sequence[str]
) -> tuple[list[str], list[np.ndarray], list[list[tuple[str, str, int, int, int]]]]:
    """Image sets (in first-seen task order), their per-image terms [n, W] and, per set, (task, kind, t, first
    column, last column) of each task."""
    from invfast.reproduce.stages.data import task_set

    tasks = [t for t in probes if isinstance(probes[t], Mapping) and "scores" in probes[t]]
    if not tasks:
        raise Missing("probe tasks")
    sets: list[str] = []
    parts: dict[str, list[np.ndarray]] = {}
    layout: dict[str, list[tuple[str, str, int, int, int]]] = {}
    for task in tasks:
        s = str(probes[task].get("set") or task_set(task))
        kind, units, t = _task_units(probes, task, models)
        if s not in parts:
            sets.append(s)
            parts[s], layout[s] = [], []
        elif parts[s][0].shape[0] != units.shape[0]:
            raise ValueError(f"tasks on the {s} images scored different numbers of images")
        col = sum(p.shape[1] for p in parts[s])
        parts[s].append(units)
        layout[s].append((task, kind, t, col, col + units.shape[1]))
    return sets, [np.concatenate(parts[s], axis=1) for s in sets], [layout[s] for s in sets]


def _e3_statistics(
    counts: Sequence[np.ndarray],
    units: Sequence[np.ndarray],
    layout: Sequence[Sequence[tuple[str, str, int, int, int]]],
    n_models: int,
    i_fus: int,
    i_ctl: int,
) -> np.ndarray:
    """[R, 4] per resample: worst-task normalised score of model ``i_fus`` − that of ``i_ctl``, the latter, the mean
    score over tasks of ``i_fus`` − that of ``i_ctl``, the latter; from each image set's counts [R, n_k], per-image
    terms [n_k, W_k] and task layout (:func:`_e3_blocks`)."""
    per_task = []
    for w, u, lay in zip(counts, units, layout):
        for _, kind, t, c0, c1 in lay:
            per_task.append(weighted_task_scores(w, u[:, c0:c1], kind, n_models, t))
    sc = np.stack(per_task, axis=1)  # [R, K, M]
    worst = normalised_scores(sc).min(axis=1)
    mean = sc.mean(axis=1)
    return np.stack(
        [worst[:, i_fus] - worst[:, i_ctl], worst[:, i_ctl], mean[:, i_fus] - mean[:, i_ctl], mean[:, i_ctl]], 1
    )


def _e3_criteria(iv: Sequence[Interval]) -> list[Criterion]:
    """E3's two criteria from the four intervals of :func:`_e3_statistics`' columns: the worst-task difference
    (minimum 0.02) and the mean-score non-inferiority (margin 0.02), each with 3×Default's score as control."""
    return [
        Criterion(
            "worst-task normalised score: Def+Spa+App − 3×Default",
            iv[0],
            E3_MIN_WORST,
            paper=round(E3_PAPER_WORST[0] - E3_PAPER_WORST[1], 2),
            control=iv[1],
        ),
        Criterion(
            "mean score over tasks: Def+Spa+App − 3×Default (non-inferiority, margin 0.02)",
            iv[2],
            -E3_MARGIN,
            boundary=-E3_MARGIN,
            paper=round(E3_PAPER_MEAN[0] - E3_PAPER_MEAN[1], 2),
            control=iv[3],
        ),
    ]


def _e3_preconditions(
    results: Mapping[str, Any], sizes: Sequence[int], layout: Sequence[Sequence[tuple[str, str, int, int, int]]]
) -> list[Precondition]:
    """E3's preconditions: ≥ 1 000 probe images per task (``sizes`` per image set, ``layout`` its tasks) and equal
    budgets over the policies' pretraining and any further Default encoder (``pretrain-default-*``)."""
    n_task = {task: n for n, lay in zip(sizes, layout) for task, *_ in lay}
    stages = [*POLICY_STAGES, *sorted(s for s in results if s.startswith("pretrain-default-"))]
    return [
        Precondition(
            f"≥ {MIN_PROBE_IMAGES} probe images per task",
            min(n_task.values()) >= MIN_PROBE_IMAGES,
            ", ".join(f"{t} {n}" for t, n in n_task.items()),
        ),
        *budget_precondition(results, stages),
    ]


def _with_three_default(results: Mapping[str, Any]) -> dict[str, Any]:
    """The probes stage's tasks with the 3×Default control's scores (stage ``probes-3xdefault``) added to each
    task's models (the probes result is not changed)."""
    probes = need(results, "probes", what="the probes")
    control = results.get("probes-3xdefault", {}).get("tasks", {})
    out: dict[str, Any] = {}
    for task, rec in probes.items():
        if isinstance(rec, Mapping) and "scores" in rec and task in control:
            rec = {**rec, "scores": {**rec["scores"], **control[task]["scores"]}}
        out[task] = rec
    return out


def judge_e3(results: Mapping[str, Any]) -> SeedVerdict:
    """E3 (Ericsson §4, Tab. 2): Def+Spa+App's worst-task normalised score − 3×Default's ≥ 0.02 with CI > 0,
    and its mean score not below 3×Default's by more than 0.02 (lower CI bound of the mean difference ≥ −0.02).

    Normalised score: per task, min–max over Default, Spatial, Appearance, Spa+App, Def+Spa+App and 3×Default
    (0 = worst of them, 1 = best; the normalisation that gives the paper's 0.92 / 0.69 from Tab. 2); worst-task
    = its minimum over the tasks. Mean score: the mean over tasks of the raw scores (accuracy, R²; the paper's
    0.71 / 0.69 are Tab. 2's "Avg." column). Intervals: one bootstrap over the probe images, paired across
    models and across the tasks fitted on the same images, independent between image sets (the rotation set),
    with the draws of :func:`~invfast.evidence.bootstrap` (``paired=False``, one array per set).

    Reads ``results['probes'][task]['scores'][model]`` for every task (``oof_correct`` [n]; regression:
    ``oof_prediction`` [n][t] and the task's targets ``['y']``), with the control ``'3×Default'`` (three Default
    encoders of different seeds, concatenated) from ``results['probes-3xdefault']['tasks']``. Preconditions: ≥ 1 000
    probe images per task; equal budgets over ``pretrain-default``, ``-spatial``, ``-appearance`` and any
    ``pretrain-default-*`` (the other Default encoders of 3×Default).
    """
    probes = _with_three_default(results)
    first = next((t for t in probes if isinstance(probes[t], Mapping) and "scores" in probes[t]), None)
    if first is None:
        raise Missing("probe tasks")
    need(probes, first, "scores", THREE_DEFAULT, what="the 3×Default control (three Default encoders, concatenated)")
    models = list(E3_MODELS)
    sets, units, layout = _e3_blocks(probes, models)
    sizes = [u.shape[0] for u in units]
    i_fus, i_ctl = models.index(FUSION), models.index(THREE_DEFAULT)
    est = _e3_statistics([np.ones((1, n)) for n in sizes], units, layout, len(models), i_fus, i_ctl)[0]
    theta = _e3_statistics(
        set_counts(sizes, seed_of("E3", "worst-task and mean scores")), units, layout, len(models), i_fus, i_ctl
    )
    iv = [_percentile(float(est[j]), theta[:, j], sizes[0]) for j in range(4)]
    return judge(_e3_criteria(iv), _e3_preconditions(results, sizes, layout))


# ---------------------------------------------------------------------------------------------- E4
def _min_statistic(g: np.ndarray) -> np.ndarray:
    """min over checkpoints of the mean over images, per resample (g [R, n, S])."""
    return g.mean(axis=1).min(axis=-1)


def _family_of_row(row: Mapping[str, Any], transforms: Sequence[str], fams: Sequence[str], family: str) -> np.ndarray:
    """[N] per-image ``family`` mean of one checkpoint row (its ``per_image_cosine``)."""
    name = str(row.get("model", row.get("policy")))
    table = need(row, "per_image_cosine", what="per-image invariance at every checkpoint")
    return family_per_image(per_image({"per_image_cosine": {name: table}}, name, transforms), fams, family)


def _e4_checkpoints(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[int, Mapping[str, Any]]]:
    """policy -> step -> its checkpoint row, for the default, spatial and appearance pretrainings (each must be
    there)."""
    by_policy: dict[str, dict[int, Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("policy") in ("default", "spatial", "appearance"):
            by_policy.setdefault(str(r["policy"]), {})[int(r["step"])] = r
    for p in ("default", "spatial", "appearance"):
        if p not in by_policy:
            raise Missing(f"the {p} pretraining's checkpoints")
    return by_policy


def _e4_preconditions(
    results: Mapping[str, Any], curves: Mapping[str, Any], by_policy: Mapping[str, Mapping[int, Mapping[str, Any]]]
) -> list[Precondition]:
    """E4's preconditions: ≥ 8 checkpoints after step 0 per policy, ≥ 96 measurement images, the policies
    checkpointed at the same steps with the last at the end of training, and equal budgets."""
    steps = {p: sorted(v) for p, v in by_policy.items()}
    n_after = {p: sum(1 for s in v if s > 0) for p, v in steps.items()}
    end = {p: int(results[f"pretrain-{p}"]["steps"]) for p in steps if results.get(f"pretrain-{p}", {}).get("steps")}
    lengths = [len(x) for p in steps for r in by_policy[p].values() for x in (r.get("per_image_cosine") or {}).values()]
    n_img = min(lengths) if lengths else int(curves.get("images") or 0)
    return [
        Precondition(
            f"≥ {E4_MIN_CHECKPOINTS} checkpoints of each pretraining",
            min(n_after.values()) >= E4_MIN_CHECKPOINTS,
            ", ".join(f"{p} {n}" for p, n in n_after.items()),
        ),
        Precondition(f"≥ {MIN_MEASURE_IMAGES} measurement images", n_img >= MIN_MEASURE_IMAGES, f"{n_img} images"),
        Precondition(
            "checkpoints at the same steps, the last at the end of training",
            steps["spatial"] == steps["default"] == steps["appearance"]
            and all(steps[p][-1] == e for p, e in end.items()),
            "; ".join(
                f"{p} {v[0]}…{v[-1]} ({len(v)})" + (f", trained {end[p]}" if p in end else "") for p, v in steps.items()
            ),
        ),
        *budget_precondition(results, POLICY_STAGES),
    ]


def _e4_gaps(
    by_policy: Mapping[str, Mapping[int, Mapping[str, Any]]],
    policy: str,
    fam: str,
    grid: Sequence[int],
    transforms: Sequence[str],
    fams: Sequence[str],
) -> np.ndarray:
    """[N', S] per-image gap ``fam``(``policy``) − ``fam``(default) at each checkpoint step of ``grid``, keeping
    the N' images defined at every step (at least 2)."""
    g = np.stack(
        [
            _family_of_row(by_policy[policy][s], transforms, fams, fam)
            - _family_of_row(by_policy["default"][s], transforms, fams, fam)
            for s in grid
        ],
        axis=1,
    )  # [N, S]
    g = g[np.isfinite(g).all(axis=1)]
    if g.shape[0] < 2:
        raise Missing(f"images with a defined {fam} invariance at every checkpoint")
    return g


def _e4_gap_criteria(gap: str, fam: str, g: np.ndarray, grid: Sequence[int]) -> list[Criterion]:
    """One gap's two criteria from its per-image values ``g`` [N, S] at the steps ``grid``: the end gap ≥ 0.05
    (with the gap at step 0 as control) and the minimum over the checkpoints from 30 % of training > 0."""
    total = grid[-1]
    later = [s for s in grid if s >= E4_FROM * total]
    cols = [grid.index(s) for s in later]
    control = mean_interval(g[:, 0], seed=seed_of("E4", gap, "initialisation")) if grid[0] == 0 else None
    label = f"{gap} = {fam}({OWN[fam]}) − {fam}(Default)"
    return [
        Criterion(
            f"{label} at the end (step {total})",
            mean_interval(g[:, -1], seed=seed_of("E4", gap, "end")),
            E4_MIN_END,
            control=control,
        ),
        Criterion(
            f"{label}: minimum over the {len(later)} checkpoints from 30 % of training",
            bootstrap(_min_statistic, [g[:, cols]], seed=seed_of("E4", gap, "every checkpoint")),
            0.0,
        ),
    ]


def judge_e4(results: Mapping[str, Any]) -> SeedVerdict:
    """E4 (Ericsson App. C.3): G_S = spatial(Spatial) − spatial(Default) and G_A = appearance(Appearance) −
    appearance(Default): at the end of pretraining ≥ 0.05 with CI > 0, and > 0 at every checkpoint from 30 % of
    training on.

    Reads ``results['invariance-curves']``: ``models`` (rows with ``policy``, ``step`` and ``per_image_cosine``
    [transform] -> [N], the same N measurement images at every checkpoint), ``families`` and ``images``;
    ``results['pretrain-<policy>']['steps']`` where present (the end of training; equal budgets). A gap per image
    is the difference of the two models' family means (NaN skipped) at the same checkpoint step. "> 0 at every
    checkpoint" is one criterion: the minimum over the checkpoints at ≥ 30 % of the steps of the mean gap, its
    interval bootstrapped over the images (paired across checkpoints and models), minimum 0 — reproduced when it
    is above 0 at every such checkpoint, contradicted when it is below 0 at some. The end criterion shows beside
    it, as the control, the same gap at the initialisation (step 0).

    Preconditions: ≥ 8 checkpoints after step 0 of each pretraining; ≥ 96 measurement images; the three
    policies checkpointed at the same steps, the last at the end of training; equal budgets.
    """
    curves = need(results, "invariance-curves", what="the invariance of every pretraining checkpoint")
    rows = need(curves, "models", what="the invariance of every pretraining checkpoint")
    families = need(curves, "families", what="the test transforms' families of the checkpoint measurement")
    by_policy = _e4_checkpoints(rows)
    pre = _e4_preconditions(results, curves, by_policy)
    if not all(p.met for p in pre):
        return judge((), pre)
    transforms = list(families)
    fams = [families[t] for t in transforms]
    grid = sorted(by_policy["default"])
    crit = []
    for gap, (policy, fam) in E4_GAPS.items():
        g = _e4_gaps(by_policy, policy, fam, grid, transforms, fams)
        crit += _e4_gap_criteria(gap, fam, g, grid)
    return judge(crit, pre)


# ---------------------------------------------------------------------------------------------- E5
def _ranks(x: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return np.asarray(rankdata(x, axis=-2), dtype=np.float64)


def spearman_blocks(inv: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Spearman's ρ across models (axis −2, ties averaged) between every invariance column of ``inv``
    [..., M, T] and every score column of ``scores`` [..., M, K]: [..., T, K] (NaN where a column is constant)."""
    rx, ry = _ranks(inv), _ranks(scores)
    rx = rx - rx.mean(axis=-2, keepdims=True)
    ry = ry - ry.mean(axis=-2, keepdims=True)
    cov = np.einsum("...mt,...mk->...tk", rx, ry)
    sx = np.sqrt((rx**2).sum(axis=-2))
    sy = np.sqrt((ry**2).sum(axis=-2))
    den = sx[..., :, None] * sy[..., None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, cov / np.where(den > 0, den, 1.0), np.nan)


def _block(rho: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    sub = rho[..., rows, :][..., cols]
    ok = np.isfinite(sub)
    cnt = ok.sum(axis=(-2, -1))
    return np.where(cnt > 0, np.where(ok, sub, 0.0).sum(axis=(-2, -1)) / np.maximum(cnt, 1), 0.0)


def block_contrast(
    inv: np.ndarray, scores: np.ndarray, spatial: np.ndarray, identity: np.ndarray, pose: np.ndarray
) -> np.ndarray:
    """B = [ρ̄(spatial, identity) − ρ̄(spatial, pose)] − [ρ̄(appearance, identity) − ρ̄(appearance, pose)] from
    ``inv`` [..., M, T] and ``scores`` [..., M, K]; ``spatial`` [T], ``identity`` and ``pose`` [K] boolean masks
    (appearance = not spatial). ρ̄ = the mean of the defined ρ of the block (a block with none counts 0)."""
    rho = spearman_blocks(inv, scores)
    app = ~spatial
    return (
        _block(rho, spatial, identity)
        - _block(rho, spatial, pose)
        - _block(rho, app, identity)
        + _block(rho, app, pose)
    )


def judge_e5(results: Mapping[str, Any]) -> SeedVerdict:
    """E5 (Ericsson App. D.1): over a population of final models that differ in their augmentations, B =
    [ρ̄(spatial, identity) − ρ̄(spatial, pose)] − [ρ̄(appearance, identity) − ρ̄(appearance, pose)] ≥ 0.1 with its
    CI by bootstrap over the models > 0 (ρ: Spearman across the models between a transform's invariance and a
    task's probe score; pose = position and rotation; ρ̄ the mean over the block's transforms and tasks).

    Reads ``results['invariance-transfer']``: ``population == 'final models'`` (the current stage correlates the
    policies' training checkpoints, which differ in progress, not augmentations: not this test), ``models``,
    ``invariance[model][transform]`` (mean standardised cosine), ``scores[model][task]`` and ``families``. A
    transform with an undefined invariance for some model is left out. Preconditions: the population holds
    Random, Default, Spatial and Appearance and ≥ 26 further models (the amortised K = 5 model at each of its
    descriptors). The bootstrap resamples models with replacement (ties from repeats take average ranks).
    """
    e5 = need(results, "invariance-transfer", what="the invariance and probe scores of a population of models")
    if e5.get("population") != FINAL_POPULATION:
        raise Missing(
            "a population of final models that differ in their augmentations (the three policies, Random and the "
            "amortised K = 5 model at each descriptor), not training checkpoints"
        )
    models = list(need(e5, "models", what="the population's models"))
    families = need(e5, "families", what="the test transforms' families")
    inv_t = need(e5, "invariance", what="each model's invariance per transform")
    sc_t = need(e5, "scores", what="each model's probe score per task")
    tasks = ["identity", *POSE]
    transforms = [
        t for t in families if all(need(inv_t, m, what=f"the invariance of {m}").get(t) is not None for m in models)
    ]
    fams = np.array([families[t] for t in transforms])
    if not (fams == "spatial").any() or not (fams == "appearance").any():
        raise Missing("each model's invariance to spatial and appearance transforms")
    inv = np.array([[float(inv_t[m][t]) for t in transforms] for m in models])
    sc = np.array([[float(need(sc_t, m, k, what=f"the {k} probe score of {m}")) for k in tasks] for m in models])
    named = [m for m in FINAL_MODELS if m in models]
    others = len(models) - len(named)
    pre = [
        Precondition(
            "the population holds Random, Default, Spatial and Appearance",
            len(named) == len(FINAL_MODELS),
            f"missing {', '.join(m for m in FINAL_MODELS if m not in models) or 'none'}",
        ),
        Precondition(
            f"the amortised K = 5 model at each of its {E5_DESCRIPTORS} descriptors",
            others >= E5_DESCRIPTORS,
            f"{others} further models",
        ),
    ]
    spatial = fams == "spatial"
    identity = np.array([k == "identity" for k in tasks])
    pose = np.array([k in POSE for k in tasks])
    stat: Callable[[np.ndarray, np.ndarray], np.ndarray] = lambda x, y: block_contrast(x, y, spatial, identity, pose)
    crit = [
        Criterion(
            "B = [ρ̄(spatial, identity) − ρ̄(spatial, pose)] − [ρ̄(appearance, identity) − ρ̄(appearance, pose)]",
            bootstrap(stat, [inv, sc], seed=seed_of("E5", "B")),
            E5_MIN_B,
        )
    ]
    return judge(crit, pre)
