"""The verdict rules of Speicher et al.'s findings S1-S8 (invfast.reproduce.rules.speicher) on stage results
built here: each rule reproduces, contradicts, is inconclusive and is not testable where it should, and the
rule applied to its control does not reproduce."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import stats

from invfast.evidence import CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE, REPRODUCED, bootstrap, judge
from invfast.reproduce.rules import speicher as S
from invfast.reproduce.rules.common import seed_of


# ---------------------------------------------------------------------------------------------- builders
def hits(rng: np.random.Generator, n: int, p: float) -> np.ndarray:
    """Per-image correctness with exactly round(p·n) correct images, in random order."""
    k = int(round(p * n))
    return rng.permutation(np.r_[np.ones(k), np.zeros(n - k)])


def score(c: np.ndarray, **extra: Any) -> dict[str, Any]:
    """A probe score dict as the stages will keep it (the CV fold scores are deliberately absent)."""
    return {"mean": float(np.mean(c)), "oof_correct": [float(v) for v in c], **extra}


def pairs(rng: np.random.Generator, n: int, s: float) -> dict[str, list[float]]:
    """Per-pair terms of a sensitivity ≈ s: den ~ 1, num ~ s·den, with noise."""
    den = 1.0 + 0.05 * rng.standard_normal(n)
    num = s * den + 0.05 * rng.standard_normal(n)
    return {"num": num.tolist(), "den": den.tolist()}


def flip(rng: np.random.Generator, c: np.ndarray, share: float) -> np.ndarray:
    """``c`` with a share of its images flipped, as many right to wrong as wrong to right: a model of the same
    accuracy that errs almost where ``c`` does."""
    out = c.copy()
    k = int(round(share * c.size / 2))
    for v in (0.0, 1.0):
        idx = rng.choice(np.flatnonzero(c == v), k, replace=False)
        out[idx] = 1 - v
    return out


def verdict(v: Any) -> str:
    return v.verdict


# ---------------------------------------------------------------------------------------------- shared helpers
def test_resample_means_matches_bootstrap(rng):
    x = rng.random((150, 3))
    seed = seed_of("test", "resample")
    means = S.resample_means(x, seed)
    assert means.shape == (2000, 3)
    iv = S.percentile_interval(float(x[:, 0].mean() - x[:, 1].mean()), means[:, 0] - means[:, 1], 150)
    ref = bootstrap(lambda a, b: a.mean(axis=1) - b.mean(axis=1), [x[:, 0], x[:, 1]], seed=seed)
    assert iv.low == pytest.approx(ref.low) and iv.high == pytest.approx(ref.high)
    assert iv.estimate == pytest.approx(ref.estimate)


def test_spearman_rows_matches_scipy(rng):
    a, b = rng.random((4, 9)), rng.random((4, 9))
    b[0] = a[0]  # a perfect rank match
    b[1, :3] = b[1, 0]  # ties
    got = S.spearman_rows(a, b)
    want = [stats.spearmanr(a[k], b[k]).statistic for k in range(4)]
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert S.spearman_rows([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0  # constant side: no order


def test_share_interval():
    iv = S.share_interval(3, 1, 4)
    assert (iv.estimate, iv.low, iv.high) == (0.75, 0.75, 0.75)
    assert S.share_interval(2, 0, 4).high == 1.0
    with pytest.raises(ValueError):
        S.share_interval(3, 2, 4)


def test_own_accuracy_prefers_test_accuracy():
    assert S.own_accuracy({"ncm_trained": 0.7, "test_accuracy": 0.95}, "m") == (0.95, "test accuracy")
    assert S.own_accuracy({"ncm_trained": 0.7}, "m")[0] == 0.7
    results = {
        "transfer-train-same": {"ncm_trained": 0.91},
        "s8-train": {"models": {"s8-first-1": {"ncm_trained": 0.5}}},
    }
    assert S.training_record(results, "transfer-same")["ncm_trained"] == 0.91
    assert S.training_record(results, "s8-first-1")["ncm_trained"] == 0.5


# ---------------------------------------------------------------------------------------------- S1
S1_ROWS = {"size": ["0.25", "0.5", "1"], "arch": ["a", "b", "c"], "classes": ["subset", "disjoint", "same", "superset"]}


def s1_results(rng, same, diff, n=200, own=0.95) -> dict[str, Any]:
    """``same`` / ``diff``: accuracy by (factor, value) or one number for all."""
    factors: dict[str, Any] = {}
    train: dict[str, Any] = {}
    for f, values in S1_ROWS.items():
        factors[f] = {}
        train[f"s1-train-{f}"] = {"models": {}}
        for v in values:
            ps = same(f, v) if callable(same) else same
            pd = diff(f, v) if callable(diff) else diff
            row = {}
            for kind, p in (("same", ps), ("different", pd)):
                key = f"s1-{f}-{v}-{kind}"
                row[kind] = score(hits(rng, n, p), model=key)
                train[f"s1-train-{f}"]["models"][key] = {"ncm_trained": own}
            factors[f][v] = row
    return {"s1-probe": {"factors": factors}, **train}


def test_s1_statistic_by_hand(rng):
    same, diff = rng.random((5, 3)), rng.random((5, 3))
    want = (same - diff).mean(1) - np.mean([abs(same[:, a] - same[:, b]) for a, b in [(0, 1), (0, 2), (1, 2)]], 0)
    np.testing.assert_allclose(S.s1_excess_statistic(same, diff), want)


def test_s1_verdicts(rng):
    v = S.judge_s1(s1_results(rng, 0.8, 0.5))
    assert v.verdict == REPRODUCED, v.why
    assert len(v.criteria) == 10 + 3  # one gap per value, one excess per factor
    assert verdict(S.judge_s1(s1_results(rng, 0.5, 0.8))) == CONTRADICTED
    assert verdict(S.judge_s1(s1_results(rng, 0.62, 0.6))) == INCONCLUSIVE


def test_s1_control_factor_spread_and_no_invariance(rng):
    # every gap is positive, but the same models differ more between the factor's values than the gap
    spread = {"0.25": 0.3, "0.5": 0.6, "1": 0.9, "a": 0.3, "b": 0.6, "c": 0.9}
    spread |= {"subset": 0.3, "disjoint": 0.5, "same": 0.7, "superset": 0.9}
    r = s1_results(rng, lambda f, v: spread[v], lambda f, v: spread[v] - 0.1)
    v = S.judge_s1(r)
    assert v.verdict != REPRODUCED
    excess = [c for c in v.criteria if "mean within-pair gap" in c.name]
    assert all(c.interval.high < 0 for c in excess)
    # the control model in place of 'different': another model of the same transformations
    assert verdict(S.judge_s1(s1_results(rng, 0.7, 0.7))) != REPRODUCED


def test_s1_not_testable(rng):
    r = s1_results(rng, 0.8, 0.5)
    r["s1-train-size"]["models"]["s1-size-0.5-same"]["ncm_trained"] = 0.7
    v = S.judge_s1(r)
    assert v.verdict == NOT_TESTABLE and "≥ 0.9" in v.why and "s1-size-0.5-same 0.700" in v.why
    r = s1_results(rng, 0.8, 0.5)
    del r["s1-probe"]["factors"]["size"]["1"]
    v = S.judge_s1(r)
    assert v.verdict == NOT_TESTABLE and "≥ 3 values of size" in v.why
    r = s1_results(rng, 0.8, 0.5)
    del r["s1-probe"]["factors"]["arch"]["b"]["same"]["oof_correct"]
    v = S.judge_s1(r)
    assert v.verdict == NOT_TESTABLE and v.why.startswith("needs out-of-fold predictions")
    v = S.judge_s1(s1_results(rng, 0.8, 0.5) | {"s1-train-arch": {}})
    assert v.verdict == NOT_TESTABLE and "own-data accuracy ≥ 0.9: the training record of s1-arch-a-same" in v.why


# ---------------------------------------------------------------------------------------------- S2
def s2_results(rng, same: dict[str, float], diff: dict[str, float] | None, n=400) -> dict[str, Any]:
    acc = {"same": {k: score(hits(rng, n, p)) for k, p in same.items()}}
    if diff is not None:
        acc["different"] = {k: score(hits(rng, n, p)) for k, p in diff.items()}
    return {"s2-probe": {"accuracy": acc}}


def test_s2_contrast_by_hand(rng):
    a = [rng.random((3, 50)) for _ in range(4)]
    want = 0.5 * ((a[0].mean(1) - a[1].mean(1)) + (a[2].mean(1) - a[3].mean(1)))
    np.testing.assert_allclose(S.s2_contrast_statistic(*a), want)


def test_s2_verdicts(rng):
    same = {"all": 0.92, "transforms": 0.92, "objects": 0.5, "none": 0.5}
    diff = {"all": 0.5, "transforms": 0.5, "objects": 0.9, "none": 0.85}
    v = S.judge_s2(s2_results(rng, same, diff))
    assert v.verdict == REPRODUCED, v.why
    assert len(v.criteria) == 2  # D_all ≥ 0.9: the closeness part is judged
    # far below D_all: the closeness part contradicts
    v = S.judge_s2(s2_results(rng, same | {"transforms": 0.75}, diff))
    assert v.verdict == CONTRADICTED and "D_all" in v.why
    # D_all below 0.9: closeness not judged
    v = S.judge_s2(s2_results(rng, same | {"all": 0.85, "transforms": 0.7}, diff))
    assert len(v.criteria) == 1 and v.verdict == REPRODUCED
    rev = {"all": 0.85, "transforms": 0.5, "objects": 0.8, "none": 0.5}
    assert verdict(S.judge_s2(s2_results(rng, rev, {"all": 0.8, "none": 0.5}))) == CONTRADICTED
    flat = {"all": 0.7, "transforms": 0.62, "objects": 0.6, "none": 0.6}
    assert verdict(S.judge_s2(s2_results(rng, flat, {"all": 0.6, "none": 0.62}))) == INCONCLUSIVE


def test_s2_control_set_difficulty(rng):
    # T2 sets are harder for every model, whatever it was trained on: the naive comparison of the same model
    # on D_transforms and D_objects passes, the crossed contrast cancels the sets' difficulty
    same = {"all": 0.8, "transforms": 0.8, "objects": 0.5, "none": 0.5}
    diff = {"all": 0.8, "transforms": 0.8, "objects": 0.5, "none": 0.5}
    r = s2_results(rng, same, diff)
    sc = r["s2-probe"]["accuracy"]["same"]
    naive = bootstrap(
        lambda a, b: a.mean(1) - b.mean(1),
        [sc["transforms"]["oof_correct"], sc["objects"]["oof_correct"]],
        paired=False,
    )
    assert judge([S.Criterion("naive", naive, 0.05)]).verdict == REPRODUCED
    v = S.judge_s2(r)
    assert v.verdict != REPRODUCED
    assert v.criteria[0].interval.estimate == pytest.approx(0.0, abs=1e-12)


def test_s2_not_testable(rng):
    v = S.judge_s2(s2_results(rng, {"all": 0.9, "transforms": 0.9, "objects": 0.5, "none": 0.5}, None))
    assert v.verdict == NOT_TESTABLE and "crossed S2 model" in v.why
    # the current stage layout: the same model's scores only
    v = S.judge_s2({"s2-probe": {"scores": {"all": {"mean": 0.7, "fold_scores": [0.7] * 5}}}})
    assert v.verdict == NOT_TESTABLE and "crossed" in v.why


# ---------------------------------------------------------------------------------------------- S3
XY = ("C/C", "C+O/C", "C+O/O", "O/O")


def s3_results(rng, acc: dict[tuple[str, str], float], sens: dict[tuple[str, str], float], n=200, n_pairs=2000):
    """acc[(model, test set)], sens[(model, feature)]; cells not given: 0.5 accuracy, sensitivity 0.5."""
    table = {m: {t: score(hits(rng, n, acc.get((m, t), 0.5))) for t in XY} for m in XY}
    sp = {m: {f: pairs(rng, n_pairs, sens.get((m, f), 0.5)) for f in ("object", "base")} for m in XY}
    return {"s3-evaluate": {"accuracy": table, "sensitivity_pairs": sp}}


#: harmful invariance: each C+O model worse at the other label than the same-label model that never saw
#: the irrelevant feature, and less sensitive to it; the probed-label specialists far above both
HARM_ACC = {
    ("C/C", "C+O/O"): 0.4,
    ("C+O/C", "C+O/O"): 0.2,
    ("O/O", "C+O/O"): 0.9,
    ("O/O", "C+O/C"): 0.5,
    ("C+O/O", "C+O/C"): 0.3,
    ("C/C", "C+O/C"): 0.95,
}
HARM_SENS = {("C/C", "object"): 0.6, ("C+O/C", "object"): 0.3, ("O/O", "base"): 0.8, ("C+O/O", "base"): 0.4}


def test_s3_reads_the_same_label_comparison(rng):
    r = s3_results(rng, HARM_ACC, HARM_SENS)
    v = S.judge_s3(r)
    assert v.verdict == REPRODUCED, v.why
    acc = r["s3-evaluate"]["accuracy"]
    objects, base = v.criteria[0], v.criteria[1]
    assert objects.interval.estimate == pytest.approx(acc["C/C"]["C+O/O"]["mean"] - acc["C+O/C"]["C+O/O"]["mean"])
    assert base.interval.estimate == pytest.approx(acc["O/O"]["C+O/C"]["mean"] - acc["C+O/O"]["C+O/C"]["mean"])
    assert "(C/C) − (C+O/C)" in objects.name and "(O/O) − (C+O/O)" in base.name


def test_s3_contradicted_and_inconclusive(rng):
    worse = HARM_ACC | {("C/C", "C+O/O"): 0.2, ("C+O/C", "C+O/O"): 0.4}
    assert verdict(S.judge_s3(s3_results(rng, worse, HARM_SENS))) == CONTRADICTED
    close = HARM_ACC | {("C/C", "C+O/O"): 0.31, ("C+O/C", "C+O/O"): 0.3}
    assert verdict(S.judge_s3(s3_results(rng, close, HARM_SENS))) == INCONCLUSIVE


def test_s3_control_the_probed_label_model(rng):
    # no harmful invariance: the C+O model is as good at the other label as the same-label model that never
    # saw the irrelevant feature, and as sensitive to it; only the probed-label specialists are better
    no_harm_acc = {
        ("C/C", "C+O/O"): 0.2,
        ("C+O/C", "C+O/O"): 0.2,
        ("O/O", "C+O/O"): 0.9,
        ("O/O", "C+O/C"): 0.3,
        ("C+O/O", "C+O/C"): 0.3,
        ("C/C", "C+O/C"): 0.95,
    }
    no_harm_sens = {
        ("C/C", "object"): 0.3,
        ("C+O/C", "object"): 0.3,
        ("O/O", "object"): 0.9,
        ("O/O", "base"): 0.4,
        ("C+O/O", "base"): 0.4,
        ("C/C", "base"): 0.9,
    }
    r = s3_results(rng, no_harm_acc, no_harm_sens)
    assert verdict(S.judge_s3(r)) != REPRODUCED
    # the old comparison, the model trained on the probed label, would call it reproduced
    crit, pre = S.s3_criteria(r, {"objects": "O/O", "base": "C/C"})
    assert judge(crit, [pre]).verdict == REPRODUCED
    assert "(O/O) − (C+O/C)" in crit[0].name


def test_s3_not_testable(rng):
    v = S.judge_s3(s3_results(rng, HARM_ACC, HARM_SENS, n_pairs=500))
    assert v.verdict == NOT_TESTABLE and "≥ 2000 sensitivity pairs" in v.why
    r = s3_results(rng, HARM_ACC, HARM_SENS, n_pairs=50)
    del r["s3-evaluate"]["sensitivity_pairs"]
    v = S.judge_s3(r)
    assert v.verdict == NOT_TESTABLE and "per-pair sensitivity" in v.why


# ---------------------------------------------------------------------------------------------- S4
def s4_results(rng, a1, a0, b0, n=300, random=None):
    base = hits(rng, n, a0)
    rows_a = [
        {"value": 0.0, "model": "s4-alpha-0", "accuracy_O": score(base)},
        {"value": 0.5, "model": "s4-alpha-0.5", "accuracy_O": score(hits(rng, n, (a0 + a1) / 2))},
        {"value": 1.0, "model": "s4-alpha-1", "accuracy_O": score(hits(rng, n, a1))},
    ]
    rows_b = [
        {"value": 0.0, "model": "s4-beta-0", "accuracy_O": score(hits(rng, n, b0))},
        {"value": 0.5, "model": "s4-beta-0.5", "accuracy_O": score(hits(rng, n, (a0 + b0) / 2))},
        {"value": 1.0, "model": "s4-alpha-0", "accuracy_O": score(base)},  # β = 1 is α = 0
    ]
    out: dict[str, Any] = {"alpha": rows_a, "beta": rows_b}
    if random is not None:
        out["random"] = {"accuracy_O": score(hits(rng, n, random))}
    return {"s4-probe": out}


def test_s4_statistic_by_hand(rng):
    a = [rng.random((3, 40)) for _ in range(4)]
    m = [x.mean(1) for x in a]
    np.testing.assert_allclose(S.s4_statistic(*a), abs(m[0] - m[1]) - abs(m[2] - m[3]))


def test_s4_verdicts(rng):
    v = S.judge_s4(s4_results(rng, 0.9, 0.2, 0.25))
    assert v.verdict == REPRODUCED, v.why
    assert v.criteria[0].interval.estimate == pytest.approx(0.7 - 0.05)
    assert verdict(S.judge_s4(s4_results(rng, 0.3, 0.2, 0.9))) == CONTRADICTED
    assert verdict(S.judge_s4(s4_results(rng, 0.5, 0.2, 0.5))) == INCONCLUSIVE


def test_s4_control_random_network(rng):
    # a random network in place of every model: no relevance or availability effect, at the floor
    v = S.judge_s4(s4_results(rng, 0.1, 0.1, 0.1, random=0.1))
    assert v.verdict != REPRODUCED
    beside = S.s4_beside(s4_results(rng, 0.9, 0.2, 0.25, random=0.1))
    assert beside["spearman_alpha"] == pytest.approx(1.0)
    assert beside["first_beta"] == 0.5 and beside["drop_first_beta"].estimate > 0
    assert beside["random_floor"].estimate == pytest.approx(0.1)


def test_s4_not_testable(rng):
    r = s4_results(rng, 0.9, 0.2, 0.25)
    r["s4-probe"]["alpha"] = r["s4-probe"]["alpha"][:2]
    v = S.judge_s4(r)
    assert v.verdict == NOT_TESTABLE and "α = 1" in v.why


# ---------------------------------------------------------------------------------------------- S5
def s5_results(rng, native=0.9, other=0.3, oplus=0.85, circ=(0.8, 0.6), n=1000, own=0.9, with_unseen=True):
    unseen = {
        "T1": {
            "T1": score(hits(rng, n, native)),
            "T2": score(hits(rng, n, other)),
            "oplus": score(hits(rng, n, oplus)),
        },
        "T2": {
            "T2": score(hits(rng, n, native)),
            "T1": score(hits(rng, n, other)),
            "oplus": score(hits(rng, n, oplus)),
        },
    }
    by_model = {m: {d: unseen[d][m] for d in ("T1", "T2")} for m in ("T1", "T2", "oplus")}
    acc = {"circ": {"circ": score(hits(rng, 400, circ[0]))}, "oplus": {"circ": score(hits(rng, 400, circ[1]))}}
    probe: dict[str, Any] = {"accuracy": acc}
    if with_unseen:
        probe["unseen"] = by_model
    models = {f"s5-{k}": {"ncm_trained": own} for k in ("T1", "T2", "oplus", "circ")}
    return {"s5-probe": probe, "s5-train": {"models": models}}


def test_s5_transfer_by_hand(rng):
    a = [rng.random((3, 40)) for _ in range(3)]
    a[1] += 1.0  # native above other (where it is not, the ratio is guarded, and the seed not testable)
    m = [x.mean(1) for x in a]
    np.testing.assert_allclose(S.transfer_statistic(*a), (m[0] - m[2]) / (m[1] - m[2]))


def test_s5_verdicts(rng):
    v = S.judge_s5(s5_results(rng))
    assert v.verdict == REPRODUCED, v.why
    assert v.criteria[0].interval.estimate == pytest.approx((0.85 - 0.3) / (0.9 - 0.3))
    assert verdict(S.judge_s5(s5_results(rng, oplus=0.3))) == CONTRADICTED
    assert verdict(S.judge_s5(s5_results(rng, circ=(0.6, 0.7)))) == CONTRADICTED


def test_s5_control_no_transfer(rng):
    # what no transfer between classes gives: ⊕ halfway between the native and the other model
    v = S.judge_s5(s5_results(rng, oplus=(0.9 + 0.3) / 2))
    assert v.verdict == INCONCLUSIVE
    assert all(c.interval.estimate == pytest.approx(0.5) for c in v.criteria[:2])


def test_s5_not_testable(rng):
    v = S.judge_s5(s5_results(rng, with_unseen=False))
    assert v.verdict == NOT_TESTABLE and "never saw" in v.why
    v = S.judge_s5(s5_results(rng, own=0.7))
    assert v.verdict == NOT_TESTABLE and "≥ 0.8" in v.why
    v = S.judge_s5(s5_results(rng, native=0.5, other=0.5, oplus=0.5))
    assert v.verdict == NOT_TESTABLE and "native above other" in v.why


# ---------------------------------------------------------------------------------------------- S6
CATS = ["translate", "rotate", "scale", "hue+brightness+contrast", "blur"]
HARD = {"translate", "rotate", "hue+brightness+contrast"}


def s6_results(rng, native, off, ratio, untrained_acc, untrained_ratio, n=200, cats=CATS):
    """native[c], off(m, c) accuracy of model m on column c, ratio(m, c), the untrained model's per column."""
    models = [*cats, "none"]
    acc = {m: {c: score(hits(rng, n, native[c] if m == c else off(m, c))) for c in cats} for m in models}
    acc["untrained"] = {c: score(hits(rng, n, untrained_acc[c])) for c in cats}
    dr = {m: {c: ratio(m, c) for c in cats} for m in models}
    dr["untrained"] = {c: untrained_ratio[c] for c in cats}
    return {"s6-probe": {"categories": list(cats), "accuracy": acc, "distance_ratio": dr}}


