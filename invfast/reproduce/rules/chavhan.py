"""The verdict rules of Chavhan et al. 2023's findings C1-C7 (``docs/findings.md``), one seed at a time.

Each ``judge_c<N>(results)`` maps stage names to one seed's stage results and returns a
:class:`~invfast.evidence.SeedVerdict`; a number it needs and the seed lacks raises
:class:`~invfast.reproduce.rules.common.Missing` (the caller's *not testable: needs …*). The learning
preconditions (a model learned ≥ 1.2×) are the caller's; the equal budgets of ``docs/findings.md`` (*What every
experiment must meet*: the amortised model trained at least the specialists' epochs and steps) are checked here
from the pretraining stages' ``epochs`` and ``steps``.

Keys read beyond the current stage outputs (a stage change adds them; until then the rule is *not testable*):

- ``results['measure']['per_image_cosine'][label][transform]`` (common.py) and the same per measurement image at
  every descriptor of the interpolation: ``results['amortised-interpolation']['points'][k]['per_image_cosine']
  [transform]`` (the measurement images of ``measure``, in the same order);
- the control of C1, the same interpolation of the amortised model's initialisation:
  ``results['amortised-interpolation']['init']['points']`` (same layout);
- C3's restarts: ``results['amortised-learned-i'][task]['restarts'] = [{'i': [...], 'score': s,
  'score_at_half': s0}, ...]`` (``score_at_half``: the held-out score of a head fitted at the fixed i = (0.5, 0.5));
- C4's and C5's out-of-fold probe predictions: ``results[<downstream>]['probes'][task] = {'kind': ..., 'y': [...],
  'scores': {label: probe score dict}}`` (the layout of the ``probes`` stage, common.py's ``oof_correct`` /
  ``oof_prediction``; ``y`` the regression targets and, for C4's chance level, the classification labels too,
  which the ``probes`` stage does not keep), and C4's few-shot scores per episode (per split for few-shot regression):
  ``results[<downstream>]['few_shot'][task][setting][label] = [score, ...]``, the same episodes for every model,
  with ``results[<downstream>]['few_shot_i'] == 'per episode'`` (i learned per episode, as C4 in
  ``docs/findings.md`` asks);
- C5's AI-SimCLR models: the stages :data:`SIMCLR_K2`, :data:`SIMCLR_K5` and :data:`SIMCLR_DOWNSTREAM`;
- C6's time per epoch: ``results['amortised-cost']['models'][key]['epoch_seconds'] = [seconds, ...]``
  (optionally ``steps_per_epoch``);
- C7's prompt effect: ``results['vit-interpolation']['prompt_effect']['per_image']`` (per probe image
  ‖f(i = [1, 0]) − f(i = [0, 1])‖ over the mean of the two norms) and the warm start of the Prompt-ViT:
  ``results['pretrain-vit-amortised']['warm_start'] == 'vit-default'``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from invfast.evidence import (
    Criterion,
    Interval,
    Precondition,
    SeedVerdict,
    bootstrap,
    judge,
    mean_interval,
)
from invfast.reproduce.rules.common import Missing, correct, need, seed_of

__all__ = [
    "PAPER_TRANSFORMS",
    "RECOGNITION",
    "POSE",
    "AI_LABEL",
    "FIXED_LABELS",
    "SIMCLR_K2",
    "SIMCLR_K5",
    "SIMCLR_DOWNSTREAM",
    "SIMCLR_K2_LABEL",
    "SIMCLR_K5_LABEL",
    "Stages",
    "RESNET",
    "TRANSFORMERS",
    "budget_precondition",
    "path_points",
    "find_point",
    "point_per_image",
    "model_per_image",
    "finite_rows",
    "spearman_last",
    "profile_rho",
    "profile_contrast",
    "along_i_spearman",
    "resample_counts",
    "resample_means",
    "resample_r2",
    "index_bootstrap",
    "mean_difference",
    "chance_level",
    "share_criteria",
    "c1_parts",
    "c2_parts",
    "welch_interval",
    "c3_parts",
    "Setting",
    "probe_settings",
    "few_shot_settings",
    "c4_parts",
    "k5_vs_k2_parts",
    "c6_saving",
    "judge_c1",
    "judge_c2",
    "judge_c3",
    "judge_c4",
    "judge_c5",
    "judge_c6",
    "judge_c7",
]

# ------------------------------------------------------------------------------------------ the rules' numbers
#: C1: Δ at its own corner − at the opposite one, as a share of the specialists' gap (E1)
C1_GAP_SHARE = 0.25
#: C1: oriented Spearman along i
C1_MONOTONE = 0.8
#: C1: points of the interpolation i = (1 − t, t)
MIN_POINTS = 7
#: C2: the specialists' profiles must differ: ρ(Spatial, Appearance) below this
C2_DISTINCT = 0.5
#: C2: minimum discrimination D_S, D_A
C2_MIN = 0.3
#: C2: the paper's D_S, D_A (Tab. 6: Spearman over its 11 transforms, matched 0.75 / 0.88, crossed −0.31 / 0.09)
C2_PAPER = {"D_S": 1.06, "D_A": 0.79}
#: C3: minimum effect and restarts of the learned i per task
C3_MIN = 0.05
MIN_RESTARTS = 5
#: C4 / C5: the non-inferiority margin (score units: accuracy, R²)
MARGIN = 0.02
#: C4: the share of settings in which the amortised model must be non-inferior
C4_SHARE = 0.75
#: C5: at most this share of tasks with K = 5 worse than K = 2 (CI < 0)
C5_WORSE_SHARE = 0.25
#: C5: the paper's mean K5 − K2 over its tasks (Tab. 1: +1.03 accuracy points)
C5_PAPER = 0.0103
#: C6: timed epochs per model (the median is taken over them)
MIN_EPOCHS_TIMED = 5
#: C6: the smallest saving 1 − time(AI) / (n × time(one specialist)) that counts: docs/findings.md gives none; a median
#: epoch time of a shared machine moves by a few per cent between runs, so a saving under 5 % is not a saving
C6_MIN_SAVING = 0.05
#: C7: the prompt must move the features by at least this share of their norm
C7_PROMPT_EFFECT = 0.05
#: enough test data for the intervals (docs/findings.md, *What every experiment must meet*)
MIN_MEASURE_IMAGES = 96
MIN_PROBE_IMAGES = 1000

#: the paper's 11 transforms of Tab. 6, by their names here
PAPER_TRANSFORMS = (
    "crop",
    "hflip",
    "vflip",
    "scale",
    "rotation",
    "translation",
    "grayscale",
    "brightness",
    "contrast",
    "saturation",
    "hue",
)
#: C3: recognition tasks and the pose-like regression tasks (the section's REGRESSION); colour is neither
RECOGNITION = ("identity",)
POSE = ("position", "rotation")
#: the descriptors of the two corners (K = 2: [spatial, appearance])
SPATIAL_I = (1.0, 0.0)
APPEARANCE_I = (0.0, 1.0)
#: the downstream tables' rows (amortised_downstream's labels)
AI_LABEL = "AI (learned i)"
FIXED_LABELS = ("Default", "Spatial", "Appearance")
#: C5's AI-SimCLR models (stages made by :mod:`invfast.reproduce.stages`; the run's other amortised models are AI-MoCo)
SIMCLR_K2 = "pretrain-amortised-simclr"
SIMCLR_K5 = "pretrain-amortised-simclr-k5"
SIMCLR_DOWNSTREAM = "amortised-simclr-downstream"
SIMCLR_K2_LABEL = "AI-SimCLR (learned i)"
SIMCLR_K5_LABEL = "AI-SimCLR K=5 (learned i)"
#: resamples evaluated at once by :func:`index_bootstrap` (bounds the memory of a 3 000-image R² resample)
_CHUNK = 250


@dataclass(frozen=True)
class Stages:
    """The stage names C1-C4 read: the Hyper-ResNet's (:data:`RESNET`) or the transformers' (:data:`TRANSFORMERS`)."""

    measure: str = "measure"
    interpolation: str = "amortised-interpolation"
    learned_i: str = "amortised-learned-i"
    downstream: str = "amortised-downstream"
    amortised: str = "pretrain-amortised"
    policies: Mapping[str, str] = field(
        default_factory=lambda: {
            "Default": "pretrain-default",
            "Spatial": "pretrain-spatial",
            "Appearance": "pretrain-appearance",
        }
    )


RESNET = Stages()
TRANSFORMERS = Stages(
    measure="vit-measure",
    interpolation="vit-interpolation",
    learned_i="vit-learned-i",
    downstream="vit-downstream",
    amortised="pretrain-vit-amortised",
    policies={
        "Default": "pretrain-vit-default",
        "Spatial": "pretrain-vit-spatial",
        "Appearance": "pretrain-vit-appearance",
    },
)


# ---------------------------------------------------------------------------------------------- helpers
def budget_precondition(
    results: Mapping[str, Any], model: str, others: Sequence[str], *, equal: bool = False
) -> Precondition:
    """The equal budget of ``docs/findings.md`` (*What every experiment must meet*) from the pretraining stages'
    ``epochs`` and ``steps``: ``model`` trained at least the epochs and steps of each of ``others`` (``equal``:
    exactly as many)."""

    def budget(stage: str) -> tuple[int, int]:
        s = need(results, stage, what=f"the {stage} stage")
        return (
            int(need(s, "epochs", what=f"the epochs of {stage}")),
            int(need(s, "steps", what=f"the steps of {stage}")),
        )

    e, s = budget(model)
    rest = {o: budget(o) for o in others}
    if equal:
        met = all(e == oe and s == os_ for oe, os_ in rest.values())
        name = f"equal budget: {model} the same epochs and steps as " + ", ".join(others)
    else:
        met = all(e >= oe and s >= os_ for oe, os_ in rest.values())
        name = f"equal budget: {model} at least the epochs and steps of " + ", ".join(others)
    detail = f"{model} {e} epochs / {s} steps; " + "; ".join(f"{o} {oe} / {os_}" for o, (oe, os_) in rest.items())
    return Precondition(name, bool(met), detail)


def path_points(points: Sequence[Mapping[str, Any]]) -> list[tuple[float, Mapping[str, Any]]]:
    """The points i = (1 − t, t) of an interpolation as (t, point), by t ([1, 1], Default, left out)."""
    out = []
    for p in points:
        i = [float(v) for v in p["i"]]
        if len(i) != 2 or not np.isclose(i[0] + i[1], 1.0):
            continue
        out.append((i[1], p))
    return sorted(out, key=lambda tp: tp[0])


def find_point(points: Sequence[Mapping[str, Any]], i: Sequence[float], what: str) -> Mapping[str, Any]:
    """The point at descriptor ``i``; :class:`Missing` naming ``what`` when the interpolation lacks it."""
    for p in points:
        if len(p["i"]) == len(i) and np.allclose([float(v) for v in p["i"]], i):
            return p
    raise Missing(what)


def point_per_image(point: Mapping[str, Any], transforms: Sequence[str], what: str) -> np.ndarray:
    """[N, T] per-image standardised cosines of ``point['per_image_cosine']`` (an interpolation point, or a model's
    table of the measure stage) for ``transforms``: NaN where undefined, a whole column of NaN where the stage kept
    an empty list (the transform undefined on every image)."""
    table = need(point, "per_image_cosine", what=f"per-image invariance of {what}")
    cols = []
    for t in transforms:
        v = table.get(t) if isinstance(table, Mapping) else None
        if v is None:
            raise Missing(f"per-image invariance of {what} to {t}")
        cols.append([np.nan if x is None else float(x) for x in v])
    n = {len(c) for c in cols if c}
    if not n:
        raise Missing(f"per-image invariance of {what} defined on some image")
    if len(n) > 1:
        raise ValueError(f"the per-image invariance of {what} covers different images per transform: {sorted(n)}")
    size = n.pop()
    return np.asarray([c if c else [np.nan] * size for c in cols], dtype=np.float64).T


def model_per_image(measure: Mapping[str, Any], label: str, transforms: Sequence[str]) -> np.ndarray:
    """[N, T] per-image standardised cosines of model ``label`` in a measure stage (:func:`point_per_image`)."""
    table = need(measure, "per_image_cosine", label, what=f"per-image invariance of the {label} model")
    return point_per_image({"per_image_cosine": table}, transforms, f"the {label} model")


def finite_rows(*arrays: np.ndarray) -> np.ndarray:
    """Boolean [N]: the images finite in every array ([N] or [N, ...], the same images)."""
    n = {a.shape[0] for a in arrays}
    if len(n) != 1:
        raise ValueError(f"the arrays hold different numbers of images: {sorted(n)}")
    keep = np.ones(arrays[0].shape[0], dtype=bool)
    for a in arrays:
        keep &= np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1)
    return keep


def _ranks(x: np.ndarray) -> np.ndarray:
    from scipy import stats as st

    return np.asarray(st.rankdata(x, axis=-1), dtype=np.float64)


def spearman_last(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman correlation of ``a`` and ``b`` along their last axis (average ranks for ties; 0 where one side is
    constant), broadcast over the leading axes."""
    ra, rb = np.broadcast_arrays(_ranks(a), _ranks(b))
    ra = ra - ra.mean(axis=-1, keepdims=True)
    rb = rb - rb.mean(axis=-1, keepdims=True)
    den = np.sqrt((ra**2).sum(-1) * (rb**2).sum(-1))
    num = (ra * rb).sum(-1)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def profile_rho(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman over transforms of two invariance profiles (per-transform means [..., T]), per resample."""
    return spearman_last(a, b)


def along_i_spearman(means: np.ndarray, t: Sequence[float], sign: float) -> np.ndarray:
    """Oriented Spearman along i, per resample: ``means`` [..., P] the family invariance at the P points, ``t``
    [P] their positions; ``sign`` −1 where the invariance should fall with t (the spatial family)."""
    return sign * spearman_last(means, np.asarray(t, dtype=np.float64))


def profile_contrast(
    values: np.ndarray, n_t: int, x: int, mine: int, other: int | None = None
) -> Callable[[np.ndarray], np.ndarray]:
    """The statistic ρ(x, mine) − ρ(x, other) (``other`` None: ρ(x, mine)) on resampled image indices, where
    ``values`` [n, k T] holds k invariance profiles' per-image values side by side (profile j in columns
    j T … (j + 1) T − 1) and ρ is the Spearman over transforms of their means over the resampled images."""

    def block(m: np.ndarray, j: int) -> np.ndarray:
        return m[:, j * n_t : (j + 1) * n_t]

    def f(i: np.ndarray) -> np.ndarray:
        m = resample_means(i, values)
        rho = profile_rho(block(m, x), block(m, mine))
        return rho if other is None else rho - profile_rho(block(m, x), block(m, other))

    return f


def resample_counts(idx: np.ndarray, n: int) -> np.ndarray:
    """[r, n] how often each unit is drawn in each row of resampled indices ``idx`` [r, n]."""
    r = idx.shape[0]
    flat = (idx + n * np.arange(r)[:, None]).ravel()
    return np.bincount(flat, minlength=r * n).reshape(r, n).astype(np.float64)


def resample_means(idx: np.ndarray, values: np.ndarray) -> np.ndarray:
    """[r, ...] means of ``values`` [n, ...] over the units of each row of resampled indices ``idx`` [r, n] (one
    matrix product with the draw counts, not a gather of r copies)."""
    n = values.shape[0]
    w = resample_counts(idx, n)
    return (w @ values.reshape(n, -1)).reshape(idx.shape[0], *values.shape[1:]) / idx.shape[1]


def resample_r2(idx: np.ndarray, target: np.ndarray, prediction: np.ndarray) -> np.ndarray:
    """[r] mean R² over targets of ``prediction`` [n, t] for ``target`` [n, t] on each row of resampled indices, as
    :func:`~invfast.evidence.r2_statistic` on the gathered resample (a constant resampled target: 1 when predicted
    exactly, else 0), from the draw counts."""
    n = target.shape[0]
    t = target - target.mean(axis=0, keepdims=True)
    p = prediction - target.mean(axis=0, keepdims=True)
    w = resample_counts(idx, n)
    m = idx.shape[1]
    ss_res = w @ (t - p) ** 2
    s1, s2 = w @ t, w @ t**2
    ss_tot = np.maximum(s2 - s1**2 / m, 0.0)
    ok = ss_tot > 1e-12 * np.maximum(s2, 1e-300)
    r2 = np.where(ok, 1.0 - ss_res / np.where(ok, ss_tot, 1.0), np.where(ss_res == 0, 1.0, 0.0))
    return r2.mean(axis=-1)


def index_bootstrap(statistic: Callable[..., np.ndarray], sizes: Sequence[int], *, paired: bool, seed: int) -> Interval:
    """:func:`~invfast.evidence.bootstrap` over unit indices: ``statistic(*idx)`` gets one int array [r, n_k] of
    resampled indices per sample and returns [r] (:func:`resample_means`, :func:`resample_r2`); it is evaluated on
    chunks of resamples, so the resampled data never exist all at once. The draws are :func:`bootstrap`'s (same
    seed, same interval)."""

    def stat(*idx: np.ndarray) -> np.ndarray:
        ints = [np.asarray(i, dtype=np.intp) for i in idx]
        r = ints[0].shape[0]
        out = np.empty(r, dtype=np.float64)
        for s in range(0, r, _CHUNK):
            out[s : s + _CHUNK] = statistic(*[i[s : s + _CHUNK] for i in ints])
        return out

    return bootstrap(stat, [np.arange(n, dtype=np.float64) for n in sizes], paired=paired, seed=seed)


def mean_difference(a: np.ndarray, b: np.ndarray, seed: int) -> Interval:
    """mean(a) − mean(b) of per-unit values on the same units, paired (as
    :func:`~invfast.evidence.difference_interval`, by :func:`index_bootstrap`)."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return index_bootstrap(lambda i: resample_means(i, d), [d.shape[0]], paired=True, seed=seed)


