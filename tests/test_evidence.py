"""invfast.evidence: intervals against scipy on fresh random data, and the verdict rules of docs/findings.md."""

import numpy as np
import pytest
from scipy import stats as st

from invfast.evidence import (
    CONTRADICTED,
    INCONCLUSIVE,
    MIXED,
    NOT_TESTABLE,
    REPRODUCED,
    Criterion,
    Interval,
    Precondition,
    accuracy_statistic,
    bootstrap,
    difference_interval,
    judge,
    judge_over_seeds,
    mean_interval,
    not_testable,
    r2_statistic,
    t_interval,
)


def _scipy(stat, data, paired, seed, n=2000):
    res = st.bootstrap(
        data, stat, paired=paired, vectorized=True, n_resamples=n, method="percentile", rng=np.random.default_rng(seed)
    )
    return res.confidence_interval.low, res.confidence_interval.high


def test_mean_interval_equals_scipy_percentile_bootstrap(rng):
    x = rng.normal(0.3, 1.0, size=int(rng.integers(40, 400)))
    seed = int(rng.integers(2**31))
    iv = mean_interval(x, seed=seed)
    lo, hi = _scipy(lambda a, axis: a.mean(axis), (x,), False, seed)
    assert iv.low == pytest.approx(lo, abs=1e-12) and iv.high == pytest.approx(hi, abs=1e-12)
    assert iv.estimate == pytest.approx(x.mean()) and iv.n == x.size and iv.method == "bootstrap"


def test_paired_difference_equals_scipy_paired(rng):
    n = int(rng.integers(50, 300))
    a = rng.normal(size=n)
    b = a * 0.8 + rng.normal(0.1, 0.3, size=n)
    seed = int(rng.integers(2**31))
    iv = difference_interval(a, b, seed=seed)
    lo, hi = _scipy(lambda x, y, axis: x.mean(axis) - y.mean(axis), (a, b), True, seed)
    assert (iv.low, iv.high) == pytest.approx((lo, hi), abs=1e-12)


def test_unpaired_difference_equals_scipy_independent(rng):
    a, b = rng.normal(size=int(rng.integers(30, 200))), rng.normal(0.5, 2, size=int(rng.integers(30, 200)))
    seed = int(rng.integers(2**31))
    iv = difference_interval(a, b, paired=False, seed=seed)
    lo, hi = _scipy(lambda x, y, axis: x.mean(axis) - y.mean(axis), (a, b), False, seed)
    assert (iv.low, iv.high) == pytest.approx((lo, hi), abs=1e-12)


def test_pairing_narrows_the_interval_of_correlated_scores(rng):
    a = rng.normal(size=500)
    b = a + rng.normal(0.05, 0.05, size=500)
    paired = difference_interval(a, b, seed=1)
    unpaired = difference_interval(a, b, paired=False, seed=1)
    assert paired.high - paired.low < 0.2 * (unpaired.high - unpaired.low)
    assert paired.below(0) and not unpaired.below(0)


def test_accuracy_and_r2_statistics_match_sklearn_on_the_observed_sample(rng):
    from sklearn.metrics import accuracy_score, r2_score

    y = rng.integers(0, 5, 300)
    pred = np.where(rng.random(300) < 0.6, y, rng.integers(0, 5, 300))
    iv = bootstrap(accuracy_statistic, [(pred == y).astype(float)], seed=0)
    assert iv.estimate == pytest.approx(accuracy_score(y, pred))
    t = rng.normal(size=(300, 3))
    p = t + rng.normal(scale=0.7, size=(300, 3))
    iv = bootstrap(r2_statistic, [t, p], seed=0)
    assert iv.estimate == pytest.approx(r2_score(t, p))
    assert iv.low < iv.estimate < iv.high


@pytest.mark.statistical
def test_bootstrap_coverage_is_near_nominal(rng):
    # 200 fresh normal samples of 60: the 95 % interval of the mean covers the truth in 88-99 % of them
    cover = 0
    for _ in range(200):
        iv = mean_interval(rng.normal(1.0, 2.0, 60), n_resamples=1000, seed=int(rng.integers(2**31)))
        cover += iv.low <= 1.0 <= iv.high
    assert 0.88 <= cover / 200 <= 0.99


def test_t_interval_equals_scipy(rng):
    v = rng.normal(size=int(rng.integers(2, 9)))
    iv = t_interval(v)
    lo, hi = st.t.interval(0.95, v.size - 1, loc=v.mean(), scale=st.sem(v))
    assert (iv.low, iv.high) == pytest.approx((lo, hi), rel=1e-12) and iv.method == "t" and iv.n == v.size


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: mean_interval([1.0]), "at least 2 units"),
        (lambda: mean_interval([1.0, np.nan, 2.0]), "NaN"),
        (lambda: mean_interval([1.0, 2.0], n_resamples=10), "at least 1000"),
        (lambda: difference_interval([1.0, 2.0], [1.0, 2.0, 3.0]), "same number of units"),
        (lambda: mean_interval([1.0, 2.0], confidence=1.5), "confidence"),
        (lambda: t_interval([1.0]), "at least 2 values"),
        (lambda: Interval(0.0, 1.0, -1.0), "above high"),
        (lambda: Criterion("x", Interval.exact(1.0), minimum=-1.0, boundary=0.0), "below its boundary"),
        (lambda: judge([]), "at least one criterion"),
        (lambda: judge_over_seeds([0, 1], [not_testable("x")]), "one verdict per seed"),
    ],
)
def test_bad_input_raises_one_clear_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def _iv(est, lo, hi):
    return Interval(est, lo, hi)