def _off(level_hard, level_easy):
    """Off-diagonal accuracy: lower on the hard columns; models spread apart within a column."""
    rank = {m: k for k, m in enumerate([*CATS, "none"])}
    return lambda m, c: (level_hard if c in HARD else level_easy) - 0.06 * rank[m]


U_ACC = {c: 0.2 + 0.15 * k for k, c in enumerate(CATS)}
U_RATIO_ANTI = {c: 2.0 - 0.2 * k for k, c in enumerate(CATS)}  # falls where the untrained accuracy rises


def test_s6_verdicts(rng):
    native = dict.fromkeys(CATS, 0.95)
    off = _off(0.6, 0.92)
    ratio = lambda m, c: 3 * off(m, c) if m != c else 3 * native[c]  # noqa: E731
    v = S.judge_s6(s6_results(rng, native, off, ratio, U_ACC, U_RATIO_ANTI))
    assert v.verdict == REPRODUCED, v.why
    assert v.criteria[0].interval.estimate == 1.0
    assert v.criteria[2].control.estimate == pytest.approx(-1.0)
    # the hard categories the easiest: contradicted
    inv = _off(0.92, 0.6)
    v = S.judge_s6(s6_results(rng, native, inv, lambda m, c: 3 * inv(m, c), U_ACC, U_RATIO_ANTI))
    assert v.verdict == CONTRADICTED and "three lowest" in v.why
    # distance ratio the same for every model of a column: ρ̄ = 0 exactly, not shown either way
    v = S.judge_s6(s6_results(rng, native, off, lambda m, c: 1.0 + CATS.index(c), U_ACC, U_RATIO_ANTI))
    assert v.verdict == INCONCLUSIVE and v.criteria[1].interval.estimate == 0.0


