"""The verdict rules of Ericsson et al. (E1–E5, SPEC §5.3) on stage results built here: each rule reproduces,
is contradicted, is inconclusive and is not testable where it should, its control does not reproduce, and its
statistics agree with numpy / scipy / scikit-learn on the same arrays."""

import warnings

import numpy as np
import pytest
from scipy import stats as st
from sklearn.metrics import r2_score

from invfast.evidence import (
    CONTRADICTED,
    INCONCLUSIVE,
    NOT_TESTABLE,
    REPRODUCED,
    accuracy_statistic,
    bootstrap,
    not_testable,
    r2_statistic,
)
from invfast.reproduce.rules import ericsson as E
from invfast.reproduce.rules.common import Missing, r2_difference, seed_of

SPATIAL_T = ["crop", "hflip", "vflip", "scale", "shear", "rotation", "translation", "deform"]
APPEARANCE_T = [
    "grayscale",
    "brightness",
    "contrast",
    "saturation",
    "hue",
    "blur",
    "sharpness",
    "equalize",
    "posterize",
    "invert",
]
FAMILIES = {**{t: "spatial" for t in SPATIAL_T}, **{t: "appearance" for t in APPEARANCE_T}}


def verdict(rule, results):
    """The rule as the caller applies it (:meth:`invfast.reproduce.finding.Finding.verdict`)."""
    try:
        return rule(results)
    except Missing as e:
        return not_testable(f"needs {e.args[0]}")


def budgets(steps=(1000, 1000, 1000)):
    return {f"pretrain-{p}": {"steps": s} for p, s in zip(("default", "spatial", "appearance"), steps)}


def family_values(gen, level, n, sd, offsets, none_every=0):
    """transform -> [n] per-image cosines around ``level`` (spatial, appearance) plus each transform's offset."""
    out = {}
    for t, fam in FAMILIES.items():
        v = (level[0] if fam == "spatial" else level[1]) + offsets[t] + gen.normal(0.0, sd, n)
        vals = [float(x) for x in v]
        if none_every and t in ("hflip", "hue"):  # undefined for some images: skipped in the family mean
            vals[::none_every] = [None] * len(vals[::none_every])
        out[t] = vals
    return out


# ---------------------------------------------------------------------------------------------- E1
E1_GOOD = {"Random": (0.05, 0.50), "Default": (0.60, 0.78), "Spatial": (0.70, 0.50), "Appearance": (0.35, 0.88)}


def e1_results(gen, levels=E1_GOOD, n=200, sd=0.15, drop=(), steps=(1000, 1000, 1000)):
    offsets = {t: float(gen.normal(0.0, 0.05)) for t in FAMILIES}
    per = {m: family_values(gen, lv, n, sd, offsets, none_every=7 if m == "Spatial" else 0) for m, lv in levels.items()}
    fam = {t: f for t, f in FAMILIES.items() if t not in drop}
    per = {m: {t: v for t, v in d.items() if t in fam} for m, d in per.items()}
    return {"measure": {"families": fam, "per_image_cosine": per, "grid_side": 32}, **budgets(steps)}


def _family(results, model, family):
    per = results["measure"]["per_image_cosine"][model]
    cols = [t for t, f in results["measure"]["families"].items() if f == family]
    v = np.array([[np.nan if x is None else x for x in per[t]] for t in cols], dtype=float).T
    return np.nanmean(v, axis=1)