@pytest.mark.parametrize(
    ("interval", "minimum", "boundary", "expected"),
    [
        (_iv(0.2, 0.1, 0.3), 0.1, 0.0, REPRODUCED),
        (_iv(0.05, 0.01, 0.09), 0.1, 0.0, INCONCLUSIVE),  # significant but below the minimum effect
        (_iv(0.2, -0.01, 0.4), 0.1, 0.0, INCONCLUSIVE),  # large but the interval reaches 0
        (_iv(-0.2, -0.3, -0.1), 0.1, 0.0, CONTRADICTED),
        (_iv(-0.01, -0.025, 0.01), -0.03, -0.03, REPRODUCED),  # non-inferior within a 0.03 margin
        (_iv(-0.05, -0.07, -0.04), -0.03, -0.03, CONTRADICTED),  # worse by more than the margin
        (_iv(-0.02, -0.04, 0.0), -0.03, -0.03, INCONCLUSIVE),
        (Interval.exact(0.8), 0.75, 0.0, REPRODUCED),
        (Interval.exact(0.75), 0.75, 0.75, REPRODUCED),  # a share that meets its bound exactly
        (Interval.exact(-0.5), 0.75, 0.0, CONTRADICTED),
    ],
)
def test_criterion_verdicts(interval, minimum, boundary, expected):
    assert Criterion("c", interval, minimum, boundary).verdict == expected


def test_multi_part_rule_needs_every_part_and_a_failed_precondition_is_not_testable():
    good, weak, bad = (
        Criterion("a", _iv(0.3, 0.2, 0.4), 0.1),
        Criterion("b", _iv(0.3, -0.1, 0.6), 0.1),
        Criterion("c", _iv(-0.3, -0.4, -0.2), 0.1),
    )
    assert judge([good, good]).verdict == REPRODUCED
    assert judge([good, weak]).verdict == INCONCLUSIVE
    assert judge([good, weak, bad]).verdict == CONTRADICTED
    v = judge([good], [Precondition("Default learned", False, "1.04x < 1.2x")])
    assert v.verdict == NOT_TESTABLE and "Default learned: 1.04x" in v.why
    assert judge([good], [Precondition("ok", True)]).verdict == REPRODUCED


def _seed(word, est=0.2):
    if word == NOT_TESTABLE:
        return not_testable("needs X")
    iv = {REPRODUCED: _iv(est, 0.1, 0.3), CONTRADICTED: _iv(-est, -0.3, -0.1), INCONCLUSIVE: _iv(0.05, -0.1, 0.2)}
    return judge([Criterion("effect", iv[word], 0.1)])


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ((REPRODUCED,) * 3, REPRODUCED),
        ((REPRODUCED, REPRODUCED), INCONCLUSIVE),  # fewer than three testable seeds never reproduce
        ((REPRODUCED, REPRODUCED, NOT_TESTABLE), INCONCLUSIVE),
        ((REPRODUCED, NOT_TESTABLE, NOT_TESTABLE), NOT_TESTABLE),
        ((CONTRADICTED, CONTRADICTED, REPRODUCED), CONTRADICTED),
        ((REPRODUCED, CONTRADICTED, INCONCLUSIVE), MIXED),
        ((REPRODUCED, REPRODUCED, INCONCLUSIVE), INCONCLUSIVE),
        ((INCONCLUSIVE,) * 3, INCONCLUSIVE),
    ],
)
def test_over_seed_verdicts(words, expected):
    ov = judge_over_seeds(list(range(len(words))), [_seed(w) for w in words])
    assert ov.verdict == expected
    assert sum(ov.counts.values()) == len(words)
    assert ov.label.startswith(expected) and f"of {len(words)} seeds" in ov.label


def test_over_seed_effect_is_the_t_interval_of_the_testable_seeds():
    verdicts = [_seed(REPRODUCED, 0.2), _seed(REPRODUCED, 0.4), _seed(NOT_TESTABLE), _seed(REPRODUCED, 0.3)]
    ov = judge_over_seeds([0, 1, 2, 3], verdicts)
    ref = t_interval([0.2, 0.4, 0.3])
    assert ov.effects["effect"] == ref and ov.label == "reproduced, 3 of 4 seeds"


def test_verdicts_round_trip_through_json():
    import json

    v = judge([Criterion("a", _iv(0.3, 0.2, 0.4), 0.1, paper=0.35, control=_iv(0.0, -0.1, 0.1))])
    from invfast.evidence import SeedVerdict

    assert SeedVerdict.from_dict(json.loads(json.dumps(v.to_dict()))) == v


def test_a_criterion_decided_on_its_estimate_reports_the_interval_but_does_not_require_it():
    wide = Interval(0.1, -0.2, 0.4)
    assert Criterion("in range", wide, 0.0).verdict == INCONCLUSIVE
    assert Criterion("in range", wide, 0.0, on_estimate=True).verdict == REPRODUCED
    assert Criterion("in range", Interval(-0.05, -0.3, 0.2), 0.0, on_estimate=True).verdict == CONTRADICTED
    c = Criterion("in range", wide, 0.0, on_estimate=True)
    assert Criterion.from_dict(c.to_dict()) == c