def test_s6_control_normalisation_and_untrained(rng):
    # the hard columns' data are harder for every model, the native one too: raw column means single them out,
    # normalised by the native model they are not lower
    native = {c: 0.5 if c in HARD else 0.92 for c in CATS}
    off = lambda m, c: native[c] * 0.94  # noqa: E731
    r = s6_results(rng, native, off, lambda m, c: 3 * off(m, c), U_ACC, U_RATIO_ANTI)
    acc = r["s6-probe"]["accuracy"]
    raw = {c: np.mean([acc[m][c]["mean"] for m in CATS if m != c]) for c in CATS}
    assert set(sorted(raw, key=raw.get)[:3]) == HARD
    v = S.judge_s6(r)
    assert v.criteria[0].verdict != REPRODUCED and v.verdict != REPRODUCED
    # the untrained network's distance ratio tracks its own accuracy as well: the relation is no evidence
    native = dict.fromkeys(CATS, 0.95)
    off = _off(0.6, 0.92)
    u_ratio = {c: 1.0 + U_ACC[c] for c in CATS}
    v = S.judge_s6(s6_results(rng, native, off, lambda m, c: 3 * off(m, c), U_ACC, u_ratio))
    assert v.criteria[0].verdict == REPRODUCED and v.criteria[1].verdict == REPRODUCED
    assert v.criteria[2].verdict != REPRODUCED and v.verdict != REPRODUCED


