"""Speicher et al.'s findings in ``invfast reproduce`` (S1-S8): every stage end to end on the tiny preset,
each verdict against numbers built to pass and to fail, and the statistics behind them against scipy."""

import json
import math

import numpy as np
import pytest
from reproduce_helpers import unresolved_model_keys
from scipy import stats as st

from invfast.cli import main
from invfast.evidence import OVER_SEED_VERDICTS
from invfast.reproduce import findings as FR
from invfast.reproduce import presets as RP
from invfast.reproduce.finding import NOT_RUN
from invfast.reproduce.sections import base as B
from invfast.reproduce.sections import categories as S67
from invfast.reproduce.sections import class_transfer as S5
from invfast.reproduce.sections import equivariance as S2
from invfast.reproduce.sections import factors as S1
from invfast.reproduce.sections import irrelevant as S34
from invfast.reproduce.stages import categories as CAT
from invfast.reproduce.stages import irrelevant as IRR
from invfast.reproduce.stages import transfer as TR

STATUSES = {*OVER_SEED_VERDICTS, NOT_RUN}


def _scores(mean, jitter=0.02, offset=0):
    pattern = np.array([0.0, 1.0, -1.0, 0.5, -0.5, 0.25, -0.25])[offset : offset + 5]
    folds = (mean + jitter * (pattern - pattern.mean())).tolist()
    return {"mean": float(np.mean(folds)), "std": float(np.std(folds)), "fold_scores": folds}


@pytest.fixture(scope="module")
def speicher_run(tmp_path_factory):
    import torch

    out = tmp_path_factory.mktemp("speicher") / "report"
    threads = torch.get_num_threads()
    try:
        args = ["reproduce", "--preset", "tiny", "--paper", "speicher", "--out", str(out), "--no-progress"]
        assert main([*args, "--threads", "1", "--set", "run.seeds=1"]) == 0
    finally:
        torch.set_num_threads(threads)
    return out


def _numbers(obj):
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, (int, float)):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _numbers(v)


def _training_records(run):
    """The training records of S1's, S8's and the transfer models, from the cache's stage results."""
    out = {}
    for path in sorted((run / "cache" / "stages").glob("*.json")):
        name = path.stem
        rec = json.loads(path.read_text())["result"]
        if name.startswith("transfer-train-"):
            out[f"transfer-{rec['source']}"] = rec
        elif name.startswith(("s1-train-", "s8-train")):
            out.update(rec["models"])
    return out


def test_every_speicher_finding_runs_on_the_tiny_preset(speicher_run):
    doc = json.loads((speicher_run / "results.json").read_text())
    assert [f["id"] for f in doc["findings"]] == [f"S{k}" for k in range(1, 9)]
    assert all(f["status"] in STATUSES - {NOT_RUN} for f in doc["findings"])
    assert all(math.isfinite(v) for v in _numbers(doc))
    assert unresolved_model_keys(doc) == []  # every model a verdict rests on is one the stages made
    # only the stages the selection needs: no MoCo pretraining, no invariance measurement
    assert not any(k.startswith(("pretrain-", "measure", "probes")) for k in doc["timings"])
    report = (speicher_run / "report.md").read_text()
    for title in ("— S1", "— S2", "— S3", "— S4", "— S5", "— S6", "— S7", "— S8"):
        assert title in report
    for fig in doc["figures"].values():
        assert (speicher_run / fig).stat().st_size > 1000
    cfg = RP.preset("tiny")
    # S1: every factor value, a same and a different model each, probed on the target
    assert set(doc["factors"]["factors"]) == {"size", "arch", "classes"}
    assert list(doc["factors"]["factors"]["arch"]) == list(cfg.speicher.s1_archs)
    assert list(doc["factors"]["factors"]["classes"]) == ["subset", "disjoint", "same", "superset"]
    # S6 / S7: one model per category and 'none'; sensitivities for both kinds at the three OOD levels
    assert set(doc["categories"]["accuracy"]) == {*cfg.speicher.categories, "none", "untrained"}  # S6: its control row
    for kind in ("image", "random"):
        assert set(doc["ood"]["sensitivity"][kind]) == {"in distribution", "mild OOD", "strong OOD"}
    # S1's and S8's models (and the transfer models they reuse) train to the 0.9 criterion or the cap, which is said
    records = _training_records(speicher_run)
    assert {"transfer-same", "transfer-different", "transfer-superset"} <= set(records)
    for key, rec in records.items():
        assert rec["level"] == 0.9 and rec["stopped"] in ("criterion", "cap"), (key, rec)
        assert rec["epochs_trained"] <= rec["epochs"] and (rec["stopped"] == "cap") == (
            rec["epochs_trained"] == rec["epochs"]
        )
        if rec["stopped"] == "criterion":
            assert rec["ncm_trained"] >= 0.9
    # every supervised model's learning check is recorded
    learned = doc["learned"]["0"]
    assert {"transfer-same", "s1-arch-vit-same", "s3-C+O-O", "cat-random-none", "s5-oplus"} <= set(learned)


