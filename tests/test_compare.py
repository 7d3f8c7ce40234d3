"""invfast.compare / invfast compare: comparability checks, Table 1 across models, paired tests against
scipy and a float64 numpy t, Holm against the sequential procedure, rank correlations and their bootstrap
against scipy, probe-score parsing, per-layer rows, JSON round trip, the output folder and the CLI."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch
from measure_helpers import Brightness, HFlip, Rot90, random_images, small_net
from scipy import stats as sps

import invfast as ivf
from invfast.cli import main as cli_main
from invfast.comparison import Comparison, compare, correlate, holm, paired_t, signed_rank
from invfast.comparison.transfer import MIN_MODELS_MARK, kendall_rows, spearman_rows
from invfast.measure import InvarianceResult, TransformResult, measure_invariance

FAMS = {"rot90": "spatial", "hflip": "spatial", "crop": "spatial", "brightness": "appearance", "hue": "appearance"}
IMAGE_ID = "5e" * 32


def _result(
    model: str,
    rng: np.random.Generator,
    means: dict[str, float] | None = None,
    *,
    n: int = 120,
    nan_at: tuple[int, ...] = (),
    spread: float = 0.08,
    grid: int = 3,
    protocol: str = "invfast",
    image_id: str | None = IMAGE_ID,
    transforms: tuple[str, ...] = tuple(FAMS),
) -> InvarianceResult:
    """A result with known per-image values (cosine around ``means``, distance decreasing in it), the
    means computed as ``measure`` does (over the readable images)."""
    means = means or {t: float(rng.uniform(0.2, 0.9)) for t in transforms}
    trs = {}
    for name in transforms:
        cos = np.clip(means[name] + spread * rng.standard_normal(n), -1, 1)
        dist = 8.0 * (1.0 - cos) + 0.3 * rng.standard_normal(n) ** 2
        cos[list(nan_at)] = np.nan
        dist[list(nan_at)] = np.nan
        trs[name] = TransformResult(
            name=name,
            family=FAMS[name],
            mean_distance=float(np.nanmean(dist)),
            mean_cosine=float(np.nanmean(cos)),
            n_images=n,
            params=torch.arange(float(grid), dtype=torch.float64),
            identity=torch.arange(grid) == 0,
            per_image_cosine=torch.from_numpy(cos),
            per_image_distance=torch.from_numpy(dist),
        )
    images = {"n": n, "id": image_id} if image_id is not None else None
    meta = {
        "mode": "transforms",
        "protocol": protocol,
        "grid_size": grid,
        "config": {"grid_size": grid, "protocol": protocol, "protocol_seed": 0, "crop": None},
    }
    if images:
        meta["images"] = images
    return InvarianceResult(model=model, transforms=trs, n_images=n, meta=meta)


def _table_line(md: str, start: str, heading: str = "## Standardised cosine") -> str:
    """The first line starting with ``start`` after ``heading`` in a report."""
    return next(line for line in md.split(heading, 1)[1].splitlines() if line.startswith(start))


@pytest.fixture
def three(rng):
    return [_result(m, rng, nan_at=nan) for m, nan in (("A", (3,)), ("B", (3, 7)), ("C", ()))]


# ------------------------------------------------------------------------------------------ comparability
@pytest.mark.parametrize(
    "change, field",
    [
        (dict(protocol="ericsson"), r"protocol differs: 'A' has 'invfast', 'B' has 'ericsson'"),
        (dict(image_id="77" * 32), r"images\.id differs: 'A' has '5e5e5e5e5e5e…', 'B' has '777777777777…'"),
        (dict(n=80), r"images\.n differs: 'A' has 120, 'B' has 80"),
        (dict(grid=4), r"grid_size differs: 'A' has 3, 'B' has 4"),
        (dict(transforms=("rot90", "hue")), r"transforms differs: 'A' has \['brightness', 'crop'"),
        (dict(image_id=None), r"'B' has no recorded image identity"),
    ],
)
def test_mismatched_runs_are_refused_naming_the_field_and_values(rng, change, field):
    a, b = _result("A", rng), _result("B", rng, **change)
    with pytest.raises(ValueError, match=field):
        compare([a, b])
    c = compare([a, b], allow_mismatch=True)
    assert c.mismatch["allowed"] and any(d["b"] == "B" for d in c.mismatch["differences"])
    assert "Compared despite differences" in c.to_markdown()
    assert Comparison.from_json(c.to_json()).mismatch == c.mismatch
    if "image_id" in change or "n" in change:  # different (or unverifiable) images: never paired
        assert all(t.reason is not None for t in c.paired.tests)


def test_one_changed_grid_is_named(rng):
    a, b = _result("A", rng), _result("B", rng)
    b.transforms["hue"].params = torch.tensor([0.0, 0.5, 2.0], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"grid of hue differs"):
        compare([a, b])


def test_bad_inputs_are_one_line_errors(rng, tmp_path):
    a = _result("A", rng)
    with pytest.raises(ValueError, match="at least 2"):
        compare([a])
    with pytest.raises(ValueError, match="both labelled 'A'"):
        compare([a, _result("A", rng)])
    with pytest.raises(ValueError, match="holds no result.json"):
        compare([a, str(tmp_path)])
    (tmp_path / "x.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not an invfast measurement result"):
        compare([a, str(tmp_path / "x.json")])
    with pytest.raises(ValueError, match="no such file"):
        compare([a, str(tmp_path / "absent")])
    with pytest.raises(ValueError, match="test must be one of"):
        compare([a, _result("B", rng)], test="welch")
    with pytest.raises(ValueError, match="alpha must be"):
        compare([a, _result("B", rng)], alpha=1.5)
    with pytest.raises(ValueError, match="n_boot"):
        compare([a, _result("B", rng)], n_boot=-1)


def test_real_world_runs(rng):
    """Real-world results (groups of views, no grid): one column, per-group values paired like images."""
    runs = []
    for m in "AB":
        per = rng.uniform(0.2, 0.6, 30) + (0.2 if m == "B" else 0.0)
        tr = TransformResult(
            name="coil",
            family="real-world",
            mean_distance=float((1 - per).mean()),
            mean_cosine=float(per.mean()),
            n_images=90,
            per_image_cosine=torch.from_numpy(per),
            per_image_distance=torch.from_numpy(1 - per),
        )
        runs.append(
            InvarianceResult(
                model=m,
                transforms={"coil": tr},
                n_images=90,
                meta={
                    "mode": "real-world",
                    "images": {"n": 90, "id": IMAGE_ID},
                    "config": {"protocol": "invfast", "protocol_seed": 0},
                },
            )
        )
    c = compare(runs)
    assert c.table.column_names == ["coil", "real-world"]
    (t,) = c.paired.of("cosine")
    assert t.more_invariant == "B" and t.n == 30
    ref = sps.ttest_rel(runs[0]["coil"].per_image_cosine, runs[1]["coil"].per_image_cosine)
    assert t.p_t == pytest.approx(ref.pvalue)


# ------------------------------------------------------------------------------------------------ the table
def test_table_values_best_and_ranks(three):
    c = compare(three)
    names = [n for n, _ in c.table.columns]
    assert names == ["rot90", "hflip", "crop", "brightness", "hue"]  # spatial first
    for metric, better in (("cosine", np.argmax), ("distance", np.argmin)):
        v = np.array([[getattr(r[n], f"mean_{metric}") for n in names] for r in three])
        np.testing.assert_array_equal(c.table.values[metric], v)
        fam = np.stack([v[:, :3].mean(1), v[:, 3:].mean(1)], 1)
        allv = np.concatenate([v, fam], 1)
        np.testing.assert_allclose(c.table.all_values(metric), allv, rtol=0, atol=1e-15)
        assert [b[0] for b in c.table.best(metric)] == list(better(allv, axis=0))
        key = -allv if metric == "cosine" else allv  # rank 1 = most invariant (no ties in random data)
        np.testing.assert_array_equal(c.table.ranks(metric), key.argsort(0).argsort(0) + 1.0)
        np.testing.assert_allclose(c.table.mean_rank(metric), (key[:, :5].argsort(0).argsort(0) + 1.0).mean(1))
    best_a = c.table.best("cosine")[0][0]
    row = _table_line(c.to_markdown(), f"| {'abc'[best_a]} | {'ABC'[best_a]} |")
    assert row.split("|")[3].strip().startswith(f"**{c.table.values['cosine'][best_a, 0]:.3f}**")


def test_tied_best_and_ranks(rng):
    a, b, c3 = (_result(m, rng) for m in "ABC")
    b.transforms["hue"].mean_cosine = a.transforms["hue"].mean_cosine
    c = compare([a, b, c3])
    j = [n for n, _ in c.table.columns].index("hue")
    assert sorted(c.table.best("cosine")[j]) == ([0, 1] if c3["hue"].mean_cosine < a["hue"].mean_cosine else [2])
    r = c.table.ranks("cosine")[:, j]
    assert r[0] == r[1] and r[0] % 1 in (0.0, 0.5)


# -------------------------------------------------------------------------------------- paired significance
def test_paired_tests_against_scipy_and_numpy(three):
    c = compare(three)
    by = {r.model: r for r in three}
    tests = c.paired.of("cosine") + c.paired.of("distance")
    assert len(tests) == 2 * 5 * 3
    for t in tests:
        a = getattr(by[t.a][t.transform], f"per_image_{t.metric}").numpy()
        b = getattr(by[t.b][t.transform], f"per_image_{t.metric}").numpy()
        keep = ~np.isnan(a) & ~np.isnan(b)
        assert t.n == keep.sum() and t.dropped == len(a) - keep.sum()
        assert t.dropped == (2 if "B" in (t.a, t.b) else 1 if "A" in (t.a, t.b) else 0)
        ref = sps.ttest_rel(a[keep], b[keep])
        assert t.t == pytest.approx(ref.statistic, rel=1e-10)
        assert t.p_t == pytest.approx(ref.pvalue, rel=1e-8, abs=1e-300)
        d = (a[keep] - b[keep]).astype(np.float64)  # the paired t by hand
        t_hand = d.mean() / (np.sqrt(((d - d.mean()) ** 2).sum() / (len(d) - 1)) / np.sqrt(len(d)))
        assert t.t == pytest.approx(t_hand, rel=1e-12) and t.mean_diff == pytest.approx(d.mean(), rel=1e-12)
        w = sps.wilcoxon(a[keep], b[keep])
        assert t.wilcoxon == pytest.approx(w.statistic) and t.p_wilcoxon == pytest.approx(w.pvalue, rel=1e-10)


def test_holm_against_the_sequential_procedure(rng):
    p = np.array([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(holm(p), [0.03, 0.06, 0.06, 0.02])
    p = rng.uniform(0, 0.2, 40) ** 2
    p[[3, 17]] = np.nan  # not tests
    adj = holm(p)
    assert np.isnan(adj[[3, 17]]).all()
    ok = ~np.isnan(p)
    m = ok.sum()
    order = np.argsort(p[ok])
    for alpha in (0.001, 0.01, 0.05, 0.1):
        rejected = np.zeros(m, dtype=bool)  # Holm: reject p_(1), p_(2), ... while p_(k) <= alpha / (m - k + 1)
        for k, i in enumerate(order):
            if p[ok][i] > alpha / (m - k):
                break
            rejected[i] = True
        np.testing.assert_array_equal(adj[ok] <= alpha, rejected)
    assert (adj[ok] >= p[ok]).all() and (adj[ok] <= 1).all()


def test_marks_and_matrix_follow_the_adjusted_tests(rng):
    base = {t: 0.5 for t in FAMS}
    a = _result("A", rng, {**base, "rot90": 0.8}, n=200)  # clearly more rot90-invariant than B and C
    b = _result("B", rng, {**base, "hue": 0.75}, n=200)
    c3 = _result("C", rng, dict(base), n=200)
    c = compare([a, b, c3])
    assert sorted(c.paired.beats("cosine", "rot90")["A"]) == ["B", "C"]
    assert c.paired.beats("distance", "rot90")["A"] == ["B", "C"]
    assert sorted(c.paired.beats("cosine", "hue")["B"]) == ["A", "C"]
    for metric in ("cosine", "distance"):
        tests = c.paired.of(metric)
        m = c.paired.matrix(metric, c.labels)
        assert m.sum() == sum(t.more_invariant is not None for t in tests)
        for t in tests:
            assert (t.more_invariant is not None) == (t.p_t_holm <= 0.05)
        assert (c.paired.tested(metric, c.labels) == 5 * (1 - np.eye(3))).all()
    a_row = _table_line(c.to_markdown(), "| a | A |")
    assert "<sup>b,c</sup>" in a_row.split("|")[3]
    w = compare([a, b, c3], test="wilcoxon")
    for t in w.paired.of("cosine"):
        assert (t.more_invariant is not None) == (t.p_wilcoxon_holm <= 0.05)


def test_paired_t_edge_cases():
    x = np.array([0.25, 0.5, 0.75])  # exact in binary: x + 0.5 - x is exactly 0.5
    assert paired_t(x, x)[1:] == (0.0, 1.0)
    md, t, p = paired_t(x + 0.5, x)
    assert md == pytest.approx(0.5) and t == math.inf and p == 0.0
    assert signed_rank(x, x) == (0.0, 1.0, 0)
    assert math.isnan(paired_t(x[:1], x[:1])[2])


# ------------------------------------------------------------------------------------- transfer correlation
def test_rank_correlations_against_scipy_and_bootstrap_by_hand(rng):
    n = 9
    x = rng.standard_normal(n)
    y = 0.7 * x + 0.5 * rng.standard_normal(n)
    for seed in (5, 6):  # the interval comes from the documented resamples of this seed
        rec = correlate(x, y, n_boot=400, seed=seed)
        s, k = sps.spearmanr(x, y), sps.kendalltau(x, y)
        assert rec["spearman"] == pytest.approx(s.statistic) and rec["spearman_p"] == pytest.approx(s.pvalue)
        assert rec["kendall"] == pytest.approx(k.statistic) and rec["kendall_p"] == pytest.approx(k.pvalue)
        idx = np.random.default_rng(seed).integers(0, n, size=(400, n))  # one resample at a time, with scipy
        rho, tau = [], []
        for i in idx:
            if np.ptp(x[i]) > 0 and np.ptp(y[i]) > 0:
                rho.append(sps.spearmanr(x[i], y[i]).statistic)
                tau.append(sps.kendalltau(x[i], y[i]).statistic)
        assert rec["n_boot_valid"] == len(rho)
        np.testing.assert_allclose(rec["spearman_ci"], np.percentile(rho, [2.5, 97.5]), rtol=1e-12)
        np.testing.assert_allclose(rec["kendall_ci"], np.percentile(tau, [2.5, 97.5]), rtol=1e-12)
        assert correlate(x, y, n_boot=400, seed=seed) == rec  # reproducible


def test_vectorised_rank_correlations_with_ties_match_scipy(rng):
    xb = rng.integers(0, 4, (50, 7)).astype(float)  # many ties, as in resamples
    yb = rng.integers(0, 3, (50, 7)).astype(float)
    rho, tau = spearman_rows(xb, yb), kendall_rows(xb, yb, block=64)
    for i in range(50):
        if np.ptp(xb[i]) and np.ptp(yb[i]):
            assert rho[i] == pytest.approx(sps.spearmanr(xb[i], yb[i]).statistic, abs=1e-12)
            assert tau[i] == pytest.approx(sps.kendalltau(xb[i], yb[i]).statistic, abs=1e-12)
        else:
            assert np.isnan(rho[i]) and np.isnan(tau[i])


@pytest.mark.statistical
def test_bootstrap_interval_holds_the_estimate(rng):
    for _ in range(20):
        n = int(rng.integers(8, 15))
        x = rng.standard_normal(n)
        y = rng.uniform(0.2, 1.0) * x + rng.standard_normal(n)
        rec = correlate(x, y, n_boot=1000, seed=int(rng.integers(1000)))
        for k in ("spearman", "kendall"):
            lo, hi = rec[f"{k}_ci"]
            assert lo <= rec[k] <= hi


def test_transfer_table_across_models(rng, tmp_path):
    rs = [_result(f"m{i}", rng) for i in range(MIN_MODELS_MARK)]
    inv = np.array([r["rot90"].mean_cosine for r in rs])
    acc = 0.5 + 0.3 * (inv - inv.min()) / np.ptp(inv)  # rot90 invariance predicts this task perfectly
    err = {r.model: float(1 - a) for r, a in zip(rs, acc)}
    probe = tmp_path / "m0_pets.json"  # what invfast probe --json writes
    probe.write_text(
        json.dumps(
            {
                "model": "LogisticCV",
                "rows": [],
                "best_index": 1,
                "best_params": {"C": 1.0},
                "cv_results": {"mean_test_score": [0.1, float(acc[0]), 0.2]},
            }
        )
    )
    scores = {
        "tasks": {
            "pets": {**{r.model: float(a) for r, a in zip(rs[1:], acc[1:])}, "m0": str(probe)},
            "pets_error": err,
        },
        "higher_is_better": {"pets_error": False},
    }
    c = compare(rs, probes=scores, n_boot=300)
    for task in ("pets", "pets_error"):  # the error is oriented: the same positive correlation
        rec = next(r for r in c.transfer.of("cosine", task) if r["column"] == "rot90")
        assert rec["n"] == len(rs) and rec["spearman"] == pytest.approx(1.0) and rec["kendall"] == pytest.approx(1.0)
        assert c.transfer.marked(rec) and rec["spearman_ci"] == [1.0, 1.0]
    for r in c.transfer.of("distance", "pets"):  # distance: the negated distance is the invariance
        col = c.table.column_names.index(r["column"])
        ref = sps.spearmanr(-c.table.all_values("distance")[:, col], acc).statistic
        assert r["spearman"] == pytest.approx(ref)
    assert c.transfer.scores.sources["pets"]["m0"] == str(probe)
    m = c.transfer.matrix("cosine", c.table.column_names)
    assert m.shape == (len(c.table.column_names), 2) and m[0, 0] == pytest.approx(1.0)
    assert "Which invariance predicts transfer" in c.to_markdown()


def test_too_few_models_are_flagged(rng):
    c = compare([_result("A", rng), _result("B", rng)], probes={"t": {"A": 0.3, "B": 0.4}})
    assert all(r["spearman"] is None and "at least 3" in r["note"] for r in c.transfer.records)
    c = compare([_result(m, rng) for m in "ABCD"], probes={"t": {"A": 0.3, "B": 0.4, "C": 0.2, "D": 0.9}})
    assert not any(c.transfer.marked(r) for r in c.transfer.records)  # 4 models: intervals never mark


def test_probe_specs(rng, tmp_path):
    rs = [_result(m, rng) for m in ("mod:fac", "B", "C")]
    for lab, v in (("mod", 0.4), ("B", 0.5), ("C", 0.7)):
        (tmp_path / f"{lab}.json").write_text(json.dumps({"best_index": 0, "cv_results": {"mean_test_score": [v]}}))
    specs = [f"mod:fac:pets={tmp_path / 'mod.json'}", f"B:pets={tmp_path / 'B.json'}", f"C:pets={tmp_path / 'C.json'}"]
    c = compare(rs, probes=specs, n_boot=50)
    assert c.transfer.scores.tasks == {"pets": {"mod:fac": 0.4, "B": 0.5, "C": 0.7}}
    with pytest.raises(ValueError, match="unknown model 'D'"):
        compare(rs, probes={"pets": {"D": 0.1}})
    with pytest.raises(ValueError, match="expected MODEL:TASK=probe.json"):
        compare(rs, probes=[f"B={tmp_path / 'B.json'}"])
    (tmp_path / "bad.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="not an 'invfast probe --json' file"):
        compare(rs, probes=[f"B:pets={tmp_path / 'bad.json'}"])
    with pytest.raises(ValueError, match="must be a finite number"):
        compare(rs, probes={"pets": {"B": float("nan")}})
    agg = tmp_path / "agg.json"
    agg.write_text(json.dumps({"tasks": {"cars": {"B": 0.1, "C": 0.2, "mod:fac": 0.05}}, "higher_is_better": False}))
    c = compare(rs, probes=[str(agg)], n_boot=50)
    assert c.transfer.scores.higher_is_better == {"cars": False}


# ------------------------------------------------------------------------------------ measured, per layer
@pytest.fixture(scope="module")
def measured():
    """Three tiny models and one per-layer run, measured on the same 48 random images."""
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = random_images(48, size=16, seed=3)
        kw = dict(grid_size=4, batch_size=12, normalize=False)
        runs = [
            measure_invariance(small_net(seed=s), x, [Rot90(), HFlip(), Brightness()], name=f"net{s}", **kw)
            for s in range(3)
        ]
        torch.manual_seed(0)
        res = ivf.models.create("resnet18-cifar", width=4).eval()
        layered = measure_invariance(
            res, x, [Rot90(), HFlip(), Brightness()], name="rn", layers="layer2,layer4", equivariance=True, **kw
        )
    finally:
        torch.set_num_threads(n_threads)
    return runs, layered


def test_per_layer_rows(measured):
    runs, layered = measured
    c = ivf.compare([runs[0], layered])
    assert c.labels == ["net0", "rn [layer2]", "rn [layer4]"]
    assert [(r.model, r.layer) for r in c.rows] == [("net0", None), ("rn", "layer2"), ("rn", "layer4")]
    j = [n for n, _ in c.table.columns].index("rot90")
    assert c.table.values["cosine"][1, j] == layered.layers["layer2"]["rot90"].mean_cosine
    # the measures without per-image values: shown, not tested; a row that did not measure one has none
    eq = c.table.measures["equivariance"]
    assert eq[1, j] == layered.layers["layer2"]["rot90"].mean_linear_equivariance and np.isnan(eq[0]).all()
    nv = c.table.measures["normalized_variance"]
    assert nv[0, j] == runs[0]["rot90"].normalized_variance
    text = c.to_markdown()
    assert "## Linear equivariance" in text and "## Normalized variance" in text
    assert {r["metric"] for r in c.to_rows()} == {"cosine", "distance", "normalized_variance", "equivariance"}
    assert "equivariance" not in ivf.compare(runs).table.measures
    t = next(t for t in c.paired.of("cosine", "rot90") if (t.a, t.b) == ("rn [layer2]", "rn [layer4]"))
    ref = sps.ttest_rel(
        layered.layers["layer2"]["rot90"].per_image_cosine.numpy(),
        layered.layers["layer4"]["rot90"].per_image_cosine.numpy(),
    )
    assert t.p_t == pytest.approx(ref.pvalue, rel=1e-8, abs=1e-300)
    assert ivf.compare([runs[0], layered], layers="last").labels == ["net0", "rn"]
    with pytest.raises(ValueError, match="ambiguous"):
        ivf.compare([runs[0], runs[1], layered], probes={"t": {"rn": 0.5, "net0": 0.1, "net1": 0.2}})


def test_json_round_trip_and_frames(measured, tmp_path):
    runs, _ = measured
    c = ivf.compare(
        {"first": runs[0], "second": runs[1], "third": runs[2]},
        probes={"t": {"first": 0.1, "second": 0.5, "third": 0.3}},
        n_boot=100,
    )
    back = Comparison.from_json(c.to_json(tmp_path / "c.json"))
    assert back.to_dict() == c.to_dict() and back.to_markdown() == c.to_markdown()
    assert Comparison.from_json(str(tmp_path / "c.json")).labels == ["first", "second", "third"]
    with pytest.raises(ValueError, match="not an invfast comparison"):
        Comparison.from_dict({"format": "x"})
    frame = c.to_frame()
    # metrics x rows x (transforms + families), then the normalized variance: rows x transforms
    assert len(frame) == 2 * 3 * (3 + 2) + 3 * 3
    assert set(frame["metric"]) == {"cosine", "distance", "normalized_variance"}
    assert len(c.to_frame("tests")) == 2 * 3 * 3 and len(c.to_frame("transfer")) == 2 * 5
    assert c.to_csv().splitlines()[0].startswith("label,model,layer,column,kind")
    for kind in ("radar", "heatmap", "significance", "correlation"):
        assert back.plot(kind, path=tmp_path / f"{kind}.png") is not None
        assert (tmp_path / f"{kind}.png").stat().st_size > 0


def test_invfast_compare_is_the_function():
    assert ivf.compare is compare and ivf.comparison.compare is compare


# ------------------------------------------------------------------------------------------ CLI and folder
def _save_runs(runs, root) -> list[str]:
    paths = []
    for r in runs:
        d = os.path.join(root, r.model)
        os.makedirs(d, exist_ok=True)
        r.to_json(os.path.join(d, "result.json"))
        paths.append(d)
    return paths


def test_cli_end_to_end(measured, tmp_path, capsys, cli_env):
    runs, layered = measured
    paths = _save_runs([*runs, layered], tmp_path / "runs")
    probe = tmp_path / "p.json"
    probe.write_text(json.dumps({"tasks": {"pets": {"net0": 0.2, "net1": 0.6, "net2": 0.4}}}))
    out = tmp_path / "cmp"
    assert cli_main(["compare", *paths[:3], "--out", str(out), "--probes", str(probe), "--bootstrap", "100"]) == 0
    files = sorted(f for f in os.listdir(out) if not f.startswith("."))
    assert json.loads((out / ".invfast-run.json").read_text())["command"] == "compare"
    assert files == sorted(
        ["report.md", "results.json", "table.csv", "heatmap.png", "significance.png", "correlation.png"]
    )  # no radar: no family has 3 transforms to draw one
    c = Comparison.from_json(str(out / "results.json"))
    assert c.labels == ["net0", "net1", "net2"] and c.rows[0].source == os.path.abspath(paths[0])
    assert "![significance](significance.png)" in (out / "report.md").read_text()
    assert "| a | net0 |" in capsys.readouterr().out
    # a finished report is kept unless --overwrite; then only invfast's files are replaced
    assert cli_main(["compare", *paths[:2], "--out", str(out)]) == 2
    assert "already holds a finished report" in capsys.readouterr().err
    (out / "notes.txt").write_text("mine")
    assert (
        cli_main(
            ["compare", f"x={paths[0]}", f"y={paths[1]}", paths[3], "--out", str(out), "--overwrite", "--no-plots"]
        )
        == 0
    )
    assert sorted(f for f in os.listdir(out) if not f.startswith(".")) == [
        "notes.txt",
        "report.md",
        "results.json",
        "table.csv",
    ]
    assert Comparison.from_json(str(out / "results.json")).labels == ["x", "y", "rn [layer2]", "rn [layer4]"]


def test_cli_refusals(measured, tmp_path, capsys, cli_env):
    runs, _ = measured
    paths = _save_runs(runs[:2], tmp_path / "runs")
    other = measure_invariance(
        small_net(seed=5),
        random_images(48, size=16, seed=4),
        [Rot90(), HFlip(), Brightness()],
        grid_size=4,
        batch_size=12,
        normalize=False,
        name="other",
    )
    odd = _save_runs([other], tmp_path / "runs")[0]
    out = tmp_path / "cmp"
    assert cli_main(["compare", paths[0], odd, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "images.id differs: 'net0' has" in err and "--allow-mismatch" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert cli_main(["compare", paths[0], odd, "--out", str(out), "--allow-mismatch", "--no-plots"]) == 0
    assert "compared despite" in capsys.readouterr().err
    doc = json.loads((out / "results.json").read_text())
    assert doc["mismatch"]["allowed"] and doc["mismatch"]["differences"][0]["field"] == "images.id"
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "thesis.tex").write_text("x")
    assert cli_main(["compare", *paths, "--out", str(busy)]) == 2
    assert "holds other files" in capsys.readouterr().err and os.listdir(busy) == ["thesis.tex"]
    assert cli_main(["compare", paths[0], "--out", str(tmp_path / "one")]) == 2
    assert "at least 2" in capsys.readouterr().err
    assert cli_main(["compare", *paths, "--out", str(tmp_path / "p"), "--probes", "nobody:t=/absent.json"]) == 2
    assert cli_main(["compare", *paths, "--out", str(tmp_path / "q"), "--probes", "net0:t=" + str(tmp_path)]) == 2


def test_a_symlink_in_a_finished_comparison_is_refused_and_its_target_untouched(measured, tmp_path, capsys, cli_env):
    runs, _ = measured
    paths = _save_runs(runs[:2], tmp_path / "runs")
    out = tmp_path / "cmp"
    assert cli_main(["compare", *paths, "--out", str(out), "--no-plots"]) == 0
    capsys.readouterr()
    precious = tmp_path / "precious.md"
    precious.write_text("mine")
    (out / "report.md").unlink()
    (out / "report.md").symlink_to(precious)
    assert cli_main(["compare", *paths, "--out", str(out), "--no-plots", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "report.md" in err and len(err.strip().splitlines()) == 1
    assert precious.read_text() == "mine" and (out / "report.md").is_symlink()


def test_comparable_runs_say_how_many_images_were_measured_of_those_listed(rng):
    """Issue 62: a folder of 19 photographs and a README.txt read 'the same 20 images'."""
    a, b = _result("A", rng), _result("B", rng)
    assert "the same 120 images (identity" in compare([a, b]).to_markdown()
    for r in (a, b):
        r.n_images = 119  # one listed file was unreadable
    assert "the same 119 images of 120 files listed; 1 unreadable (identity" in compare([a, b]).to_markdown()


def test_the_pictures_name_the_rows_of_the_table(rng):
    """Two runs of one model labelled ``own`` and ``random`` (issue 62): the radar's legend and the heatmap's rows
    name the table's rows, not the model they share."""
    pytest.importorskip("matplotlib")
    cmp = compare({"own": _result("resnet18", rng), "random": _result("resnet18", rng)})
    assert cmp.labels == ["own", "random"]
    radar = cmp.plot("radar")
    assert [t.get_text() for t in radar.axes[0].get_legend().get_texts()] == ["own", "random"]
    heat = cmp.plot("heatmap")
    assert {t.get_text() for t in heat.axes[0].get_yticklabels()} >= {"own", "random"}