def test_s6_not_testable(rng):
    native = dict.fromkeys(CATS, 0.95)
    off = _off(0.6, 0.92)
    r = s6_results(rng, native, off, lambda m, c: 3 * off(m, c), U_ACC, U_RATIO_ANTI)
    del r["s6-probe"]["accuracy"]["untrained"]
    v = S.judge_s6(r)
    assert v.verdict == NOT_TESTABLE and "untrained" in v.why
    cats = [c for c in CATS if c != "rotate"]
    r = s6_results(rng, native, off, lambda m, c: 1.0, U_ACC, U_RATIO_ANTI, cats=cats)
    v = S.judge_s6(r)
    assert v.verdict == NOT_TESTABLE and "rotate" in v.why


# ---------------------------------------------------------------------------------------------- S7
S7_CATS = ["a", "b", "c"]


def s7_results(rng, own, other, none, untrained, n=2000, cats=S7_CATS):
    """Sensitivity of each model to each category: ``own`` on its own column, ``other`` for the other
    category models, ``none``, ``untrained``."""
    own_of = own if callable(own) else (lambda c: own)
    block_of = lambda: (
        {  # noqa: E731
            m: {c: pairs(rng, n, own_of(c) if m == c else other) for c in cats} for m in cats
        }
        | {"none": {c: pairs(rng, n, none) for c in cats}, "untrained": {c: pairs(rng, n, untrained) for c in cats}}
    )
    sp = {k: {lv: block_of() for lv in S.S7_LEVELS} for k in S.S7_KINDS}
    return {"s7-sensitivity": {"categories": list(cats), "sensitivity_pairs": sp, "n": n}}


