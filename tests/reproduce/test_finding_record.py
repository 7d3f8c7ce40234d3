"""CONTRIBUTING's "add a finding" recipe: one Finding record carries its stages, the models its verdict rests
on, its rule and the paper's value, and everything else (stages to run, learning dependencies, verdicts,
not-testable reasons, the over-seed verdict) is derived from it."""

import dataclasses

import numpy as np
import pytest

from invfast.evidence import (
    CONTRADICTED,
    NOT_TESTABLE,
    REPRODUCED,
    Criterion,
    Interval,
    judge,
    judge_over_seeds,
)
from invfast.reproduce import findings as FR
from invfast.reproduce.document import findings_of
from invfast.reproduce.finding import NOT_RUN, Finding
from invfast.reproduce.rules.common import Missing, accuracy_difference, need
from invfast.reproduce.sections.over_seeds import combine_over_seeds


def _judge(results):
    """A rule in the recipe's shape: a paired accuracy difference over images with a minimum effect."""
    scores = need(results, "toy-probe", "scores", what="the toy probe")
    iv = accuracy_difference(scores["A"], scores["B"], "E9", "A − B")
    return judge([Criterion("acc(A) − acc(B)", iv, minimum=0.05, paper=0.1)])


def _record():
    return Finding(
        "E9",
        "ericsson",
        "Tab. 9",
        "A beats B",
        "acc(A) − acc(B) ≥ 0.05 with CI > 0",
        ("toy-probe",),
        lambda r: {"summary": "toy"},
        "toy",
        judge=_judge,
        models=("toy-",),
        paper_value="+0.10 (Tab. 9)",
    )


def _results(rng, gap, learned=True, n=400):
    y_a = (rng.random(n) < 0.5 + gap).astype(int)
    y_b = (rng.random(n) < 0.5).astype(int)
    return {
        "toy-probe": {"scores": {"A": {"oof_correct": y_a.tolist()}, "B": {"oof_correct": y_b.tolist()}}},
        "toy-train": {"models": {"toy-a": {"ratio": 1.5 if learned else 1.0, "learned": learned}}},
    }


@pytest.fixture
def registered(monkeypatch):
    rec = _record()
    monkeypatch.setattr(FR, "FINDINGS", (*FR.FINDINGS, rec))
    monkeypatch.setitem(FR.SPEC_IDS, "E9", "A beats B")
    return rec


def test_the_record_is_the_only_place_a_finding_is_declared(registered):
    assert FR.by_id("E9") is registered
    assert FR.stages_for(["E9"]) == ("toy-probe",)
    assert FR.resting_on("toy-a") == ("E9",) and "E9" not in FR.resting_on("default")
    assert any(line.startswith("E9 ") for line in FR.listing())


def test_verdicts_follow_the_rule_the_learning_precondition_and_missing_numbers(registered, rng):
    seed_results = [_results(rng, 0.3), _results(rng, 0.3), _results(rng, 0.3)]
    per_seed = [findings_of(r, [registered]) for r in seed_results]
    assert [fs[0]["status"] for fs in per_seed] == [REPRODUCED] * 3
    got = combine_over_seeds(per_seed, [0, 1, 2])[0]
    assert got["label"] == "reproduced, 3 of 3 seeds" and got["paper_value"] == "+0.10 (Tab. 9)"
    crit = got["per_seed_verdict"]["0"]["criteria"][0]
    assert crit["paper"] == 0.1 and crit["minimum"] == 0.05 and crit["interval"]["low"] > 0
    # a model the verdict rests on did not learn: not testable, naming it
    weak = findings_of(_results(rng, 0.3, learned=False), [registered])[0]
    assert weak["status"] == NOT_TESTABLE and "toy-a learned" in weak["verdict"]["why"]
    # a number the rule needs is missing: not testable, naming it
    learned = _results(rng, 0.3)["toy-train"]
    gone = findings_of({"toy-probe": {}, "toy-train": learned}, [registered])[0]
    assert gone["status"] == NOT_TESTABLE and gone["verdict"]["why"] == "needs the toy probe"
    # a model the verdict rests on has no learning number: not testable, whatever the rule says
    unchecked = findings_of({"toy-probe": _results(rng, 0.3)["toy-probe"]}, [registered])[0]
    assert unchecked["status"] == NOT_TESTABLE and unchecked["verdict"]["why"] == "toy-* learned (no learning number)"
    # a stage that did not run: not run
    assert findings_of({}, [registered])[0]["status"] == NOT_RUN


def test_the_rule_fails_on_its_control(registered, rng):
    # the control: B as good as A (B's right answers are A's, on other images) must not reproduce on any seed;
    # the estimate is exactly 0, under the minimum effect, whatever the draw
    per_seed = []
    for _ in range(3):
        res = _results(rng, 0.0)
        a = res["toy-probe"]["scores"]["A"]["oof_correct"]
        res["toy-probe"]["scores"]["B"]["oof_correct"] = rng.permutation(a).tolist()
        per_seed.append(findings_of(res, [registered]))
    assert all(fs[0]["status"] != REPRODUCED for fs in per_seed)
    # and a reversed effect is contradicted
    rev = _results(rng, 0.0)
    rev["toy-probe"]["scores"]["A"]["oof_correct"] = np.zeros(400, int).tolist()  # A never right, B half the time
    assert findings_of(rev, [registered])[0]["status"] == CONTRADICTED