def test_the_default_pair_is_one_model_pair_seen_by_s1_s2_and_s8(speicher_run):
    """The transfer experiment's same / different models are S1's pair at every default factor value, S2's
    model (its D_transforms is S1's target), and S8's model of the target's |T| types: the same numbers."""
    doc = json.loads((speicher_run / "results.json").read_text())
    f = doc["factors"]["factors"]
    rows = [f["size"]["1"], f["arch"]["resnet18-cifar"], f["classes"]["disjoint"]]
    assert all(r["same"]["model"] == "transfer-same" and r["different"]["model"] == "transfer-different" for r in rows)
    assert rows[0] == rows[1] == rows[2]
    assert doc["equivariance"]["scores"]["transforms"]["fold_scores"] == rows[0]["same"]["fold_scores"]
    k = str(doc["config"]["speicher"]["transfer_transforms"])
    assert doc["nested"]["models"][k] == "transfer-same"
    assert doc["nested"]["accuracy"][k][k]["fold_scores"] == rows[0]["same"]["fold_scores"]


# ---------------------------------------------------------------------------------------------- statistics
def test_unpaired_is_welchs_t_and_trend_is_spearman(rng):
    a, b = rng.normal(0.6, 0.05, 5), rng.normal(0.5, 0.08, 5)
    u = B.unpaired(a, b)
    ref = st.ttest_ind(a, b, equal_var=False)
    assert u["t"] == pytest.approx(ref.statistic) and u["diff"] == pytest.approx(a.mean() - b.mean())
    one_sided = ref.pvalue / 2 if ref.statistic > 0 else 1 - ref.pvalue / 2
    assert (u["status"] == B.REPRODUCED) == (one_sided <= 0.05 and u["diff"] > 0)
    x, y = rng.random(9), rng.random(9)
    t = B.trend(x, y)
    r = st.spearmanr(x, y)
    assert t["rho"] == pytest.approx(r.statistic) and t["p"] == pytest.approx(r.pvalue)
    assert B.trend([0, 1, 2, 3, 4, 5], [0.1, 0.2, 0.3, 0.5, 0.6, 0.9])["status"] == B.REPRODUCED
    assert B.trend([0, 1, 2], [0.1, 0.3, 0.2])["status"] == B.DIRECTION
    assert B.trend([0, 1, 2], [0.3, 0.2, 0.1])["status"] == B.NOT


# ---------------------------------------------------------------------------------------------- verdicts
def _factor_rows(same, diff):
    return {str(k): {"same": _scores(s), "different": _scores(d)} for k, (s, d) in enumerate(zip(same, diff))}