def test_s7_statistics_by_hand(rng):
    means = rng.random((4, 10)) + 0.5  # own, 2 others, none, untrained: num then den
    s = means[:, :5] / means[:, 5:]
    want = np.stack([np.minimum(s[:, 1], s[:, 2]) - s[:, 0], s[:, 3] - s[:, 0], s[:, 4] - s[:, 0]], axis=1)
    np.testing.assert_allclose(S.s7_statistics(means), want)


def test_s7_verdicts(rng):
    v = S.judge_s7(s7_results(rng, 0.3, 0.6, 0.7, 0.9))
    assert v.verdict == REPRODUCED, v.why
    assert len(v.criteria) == 6 and all(c.interval.estimate == 1.0 for c in v.criteria)
    v = S.judge_s7(s7_results(rng, 0.9, 0.3, 0.3, 0.3))
    assert v.verdict == CONTRADICTED
    # own = none in every column (the same distances): nothing shown either way
    r = s7_results(rng, 0.5, 0.7, 0.5, 0.9)
    for levels in r["s7-sensitivity"]["sensitivity_pairs"].values():
        for block in levels.values():
            for c in S7_CATS:
                block["none"][c] = block[c][c]
    v = S.judge_s7(r)
    assert v.verdict == INCONCLUSIVE and v.criteria[0].interval.high == 1.0