def chance_level(kind: str, y: Any = None, setting: str = "") -> float:
    """The chance score of a setting: R² 0 for regression; for classification 1/N of an 'N-way' episode, else the
    majority class's share of ``y`` (a constant predictor's accuracy)."""
    if kind != "classification":
        return 0.0
    m = re.match(r"\s*(\d+)-way", setting)
    if m:
        return 1.0 / int(m.group(1))
    labels = np.asarray(y).reshape(-1)
    _, counts = np.unique(labels, return_counts=True)
    return float(counts.max() / counts.sum())


def share_criteria(name: str, shown: int, opposite: int, total: int, share: float) -> tuple[Criterion, Criterion]:
    """A share rule ('in ≥ ``share`` of the settings') as two exact criteria: the share of settings where the part
    is shown (its CI clears the bound; minimum ``share``, never contradicted by itself) and the share where it is
    not shown wrong (minimum and boundary ``share``: contradicted when the settings shown wrong leave fewer than
    ``share`` of them able to hold it, i.e. the claim is impossible whatever the undecided settings would show)."""
    return (
        Criterion(f"{name}: share shown", Interval.exact(shown / total, total), minimum=share, boundary=0.0),
        Criterion(
            f"{name}: share not shown wrong",
            Interval.exact(1.0 - opposite / total, total),
            minimum=share,
            boundary=share,
        ),
    )