def test_missing_is_a_lookup_error_naming_what():
    with pytest.raises(Missing, match="the toy probe"):
        need({"a": {}}, "a", "b", what="the toy probe")
    assert dataclasses.is_dataclass(Finding)
    iv = Interval(0.2, 0.1, 0.3)
    assert judge_over_seeds([0], [judge([Criterion("x", iv, 0.1)])]).verdict == NOT_TESTABLE


def test_the_report_table_shows_every_seed_the_minimum_the_mean_and_the_papers_value(registered, rng):
    from invfast.reproduce.sections.over_seeds import criteria_table

    per_seed = [findings_of(_results(rng, 0.3, learned=s != 2), [registered]) for s in range(3)]
    f = combine_over_seeds(per_seed, [0, 1, 2])[0]
    assert f["label"] == "inconclusive: 2 reproduced, 1 not testable of 3 seeds"
    rows = criteria_table(f, [0, 1, 2])
    assert rows[0].startswith("| statistic | seed 0 | seed 1 | seed 2 | minimum | control | over seeds | paper |")
    row = rows[2].split(" | ")
    assert row[0] == "| acc(A) − acc(B)" and row[1].endswith("✓") and row[3].startswith("(")  # seed 2 not testable
    assert row[4] == "≥ 0.05" and row[7] == "0.1 |"
    mean = f["over_seeds"]["effects"]["acc(A) − acc(B)"]
    assert mean["method"] == "t" and mean["n"] == 2 and row[6].startswith(f"{mean['estimate']:.3f} [")


def _toy_train(ctx):
    return {"models": {}}


def _toy_probe(ctx):
    return {}


def _toy_disk(cfg):
    return 7.0 * cfg.run.seeds


def test_a_new_findings_stages_bring_their_disk_need(registered, monkeypatch):
    from invfast.reproduce import pipeline as R
    from invfast.reproduce import presets as RP
    from invfast.reproduce import stages as S
    from invfast.reproduce.stage import Stage

    train = Stage("toy-train", _toy_train, writes=("toy/",), disk_mb=_toy_disk)
    probe = Stage("toy-probe", _toy_probe, needs=("toy-train",))
    stages = (*S.STAGES, train, probe)
    cfg = RP.preset("tiny", {"run.findings": ("E9",)})
    # E9's stages alone: 20 MiB of records and reports, and toy-train's 14 MiB on each of the 2 seeds
    assert R.disk_estimate_mb(cfg, stages) == pytest.approx(20 + 2 * 14)
    both = RP.preset("tiny", {"run.findings": ("E9", "S2")})
    s2 = R.disk_estimate_mb(RP.preset("tiny", {"run.findings": ("S2",)}), S.STAGES)
    assert R.disk_estimate_mb(both, stages) == pytest.approx(s2 + 2 * 14)
    # a stage that writes must say how much
    with pytest.raises(ValueError, match=r"stage 'toy-train' writes toy/: declare disk_mb"):
        Stage("toy-train", _toy_train, writes=("toy/",))


def test_a_findings_test_families_are_checked_when_a_run_starts(monkeypatch, tmp_path):
    from invfast.reproduce import pipeline as R
    from invfast.reproduce import presets as RP

    rec = dataclasses.replace(_record(), test_families=("appearance",))
    monkeypatch.setattr(FR, "FINDINGS", (*FR.FINDINGS, rec))
    monkeypatch.setitem(FR.SPEC_IDS, "E9", "A beats B")
    FR.check_families(("E9",), "hue")  # an appearance transform: enough
    with pytest.raises(ValueError, match=r"has no appearance transform; E9 compares the appearance family: add one"):
        FR.check_families(("E9", "S2"), "rotation")
    FR.check_families(("S2",), "rotation")  # S2 compares no families
    cfg = RP.preset(
        "tiny", {"run.findings": ("E9",), "measurement.transforms": "rotation"}
    )  # a configuration may hold it ...
    with pytest.raises(ValueError, match="E9 compares the appearance family"):  # ... a run refuses it first
        R.reproduce(cfg, str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="test_families must be a tuple of spatial, appearance"):
        dataclasses.replace(_record(), test_families=("texture",))


def test_the_end_to_end_check_names_a_model_the_stages_did_not_make():
    """tests/reproduce/reproduce_helpers.unresolved_model_keys, which the tiny runs assert empty, on made-up verdicts: a
    misspelt key and a pattern no learning number matched are named; a run's own keys are not."""
    from reproduce_helpers import unresolved_model_keys

    def seed(*names):
        pre = [{"name": f"{n} learned", "met": True, "detail": "1.50× its baseline"} for n in names]
        pre.append({"name": "s3-* learned", "met": False, "detail": "no learning number"})
        return {
            "findings": [
                {"id": "E1", "verdict": {"preconditions": pre}},
                {"id": "S3", "verdict": {"preconditions": pre}},
            ]
        }

    doc = {"per_seed": {"0": seed("default", "spatial", "appearance"), "1": seed("default", "spatail", "appearance")}}
    assert unresolved_model_keys(doc) == ["E1 seed 1: spatial", "S3 seed 0: s3-", "S3 seed 1: s3-"]
    doc["per_seed"]["0"]["findings"].append({"id": "E2", "status": "not run"})  # a finding that did not run
    assert unresolved_model_keys(doc) == ["E1 seed 1: spatial", "S3 seed 0: s3-", "S3 seed 1: s3-"]