def test_s7_share_of_columns(rng):
    cats = ["a", "b", "c", "d"]
    # one column of four (25 %) where the own model is another's twin: 3 of 4 shown, reproduced at 75 %
    r = s7_results(rng, 0.3, 0.6, 0.7, 0.9, cats=cats)
    for levels in r["s7-sensitivity"]["sensitivity_pairs"].values():
        for block in levels.values():
            block["d"]["d"] = block["a"]["d"]
    v = S.judge_s7(r)
    assert v.verdict == REPRODUCED and v.criteria[0].interval.estimate == 0.75


def test_s7_control_untrained(rng):
    # a model no more invariant to its own category than an untrained network (the same distances): not reproduced
    r = s7_results(rng, 0.5, 0.7, 0.7, 0.5)
    for levels in r["s7-sensitivity"]["sensitivity_pairs"].values():
        for block in levels.values():
            for c in S7_CATS:
                block["untrained"][c] = block[c][c]
    v = S.judge_s7(r)
    assert v.verdict != REPRODUCED
    assert all(c.interval.estimate == 0.0 for c in v.criteria)


def test_s7_not_testable(rng):
    v = S.judge_s7(s7_results(rng, 0.3, 0.6, 0.7, 0.9, n=200))
    assert v.verdict == NOT_TESTABLE and "≥ 2000 sensitivity pairs" in v.why
    r = s7_results(rng, 0.3, 0.6, 0.7, 0.9, n=50)
    del r["s7-sensitivity"]["sensitivity_pairs"]["random"]
    v = S.judge_s7(r)
    assert v.verdict == NOT_TESTABLE and "random models" in v.why