def _i(i: Sequence[float]) -> str:
    """'[1, 0]'."""
    return "[" + ", ".join(f"{v:g}" for v in i) + "]"


def _nanmean_rows(x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(x, axis=1)


def _images_precondition(n: int, least: int, what: str) -> Precondition:
    return Precondition(f"enough test data: ≥ {least} {what}", n >= least, f"{n} {what}")


def _prefixed(
    prefix: str, parts: tuple[list[Criterion], list[Precondition]]
) -> tuple[list[Criterion], list[Precondition]]:
    crit, pre = parts
    return (
        [Criterion(f"{prefix}{c.name}", c.interval, c.minimum, c.boundary, c.paper, c.control) for c in crit],
        [Precondition(f"{prefix}{p.name}", p.met, p.detail) for p in pre],
    )


# ------------------------------------------------------------------------------------------------------ C1
#: C1's families: (family, its own corner, the opposite corner, its specialist, the other specialist, the sign of
#: the oriented Spearman along i: −1 where the invariance should fall with t)
_C1_FAMILIES = (
    ("spatial", SPATIAL_I, APPEARANCE_I, "Spatial", "Appearance", -1.0),
    ("appearance", APPEARANCE_I, SPATIAL_I, "Appearance", "Spatial", 1.0),
)


@dataclass(frozen=True)
class _C1Inputs:
    """What C1 reads, as [N, T] per-image standardised cosines over ``transforms`` (the spatial family's, then the
    appearance family's): the amortised model at each point ``t_pos`` of the interpolation (``ai``) and at its
    corners (``corner``), its initialisation at the corners (``init``), and the specialists (``spec``)."""

    fam_ts: Mapping[str, list[str]]
    transforms: list[str]
    t_pos: list[float]
    ai: list[np.ndarray]
    init: Mapping[tuple[float, float], np.ndarray]
    corner: Mapping[tuple[float, float], np.ndarray]
    spec: Mapping[str, np.ndarray]


@dataclass(frozen=True)
class _C1Family:
    """One family's per-image invariance on the images where all of it is defined: the amortised model at its own
    and the opposite corner (``a_own``, ``a_opp``), the initialisation at them (``c_own``, ``c_opp``), its specialist
    and the other (``s_mine``, ``s_other``), and the amortised model along i (``along`` [N, P])."""

    a_own: np.ndarray
    a_opp: np.ndarray
    c_own: np.ndarray
    c_opp: np.ndarray
    s_mine: np.ndarray
    s_other: np.ndarray
    along: np.ndarray

    @property
    def n(self) -> int:
        """The measurement images used."""
        return int(self.along.shape[0])


def _c1_inputs(results: Mapping[str, Any], st: Stages) -> _C1Inputs:
    """C1's inputs on the stages ``st``: the interpolation over ≥ :data:`MIN_POINTS` points from corner to corner,
    its control (the initialisation's) and the specialists' per-image invariance; :class:`Missing` naming what
    lacks."""
    measure = need(results, st.measure, what=f"the {st.measure} stage")
    families = need(measure, "families", what="the families of the test transforms")
    points = need(results, st.interpolation, "points", what="the amortised model's invariance along i")
    path = path_points(points)
    if len(path) < MIN_POINTS:
        raise Missing(f"i interpolated over ≥ {MIN_POINTS} points (got {len(path)})")
    fam_ts = {f: [t for t, g in families.items() if g == f] for f in ("spatial", "appearance")}
    transforms = fam_ts["spatial"] + fam_ts["appearance"]
    t_pos = [t for t, _ in path]
    ai = [point_per_image(p, transforms, f"the amortised model at i = {_i(p['i'])}") for _, p in path]
    init_points = need(
        results,
        st.interpolation,
        "init",
        "points",
        what="the invariance along i of the amortised model's initialisation (C1's control)",
    )
    init = {
        c: point_per_image(
            find_point(init_points, c, f"the initialisation at i = {_i(c)}"), transforms, "the initialisation"
        )
        for c in (SPATIAL_I, APPEARANCE_I)
    }
    if not (np.isclose(t_pos[0], 0.0) and np.isclose(t_pos[-1], 1.0)):
        raise Missing("the interpolation's corners i = [1, 0] and [0, 1]")
    corner = {SPATIAL_I: ai[0], APPEARANCE_I: ai[-1]}
    spec = {lab: model_per_image(measure, lab, transforms) for lab in ("Spatial", "Appearance")}
    return _C1Inputs(fam_ts, transforms, t_pos, ai, init, corner, spec)


def _family_invariance(x: np.ndarray, transforms: Sequence[str], members: Sequence[str]) -> np.ndarray:
    """[N] per-image family invariance: the mean of the image's defined values of ``x`` [N, T] (columns
    ``transforms``) over the family's transforms ``members`` (NaN where none is defined)."""
    return _nanmean_rows(x[:, [transforms.index(t) for t in members]])


def _c1_family(
    inp: _C1Inputs, f: str, own: tuple[float, float], opp: tuple[float, float], mine: str, other: str
) -> _C1Family:
    """Family ``f``'s per-image invariances C1 compares, on the images where every one of them is defined;
    :class:`Missing` when fewer than 2 are."""

    def fam(x: np.ndarray) -> np.ndarray:
        return _family_invariance(x, inp.transforms, inp.fam_ts[f])

    a_own, a_opp = fam(inp.corner[own]), fam(inp.corner[opp])
    c_own, c_opp = fam(inp.init[own]), fam(inp.init[opp])
    s_mine, s_other = fam(inp.spec[mine]), fam(inp.spec[other])
    along = np.stack([fam(x) for x in inp.ai], axis=1)  # [N, P]
    keep = finite_rows(a_own, a_opp, c_own, c_opp, s_mine, s_other, along)
    if keep.sum() < 2:
        raise Missing(f"per-image {f} invariance defined on at least 2 measurement images")
    return _C1Family(a_own[keep], a_opp[keep], c_own[keep], c_opp[keep], s_mine[keep], s_other[keep], along[keep])


def _c1_gap_precondition(f: str, mine: str, other: str, gap: Interval) -> Precondition:
    """The specialists differ in family ``f``'s invariance: the CI of E1's gap ``mine`` − ``other`` above 0."""
    return Precondition(
        f"the specialists differ in {f} invariance: {mine} − {other} > 0 (E1's gap, CI)", gap.low > 0, f"{gap}"
    )


def _c1_delta_criteria(
    f: str, own: tuple[float, float], opp: tuple[float, float], v: _C1Family, gap: Interval, ids: tuple[str, ...]
) -> list[Criterion]:
    """C1's Δ criteria for family ``f``: Δ = invariance at its own corner − at the opposite one (the same Δ at the
    initialisation its control), at least :data:`C1_GAP_SHARE` of the specialists' ``gap``; and Δ − Δ at the
    initialisation (paired over images) above 0 (the control must be below Δ)."""
    delta = mean_difference(v.a_own, v.a_opp, seed_of(*ids, f"Δ {f}"))
    delta_init = mean_difference(v.c_own, v.c_opp, seed_of(*ids, f"Δ {f} at the initialisation"))
    vs_init = mean_difference(v.a_own - v.a_opp, v.c_own - v.c_opp, seed_of(*ids, f"Δ {f} − Δ at the initialisation"))
    minimum = max(C1_GAP_SHARE * gap.estimate, 0.0)
    return [
        Criterion(
            f"Δ_{f}: {f} invariance at i = {_i(own)} − at {_i(opp)} (≥ {C1_GAP_SHARE:g} × the specialists' gap)",
            delta,
            minimum=minimum,
            control=delta_init,
        ),
        Criterion(f"Δ_{f} − the same Δ at the initialisation (control)", vs_init, minimum=0.0),
    ]


def _c1_monotone_criterion(
    f: str, along: np.ndarray, t_pos: Sequence[float], sign: float, ids: tuple[str, ...]
) -> Criterion:
    """C1's monotonicity for family ``f``: the oriented Spearman along i of the family invariance ``along`` [N, P]
    at the points ``t_pos``, bootstrapped over images, at least :data:`C1_MONOTONE`."""
    rho = index_bootstrap(
        lambda i: along_i_spearman(resample_means(i, along), t_pos, sign),
        [along.shape[0]],
        paired=True,
        seed=seed_of(*ids, f"Spearman {f}"),
    )
    return Criterion(f"Spearman of {f} invariance along i (oriented)", rho, minimum=C1_MONOTONE)


def c1_parts(
    results: Mapping[str, Any], st: Stages = RESNET, ids: tuple[str, ...] = ("C1",)
) -> tuple[list[Criterion], list[Precondition]]:
    """C1's criteria and preconditions (see :func:`judge_c1`) on the stages ``st``; ``ids`` seed the bootstraps."""
    inp = _c1_inputs(results, st)
    crit: list[Criterion] = []
    pre = [budget_precondition(results, st.amortised, [st.policies["Spatial"], st.policies["Appearance"]])]
    n_used = []
    for f, own, opp, mine, other, sign in _C1_FAMILIES:
        v = _c1_family(inp, f, own, opp, mine, other)
        n_used.append(v.n)
        gap = mean_difference(v.s_mine, v.s_other, seed_of(*ids, f"specialists' gap, {f}"))
        pre.append(_c1_gap_precondition(f, mine, other, gap))
        crit += _c1_delta_criteria(f, own, opp, v, gap, ids)
        crit.append(_c1_monotone_criterion(f, v.along, inp.t_pos, sign, ids))
    pre.append(_images_precondition(min(n_used), MIN_MEASURE_IMAGES, "measurement images"))
    return crit, pre


def judge_c1(results: Mapping[str, Any]) -> SeedVerdict:
    """C1: per family, Δ = invariance at its own corner (spatial: i = [1, 0]; appearance: [0, 1]) − at the opposite
    corner ≥ 25 % of the specialists' gap (E1: Spatial − Appearance, resp. Appearance − Spatial), CI over images
    > 0; the oriented Spearman along i = (1 − t, t) over ≥ 7 points ≥ 0.8, CI > 0; the control: the same Δ at the
    initialisation must be below it — Δ − Δ_init (paired over images) CI > 0 and, like Δ, ≥ 25 % of the gap (the
    minimum effect holds for what training added, so an initialisation that already moves does not count).

    Reads ``measure`` (``families``, ``per_image_cosine`` of Spatial / Appearance), ``amortised-interpolation``
    (``points[k]['per_image_cosine']``; the control ``init['points']``), ``pretrain-amortised`` /
    ``pretrain-spatial`` / ``pretrain-appearance`` (``epochs``, ``steps``). Preconditions: equal budget, the
    specialists' gap CI > 0 in each family (else 25 % of it is no minimum), ≥ 96 measurement images. Family
    invariance of an image: the mean of its standardised cosines over the family's transforms."""
    return judge(*c1_parts(results))


# ------------------------------------------------------------------------------------------------------ C2
#: C2's profiles side by side: the block of each in :class:`_C2Profiles`' ``stacked``
_C2_COL = {"AI_spa": 0, "AI_app": 1, "S": 2, "A": 3, "R": 4}
#: C2's discriminations: (name, the amortised profile, the specialist it should match, the other one, the formula)
_C2_DISCRIMINATIONS = (
    ("D_S", "AI_spa", "S", "A", "ρ(AI_spa, Spatial) − ρ(AI_spa, Appearance)"),
    ("D_A", "AI_app", "A", "S", "ρ(AI_app, Appearance) − ρ(AI_app, Spatial)"),
)


@dataclass(frozen=True)
class _C2Profiles:
    """C2's per-image invariance on one set of transforms: ``stacked`` [n, 5 T] the blocks of :data:`_C2_COL` side
    by side (AI at [1, 0], AI at [0, 1], Spatial, Appearance, Random — AI at [1, 0] again where Random is missing),
    over the ``n_t`` transforms defined for every model and the ``n`` images where all are defined."""

    stacked: np.ndarray
    n_t: int
    n: int
    random: bool


def _c2_profiles(
    measure: Mapping[str, Any], at: Mapping[tuple[float, float], Mapping[str, Any]], transforms: Sequence[str]
) -> _C2Profiles:
    """The profiles C2 compares on ``transforms``: the amortised model at the corners ``at``, the specialists and
    (if measured) Random, less the transforms undefined on every image for some model and the images where some
    value is undefined; :class:`Missing` when fewer than 2 images are left."""
    ai_s = point_per_image(at[SPATIAL_I], transforms, "the amortised model at i = [1, 0]")
    ai_a = point_per_image(at[APPEARANCE_I], transforms, "the amortised model at i = [0, 1]")
    s, a = model_per_image(measure, "Spatial", transforms), model_per_image(measure, "Appearance", transforms)
    try:
        rnd: np.ndarray | None = model_per_image(measure, "Random", transforms)
    except Missing:
        rnd = None
    # a transform undefined on every image for some model has no place in the profiles
    arrays = [ai_s, ai_a, s, a, *([] if rnd is None else [rnd])]
    defined = np.all([np.isfinite(x).any(axis=0) for x in arrays], axis=0)
    n_t = len([t for t, ok in zip(transforms, defined) if ok])
    ai_s, ai_a, s, a = (x[:, defined] for x in (ai_s, ai_a, s, a))
    rnd = None if rnd is None else rnd[:, defined]
    keep = finite_rows(ai_s, ai_a, s, a, *([] if rnd is None else [rnd]))
    if keep.sum() < 2:
        raise Missing("per-image invariance defined on at least 2 measurement images")
    ai_s, ai_a, s, a = ai_s[keep], ai_a[keep], s[keep], a[keep]
    # every profile's per-image values side by side: [n, 5 T]
    stacked = np.concatenate([ai_s, ai_a, s, a, ai_s if rnd is None else rnd[keep]], axis=1)
    return _C2Profiles(stacked, n_t, int(keep.sum()), rnd is not None)


def _c2_distinct_precondition(p: _C2Profiles, profile: str, ids: tuple[str, ...]) -> Precondition:
    """The specialists' profiles differ on the set ``profile``: ρ(Spatial, Appearance) below :data:`C2_DISTINCT`
    (point value; its CI over images shown)."""
    rho_sa = index_bootstrap(
        profile_contrast(p.stacked, p.n_t, _C2_COL["S"], _C2_COL["A"]),
        [p.n],
        paired=True,
        seed=seed_of(*ids, f"ρ(Spatial, Appearance), {profile}"),
    )
    return Precondition(
        f"the specialists' profiles differ: ρ(Spatial, Appearance) < {C2_DISTINCT}, {profile}",
        rho_sa.estimate < C2_DISTINCT,
        f"{rho_sa}",
    )


def _c2_discrimination_criterion(
    p: _C2Profiles, d: tuple[str, str, str, str, str], profile: str, paper: bool, ids: tuple[str, ...]
) -> Criterion:
    """C2's discrimination ``d`` (one of :data:`_C2_DISCRIMINATIONS`) on the set ``profile``: ρ(x, mine) −
    ρ(x, other) over images, at least :data:`C2_MIN`, with the same statistic of Random's profile as the control
    (None without Random) and the paper's value where ``paper`` (the paper's 11 transforms)."""
    name, x, mine, other, label = d
    iv = index_bootstrap(
        profile_contrast(p.stacked, p.n_t, _C2_COL[x], _C2_COL[mine], _C2_COL[other]),
        [p.n],
        paired=True,
        seed=seed_of(*ids, name, profile),
    )
    control = (
        index_bootstrap(
            profile_contrast(p.stacked, p.n_t, _C2_COL["R"], _C2_COL[mine], _C2_COL[other]),
            [p.n],
            paired=True,
            seed=seed_of(*ids, name, profile, "Random"),
        )
        if p.random
        else None
    )
    return Criterion(
        f"{name} = {label}, {profile}", iv, minimum=C2_MIN, paper=C2_PAPER[name] if paper else None, control=control
    )


def c2_parts(
    results: Mapping[str, Any], st: Stages = RESNET, ids: tuple[str, ...] = ("C2",)
) -> tuple[list[Criterion], list[Precondition]]:
    """C2's criteria and preconditions (see :func:`judge_c2`) on the stages ``st``."""
    measure = need(results, st.measure, what=f"the {st.measure} stage")
    families = need(measure, "families", what="the families of the test transforms")
    points = need(results, st.interpolation, "points", what="the amortised model's invariance along i")
    at = {c: find_point(points, c, f"the amortised model measured at i = {_i(c)}") for c in (SPATIAL_I, APPEARANCE_I)}
    crit: list[Criterion] = []
    pre = [budget_precondition(results, st.amortised, [st.policies["Spatial"], st.policies["Appearance"]])]
    n_used = []
    for profile, transforms in (
        ("all test transforms", list(families)),
        ("the paper's 11 transforms", PAPER_TRANSFORMS),
    ):
        p = _c2_profiles(measure, at, transforms)
        n_used.append(p.n)
        pre.append(_c2_distinct_precondition(p, profile, ids))
        paper = profile != "all test transforms"
        crit += [_c2_discrimination_criterion(p, d, profile, paper, ids) for d in _C2_DISCRIMINATIONS]
    pre.append(_images_precondition(min(n_used), MIN_MEASURE_IMAGES, "measurement images"))
    return crit, pre


def judge_c2(results: Mapping[str, Any]) -> SeedVerdict:
    """C2: the amortised model's invariance profile at i = spatial [1, 0] / appearance [0, 1] against the Spatial /
    Appearance models (Spearman over transforms of the per-transform mean standardised cosine): D_S = ρ(AI_spa,
    Spatial) − ρ(AI_spa, Appearance) ≥ 0.3 and D_A = ρ(AI_app, Appearance) − ρ(AI_app, Spatial) ≥ 0.3, CIs by a
    paired bootstrap over measurement images > 0 — on all the test transforms and on the paper's 11 (paper: D_S
    1.06, D_A 0.79 on its 11). Precondition: ρ(Spatial, Appearance) < 0.5 (point value; CI shown) on each set.

    Reads ``measure['per_image_cosine']`` (Spatial, Appearance; Random's for the control shown beside each D: the
    same D with the amortised profile replaced by Random's), ``amortised-interpolation['points']`` at [1, 0] and
    [0, 1] (``per_image_cosine``), the pretraining stages' ``epochs`` / ``steps`` (equal budget); ≥ 96 images."""
    return judge(*c2_parts(results))


# ------------------------------------------------------------------------------------------------------ C3
def welch_interval(groups: Sequence[Any], weights: Sequence[float], confidence: float = 0.95) -> Interval:
    """Σ_k w_k · mean(groups[k]) over independent groups (each [n_k], n_k ≥ 2) with its Welch-Satterthwaite t
    interval: var = Σ w_k² s_k² / n_k, df = var² / Σ (w_k² s_k² / n_k)² / (n_k − 1). For a handful of units (the
    restarts of C3), where a percentile bootstrap's interval is too narrow; one group of differences is the paired
    t interval."""
    from scipy import stats as st

    xs = [np.asarray(g, dtype=np.float64).reshape(-1) for g in groups]
    if any(x.size < 2 for x in xs):
        raise ValueError("a Welch interval needs at least 2 values per group")
    w = np.asarray(weights, dtype=np.float64)
    est = float(sum(wk * x.mean() for wk, x in zip(w, xs)))
    terms = np.array([wk**2 * x.var(ddof=1) / x.size for wk, x in zip(w, xs)])
    var = float(terms.sum())
    n = int(sum(x.size for x in xs))
    if var <= 0:
        return Interval(est, est, est, confidence, "t", n)
    df = var**2 / float(sum(tk**2 / (x.size - 1) for tk, x in zip(terms, xs) if tk > 0))
    half = float(st.t.ppf(0.5 + confidence / 2, df)) * var**0.5
    return Interval(est, est - half, est + half, confidence, "t", n)


def c3_parts(
    results: Mapping[str, Any], st: Stages = RESNET, ids: tuple[str, ...] = ("C3",)
) -> tuple[list[Criterion], list[Precondition]]:
    """C3's criteria and preconditions (see :func:`judge_c3`) on the stages ``st`` (``ids`` unused: no bootstrap)."""
    learned = need(results, st.learned_i, what=f"the {st.learned_i} stage")
    d_of: dict[str, np.ndarray] = {}
    pre: list[Precondition] = []
    for task in RECOGNITION + POSE:
        restarts = need(learned, task, "restarts", what=f"≥ {MIN_RESTARTS} restarts of the learned i per task")
        if len(restarts) < MIN_RESTARTS:
            raise Missing(f"≥ {MIN_RESTARTS} restarts of the learned i per task ({task}: {len(restarts)})")
        d_of[task] = np.asarray([float(r["i"][0]) - float(r["i"][1]) for r in restarts], dtype=np.float64)
        score = [float(need(r, "score", what="the held-out score at the learned i")) for r in restarts]
        half = [
            float(need(r, "score_at_half", what="the held-out score at i = (0.5, 0.5) of each restart"))
            for r in restarts
        ]
        iv = welch_interval([np.asarray(score) - np.asarray(half)], [1.0])
        pre.append(
            Precondition(
                f"learning i changes the {task} score: score at the learned i − at (0.5, 0.5), CI excludes 0",
                iv.low > 0 or iv.high < 0,
                f"{iv} over {len(restarts)} restarts",
            )
        )
    weights = [1.0 / len(RECOGNITION)] * len(RECOGNITION) + [-1.0 / len(POSE)] * len(POSE)
    iv = welch_interval([d_of[t] for t in RECOGNITION + POSE], weights)
    crit = [
        Criterion(
            "mean over recognition of (i_spatial − i_appearance) − the same over pose regression",
            iv,
            minimum=C3_MIN,
        )
    ]
    return crit, pre


def judge_c3(results: Mapping[str, Any]) -> SeedVerdict:
    """C3: the mean over recognition tasks (identity) of (i_spatial − i_appearance) − the same mean over the pose
    regression tasks (position, rotation) ≥ 0.05, CI over restarts > 0; ≥ 5 restarts per task. Precondition per
    task: the held-out score at the learned i differs from that at i = (0.5, 0.5) beyond its CI (the paired interval
    over restarts of score − score_at_half excludes 0). Restarts are not test units: with 5 of them a percentile
    bootstrap's interval is too narrow, so the CIs are t intervals (Welch's over the tasks' independent restarts,
    :func:`welch_interval`).

    Reads ``amortised-learned-i[task]['restarts'] = [{'i', 'score', 'score_at_half'}, ...]`` (``chavhan.ip_restarts``;
    folders of invfast before 0.6 learned i once per task: not testable). The paper's spatial entries (0.80 vs
    0.48) are not this statistic."""
    return judge(*c3_parts(results))


# ------------------------------------------------------------------------------------------------------ C4
@dataclass(frozen=True)
class Setting:
    """One setting of C4 (a task's many-shot probe, or one few-shot setting): its units (probe images, episodes)
    and per model the score of resampled unit indices, ``score[model](idx [r, n]) -> [r]``."""

    name: str
    chance: float | None
    n: int
    score: Mapping[str, Callable[[np.ndarray], np.ndarray]]

    def interval(self, model: str, *ids: str) -> Interval:
        """The model's score with its bootstrap interval over the units."""
        return index_bootstrap(self.score[model], [self.n], paired=True, seed=seed_of(*ids, self.name, model))

    def difference(self, a: str, b: str, *ids: str) -> Interval:
        """score(a) − score(b), paired over the units."""
        fa, fb = self.score[a], self.score[b]
        return index_bootstrap(lambda i: fa(i) - fb(i), [self.n], paired=True, seed=seed_of(*ids, self.name, a, b))


def _mean_of(v: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda i: resample_means(i, v)


def _r2_of(t: np.ndarray, p: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    return lambda i: resample_r2(i, t, p)


def probe_settings(down: Mapping[str, Any], labels: Sequence[str]) -> list[Setting]:
    """The many-shot settings of a downstream stage, one per task, from the out-of-fold probe predictions of
    ``down['probes'][task]`` (``kind``, ``scores[label]``; ``y``: the targets of a regression task, the labels of
    a classification task, where they give its chance level — None when the stage keeps no labels, as the
    ``probes`` stage does not): accuracy over probe images, or R²."""
    probes = need(down, "probes", what="the downstream stage's out-of-fold probe predictions")
    out = []
    for task, rec in probes.items():
        kind = need(rec, "kind", what=f"the kind of the {task} task")
        scores = need(rec, "scores", what=f"the {task} probe scores")
        fns: dict[str, Callable[[np.ndarray], np.ndarray]] = {}
        sizes = set()
        chance: float | None = None
        if kind == "classification":
            for m in labels:
                c = correct(need(scores, m, what=f"the {task} probe of {m}"))
                fns[m], n = _mean_of(c), c.shape[0]
                sizes.add(n)
            if rec.get("y") is not None:
                chance = chance_level(kind, rec["y"])
        else:
            y = np.asarray(need(rec, "y", what=f"the {task} probe targets"), dtype=np.float64)
            t = y.reshape(y.shape[0], -1)
            for m in labels:
                pred = need(scores, m, "oof_prediction", what="out-of-fold probe predictions")
                fns[m] = _r2_of(t, np.asarray(pred, dtype=np.float64).reshape(t.shape[0], -1))
            sizes.add(t.shape[0])
            chance = 0.0
        if len(sizes) != 1:
            raise ValueError(f"{task}: the models' probes scored different numbers of images: {sorted(sizes)}")
        out.append(Setting(f"{task}, many-shot", chance, sizes.pop(), fns))
    return out


def few_shot_settings(down: Mapping[str, Any], labels: Sequence[str]) -> list[Setting]:
    """The few-shot settings of a downstream stage: per task and setting, every model's scores on the same
    episodes (splits, for few-shot regression), ``down['few_shot'][task][setting][label]``, with i learned per
    episode (``down['few_shot_i'] == 'per episode'``)."""
    what = "few-shot scores per episode with i learned per episode"
    if need(down, "few_shot_i", what=what) != "per episode":
        raise Missing(what)
    few = need(down, "few_shot", what=what)
    out = []
    for task, settings in few.items():
        for setting, per_model in settings.items():
            v = {m: np.asarray(need(per_model, m, what=f"the {task} {setting} episodes of {m}")) for m in labels}
            sizes = {x.shape[0] for x in v.values()}
            if len(sizes) != 1:
                raise ValueError(f"{task} {setting}: the models were scored on different episodes: {sorted(sizes)}")
            kind = "classification" if re.match(r"\s*\d+-way", setting) else "regression"
            fns = {m: _mean_of(x.astype(np.float64)) for m, x in v.items()}
            out.append(Setting(f"{task}, {setting}", chance_level(kind, setting=setting), sizes.pop(), fns))
    return out


def c4_parts(
    results: Mapping[str, Any], st: Stages = RESNET, ids: tuple[str, ...] = ("C4",)
) -> tuple[list[Criterion], list[Precondition]]:
    """C4's criteria and preconditions (see :func:`judge_c4`) on the stages ``st``."""
    down = need(results, st.downstream, what=f"the {st.downstream} stage")
    labels = [AI_LABEL, *FIXED_LABELS]
    many = probe_settings(down, labels)
    settings = many + few_shot_settings(down, labels)
    pre = [budget_precondition(results, st.amortised, list(st.policies.values()))]
    pre.append(_images_precondition(min(s.n for s in many), MIN_PROBE_IMAGES, "probe images"))
    counted, shown, worse, better = 0, 0, 0, 0
    for s in settings:
        if s.chance is None:
            raise Missing(f"the {s.name.split(',')[0]} probe labels (its chance level)")
        chance = s.chance
        scores = {m: s.interval(m, *ids) for m in labels}
        if not any(iv.low > chance for iv in scores.values()):
            continue  # no model above chance: the setting says nothing
        counted += 1
        best = max(FIXED_LABELS, key=lambda m: scores[m].estimate)
        d = s.difference(AI_LABEL, best, *ids)
        shown += d.low >= -MARGIN
        worse += d.high < -MARGIN
        better += d.low > 0
    pre.append(
        Precondition(
            "some model above chance (CI) in at least one setting", counted > 0, f"{counted} of {len(settings)}"
        )
    )
    if counted == 0:
        return [], pre
    name = f"AI non-inferior to the best fixed model (lower CI bound of AI − best ≥ −{MARGIN:g})"
    noninf, not_inferior = share_criteria(name, shown, worse, counted, C4_SHARE)
    crit = [
        noninf,
        not_inferior,
        Criterion(
            "settings where AI beats the best fixed model (CI of AI − best > 0)", Interval.exact(better, counted), 1.0
        ),
    ]
    return crit, pre


def judge_c4(results: Mapping[str, Any]) -> SeedVerdict:
    """C4: over the settings (task × many-shot probe / few-shot episodes / few-shot regression) where some model's
    score interval lies above chance (majority class, 1/N for N-way episodes, R² 0), the amortised model at its
    learned i is non-inferior to the best fixed model (Default, Spatial, Appearance: the best point estimate) —
    lower CI bound of AI − best ≥ −0.02, paired over probe images (out-of-fold) or episodes — in ≥ 75 % of them,
    and better (CI > 0) in ≥ 1.

    The share is two exact criteria (:func:`share_criteria`): reproduced when ≥ 75 % are shown non-inferior;
    contradicted when more than 25 % are shown inferior (upper CI bound < −0.02), so 75 % is out of reach. Reads
    ``amortised-downstream['probes'][task]`` (``kind``, ``y``, ``scores[label]`` with ``oof_correct`` /
    ``oof_prediction``), ``['few_shot'][task][setting][label]`` (per-episode scores) with ``['few_shot_i'] ==
    'per episode'``, and the pretraining stages' ``epochs`` / ``steps`` (equal budget: the amortised model at least
    each policy model's); ≥ 1 000 probe images. The mean rank is the stage's ``mean_rank`` (reported, not judged)."""
    return judge(*c4_parts(results))


# ------------------------------------------------------------------------------------------------------ C5
def k5_vs_k2_parts(
    results: Mapping[str, Any],
    *,
    k2: str,
    k5: str,
    downstream: str,
    k2_label: str,
    k5_label: str,
    ids: tuple[str, ...] = ("C5",),
) -> tuple[list[Criterion], list[Precondition]]:
    """C5's criteria and preconditions for the K = 5 model ``k5_label`` against the K = 2 model ``k2_label`` of the
    ``downstream`` stage's many-shot probes (pretraining stages ``k5`` and ``k2``)."""
    down = need(results, downstream, what=f"the {downstream} stage")
    tasks = probe_settings(down, [k5_label, k2_label])
    pre = [
        budget_precondition(results, k5, [k2], equal=True),
        _images_precondition(min(s.n for s in tasks), MIN_PROBE_IMAGES, "probe images"),
    ]
    worse = sum(s.difference(k5_label, k2_label, *ids).high < 0 for s in tasks)
    gaps = [(s.score[k5_label], s.score[k2_label]) for s in tasks]
    mean = index_bootstrap(
        lambda *idx: np.mean([f5(i) - f2(i) for (f5, f2), i in zip(gaps, idx)], axis=0),
        [s.n for s in tasks],
        paired=False,
        seed=seed_of(*ids, "mean over tasks of K5 − K2"),
    )
    crit = [
        Criterion(
            f"mean over tasks of K5 − K2 (non-inferior: lower CI bound ≥ −{MARGIN:g})",
            mean,
            minimum=-MARGIN,
            boundary=-MARGIN,
            paper=C5_PAPER,
        ),
        Criterion(
            f"share of tasks where K5 is not worse than K2 (CI < 0 on ≤ {C5_WORSE_SHARE:g} of them)",
            Interval.exact(1.0 - worse / len(tasks), len(tasks)),
            minimum=1.0 - C5_WORSE_SHARE,
            boundary=1.0 - C5_WORSE_SHARE,
        ),
    ]
    return crit, pre


def judge_c5(results: Mapping[str, Any]) -> SeedVerdict:
    """C5: AI-SimCLR with K = 5 against K = 2 at equal budgets (the same epochs and steps): the mean over tasks of
    K5 − K2 (many-shot probe scores: accuracy, R²; each task's images resampled, the two models paired on them) has
    its lower CI bound ≥ −0.02 (non-inferior; paper +1.03 points), and K5 is worse (paired CI < 0) on ≤ 25 % of the
    tasks (an exact share: contradicted above 25 %).

    Reads the stages :data:`SIMCLR_K2`, :data:`SIMCLR_K5` (``epochs``, ``steps``) and :data:`SIMCLR_DOWNSTREAM`
    (``probes[task]`` as in C4, rows :data:`SIMCLR_K2_LABEL`, :data:`SIMCLR_K5_LABEL`); folders of invfast before 0.6
    compared the AI-MoCo models (``amortised-k5-downstream``): not testable."""
    return judge(
        *k5_vs_k2_parts(
            results,
            k2=SIMCLR_K2,
            k5=SIMCLR_K5,
            downstream=SIMCLR_DOWNSTREAM,
            k2_label=SIMCLR_K2_LABEL,
            k5_label=SIMCLR_K5_LABEL,
        )
    )


# ------------------------------------------------------------------------------------------------------ C6
def c6_saving(ai_seconds: float, specialist_seconds: Sequence[float]) -> tuple[float, float]:
    """(saving, ratio): saving = 1 − time(AI) / (n × time(one specialist)), ratio = time(AI) / time(one specialist),
    with time(one specialist) the mean of the n specialists' times (n × it: their sum)."""
    one = float(np.mean(specialist_seconds))
    n = len(specialist_seconds)
    return 1.0 - ai_seconds / (n * one), ai_seconds / one


def judge_c6(results: Mapping[str, Any]) -> SeedVerdict:
    """C6: time(AI) < n_specialists × time(one specialist), time = the median seconds per epoch over ≥ 5 timed
    epochs, at equal epochs (every model timed over the same number of epochs of the same data): the saving
    1 − time(AI) / (n × time(one specialist)) is an exact number (a measured time, no sampling interval) that must
    reach 5 % (:data:`C6_MIN_SAVING`: timing noise; ``docs/findings.md`` gives no minimum) and is contradicted
    below 0. The ratio AI / one specialist (paper 1.75 at K = 5, RN-50) is reported in the precondition's detail.

    Reads ``amortised-cost['models'][key]['epoch_seconds']`` (the amortised model ``'amortised'``, the specialists
    every other key; ``steps_per_epoch`` compared where recorded), which the stage makes with ``chavhan.cost_epochs`` ≥
    5 (folders of invfast before 0.6 timed ``chavhan.cost_steps`` steps once: not testable)."""
    models = need(results, "amortised-cost", "models", what="the amortised-cost stage")
    what = f"time per epoch of every model over ≥ {MIN_EPOCHS_TIMED} epochs"
    epochs = {k: [float(v) for v in need(m, "epoch_seconds", what=what)] for k, m in models.items()}
    if "amortised" not in epochs or len(epochs) < 2:
        raise Missing("the amortised model's and the specialists' time per epoch")
    if min(len(v) for v in epochs.values()) < MIN_EPOCHS_TIMED:
        raise Missing(f"{what} (got {min(len(v) for v in epochs.values())})")
    median = {k: float(np.median(v)) for k, v in epochs.items()}
    specialists = [k for k in median if k != "amortised"]
    saving, ratio = c6_saving(median["amortised"], [median[k] for k in specialists])
    counts = {k: len(v) for k, v in epochs.items()}
    spe = {k: m.get("steps_per_epoch") for k, m in models.items() if m.get("steps_per_epoch") is not None}
    equal = len(set(counts.values())) == 1 and len(set(spe.values())) <= 1
    detail = (
        "timed epochs "
        + ", ".join(f"{k} {n}" for k, n in counts.items())
        + ("; steps per epoch " + ", ".join(f"{k} {v}" for k, v in spe.items()) if spe else "")
        + f"; ratio AI / one specialist {ratio:.2f} (n = {len(specialists)})"
    )
    pre = [Precondition("equal epochs: every model timed over the same epochs", equal, detail)]
    crit = [
        Criterion(
            "saving 1 − time(AI) / (n × time(one specialist)), median time per epoch",
            Interval.exact(saving),
            minimum=C6_MIN_SAVING,
        )
    ]
    return judge(crit, pre)


# ------------------------------------------------------------------------------------------------------ C7
def judge_c7(results: Mapping[str, Any]) -> SeedVerdict:
    """C7: C1-C4's rules (:func:`c1_parts` … :func:`c4_parts`) on the transformers — the Prompt-ViT
    ('vit-amortised') for the amortised model, the plain ViTs for the policies (:data:`TRANSFORMERS`' stages) —
    every part's criteria must hold (named 'C1: …' to 'C4: …').

    Preconditions besides the parts': the prompt is not ignored — features at i = [1, 0] and [0, 1] differ by
    ≥ 5 % of their norm on the probe images (mean over images of ‖f(1, 0) − f(0, 1)‖ / mean norm, read from
    ``vit-interpolation['prompt_effect']['per_image']``: per image, the difference's norm over the mean of the two
    features' norms), and the Prompt-ViT is warm-started from the Default ViT as C7's experiment in
    ``docs/findings.md`` says (``pretrain-vit-amortised['warm_start'] == 'vit-default'``; folders of invfast before
    0.6 trained it from its initialisation and record no warm start: not testable)."""
    rel = np.asarray(
        need(
            results,
            TRANSFORMERS.interpolation,
            "prompt_effect",
            "per_image",
            what="the Prompt-ViT's feature difference between i = [1, 0] and [0, 1] on the probe images",
        ),
        dtype=np.float64,
    )
    effect = mean_interval(rel, seed=seed_of("C7", "prompt effect"))
    warm = need(results, TRANSFORMERS.amortised, "warm_start", what="the Prompt-ViT warm-started from the Default ViT")
    pre = [
        Precondition(
            f"the prompt is not ignored: features at i = [1, 0] and [0, 1] differ by ≥ {C7_PROMPT_EFFECT:.0%} of "
            "their norm",
            effect.estimate >= C7_PROMPT_EFFECT,
            f"mean relative difference {effect} over {rel.size} probe images",
        ),
        Precondition("the Prompt-ViT warm-started from the Default ViT", warm == "vit-default", f"from {warm}"),
    ]
    crit: list[Criterion] = []
    for fid, parts in (("C1", c1_parts), ("C2", c2_parts), ("C3", c3_parts), ("C4", c4_parts)):
        c, p = _prefixed(f"{fid}: ", parts(results, TRANSFORMERS, ("C7", fid)))
        crit += c
        pre += p
    return judge(crit, pre)