def test_family_per_image_is_nanmean(rng):
    v = rng.normal(size=(30, 5))
    v[rng.random((30, 5)) < 0.3] = np.nan
    v[0, :3] = np.nan
    fams = ["spatial", "spatial", "spatial", "appearance", "appearance"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nanmean of an all-NaN row
        want = np.nanmean(v[:, :3], axis=1)
    np.testing.assert_allclose(E.family_per_image(v, fams, "spatial"), want, equal_nan=True)
    assert np.isnan(E.family_per_image(v, fams, "spatial")[0])


def test_e1_reproduced_and_statistics_match_numpy_and_scipy(rng):
    res = e1_results(rng)
    v = E.judge_e1(res)
    assert v.verdict == REPRODUCED, v.why
    crit = {c.name: c for c in v.criteria}
    S = {f: _family(res, "Spatial", f) for f in ("spatial", "appearance")}
    A = {f: _family(res, "Appearance", f) for f in ("spatial", "appearance")}
    D = {f: _family(res, "Default", f) for f in ("spatial", "appearance")}
    d_spa = crit["Δ_spa = spatial(Spatial) − spatial(Appearance)"]
    assert d_spa.interval.estimate == pytest.approx(np.mean(S["spatial"] - A["spatial"]))
    assert d_spa.paper == 0.35 and d_spa.minimum == 0.10
    ci = st.bootstrap(
        (S["spatial"], A["spatial"]),
        lambda x, y, axis: x.mean(axis) - y.mean(axis),
        paired=True,
        vectorized=True,
        n_resamples=2000,
        method="percentile",
        rng=np.random.default_rng(seed_of("E1", "Δ_spa")),
    ).confidence_interval
    assert d_spa.interval.low == pytest.approx(ci.low) and d_spa.interval.high == pytest.approx(ci.high)
    pos_spa = (D["spatial"].mean() - A["spatial"].mean()) / (S["spatial"].mean() - A["spatial"].mean())
    pos_app = (D["appearance"].mean() - S["appearance"].mean()) / (A["appearance"].mean() - S["appearance"].mean())
    low_spa = next(c for c in v.criteria if c.name.startswith("Default's position on spatial"))
    high_app = next(c for c in v.criteria if c.name.startswith("1.2 − Default's position on appearance"))
    assert low_spa.interval.estimate == pytest.approx(pos_spa - 0.2)
    assert high_app.interval.estimate == pytest.approx(1.2 - pos_app)
    assert 0.6 < pos_spa < 0.85 and 0.6 < pos_app < 0.85
    assert low_spa.paper == pytest.approx(0.52) and high_app.paper == pytest.approx(0.47)
    assert len(v.criteria) == 6 and all(p.met for p in v.preconditions)


def test_e1_contradicted_when_the_specialists_swap(rng):
    levels = {**E1_GOOD, "Spatial": (0.35, 0.88), "Appearance": (0.70, 0.50)}
    v = E.judge_e1(e1_results(rng, levels))
    assert v.verdict == CONTRADICTED
    assert "Δ_spa" in v.why and "Δ_app" in v.why


def test_e1_contradicted_when_default_is_outside_the_range(rng):
    levels = {**E1_GOOD, "Default": (0.25, 0.78)}  # below the Appearance model on spatial transforms
    v = E.judge_e1(e1_results(rng, levels))
    assert v.verdict == CONTRADICTED and "position on spatial" in v.why


def test_e1_inconclusive_below_the_minimum_effect(rng):
    levels = {**E1_GOOD, "Default": (0.43, 0.78), "Spatial": (0.45, 0.50), "Appearance": (0.40, 0.88)}
    v = E.judge_e1(e1_results(rng, levels))
    assert v.verdict == INCONCLUSIVE
    d = v.criteria[0]
    assert d.interval.low > 0 and d.interval.estimate < 0.10 and "Δ_spa" in v.why


def test_e1_not_testable(rng):
    res = e1_results(rng)
    del res["measure"]["per_image_cosine"]
    v = verdict(E.judge_e1, res)
    assert v.verdict == NOT_TESTABLE and "per-image invariance" in v.why
    v = E.judge_e1(e1_results(rng, n=50))
    assert v.verdict == NOT_TESTABLE and "96 measurement images" in v.why
    v = E.judge_e1(e1_results(rng, drop=("deform", "invert")))
    assert v.verdict == NOT_TESTABLE and "18 test transforms" in v.why
    v = E.judge_e1(e1_results(rng, steps=(1000, 2000, 1000)))
    assert v.verdict == NOT_TESTABLE and "equal budgets" in v.why
    unscaled = e1_results(rng)
    del unscaled["measure"]["grid_side"]  # a measurement made with the 224-px grids at 32 px
    v = E.judge_e1(unscaled)
    assert v.verdict == NOT_TESTABLE and "grids scaled to the image" in v.why


def test_e1_control_random_networks_do_not_reproduce(rng):
    """The rule applied to three models with a random network's invariance profile."""
    r = E1_GOOD["Random"]
    v = E.judge_e1(e1_results(rng, {"Random": r, "Default": r, "Spatial": r, "Appearance": r}))
    assert v.verdict != REPRODUCED


# ---------------------------------------------------------------------------------------------- E2 / E3 data
def exact_correct(gen, acc, n):
    c = np.zeros(n)
    c[: int(round(acc * n))] = 1.0
    return gen.permutation(c)


def exact_prediction(gen, y, r2):
    """y + c·e with c per target so that R² of the prediction is exactly ``r2`` on every target."""
    e = gen.normal(size=y.shape)
    ss_tot = ((y - y.mean(0)) ** 2).sum(0)
    c = np.sqrt((1.0 - r2) * ss_tot / (e**2).sum(0))
    return y + c * e


TARGETS = {"position": 2, "rotation": 2, "colour": 3}


def probes_results(gen, table, n=1000, n_rotation=1200, probe="kernel ridge"):
    """results['probes'] from task -> model -> score (accuracy for identity, R² otherwise)."""
    out = {}
    for task, scores in table.items():
        m = n_rotation if task == "rotation" else n
        if task == "identity":
            rows = {k: {"mean": a, "oof_correct": exact_correct(gen, a, m).tolist()} for k, a in scores.items()}
            out[task] = {"kind": "classification", "scores": rows}
        else:
            y = gen.normal(size=(m, TARGETS[task]))
            rows = {k: {"mean": r, "oof_prediction": exact_prediction(gen, y, r).tolist()} for k, r in scores.items()}
            out[task] = {"kind": "regression", "probe": probe, "y": y.tolist(), "scores": rows}
    # the kernel-ridge tasks are the probes-kernel stage's (the same dicts: a test that edits one edits both)
    kernel = {t: v for t, v in out.items() if v.get("probe") == "kernel ridge"}
    return {"probes": out, **({"probes-kernel": kernel} if kernel else {}), **budgets()}


# ---------------------------------------------------------------------------------------------- E2
E2_GOOD = {
    "identity": {"Random": 0.2, "Default": 0.80, "Spatial": 0.78, "Appearance": 0.70},
    "position": {"Random": 0.0, "Default": 0.35, "Spatial": 0.30, "Appearance": 0.45},
    "rotation": {"Random": 0.0, "Default": 0.25, "Spatial": 0.20, "Appearance": 0.40},
    "colour": {"Random": 0.1, "Default": 0.50, "Spatial": 0.70, "Appearance": 0.30},
}


def with_scores(table, **changes):
    out = {t: dict(v) for t, v in table.items()}
    for key, value in changes.items():
        task, model = key.split("__")
        out[task][model] = value
    return out


def test_e2_reproduced_and_matches_sklearn(rng):
    res = probes_results(rng, E2_GOOD)
    v = E.judge_e2(res)
    assert v.verdict == REPRODUCED, v.why
    crit = {c.name.split(":")[0]: c for c in v.criteria}
    p = res["probes"]
    y = np.array(p["colour"]["y"])
    want = r2_score(y, np.array(p["colour"]["scores"]["Spatial"]["oof_prediction"])) - r2_score(
        y, np.array(p["colour"]["scores"]["Appearance"]["oof_prediction"])
    )
    assert crit["colour"].interval.estimate == pytest.approx(want) == pytest.approx(0.40)
    assert crit["position"].paper == 0.06 and crit["rotation"].paper == 0.16 and crit["colour"].paper == 0.37
    acc = {m: np.mean(p["identity"]["scores"][m]["oof_correct"]) for m in ("Default", "Spatial", "Appearance")}
    assert crit["identity"].interval.estimate == pytest.approx(max(acc["Default"], acc["Spatial"]) - acc["Appearance"])
    assert crit["rotation"].interval.n == 1200 and crit["identity"].interval.n == 1000


def test_r2_difference_interval_equals_common_r2_difference(rng):
    n = int(rng.integers(50, 300))
    y = rng.normal(size=(n, 2))
    a = {"oof_prediction": (y + rng.normal(0, 0.6, y.shape)).tolist()}
    b = {"oof_prediction": (y + rng.normal(0, 0.8, y.shape)).tolist()}
    got = E.r2_difference_interval(y.tolist(), a, b, "E2", "position")
    want, _, _ = r2_difference(y.tolist(), a, b, "E2", "position")
    assert got.estimate == pytest.approx(want.estimate, abs=1e-10)
    assert got.low == pytest.approx(want.low, abs=1e-10) and got.high == pytest.approx(want.high, abs=1e-10)
    assert got.n == want.n == n


def test_e2_contradicted_on_colour(rng):
    v = E.judge_e2(probes_results(rng, with_scores(E2_GOOD, colour__Spatial=0.30, colour__Appearance=0.70)))
    assert v.verdict == CONTRADICTED and "colour" in v.why


def test_e2_inconclusive_below_the_minimum_effect():
    gen = np.random.default_rng(7)
    v = E.judge_e2(probes_results(gen, with_scores(E2_GOOD, position__Appearance=0.31)))
    assert v.verdict == INCONCLUSIVE and "position" in v.why


def test_e2_not_testable(rng):
    v = E.judge_e2(probes_results(rng, E2_GOOD, probe="ridge"))
    assert v.verdict == NOT_TESTABLE and v.why == "needs kernel-ridge regression probes (BMVC Tab. 4)"
    res = probes_results(rng, E2_GOOD)
    del res["probes"]["rotation"]["y"]
    v = verdict(E.judge_e2, res)
    assert v.verdict == NOT_TESTABLE and "rotation kernel probe's targets" in v.why
    res = probes_results(rng, E2_GOOD)
    del res["probes"]["identity"]["scores"]["Spatial"]["oof_correct"]
    assert "out-of-fold" in verdict(E.judge_e2, res).why
    v = E.judge_e2(probes_results(rng, E2_GOOD, n=500, n_rotation=500))
    assert v.verdict == NOT_TESTABLE and "1000 probe images" in v.why


def test_e2_control_exchangeable_specialists_do_not_reproduce(rng):
    """The rule with Spatial and Appearance (and Default) equally good on every task, as two random networks."""
    same = {t: {m: s["Random"] + 0.3 for m in s} for t, s in E2_GOOD.items()}
    v = E.judge_e2(probes_results(rng, same))
    assert v.verdict != REPRODUCED


# ---------------------------------------------------------------------------------------------- E3
E3_GOOD = {  # identity, position, rotation, colour
    "Random": (0.20, 0.00, 0.00, 0.10),
    "Default": (0.80, 0.40, 0.30, 0.50),
    "Spatial": (0.75, 0.35, 0.20, 0.70),
    "Appearance": (0.60, 0.60, 0.50, 0.20),
    "Spa+App": (0.78, 0.62, 0.52, 0.65),
    "Def+Spa+App": (0.81, 0.63, 0.55, 0.70),
    "3×Default": (0.82, 0.45, 0.33, 0.55),
}
TASK_ORDER = ("identity", "position", "rotation", "colour")


def e3_table(rows):
    return {t: {m: v[k] for m, v in rows.items()} for k, t in enumerate(TASK_ORDER)}


def _e3_direct(res):
    """(worst-task and mean scores of every model) from sklearn / numpy on the stored predictions."""
    p = res["probes"]
    sc = np.zeros((len(TASK_ORDER), len(E.E3_MODELS)))
    for k, t in enumerate(TASK_ORDER):
        for j, m in enumerate(E.E3_MODELS):
            s = p[t]["scores"][m]
            sc[k, j] = np.mean(s["oof_correct"]) if t == "identity" else r2_score(p[t]["y"], s["oof_prediction"])
    lo, hi = sc.min(1, keepdims=True), sc.max(1, keepdims=True)
    return ((sc - lo) / (hi - lo)).min(0), sc.mean(0)


def test_e3_reproduced_and_matches_a_direct_computation(rng):
    res = probes_results(rng, e3_table(E3_GOOD))
    v = E.judge_e3(res)
    assert v.verdict == REPRODUCED, v.why
    worst, mean = _e3_direct(res)
    f, c = E.E3_MODELS.index("Def+Spa+App"), E.E3_MODELS.index("3×Default")
    w, m = v.criteria
    assert w.interval.estimate == pytest.approx(worst[f] - worst[c]) and w.control.estimate == pytest.approx(worst[c])
    assert m.interval.estimate == pytest.approx(mean[f] - mean[c]) and m.control.estimate == pytest.approx(mean[c])
    assert worst[f] == pytest.approx((0.81 - 0.60) / (0.82 - 0.60)) and worst[c] == pytest.approx(0.10 / 0.28)
    assert w.paper == 0.23 and m.paper == 0.02 and m.boundary == -0.02 == m.minimum


def test_e3_count_bootstrap_equals_the_library_bootstrap(rng):
    """set_counts + weighted_task_scores give bootstrap(paired=False)'s resamples, one array per image set."""
    n1, n2, models = 60, 45, 3
    c1 = (rng.random((n1, models)) < 0.6).astype(float)
    y1 = rng.normal(size=(n1, 2))
    p1 = [y1 + rng.normal(0, 0.5 + j * 0.3, y1.shape) for j in range(models)]
    y2 = rng.normal(size=(n2, 3))
    p2 = [y2 + rng.normal(0, 0.7, y2.shape) for _ in range(models)]
    u1 = np.concatenate([c1, y1, y1**2, *[(y1 - p) ** 2 for p in p1]], 1)
    u2 = np.concatenate([y2, y2**2, *[(y2 - p) ** 2 for p in p2]], 1)
    seed = int(rng.integers(2**31))
    # the library side resamples the units themselves: correctness, then targets and one model's predictions
    a = np.concatenate([c1, y1, p1[2]], 1)  # [n1, 3 + 2 + 2]
    b = np.concatenate([y2, p2[0]], 1)  # [n2, 3 + 3]

    def lib(a, b):
        acc = accuracy_statistic(a[..., 1])
        return acc + r2_statistic(a[..., 3:5], a[..., 5:7]) - r2_statistic(b[..., :3], b[..., 3:6])

    want = bootstrap(lib, [a, b], paired=False, seed=seed)
    w1, w2 = E.set_counts([n1, n2], seed)
    s1c = E.weighted_task_scores(w1, u1[:, :models], "classification", models, 0)
    s1r = E.weighted_task_scores(w1, u1[:, models:], "regression", models, 2)
    s2r = E.weighted_task_scores(w2, u2, "regression", models, 3)
    theta = s1c[:, 1] + s1r[:, 2] - s2r[:, 0]
    lo, hi = np.percentile(theta, [2.5, 97.5])
    assert lo == pytest.approx(want.low) and hi == pytest.approx(want.high)
    one = [np.ones((1, n1)), np.ones((1, n2))]
    est = (
        E.weighted_task_scores(one[0], u1[:, :models], "classification", models, 0)[0, 1]
        + E.weighted_task_scores(one[0], u1[:, models:], "regression", models, 2)[0, 2]
        - E.weighted_task_scores(one[1], u2, "regression", models, 3)[0, 0]
    )
    assert est == pytest.approx(want.estimate)


def test_e3_contradicted_when_3x_default_is_more_consistent(rng):
    rows = {**E3_GOOD, "Def+Spa+App": E3_GOOD["3×Default"], "3×Default": E3_GOOD["Def+Spa+App"]}
    v = E.judge_e3(probes_results(rng, e3_table(rows)))
    assert v.verdict == CONTRADICTED and "worst-task" in v.why


def test_e3_inconclusive_on_the_mean_margin(rng):
    rows = {**E3_GOOD, "3×Default": (0.95, 0.45, 0.60, 0.77)}  # mean 0.6925: Def+Spa+App 0.02 below it
    v = E.judge_e3(probes_results(rng, e3_table(rows)))
    w, m = v.criteria
    assert m.interval.estimate == pytest.approx(-0.02) and w.verdict == REPRODUCED
    assert v.verdict == INCONCLUSIVE and "mean score" in v.why


def test_e3_not_testable(rng):
    rows = {k: v for k, v in E3_GOOD.items() if k != "3×Default"}
    v = verdict(E.judge_e3, probes_results(rng, e3_table(rows)))
    assert v.verdict == NOT_TESTABLE and "3×Default" in v.why
    v = E.judge_e3(probes_results(rng, e3_table(E3_GOOD), n=400, n_rotation=1000))
    assert v.verdict == NOT_TESTABLE and "1000 probe images" in v.why
    res = probes_results(rng, e3_table(E3_GOOD))
    del res["probes"]["identity"]["scores"]["Spa+App"]["oof_correct"]
    v = verdict(E.judge_e3, res)
    assert v.verdict == NOT_TESTABLE and "out-of-fold" in v.why
    res = probes_results(rng, e3_table(E3_GOOD))
    res["pretrain-default-2"] = {"steps": 500}
    v = E.judge_e3(res)
    assert v.verdict == NOT_TESTABLE and "equal budgets" in v.why and "default-2 500" in v.why


def test_e3_control_3x_default_in_place_of_the_fusion_does_not_reproduce(rng):
    rows = {**E3_GOOD, "Def+Spa+App": E3_GOOD["3×Default"]}
    v = E.judge_e3(probes_results(rng, e3_table(rows)))
    assert v.verdict != REPRODUCED and v.criteria[0].interval.estimate == pytest.approx(0.0)


def test_e3_reads_its_control_from_the_3x_default_stage(rng):
    """The pipeline's layout: the probes stage holds the six policies and fusions, ``probes-3xdefault`` the
    control; the verdict equals the one on a single table holding both."""
    one_table = probes_results(rng, e3_table(E3_GOOD))
    split = {k: v for k, v in one_table.items() if k != "probes"}
    split["probes"] = {t: dict(r) for t, r in one_table["probes"].items()}
    split["probes-3xdefault"] = {"tasks": {}}
    for t, r in split["probes"].items():
        if isinstance(r, dict) and "scores" in r:
            r["scores"] = {m: v for m, v in r["scores"].items() if m != "3×Default"}
            split["probes-3xdefault"]["tasks"][t] = {
                "scores": {"3×Default": one_table["probes"][t]["scores"]["3×Default"]}
            }
    a, b = E.judge_e3(one_table), E.judge_e3(split)
    assert a.verdict == b.verdict == REPRODUCED
    assert [c.interval for c in a.criteria] == [c.interval for c in b.criteria]
    assert "3×Default" not in split["probes"]["identity"]["scores"]  # the probes result is not changed


def test_e3_runs_three_default_encoders_and_rests_on_their_learning():
    from invfast.reproduce import findings as FR
    from invfast.reproduce.config import ReproduceConfig
    from invfast.reproduce.pipeline import stage_names
    from invfast.reproduce.stages.context import EXTRA_DEFAULTS

    rec = FR.by_id("E3")
    assert set(EXTRA_DEFAULTS) <= set(rec.models) and "probes-3xdefault" in rec.stages
    names = set(stage_names(ReproduceConfig().with_values({"run.findings": ("E3",)})))
    assert {"pretrain-default", "pretrain-default-b", "pretrain-default-c", "probes-3xdefault"} <= names


# ---------------------------------------------------------------------------------------------- E4
def ramp(final, at=0.2):
    return lambda frac: final * min(1.0, frac / at)


def e4_results(gen, gap_s=None, gap_a=None, steps=tuple(range(0, 1001, 100)), n=100, sd=0.1):
    gap_s, gap_a = gap_s or ramp(0.3), gap_a or ramp(0.3)
    offsets = {t: float(gen.normal(0.0, 0.05)) for t in FAMILIES}
    total = steps[-1]
    rows = [{"model": "Random", "policy": "random", "step": 0, "epoch": 0.0}]
    rows[0]["per_image_cosine"] = family_values(gen, (0.1, 0.4), n, sd, offsets)
    for policy in ("default", "spatial", "appearance"):
        for s in steps:
            frac = s / total
            level = {
                "default": (0.5, 0.5),
                "spatial": (0.5 + gap_s(frac), 0.3),
                "appearance": (0.3, 0.5 + gap_a(frac)),
            }[policy]
            per = family_values(gen, level, n, sd, offsets)
            cos = {t: float(np.mean(v)) for t, v in per.items()}
            rows.append({"model": f"{policy}@{s}", "policy": policy, "step": s, "cosine": cos, "per_image_cosine": per})
    curves = {"models": rows, "families": dict(FAMILIES), "images": n}
    return {"invariance-curves": curves, **budgets((total, total, total))}


def test_e4_reproduced_and_matches_numpy(rng):
    res = e4_results(rng)
    v = E.judge_e4(res)
    assert v.verdict == REPRODUCED, v.why
    rows = {(r["policy"], r["step"]): r for r in res["invariance-curves"]["models"]}

    def fam(policy, step, family):
        per = rows[(policy, step)]["per_image_cosine"]
        return np.mean([per[t] for t in FAMILIES if FAMILIES[t] == family], axis=0)

    end = v.criteria[0]
    assert end.interval.estimate == pytest.approx(
        np.mean(fam("spatial", 1000, "spatial") - fam("default", 1000, "spatial"))
    )
    assert end.control.estimate == pytest.approx(np.mean(fam("spatial", 0, "spatial") - fam("default", 0, "spatial")))
    every = v.criteria[1]
    later = [s for s in range(0, 1001, 100) if s >= 300]
    want = min(np.mean(fam("spatial", s, "spatial") - fam("default", s, "spatial")) for s in later)
    assert every.interval.estimate == pytest.approx(want) and "8 checkpoints" in every.name
    assert [c.name.split(" ")[0] for c in v.criteria] == ["G_S", "G_S", "G_A", "G_A"]


def test_e4_contradicted_by_a_dip_after_30_percent(rng):
    dip = lambda frac: -0.1 if 0.45 <= frac <= 0.55 else ramp(0.3)(frac)  # noqa: E731
    v = E.judge_e4(e4_results(rng, gap_a=dip))
    assert v.verdict == CONTRADICTED and "G_A" in v.why and "minimum" in v.why


def test_e4_a_dip_before_30_percent_does_not_count(rng):
    dip = lambda frac: -0.1 if frac == 0.2 else ramp(0.3, at=0.1)(frac)  # noqa: E731
    assert E.judge_e4(e4_results(rng, gap_a=dip)).verdict == REPRODUCED


def test_e4_inconclusive_below_the_minimum_end_gap(rng):
    v = E.judge_e4(e4_results(rng, gap_s=ramp(0.03)))
    assert v.verdict == INCONCLUSIVE
    assert v.criteria[0].interval.low > 0 and v.criteria[0].interval.estimate < 0.05


def test_e4_not_testable(rng):
    v = E.judge_e4(e4_results(rng, n=48))
    assert v.verdict == NOT_TESTABLE and "96 measurement images" in v.why
    v = E.judge_e4(e4_results(rng, steps=tuple(range(0, 501, 100))))
    assert v.verdict == NOT_TESTABLE and "8 checkpoints" in v.why
    res = e4_results(rng)
    for r in res["invariance-curves"]["models"]:
        del r["per_image_cosine"]
    v = verdict(E.judge_e4, res)
    assert v.verdict == NOT_TESTABLE and "per-image invariance" in v.why
    res = e4_results(rng)
    res["pretrain-spatial"]["steps"] = 1200
    v = E.judge_e4(res)
    assert v.verdict == NOT_TESTABLE and "end of training" in v.why and "equal budgets" in v.why


def test_e4_current_layout_is_not_testable():
    """The invariance-curves stage as it is: 48 images, means only."""
    rows = [
        {"model": f"{p}@{s}", "policy": p, "step": s, "epoch": s / 32, "cosine": {t: 0.5 for t in FAMILIES}}
        for p in ("default", "spatial", "appearance")
        for s in range(0, 1121, 96)
    ]
    v = verdict(E.judge_e4, {"invariance-curves": {"models": rows, "families": FAMILIES, "images": 48}})
    assert v.verdict == NOT_TESTABLE and "96 measurement images" in v.why


def test_e4_control_default_in_place_of_the_specialists_does_not_reproduce(rng):
    v = E.judge_e4(e4_results(rng, gap_s=lambda f: 0.0, gap_a=lambda f: 0.0))
    assert v.verdict != REPRODUCED


# ---------------------------------------------------------------------------------------------- E5
def e5_results(gen, identity, pose, colour=None, n_models=30, spatial_latent=None, appearance_latent=None, sd=0.1):
    """A population: each model's spatial / appearance invariance follows a latent (u, v) per model; the task
    scores are the given functions of (u, v, noise)."""
    names = ["Random", "Default", "Spatial", "Appearance", *[f"AI K=5 #{k}" for k in range(n_models - 4)]]
    u = gen.random(len(names)) if spatial_latent is None else spatial_latent
    v = gen.random(len(names)) if appearance_latent is None else appearance_latent
    inv = {}
    for j, m in enumerate(names):
        inv[m] = {t: float((u[j] if f == "spatial" else v[j]) + gen.normal(0, sd)) for t, f in FAMILIES.items()}
    scores = {}
    for j, m in enumerate(names):
        scores[m] = {
            "identity": float(identity(u[j], v[j]) + gen.normal(0, sd)),
            "position": float(pose(u[j], v[j]) + gen.normal(0, sd)),
            "rotation": float(pose(u[j], v[j]) + gen.normal(0, sd)),
            "colour": float(gen.random() if colour is None else colour(u[j], v[j])),
        }
    return {
        "invariance-transfer": {
            "population": "final models",
            "models": names,
            "invariance": inv,
            "scores": scores,
            "families": dict(FAMILIES),
        }
    }


def test_spearman_blocks_matches_scipy_with_ties(rng):
    x = rng.integers(0, 5, size=(12, 4)).astype(float)
    y = rng.normal(size=(12, 3))
    got = E.spearman_blocks(x, y)
    for t in range(4):
        for k in range(3):
            assert got[t, k] == pytest.approx(st.spearmanr(x[:, t], y[:, k]).statistic)


def test_e5_reproduced_and_b_matches_scipy(rng):
    res = e5_results(rng, identity=lambda u, v: u, pose=lambda u, v: v)
    v = E.judge_e5(res)
    assert v.verdict == REPRODUCED, v.why
    e5 = res["invariance-transfer"]
    rho = {
        (t, k): st.spearmanr(
            [e5["invariance"][m][t] for m in e5["models"]], [e5["scores"][m][k] for m in e5["models"]]
        ).statistic
        for t in FAMILIES
        for k in ("identity", "position", "rotation")
    }

    def bar(fam, tasks):
        return np.mean([rho[(t, k)] for t in FAMILIES if FAMILIES[t] == fam for k in tasks])

    pose = ("position", "rotation")
    want = (
        bar("spatial", ("identity",))
        - bar("spatial", pose)
        - bar("appearance", ("identity",))
        + bar("appearance", pose)
    )
    assert v.criteria[0].interval.estimate == pytest.approx(want) and want > 1.0
    assert v.criteria[0].interval.n == 30


def test_e5_contradicted_when_the_blocks_are_reversed(rng):
    v = E.judge_e5(e5_results(rng, identity=lambda u, v: v, pose=lambda u, v: u))
    assert v.verdict == CONTRADICTED


def test_e5_inconclusive_without_a_relation():
    gen = np.random.default_rng(3)
    v = E.judge_e5(e5_results(gen, identity=lambda u, v: 0.0, pose=lambda u, v: 0.0, sd=0.1))
    assert v.verdict == INCONCLUSIVE
    assert v.criteria[0].interval.low < 0 < v.criteria[0].interval.high


def test_e5_not_testable(rng):
    res = e5_results(rng, identity=lambda u, v: u, pose=lambda u, v: v)
    del res["invariance-transfer"]["population"]  # the current stage: training checkpoints
    v = verdict(E.judge_e5, res)
    assert v.verdict == NOT_TESTABLE and "population of final models" in v.why
    v = E.judge_e5(e5_results(rng, identity=lambda u, v: u, pose=lambda u, v: v, n_models=12))
    assert v.verdict == NOT_TESTABLE and "26 descriptors" in v.why
    res = e5_results(rng, identity=lambda u, v: u, pose=lambda u, v: v)
    del res["invariance-transfer"]["scores"]["Spatial"]["rotation"]
    assert "rotation probe score of Spatial" in verdict(E.judge_e5, res).why


def test_e5_control_a_training_progress_population_does_not_reproduce(rng):
    """Models that differ in progress only: every invariance and every score rises with one latent."""
    progress = rng.random(30)
    v = E.judge_e5(
        e5_results(
            rng,
            identity=lambda u, v: u,
            pose=lambda u, v: u,
            colour=lambda u, v: u,
            spatial_latent=progress,
            appearance_latent=progress,
        )
    )
    assert v.verdict != REPRODUCED