# ---------------------------------------------------------------------------------------------- S8
S8_SIZES = [1, 2, 3]
S8_SETS = {"1": ["rotate"], "2": ["rotate", "vflip"], "3": ["rotate", "vflip", "brightness"]}


def s8_results(rng, cell, n=400, own=0.95, sets=S8_SETS):
    """``cell(i, j, native_correct)`` -> correctness of T_i's model on T_j."""
    acc: dict[str, dict[str, Any]] = {str(i): {} for i in S8_SIZES}
    for j in S8_SIZES:
        native = hits(rng, n, 0.9)
        for i in S8_SIZES:
            acc[str(i)][str(j)] = score(native if i == j else cell(i, j, native))
    models = {str(k): f"s8-first-{k}" for k in S8_SIZES}
    train = {"models": {f"s8-first-{k}": {"ncm_trained": own} for k in S8_SIZES}}
    return {"s8-probe": {"sizes": S8_SIZES, "sets": sets, "models": models, "accuracy": acc}, "s8-train": train}


def test_s8_verdicts(rng):
    good = lambda i, j, nat: flip(rng, nat, 0.02) if i > j else hits(rng, nat.size, 0.6)  # noqa: E731
    v = S.judge_s8(s8_results(rng, good))
    assert v.verdict == REPRODUCED, v.why
    assert len(v.criteria) == 6
    sup = [c for c in v.criteria if "⊃" in c.name]
    assert all(c.minimum == c.boundary == -0.03 for c in sup)
    hurt = lambda i, j, nat: hits(rng, nat.size, 0.6)  # noqa: E731
    assert verdict(S.judge_s8(s8_results(rng, hurt))) == CONTRADICTED
    mild = lambda i, j, nat: flip(rng, nat, 0.02) if i > j else hits(rng, nat.size, 0.88)  # noqa: E731
    assert verdict(S.judge_s8(s8_results(rng, mild))) == INCONCLUSIVE