def test_s1_compares_the_within_pair_gap_with_the_spread_across_values():
    good = {"size": _factor_rows([0.8, 0.82, 0.85], [0.5, 0.52, 0.55]), "arch": _factor_rows([0.7, 0.8], [0.4, 0.5])}
    r = S1.check_s1({"factors": good})
    assert r["status"] == B.REPRODUCED
    assert r["gaps"]["size"]["within"] == pytest.approx(0.3) and r["gaps"]["size"]["between"] == pytest.approx(0.05)
    mixed = {**good, "classes": _factor_rows([0.5, 0.9], [0.45, 0.85])}  # class relationship dominates here
    assert S1.check_s1({"factors": mixed})["status"] == B.PARTLY


def test_s2_needs_transfer_to_new_objects_near_the_training_distribution():
    good = {"all": _scores(0.9), "transforms": _scores(0.88), "objects": _scores(0.5), "none": _scores(0.45)}
    assert S2.check_s2({"scores": good})["status"] == B.REPRODUCED
    far = {**good, "transforms": _scores(0.7)}  # better than D_objects, but 0.2 below D_all
    assert S2.check_s2({"scores": far})["status"] == B.PARTLY
    assert S2.check_s2({"scores": {**good, "transforms": _scores(0.4)}})["status"] == B.NOT


def test_s3_s4_follow_the_numbers():
    xy = ["C/C", "C+O/C", "C+O/O", "O/O"]
    acc = {m: {t: _scores(0.5) for t in xy} for m in xy}
    acc["O/O"]["C+O/O"], acc["C+O/C"]["C+O/O"] = _scores(0.8), _scores(0.3)
    acc["C/C"]["C+O/C"], acc["C+O/O"]["C+O/C"] = _scores(0.7), _scores(0.3)
    sens = {m: {"object": 0.5, "base": 0.5} for m in xy}
    sens["C+O/C"]["object"], sens["C+O/O"]["base"] = 0.2, 0.2
    # S3's description compares each C+O model with the model trained on the same label without the object
    # (not with the model trained on the probed label: that comparison it could not fail)
    summary = S34.check_s3({"accuracy": acc, "sensitivity": sens})["summary"]
    assert "objects on C+O: (C, C) 0.500 vs (C+O, C) 0.300" in summary
    assert "base classes on C+O: (O, O) 0.500 vs (C+O, O) 0.300" in summary
    alpha = [{"value": a, "accuracy_O": _scores(0.2 + 0.7 * a)} for a in (0, 0.2, 0.4, 0.6, 0.8, 1.0)]
    beta = [{"value": b, "accuracy_O": _scores(0.9 if b == 0 else 0.3)} for b in (0, 0.2, 0.6, 1.0)]
    assert S34.check_s4({"alpha": alpha, "beta": beta})["status"] == B.REPRODUCED
    flat = [{"value": b, "accuracy_O": _scores(0.3, offset=k % 2)} for k, b in enumerate((0, 0.2, 0.6, 1.0))]
    assert S34.check_s4({"alpha": alpha, "beta": flat})["status"] == B.PARTLY


def test_s5_oplus_near_native_on_each_and_below_the_composition_model():
    names = ["T1", "T2", "oplus", "circ"]
    acc = {m: {d: _scores(0.3) for d in names} for m in names}
    for d in ("T1", "T2"):
        acc[d][d] = _scores(0.9)
        acc["oplus"][d] = _scores(0.85)
    acc["circ"]["circ"] = _scores(0.8)
    assert S5.check_s5({"accuracy": acc})["status"] == B.REPRODUCED
    acc["oplus"]["T1"] = _scores(0.4)  # closes only 0.1 of the 0.6 gap: direction only
    r = S5.check_s5({"accuracy": acc})
    assert r["status"] == B.PARTLY and r["checks"]["⊕ near the native model on D_T1"] == B.DIRECTION