def test_s8_control_same_model_everywhere(rng):
    # every row the same model (the native one): the superset part passes trivially, the subset part cannot
    v = S.judge_s8(s8_results(rng, lambda i, j, nat: nat.copy()))
    assert v.verdict != REPRODUCED
    assert all(c.verdict == REPRODUCED for c in v.criteria if "⊃" in c.name)


def test_s8_not_testable(rng):
    good = lambda i, j, nat: flip(rng, nat, 0.02) if i > j else hits(rng, nat.size, 0.6)  # noqa: E731
    v = S.judge_s8(s8_results(rng, good, own=0.8))
    assert v.verdict == NOT_TESTABLE and "≥ 0.9" in v.why
    v = S.judge_s8(s8_results(rng, good, sets=S8_SETS | {"3": ["rotate", "brightness"]}))
    assert v.verdict == NOT_TESTABLE and "nested" in v.why
    # T3 adds hflip to {rotate, vflip}: a full rotation with one flip is the other flip, so T3 adds no invariance
    v = S.judge_s8(s8_results(rng, good, sets=S8_SETS | {"3": ["rotate", "vflip", "hflip"]}))
    assert v.verdict == NOT_TESTABLE and "not implied" in v.why, v.why
    pre = next(p for p in v.preconditions if "implied" in p.name)
    assert pre.detail == "T3: hflip"

    r = s8_results(rng, good)
    del r["s8-probe"]["accuracy"]["2"]["3"]["oof_correct"]
    v = S.judge_s8(r)
    assert v.verdict == NOT_TESTABLE and "T2's model on T3" in v.why


def test_implied_types_of_the_recipe():
    from invfast.synthetic.recipe import implied_types

    assert implied_types(["rotate", "hflip", "vflip"]) == ["hflip", "vflip"]
    assert implied_types(["rotate", "hflip"]) == [] and implied_types(["hflip", "vflip"]) == []
    assert implied_types(["rotate", "vflip", "hue"]) == []


def test_every_rule_is_not_testable_on_the_0_4_stage_layout():
    """The 0.4 stages (seed 0 of its `--paper speicher` example, commit 9e6f862) kept fold scores, not per-unit
    numbers: nothing is decided from them."""
    import gzip
    import json
    import os

    path = os.path.join(os.path.dirname(__file__), "data", "stages_0.4_speicher_seed0.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        stages = json.load(f)
    for k in range(1, 9):
        v = getattr(S, f"judge_s{k}")(stages)
        assert v.verdict == NOT_TESTABLE and v.why.startswith("needs"), (k, v.why)


def test_presets_meet_s3s_pair_precondition_and_say_where_s7_does_not():
    """S3 needs >= MIN_PAIRS sensitivity pairs: the library default and quick give them; S7's pairs are their own
    field (quick keeps them below the precondition: its cost), 0 meaning 'as sensitivity_n'."""
    from invfast.reproduce.config import ReproduceConfig
    from invfast.reproduce.presets import preset
    from invfast.reproduce.rules.speicher import MIN_PAIRS

    assert (
        ReproduceConfig().speicher.sensitivity_n >= MIN_PAIRS and ReproduceConfig().speicher.category_sensitivity_n == 0
    )
    quick = preset("quick")
    assert quick.speicher.sensitivity_n >= MIN_PAIRS and 2 <= quick.speicher.category_sensitivity_n < MIN_PAIRS
    with pytest.raises(ValueError, match="category_sensitivity_n must be 0"):
        ReproduceConfig().with_values({"speicher.category_sensitivity_n": 1}).validate()