def test_s6_hard_columns_and_the_distance_ratio():
    cats = ["translate", "rotate", "scale", "hflip", "hue+brightness+contrast"]
    hard = {"translate": 0.3, "rotate": 0.35, "hue+brightness+contrast": 0.4}
    acc = {m: {c: _scores(1.0 if m == c else hard.get(c, 0.9)) for c in cats} for m in [*cats, "none"]}
    ratio = {m: {c: acc[m][c]["mean"] * 3 for c in cats} for m in [*cats, "none"]}
    ratio["untrained"] = {c: 1.0 for c in cats}
    assert S67.check_s6({"categories": cats, "accuracy": acc, "distance_ratio": ratio})["status"] == B.REPRODUCED
    acc["translate"]["scale"] = acc["rotate"]["scale"] = acc["hflip"]["scale"] = _scores(0.1)
    r = S67.check_s6({"categories": cats, "accuracy": acc, "distance_ratio": ratio})
    assert r["status"] == B.PARTLY and r["checks"]["colour jitter among the 3 lowest columns"] == B.NOT


def test_s7_diagonal_and_baseline_per_level():
    cats = ["translate", "rotate", "blur"]

    def block(diag, other, none):
        rows = {m: {c: (diag if m == c else other) for c in cats} for m in cats}
        return {**rows, "none": {c: none for c in cats}, "untrained": {c: 0.9 for c in cats}}

    levels = ("in distribution", "mild OOD", "strong OOD")
    good = {k: {lv: block(0.1, 0.5, 0.6) for lv in levels} for k in CAT.KINDS}
    assert S67.check_s7({"categories": cats, "sensitivity": good})["status"] == B.REPRODUCED
    worse = {k: {lv: block(0.7, 0.5, 0.6) for lv in levels} for k in CAT.KINDS}
    assert S67.check_s7({"categories": cats, "sensitivity": worse})["status"] == B.NOT


# ---------------------------------------------------------------------------------------------- data
def test_transfer_family_sets_by_name():
    cfg = RP.preset("quick")
    sv = TR.split_of(cfg)
    assert TR.transform_set(cfg, "first:3") == tuple(sv.target_transforms)
    assert set(TR.transform_set(cfg, "first:6")) == set(sv.target_transforms) | set(sv.other_transforms)
    assert set(TR.object_set(cfg, "target-half")) < set(sv.target_objects)
    ds = TR.transfer_dataset(cfg, "val", 20, "target", "target")
    ref = sv.target("val", n=20)  # the transfer experiment's own target set
    assert (ds.generate(range(20))[0] == ref.generate(range(20))[0]).all()
    with pytest.raises(ValueError, match="object set must be one of"):
        TR.object_set(cfg, "nothing")


def test_irrelevant_feature_sets_keep_train_and_test_apart():
    cfg = RP.preset("tiny")
    train, _ = IRR.base_set(cfg, "train", 40)
    test, _ = IRR.base_set(cfg, "test", 40)
    assert not any(bool((train[i] == test[j]).all()) for i in range(40) for j in range(40))
    objects_only = IRR.irrelevant_dataset(cfg, "train", 40, "O", "O")
    x, y, p = objects_only.generate(range(10))
    assert (p["object_label"] >= 0).all() and (y == p["object_label"]).all()
    base_only = IRR.irrelevant_dataset(cfg, "train", 40, "C", "C")
    assert (base_only.generate(range(10))[2]["object_label"] == -1).all()


def test_speicher_config_is_checked():
    with pytest.raises(ValueError, match="nested_sizes must lie in 1..6"):
        RP.preset("quick", {"speicher.nested_sizes": (1, 7)})
    with pytest.raises(ValueError, match="s1_archs"):
        RP.preset("quick", {"speicher.s1_archs": ("resnet18-cifar", "prompt-vit")})
    with pytest.raises(ValueError, match="categories: 'spin'"):
        RP.preset("quick", {"speicher.categories": ("rotate", "spin")})
    with pytest.raises(ValueError, match="betas must start at 0"):
        RP.preset("quick", {"speicher.betas": (0.2, 1.0)})
    with pytest.raises(ValueError, match="base_images must be 'builtin' or 'folder:PATH'"):
        RP.preset("quick", {"speicher.base_images": "cifar"})
    assert FR.stages_for(["S2", "S8"]) == ("s2-probe", "s8-probe", "transfer-probe")
