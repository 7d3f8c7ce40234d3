"""``invfast reproduce``: the tiny configuration end to end (report structure, every number finite),
resume without recomputation, interrupted runs, configuration mismatch, and the statistics behind
the verdict against independent references (scipy, colorsys)."""

import colorsys
import dataclasses
import json
import math
import os
import shutil
import sys

import numpy as np
import pytest

from invfast.cli import main
from invfast.evidence import (
    CONTRADICTED,
    MIXED,
    NOT_TESTABLE,
    OVER_SEED_VERDICTS,
    SEED_VERDICTS,
    Criterion,
    Interval,
    SeedVerdict,
    judge,
    judge_over_seeds,
    not_testable,
)
from invfast.reproduce import findings as FR
from invfast.reproduce import pipeline as R
from invfast.reproduce import presets as RP
from invfast.reproduce import sections as RS
from invfast.reproduce import stages as S
from invfast.reproduce.finding import NOT_RUN
from invfast.reproduce.folders import check_disk
from invfast.reproduce.sections import amortised as C13
from invfast.reproduce.sections import fusion as F3
from invfast.reproduce.sections import invariances as F1
from invfast.reproduce.sections import nested as S8
from invfast.reproduce.sections import over_seeds as OS
from invfast.reproduce.sections import summary as SUM
from invfast.reproduce.sections import task_preferences as F2
from invfast.reproduce.sections.base import NOT, PARTLY, REPRODUCED, paired

STATUSES = {*OVER_SEED_VERDICTS, NOT_RUN}
from reproduce_helpers import unresolved_model_keys


def run_cli(*args):
    """``invfast reproduce ARGS`` on one torch thread (tiny models gain nothing from more, and a
    loaded machine loses a lot), restoring the thread count afterwards."""
    import torch

    threads = torch.get_num_threads()
    try:
        return main(["reproduce", *args, "--no-progress", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)


def _stage_mtimes(cache):
    d = os.path.join(cache, "stages")
    return {n: os.stat(os.path.join(d, n)).st_mtime_ns for n in sorted(os.listdir(d))}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce") / "report"
    assert run_cli("--preset", "tiny", "--out", str(out)) == 0
    return out


def _numbers(obj, path="$"):
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return
    if isinstance(obj, (int, float)):
        yield path, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}[{i}]")


def test_tiny_end_to_end_report(tiny_run):
    out = tiny_run
    doc = json.loads((out / "results.json").read_text())
    nums = list(_numbers(doc))
    assert len(nums) > 500
    bad = [(p, v) for p, v in nums if not math.isfinite(v)]
    assert not bad, bad[:5]
    assert unresolved_model_keys(doc) == []  # every model a verdict rests on is one the stages made
    # E2's kernel-ridge probes: every regression task, the three policies, out-of-fold predictions per image
    for seed_doc in doc["per_seed"].values():
        kernel = seed_doc["stages"]["probes-kernel"]
        assert sorted(kernel) == ["colour", "position", "rotation"]
        for task in kernel.values():
            assert task["probe"] == "kernel ridge" and sorted(task["scores"]) == ["Appearance", "Default", "Spatial"]
            assert all(len(s["oof_prediction"]) == task["n"] == len(task["y"]) for s in task["scores"].values())
    # every model, transform, task and transfer source is there
    models = ["Random", "Default", "Spatial", "Appearance"]
    assert sorted(doc["invariance"]["cosine"]) == sorted(models)
    import invfast.transforms as T

    for m in models:
        assert set(doc["invariance"]["cosine"][m]) == set(T.TEST_TRANSFORMS)
        assert all(v is not None for v in doc["invariance"]["cosine"][m].values())
    for task in ("identity", "position", "rotation", "colour"):
        sc = doc["probes"][task]["scores"]
        assert set(sc) == set(models) | {"Spa+App", "Def+Spa+App"}
        for s in sc.values():
            assert len(s["fold_scores"]) == doc["config"]["probe"]["folds"]
            assert s["mean"] == pytest.approx(np.mean(s["fold_scores"]))
            assert s["std"] == pytest.approx(np.std(s["fold_scores"]))
    assert doc["probes"]["identity"]["kind"] == "classification"
    assert 0.0 <= doc["probes"]["identity"]["scores"]["Default"]["mean"] <= 1.0
    assert set(doc["transfer"]["scores"]) == {"random", "same", "different", "superset"}
    setup = doc["transfer"]["setup"]
    assert not set(setup["source_objects"]) & set(setup["target_objects"])
    assert not set(setup["target_transforms"]) & set(setup["other_transforms"])
    assert set(setup["sources"]["superset"]) == set(setup["target_transforms"]) | set(setup["other_transforms"])
    # the tiny preset runs the amortised model too: interpolation and learned i in [0, 1]
    am = doc["amortised"]
    assert [p["i"] for p in am["interpolation"]["points"]][:3] == [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]
    for v in am["learned_i"].values():
        assert len(v["i"]) == 2 and all(0.0 <= x <= 1.0 for x in v["i"])
    # findings: the default selection, each with a status computed from the numbers, and a verdict naming each
    assert [f["id"] for f in doc["findings"]] == ["E1", "E2", "E3", "S8", "C1", "C3"] == doc["findings_selected"]
    assert all(f["status"] in STATUSES for f in doc["findings"])
    for f in doc["findings"]:
        assert f"{f['id']} ({f['label']})" in doc["verdict"]
        assert f["label"].startswith(f["status"]) and "of 2 seeds" in f["label"]
        for v in f["per_seed_verdict"].values():  # every seed's verdict says why when it is not testable
            assert v["verdict"] in SEED_VERDICTS and (v["verdict"] != NOT_TESTABLE or v["why"])
    assert doc["verdict"] == SUM.verdict(doc["findings"])
    # seeds, machine, versions, time per stage
    assert doc["seeds"]["master"] == 0 and len(doc["seeds"]) > 5
    assert doc["environment"]["versions"]["torch"]
    assert set(doc["timings"]) == set(R.stage_names(RP.preset("tiny")))
    # every seed's numbers are recorded, not only the first's
    assert set(doc["per_seed"]) == {"0", "1"}
    assert doc["per_seed"]["0"]["stages"]["probes"] == doc["probes"]
    assert doc["per_seed"]["1"]["stages"]["probes"] != doc["probes"]
    assert [f["status"] for f in doc["per_seed"]["1"]["findings"]] == [
        f["per_seed_status"]["1"] for f in doc["findings"]
    ]
    # learning curves: the held-out identity probe from the initialisation (step 0) to the end, and the loss
    keys = ("default", "spatial", "appearance", "amortised", "default-b", "default-c")  # E3's two more Defaults
    assert set(doc["pretraining"]) == set(keys)
    steps = {k: doc["pretraining"][k]["steps"] for k in keys}
    for key, run in doc["pretraining"].items():
        probe = run["curve"]["probe"]
        assert probe[0]["step"] == 0 and probe[-1]["step"] == steps[key], key
        assert all(0.0 <= r["linear"] <= 1.0 and 0.0 <= r["knn"] <= 1.0 and r["effective_rank"] >= 1.0 for r in probe)
        assert run["curve"]["loss"] and run["final_loss"] == run["curve"]["loss"][-1]["loss"]
    from invfast.reproduce.sections import learning as LR

    for seed in ("0", "1"):
        got = doc["learned"][seed]
        idn = doc["per_seed"][seed]["stages"]["probes"]["identity"]["scores"]
        for m, label in (("default", "Default"), ("spatial", "Spatial"), ("appearance", "Appearance")):
            assert got[m]["ratio"] == pytest.approx(idn[label]["mean"] / idn["Random"]["mean"])
            assert got[m]["learned"] == (got[m]["ratio"] >= LR.LEARNED_RATIO)
    md = (out / "report.md").read_text()
    assert "## Do the models learn?" in md and "figures/learning.png" in md and "| epoch | default linear / kNN" in md
    for seed, seed_doc in doc["per_seed"].items():  # every seed's row: the loss at its peak and at the end
        runs = {k[len("pretrain-") :]: v for k, v in seed_doc["stages"].items() if k.startswith("pretrain-")}
        assert runs, seed
        for key, run in runs.items():
            loss = [r["loss"] for r in run["curve"]["loss"]]
            # issue 57: how collapsed the final head's outputs are, in the record and at the end of the row
            assert -1.0 <= run["head"]["cos"] <= 1.0 and 0.0 <= run["head"]["mean_share"] <= 1.0 + 1e-9, key
            row = next(x for x in md.splitlines() if x.startswith(f"| {seed} | {key} | {max(loss):.2f} → "))
            assert f"{loss[-1]:.2f} |" in row and row.endswith(f"| {run['head']['cos']:.3f} |"), row
            pr = run["curve"]["probe"]
            assert f"| {pr[0]['knn']:.3f} → {pr[-1]['knn']:.3f} |" in row, row
            assert f"| {pr[0]['effective_rank']:.1f} → {pr[-1]['effective_rank']:.1f} |" in row, row
    for heading in (
        "## Verdict",
        "## Invariances (Table 1) — E1",
        "## Probes (Table 2) — E2, E3",
        "## Same, different and nested transformations (transfer) — S8",
        "## Amortised invariance — C1, C3",
        "## Findings in detail",
        "## Machine, versions, time",
    ):
        assert heading in md
    assert doc["verdict"] in md
    assert "standardised cosine similarity" in md and "| Def+Spa+App |" in md
    for rel in doc["figures"].values():
        p = out / rel
        assert p.exists() and p.stat().st_size > 1000 and p.read_bytes()[:4] == b"\x89PNG"
        assert f"]({rel})" in md or rel == "figures/heatmap.png"


def test_resume_recomputes_nothing(tiny_run, capsys):
    cache = str(tiny_run / "cache")
    before = _stage_mtimes(cache)
    ckpts = {
        p: os.stat(p).st_mtime_ns
        for p in (
            os.path.join(cache, "pretrain", k, "model.pt") for k in ("default", "spatial", "appearance", "amortised")
        )
    }
    rc = run_cli("--preset", "tiny", "--out", str(tiny_run))
    assert rc == 0
    assert _stage_mtimes(cache) == before
    assert {p: os.stat(p).st_mtime_ns for p in ckpts} == ckpts
    doc = json.loads((tiny_run / "results.json").read_text())
    assert all(t["cached"] for t in doc["timings"].values())
    md = (tiny_run / "report.md").read_text()
    assert "cached from an earlier invocation" in md and "Stage results from other code" not in md


def test_a_report_names_the_stages_another_commit_computed(tiny_run):
    """A stage record stamped by other code (a cache kept across an upgrade) is named in the report's header
    and its time table; its numbers are still read (the stamp is provenance, not part of the result)."""
    path = tiny_run / "cache" / "stages" / "probes.json"
    original = path.read_text()
    rec = json.loads(original)
    rec["computed_by"] = "invfast 0.3.0, commit 0ld0000"
    path.write_text(json.dumps(rec))
    try:
        assert run_cli("--preset", "tiny", "--out", str(tiny_run)) == 0
        md = (tiny_run / "report.md").read_text()
        header = md.split("## Verdict")[1]
        assert "Stage results from other code" in header and "invfast 0.3.0, commit 0ld0000: 1 (probes)" in header
        assert "| probes |" in md and "computed by invfast 0.3.0, commit 0ld0000 |" in md
        doc = json.loads((tiny_run / "results.json").read_text())
        assert doc["timings"]["probes"]["computed_by"] == "invfast 0.3.0, commit 0ld0000"
    finally:
        path.write_text(original)


def test_config_mismatch_is_refused(tiny_run, capsys):
    rc = main(["reproduce", "--preset", "tiny", "--set", "data.objects=5", "--out", str(tiny_run), "--no-progress"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "different configuration" in err and "objects: folder has 4, this run has 5" in err
    rc = main(["reproduce", "--preset", "quick", "--out", str(tiny_run), "--no-progress"])
    assert rc == 2 and "preset: folder has 'tiny', this run has 'quick'" in capsys.readouterr().err


def test_interrupted_run_keeps_finished_stages(tiny_run, tmp_path, monkeypatch):
    out = tmp_path / "copy"
    shutil.copytree(tiny_run, out)
    cache = str(out / "cache")
    os.remove(os.path.join(cache, "stages", "probes.json"))
    os.remove(out / "results.json")
    before = _stage_mtimes(cache)
    real = S.STAGES

    def interrupted(ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(
        S, "STAGES", tuple(dataclasses.replace(st, run=interrupted) if st.name == "probes" else st for st in real)
    )
    assert run_cli("--preset", "tiny", "--out", str(out)) == 130
    assert _stage_mtimes(cache) == before and not (out / "results.json").exists()
    monkeypatch.setattr(S, "STAGES", real)
    assert run_cli("--preset", "tiny", "--out", str(out)) == 0
    after = _stage_mtimes(cache)
    assert {k: v for k, v in after.items() if k != "probes.json"} == before and "probes.json" in after
    doc = json.loads((out / "results.json").read_text())
    assert [k for k, t in doc["timings"].items() if not t["cached"]] == ["probes"]
    orig = json.loads((tiny_run / "results.json").read_text())
    assert doc["probes"] == orig["probes"]  # the same numbers as the uninterrupted run


def test_bad_input(tmp_path, capsys):
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main(["reproduce", "--preset", "tiny", "--out", str(foreign), "--no-progress"]) == 2
    assert "not from invfast reproduce" in capsys.readouterr().err
    assert (foreign / "notes.txt").read_text() == "mine" and len(os.listdir(foreign)) == 1
    assert main(["reproduce", "--set", "colour=3", "--out", str(tmp_path / "x")]) == 2
    assert "unknown config field 'colour'" in capsys.readouterr().err
    assert main(["reproduce", "--set", "data.objects=many", "--out", str(tmp_path / "x")]) == 2
    assert "cannot read 'many' as int" in capsys.readouterr().err
    assert main(["reproduce", "--preset", "tiny", "--set", "data.transforms=rotate", "--out", str(tmp_path / "x")]) == 2
    assert "must include" in capsys.readouterr().err
    assert (
        main(["reproduce", "--preset", "tiny", "--set", "data.backgrounds=builtin:0", "--out", str(tmp_path / "x")])
        == 2
    )
    assert "backgrounds must be 'procedural:N', 'builtin:N'" in capsys.readouterr().err
    assert (
        main(["reproduce", "--preset", "tiny", "--set", "data.backgrounds=photos:3", "--out", str(tmp_path / "x")]) == 2
    )
    assert "backgrounds must be" in capsys.readouterr().err
    fresh_on_a_bank = ["--set", "data.fresh_backgrounds=true", "--set", "data.backgrounds=procedural:8"]
    assert main(["reproduce", "--preset", "tiny", *fresh_on_a_bank, "--out", str(tmp_path / "x")]) == 2
    assert "fresh_backgrounds draws each view's background as uniform noise" in capsys.readouterr().err
    assert main(["reproduce", "--preset", "tiny", "--set", "probe.kernel_n=3", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "probe.kernel_n must be 0 (all probe images) or an int in [2 x probe.folds, data.n_probe]" in err
    assert main(["reproduce", "--preset", "tiny", "--set", "pretrain_epochs=3", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err  # a flat name of before the sections: one line naming the new one
    assert "config field 'pretrain_epochs' is now 'pretrain.epochs'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
    with pytest.raises(OSError, match="not enough disk space"):
        check_disk(str(tmp_path / "new" / "dir"), need_mb=1e12)
    assert main(["reproduce", "--preset", "tiny", "--print-config", "--out", str(tmp_path / "y")]) == 0
    assert json.loads(capsys.readouterr().out)["data"]["objects"] == 4


def test_paired_against_scipy():
    from scipy import stats

    rng = np.random.default_rng(3)
    for _ in range(20):
        a, b = rng.normal(size=5), rng.normal(size=5) + rng.normal() * 0.5
        got = paired(a, b)
        ref = stats.ttest_rel(a, b, alternative="greater")
        assert got["t"] == pytest.approx(ref.statistic, rel=1e-10)
        assert got["diff"] == pytest.approx(np.mean(a - b))
        significant = ref.pvalue <= 0.05
        assert (got["status"] == REPRODUCED) == (significant and got["diff"] > 0)
        assert (got["status"] == NOT) == (got["diff"] <= 0)


def _probe_doc(means):
    """Probe results with 5 folds around the given means (tiny fold noise)."""
    noise = np.array([-0.002, 0.001, 0.0, 0.002, -0.001])
    return {
        task: {
            "kind": "classification" if task == "identity" else "regression",
            "scores": {
                m: {"mean": v, "std": 0.0015, "fold_scores": (v + noise * (1 + k)).tolist()}
                for k, (m, v) in enumerate(ms.items())
            },
        }
        for task, ms in means.items()
    }


def test_findings_follow_the_numbers():
    models = ["Random", "Default", "Spatial", "Appearance", "Spa+App", "Def+Spa+App"]
    good = {
        "identity": dict(zip(models, [0.2, 0.9, 0.85, 0.6, 0.88, 0.9])),
        "position": dict(zip(models, [0.1, 0.3, 0.2, 0.8, 0.75, 0.7])),
        "rotation": dict(zip(models, [0.1, 0.3, 0.2, 0.7, 0.7, 0.65])),
        "colour": dict(zip(models, [0.3, 0.5, 0.9, 0.6, 0.88, 0.85])),
    }
    f2, f3 = F2.check_e2(_probe_doc(good)), F3.check_e3(_probe_doc(good))
    assert f2["status"] == REPRODUCED and f3["status"] == REPRODUCED
    bad = {t: {m: (1.0 - v if m != "Random" else v) for m, v in ms.items()} for t, ms in good.items()}
    f2b, f3b = F2.check_e2(_probe_doc(bad)), F3.check_e3(_probe_doc(bad))
    assert f2b["status"] == NOT and f3b["status"] == NOT
    fam = {"rotation": "spatial", "crop": "spatial", "hue": "appearance", "blur": "appearance"}
    cos = {
        "Spatial": {"rotation": 0.8, "crop": 0.7, "hue": 0.2, "blur": 0.5},
        "Default": {"rotation": 0.6, "crop": 0.6, "hue": 0.4, "blur": 0.6},
        "Appearance": {"rotation": 0.3, "crop": 0.4, "hue": 0.8, "blur": 0.7},
        "Random": {"rotation": 0.5, "crop": 0.5, "hue": 0.5, "blur": 0.5},
    }
    f1 = F1.check_e1({"cosine": cos, "families": fam, "best": {"rotation": "Spatial", "hue": "Appearance"}})
    assert f1["status"] == REPRODUCED and f1["per_transform_wins"] == {"spatial": [2, 2], "appearance": [2, 2]}
    cos["Default"]["rotation"] = 0.95
    assert F1.check_e1({"cosine": cos, "families": fam, "best": {}})["status"] == PARTLY
    cos["Spatial"], cos["Appearance"] = cos["Appearance"], cos["Spatial"]
    assert F1.check_e1({"cosine": cos, "families": fam, "best": {}})["status"] == NOT
    pts = [
        {"i": [1 - t, t], "family_cosine": {"spatial": 0.8 - 0.4 * t, "appearance": 0.3 + 0.5 * t}}
        for t in (0.0, 0.25, 0.5, 0.75, 1.0)
    ]
    assert C13.check_c1({"points": pts})["status"] == REPRODUCED
    flat = [dict(p, family_cosine={"spatial": 0.5, "appearance": 0.3 + 0.5 * p["i"][1]}) for p in pts]
    assert C13.check_c1({"points": flat})["status"] == PARTLY
    backwards = [dict(p, family_cosine={"spatial": 0.4 + 0.4 * p["i"][1], "appearance": 0.5}) for p in pts]
    assert C13.check_c1({"points": backwards})["status"] == NOT
    li = {"identity": {"i": [0.9, 0.2]}, "position": {"i": [0.1, 0.8]}, "rotation": {"i": [0.2, 0.9]}}
    assert C13.check_c3(li)["status"] == REPRODUCED
    assert C13.check_c3({**li, "rotation": {"i": [0.95, 0.1]}})["status"] == PARTLY
    assert C13.check_c3({k: {"i": [0.5, 0.5]} for k in li})["status"] == NOT


def _scores(mean, jitter=0.01, k=5, offset=0):
    """A probe result: ``k`` fold scores around ``mean`` (a fixed, non-constant pattern)."""
    pattern = np.array([0.0, 1.0, -1.0, 0.5, -0.5, 0.25, -0.25][offset : offset + k])
    folds = (mean + jitter * (pattern - pattern.mean())).tolist()
    return {"mean": float(np.mean(folds)), "std": float(np.std(folds)), "fold_scores": folds}


def test_s8_holds_when_supersets_keep_and_subsets_lose_accuracy():
    sizes = [1, 3, 6]
    good = {str(i): {str(j): _scores(0.9 if i >= j else 0.5, offset=i % 2) for j in sizes} for i in sizes}
    r = S8.check_s8({"sizes": sizes, "accuracy": good})
    assert r["status"] == REPRODUCED and len(r["checks"]) == 6
    bad = {str(i): {str(j): _scores(0.9 if i == j else 0.4, offset=i % 2) for j in sizes} for i in sizes}
    assert S8.check_s8({"sizes": sizes, "accuracy": bad})["status"] == PARTLY  # the subsets still lose
    flat = {str(i): {str(j): _scores(0.6, offset=i % 2) for j in sizes} for i in sizes}
    r = S8.check_s8({"sizes": sizes, "accuracy": flat})
    assert r["status"] == PARTLY and all(v == REPRODUCED for k, v in r["checks"].items() if "⊃" in k)


def test_colour_targets_against_colorsys():
    from invfast.synthetic import builtin_objects

    bank = builtin_objects(61).subset([0, 5])
    labels = np.array([0, 1, 0, 1])
    params = {"hue": np.array([0.0, 0.25, -0.4, 0.1]), "brightness": np.array([1.0, 1.0, 0.5, 1.5])}
    got = S.colour_targets(bank, labels, params)
    for j, c in enumerate(labels):
        full = bank.images[c].astype(np.float64) / 255.0
        acc, wsum = np.zeros(3), 0.0
        for px in full.reshape(-1, 4):
            if px[3] == 0:
                continue
            h, s, v = colorsys.rgb_to_hsv(*px[:3])
            rgb = np.clip(
                np.array(colorsys.hsv_to_rgb((h + params["hue"][j]) % 1.0, s, v)) * params["brightness"][j], 0, 1
            )
            acc += px[3] * rgb
            wsum += px[3]
        np.testing.assert_allclose(got[j], acc / wsum, atol=2e-3)


class _Payload:
    """A pickle that creates a marker file when unpickled without weights_only."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("where", ["model", "transfer-checkpoint"])
def test_crafted_cache_files_never_run_code(tmp_path, where):
    """A cache file whose unpickling would run code (here: create a marker file) is refused unread."""
    import torch

    cfg = RP.preset("tiny")
    cache = tmp_path / "cache"
    marker = tmp_path / "marker"
    ctx = S.Context(cfg=cfg, cache=str(cache), progress=False)
    if where == "model":
        path = ctx.path("pretrain", "default", "model.pt")
        torch.save({"encoder": _Payload(str(marker))}, path)
        with pytest.raises(ValueError):
            S.load_stage_model(ctx, "default")
    else:
        n = cfg.pretrain.batch_size
        np.save(ctx.path("transfer", "same_images.npy"), np.zeros((n, 3, cfg.data.size, cfg.data.size), np.uint8))
        np.save(ctx.path("transfer", "same_labels.npy"), np.arange(n) % 2)
        from invfast.io import atomic_torch_save
        from invfast.pretrain.trainer import OWN_FILES
        from invfast.reproduce.stages.transfer import transfer_train
        from invfast.runtime.run_folder import RunFolder

        # a folder that a pretraining run marked as its own (so the load path is reached); even with a valid
        # checksum trailer, the content must be plain tensors and containers
        RunFolder(ctx.path("transfer", "same"), "pretrain", overwrite=True).own(*OWN_FILES)
        atomic_torch_save({"model": _Payload(str(marker))}, ctx.path("transfer", "same", "checkpoint.pt"))
        with pytest.raises(ValueError, match="only tensors"):
            transfer_train(ctx, "same")
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------- seeds, determinism
def test_over_seeds_in_the_tiny_report(tiny_run):
    doc = json.loads((tiny_run / "results.json").read_text())
    ov = doc["over_seeds"]
    assert ov["seeds"] == [0, 1] and doc["config"]["run"]["seeds"] == 2
    for name, v in ov["statistics"].items():
        vals = np.asarray(v["values"])
        assert len(vals) == 2, name
        assert v["mean"] == pytest.approx(vals.mean()) and v["sd"] == pytest.approx(vals.std(ddof=1))
    for f in doc["findings"]:
        k = [g["id"] for g in doc["findings"]].index(f["id"])
        per = [ov["findings"][str(s)][k]["status"] for s in (0, 1)]
        assert list(f["per_seed_status"].values()) == per
        seeds = [SeedVerdict.from_dict(f["per_seed_verdict"][str(s)]) for s in (0, 1)]
        assert f["status"] == judge_over_seeds([0, 1], seeds).verdict
    # the identity gain over Random is tested over the shared folds on each seed (scipy's paired t)
    from scipy import stats as st

    seed1 = json.loads((tiny_run / "cache" / "seed-1" / "stages" / "probes.json").read_text())
    for seed, probes in ((0, doc["probes"]), (1, seed1.get("result", seed1))):
        idn = probes["identity"]["scores"]
        best = max(("Default", "Spatial", "Appearance"), key=lambda m: idn[m]["mean"])
        t = st.ttest_rel(idn[best]["fold_scores"], idn["Random"]["fold_scores"]).statistic
        got = ov["statistics"]["identity probe: paired t over folds, that model − Random"]["values"][seed]
        assert got == pytest.approx(t) if np.isfinite(t) else abs(got) in (0.0, 1e9)
    # the second seed ran every stage in its own cache folder, with its own data
    assert (tiny_run / "cache" / "seed-1" / "stages" / "probes.json").exists()
    assert set(doc["timings"]) == set(R.stage_names(RP.preset("tiny")))
    assert any(k.startswith("seed-1/") for k in doc["timings"])
    assert "## Over seeds" in (tiny_run / "report.md").read_text()


def test_combine_over_seeds_follows_the_seed_verdicts():
    def seed(word):
        if word == NOT_RUN:
            return {"status": NOT_RUN, "summary": "x"}
        if word == NOT_TESTABLE:
            v = not_testable("needs X")
        else:
            iv = {REPRODUCED: Interval(0.2, 0.1, 0.3), CONTRADICTED: Interval(-0.2, -0.3, -0.1)}[word]
            v = judge([Criterion("effect", iv, 0.1)])
        return {"status": v.verdict, "summary": "x", "verdict": v.to_dict()}

    def comb(*words):
        return OS.combine_over_seeds([[seed(w)] for w in words], list(range(len(words))))[0]

    R_, C_, T_, X_ = REPRODUCED, CONTRADICTED, NOT_TESTABLE, NOT_RUN
    assert comb(R_, R_, R_)["label"] == "reproduced, 3 of 3 seeds"
    assert comb(R_, R_, C_)["status"] == MIXED  # one seed against is enough to stop "reproduced"
    assert comb(C_, C_, R_)["status"] == C_
    assert comb(R_, T_, T_)["status"] == T_
    assert comb(X_, X_)["status"] == X_
    part = comb(R_, X_, R_)  # not run on one seed (another selection resumed it): that seed is not testable
    assert part["label"] == "inconclusive: 2 reproduced, 1 not testable of 3 seeds"
    assert part["per_seed_verdict"]["1"]["why"] == "not run on this seed"
    f = comb(R_, C_, R_)
    assert f["per_seed_status"] == {"0": R_, "1": C_, "2": R_}
    assert f["label"] == "mixed: 2 reproduced, 1 contradicted of 3 seeds"
    assert f["over_seeds"]["effects"]["effect"]["method"] == "t"


def test_same_machine_and_seed_give_identical_numbers(tiny_run, tmp_path):
    # the second run puts its stages in 2 processes at once: the numbers must not depend on that
    out = tmp_path / "again"
    assert run_cli("--preset", "tiny", "--out", str(out), "--workers", "2") == 0
    a = json.loads((tiny_run / "results.json").read_text())
    b = json.loads((out / "results.json").read_text())
    assert (a["config"]["run"]["workers"], b["config"]["run"]["workers"]) == (1, 2)
    for key in ("invariance", "probes", "transfer", "amortised", "features", "findings", "verdict", "over_seeds"):
        assert a[key] == b[key], key
    assert list(a["timings"]) == list(b["timings"])  # every stage of every seed, in plan order


def _stage_a(ctx):
    with open(ctx.path("a.txt"), "w") as f:
        f.write(str(ctx.cfg.run.seed))
    return {"pid": os.getpid()}


def _stage_b(ctx):
    with open(os.path.join(ctx.cache, "a.txt")) as f:  # written by stage a of the same seed
        return {"seed_seen": int(f.read()), "pid": os.getpid()}


def _tiny_disk(cfg):
    return 0.01


def _stage_fails(ctx):
    raise ValueError(f"stage failed on seed {ctx.cfg.run.seed}")


def test_parallel_stages_respect_needs_and_raise_a_workers_error(tmp_path):
    cfg = RP.preset("tiny")
    a, b = R.Stage("a", _stage_a, writes=("a.txt",), disk_mb=_tiny_disk), R.Stage("b", _stage_b, needs=("a",))
    jobs = [(c, str(tmp_path / f"s{c.run.seed}"), R.plan([b, a], c)) for c in R.seed_configs(cfg)]
    results, timings = R.run_parallel(jobs, workers=2)
    assert [r["b"]["seed_seen"] for r in results] == [c.run.seed for c in R.seed_configs(cfg)]
    assert all(list(r) == ["a", "b"] for r in results) and all(list(t) == ["a", "b"] for t in timings)
    assert os.getpid() not in {r[k]["pid"] for r in results for k in r}  # the stages ran in the workers
    # finished stages are cached: a second call reads them back without running anything
    again, t2 = R.run_parallel(jobs, workers=2)
    assert again == results and all(t["a"]["cached"] for t in t2)
    bad = [(c, str(tmp_path / f"f{c.run.seed}"), [a, R.Stage("fails", _stage_fails, needs=("a",))]) for c in [cfg]]
    with pytest.raises(ValueError, match="stage failed on seed 0"):
        R.run_parallel(bad, workers=2)


def test_workers_are_checked_and_do_not_block_a_resume(tmp_path):
    with pytest.raises(ValueError, match=r"workers must be an integer in \[1, 256\], got 0"):
        RP.preset("quick", {"run.workers": 0})
    with pytest.raises(ValueError, match=r"needs run.workers=1 \(--workers 1\)"):
        RP.preset("gpu", {"run.workers": 2})
    cfg = RP.preset("quick", {"run.workers": 3})
    assert "run.workers" not in cfg.claim_dict() and cfg.to_dict()["run"]["workers"] == 3


def _no_rotational_symmetry(alpha, name):
    from scipy import ndimage

    a = alpha.astype(np.float64) / 255.0
    for angle in (60, 72, 90, 120, 180):
        r = ndimage.rotate(a, angle, reshape=False, order=1)
        iou = np.minimum(a, r).sum() / np.maximum(a, r).sum()
        assert iou < 0.93, (name, angle, iou)


def test_builtin_main_objects_have_no_rotational_symmetry():
    from invfast.synthetic.banks import builtin_objects

    cfg = RP.preset("quick", {"data.object_style": "builtin"})
    ids = S.main_objects(cfg)
    assert len(ids) == cfg.data.objects == len(set(ids))
    bank = builtin_objects(max(61, max(ids) + 1))
    for i in ids:
        _no_rotational_symmetry(bank.images[i][..., 3], bank.names[i])
    assert (
        S.main_objects(RP.preset("quick", {"data.object_style": "builtin", "data.asymmetric_objects": False}))
        == cfg.data.objects
    )


@pytest.mark.parametrize("style", ["silhouettes", "shared-palette"])
def test_objects_differ_in_shape_and_texture_not_in_colour(style):
    """With the built-in objects' own colours a colour histogram told the objects apart; the default
    styles draw every object in one colour (silhouettes) or one colour pair (shared palette)."""
    import colorsys

    from invfast.reproduce.stages import data as D
    from invfast.synthetic.banks import builtin_objects

    cfg = RP.preset("quick", {"data.object_style": style})
    bank = S.main_objects(cfg)
    assert len(bank) == cfg.data.objects
    builtin = builtin_objects(61)
    if style == "silhouettes":
        rgb = np.round(np.array(colorsys.hsv_to_rgb(*D.SILHOUETTE_HSV)) * 255)
        shapes = [n.split("-")[1] for n in bank.names]
        assert len(set(shapes)) == len(shapes)  # distinct outlines
        for img, shape in zip(bank.images, shapes):
            assert (img[..., :3] == rgb).all()  # one colour everywhere
            ref = next(b for b, n in zip(builtin.images, builtin.names) if n.split("-")[1] == shape)
            np.testing.assert_array_equal(img[..., 3], ref[..., 3])  # the built-in shape's mask
    else:
        light, dark = (np.array(colorsys.hsv_to_rgb(*c)) for c in D.PALETTE_HSV)
        names = [n[len("palette-") :] for n in bank.names]
        assert len(set(names)) == len(names)
        for img, name in zip(bank.images, names):
            px = img[..., :3][img[..., 3] > 128].astype(np.float64) / 255
            w = np.clip((px - light) @ (dark - light) / ((dark - light) @ (dark - light)), 0, 1)
            np.testing.assert_allclose(px, light + w[:, None] * (dark - light), atol=1.5 / 255)  # on the shared pair
            ref = builtin.images[builtin.names.index(name)]
            np.testing.assert_array_equal(img[..., 3], ref[..., 3])
    # the rotation set uses only objects whose rotation shows in the image
    for img, name in zip(S.rotation_objects(cfg).images, S.rotation_objects(cfg).names):
        _no_rotational_symmetry(img[..., 3], name)
    with pytest.raises(ValueError, match="18 distinct shapes"):
        RP.preset("quick", {"data.objects": 19})
    with pytest.raises(ValueError, match="object_style"):
        RP.preset("quick", {"data.object_style": "painted"})


def test_rotation_task_has_its_own_set_where_only_rotation_varies(tmp_path):
    import torch

    from invfast.synthetic import Transforms2D

    cfg = RP.preset("tiny")
    ctx = S.Context(cfg, str(tmp_path), progress=False)
    info = S.make_data(ctx)
    assert info["splits"]["rotation"]["transforms"] == ["rotate"]
    assert info["splits"]["probe"]["transforms"] == list(cfg.data.transforms)
    ds = Transforms2D(
        objects=S.rotation_objects(cfg),
        transforms=("rotate",),
        size=cfg.data.size,
        n=cfg.data.n_probe,
        seed=cfg.run.seed,
        split="val",
        backgrounds=cfg.main_backgrounds(),
    )
    images, _, params = ds.generate(range(cfg.data.n_probe))
    assert torch.equal(ctx.images("rotation"), images)
    for k in ("x", "y", "scale", "hue"):
        assert float(params[k].double().std()) == 0.0, k
    angle = np.deg2rad(params["angle"].double().numpy())
    target = ctx.array("data", "probe_target_rotation.npy")
    np.testing.assert_allclose(target, np.stack([np.cos(angle), np.sin(angle)], 1), atol=1e-12)
    assert target[:, 1].std() > 0.5  # angles cover the circle
    # the other tasks' targets come from the probe set, in which position varies
    assert ctx.array("data", "probe_target_position.npy").std(0).min() > 0.05
    assert [S.task_set(t) for t in S.TASKS] == ["probe", "probe", "rotation", "probe"]


@pytest.mark.parametrize(
    "spec, count, procedural",
    [("procedural:3", 3, 1.0), ("builtin:3", 3, 0.25), ("builtin", 867, 0.25), ("uniform-random", None, None)],
)
def test_main_data_draws_from_the_configured_backgrounds(tmp_path, spec, count, procedural):
    import torch

    from invfast.synthetic import Transforms2D
    from invfast.synthetic.banks import builtin_backgrounds

    cfg = RP.preset("tiny", {"data.backgrounds": spec, "data.fresh_backgrounds": spec == "uniform-random"})
    ctx = S.Context(cfg, str(tmp_path), progress=False)
    assert S.make_data(ctx)["backgrounds"] == spec
    images = ctx.images("probe")
    ds = Transforms2D(
        objects=S.main_objects(cfg),
        transforms=cfg.data.transforms,
        size=cfg.data.size,
        n=cfg.data.n_probe,
        seed=cfg.run.seed,
        split="val",
        backgrounds=cfg.main_backgrounds(),
    )
    _, _, params = ds.generate(range(cfg.data.n_probe))
    assert torch.equal(images, ds.generate(range(cfg.data.n_probe))[0])
    if count is None:
        return
    bank = builtin_backgrounds(count, cfg.data.size, procedural_fraction=procedural)
    used = params["background"].long()
    assert int(used.max()) < count
    # corner pixels far from the (centred, at most image-sized) object show the bank's background
    corner = images[:, :, 0, 0].long()
    far = (params["x"] - 0.5).abs() + (params["y"] - 0.5).abs() < 0.2
    match = (corner == bank[used, :, 0, 0].long()).all(1)
    assert float(match[far & (params["scale"] < 0.6)].float().mean()) > 0.9


def test_gpu_preset_is_the_default_with_cuda(monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert main(["reproduce", "--print-config", "--out", str(tmp_path / "g")]) == 0
    cfg = json.loads(capsys.readouterr().out)
    run = cfg["run"]
    assert run["preset"] == "gpu" and run["device"] == "cuda" and "C1" in run["findings"] and run["seeds"] >= 3
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["reproduce", "--print-config", "--out", str(tmp_path / "q")]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["preset"] == "quick"
    with pytest.raises(ValueError, match="no CUDA device"):
        R.reproduce(RP.preset("gpu"), str(tmp_path / "g2"), progress=False)
    assert not (tmp_path / "g2").exists()


# ---------------------------------------------------------------------------------------------- structure
def test_stages_are_records_in_an_order_that_respects_their_needs():
    tiny, quick = RP.preset("tiny"), RP.preset("quick", {"run.findings": ("E1", "E2", "E3", "S8")})
    order = R.plan(S.STAGES, tiny)
    names = [st.name for st in order]
    assert len(names) == len(set(names)) == len(S.STAGES)
    for i, st in enumerate(order):
        assert set(st.needs) <= set(names[:i]), st.name
    assert not any(
        n.startswith("amortised") or n == "pretrain-amortised"
        for n in (st.name for st in R.selected_plan(S.STAGES, quick))
    )
    selected = [st.name for st in R.selected_plan(S.STAGES, tiny)]
    assert set(selected) < set(names) and not any(n.startswith(("s1-", "s3-", "categories-")) for n in selected)
    assert R.stage_names(tiny) == selected + [f"seed-1/{n}" for n in selected]

    def run(ctx):
        return {}

    a, b, c = R.Stage("a", run), R.Stage("b", run, needs=("a",)), R.Stage("c", run, needs=("b",))
    assert [st.name for st in R.plan([c, b, a], tiny)] == ["a", "b", "c"]  # needs first, list order otherwise
    with pytest.raises(ValueError, match="two stages are called 'a'"):
        R.plan([a, a], tiny)
    with pytest.raises(ValueError, match="needs 'x', which no stage provides"):
        R.plan([R.Stage("d", run, needs=("x",))], tiny)
    with pytest.raises(ValueError, match="which this configuration does not run"):
        R.plan([R.Stage("a", run, when=lambda cfg: False), b], tiny)
    with pytest.raises(ValueError, match="cycle"):
        R.plan([R.Stage("a", run, needs=("b",)), b], tiny)
    with pytest.raises(ValueError, match="stage name"):
        R.Stage("has/slash", run)
    with pytest.raises(TypeError, match="tuple of non-empty strings"):
        R.Stage("e", run, needs="a")
    with pytest.raises(ValueError, match="needs itself"):
        R.Stage("e", run, needs=("e",))


def test_findings_and_sections_are_records():
    ids = [f.id for f in FR.FINDINGS]
    assert ids == [i for i in FR.SPEC_IDS if i in ids] and len(set(ids)) == len(ids)  # SPEC order, once each
    assert {f"S{k}" for k in range(1, 9)} <= set(ids) and {"E1", "E2", "E3", "C1", "C3"} <= set(ids)
    stage_names = {st.name for st in S.STAGES}
    sections = {s.name for s in RS.SECTIONS}
    for f in FR.FINDINGS:
        assert set(f.stages) <= stage_names and f.section in sections, f.id
    assert len(sections) == len(RS.SECTIONS)
    # a finding whose stages did not run is 'not run', without calling its check
    assert FR.FINDINGS[0].evaluate({})["status"] == NOT_RUN


def test_selection_by_id_and_by_paper(capsys, tmp_path):
    assert FR.select() == ("E1", "E2", "E3", "S8", "C1", "C3")
    assert FR.select("s3, S2") == ("S2", "S3")  # SPEC order, case-insensitive
    assert FR.select(paper="speicher") == tuple(f"S{k}" for k in range(1, 9))
    assert FR.select(paper="all") == tuple(f.id for f in FR.FINDINGS)
    assert FR.select("c7") == ("C7",) and FR.select(paper="chavhan")[-1] == "C7"
    assert {f.id for f in FR.FINDINGS} == set(FR.SPEC_IDS)  # every finding of SPEC §5 is tested
    with pytest.raises(ValueError, match="unknown finding 'X9'"):
        FR.select("X9")
    with pytest.raises(ValueError, match="lists an id twice"):
        FR.select("S2,S2")
    # only the stages the chosen findings need (and what those need) run
    cfg = RP.preset("tiny", {"run.findings": ("S2",)})
    want = ["transfer-data", "transfer-train-same", "transfer-train-different", "s2-probe"]
    assert [st.name for st in R.selected_plan(S.STAGES, cfg)] == want
    assert main(["reproduce", "--preset", "tiny", "--findings", "S5", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["findings"] == ["S5"]
    with pytest.raises(SystemExit) as both:  # argparse: the two options exclude each other
        main(["reproduce", "--preset", "tiny", "--findings", "S5", "--paper", "speicher", "--out", "x"])
    assert both.value.code == 2
    assert main(["reproduce", "--list-findings"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listing] == list(FR.SPEC_IDS)
    assert main(["reproduce", "--preset", "tiny", "--set", "amortised=true", "--out", str(tmp_path / "a")]) == 2
    assert "--paper chavhan" in capsys.readouterr().err
    # the selection is scheduling only: a folder resumes under another one
    assert "run.findings" not in RP.preset("tiny", {"run.findings": ("S2",)}).claim_dict()


def test_adding_a_stage_is_one_record(tiny_run, tmp_path, monkeypatch):
    """A new stage appended to STAGES runs once per seed after the stages it needs, is cached and
    timed like the others, and reruns compute nothing; the finished stages are not recomputed."""
    out = tmp_path / "copy"
    shutil.copytree(tiny_run, out)
    cache = str(out / "cache")
    before = _stage_mtimes(cache)
    calls = []

    def feature_norms(ctx):
        calls.append(ctx.cfg.run.seed)
        f = ctx.array(*S.feature_file("spatial", "probe"))
        path = ctx.path("extra", "norms.npy")
        np.save(path, np.linalg.norm(f, axis=1))
        return {"mean_norm": float(np.linalg.norm(f, axis=1).mean())}

    extra = R.Stage("feature-norms", feature_norms, needs=("features",), writes=("extra/",), disk_mb=_tiny_disk)
    monkeypatch.setattr(S, "STAGES", (*S.STAGES, extra))
    assert run_cli("--preset", "tiny", "--out", str(out)) == 0
    assert calls == [0, 1]
    after = _stage_mtimes(cache)
    assert {k: v for k, v in after.items() if k != "feature-norms.json"} == before
    rec = json.loads((out / "cache" / "stages" / "feature-norms.json").read_text())
    f = np.load(out / "cache" / "features" / "spatial.npy")
    assert rec["result"]["mean_norm"] == pytest.approx(float(np.linalg.norm(f, axis=1).mean()))
    assert (out / "cache" / "seed-1" / "extra" / "norms.npy").exists()
    doc = json.loads((out / "results.json").read_text())
    assert [k for k, t in doc["timings"].items() if not t["cached"]] == ["feature-norms", "seed-1/feature-norms"]
    assert doc["per_seed"]["1"]["stages"]["feature-norms"]["mean_norm"] > 0
    assert run_cli("--preset", "tiny", "--out", str(out)) == 0 and calls == [0, 1]


def test_an_old_cache_format_is_refused(tmp_path, capsys):
    out = tmp_path / "old"
    out.mkdir()
    (out / "config.json").write_text(
        json.dumps({"format": "invfast.reproduce/1", "config": RP.preset("tiny").to_dict()})
    )
    assert main(["reproduce", "--preset", "tiny", "--out", str(out), "--no-progress"]) == 2
    assert "another version of invfast reproduce" in capsys.readouterr().err


def test_under_trained_models_are_named_with_the_findings_that_rest_on_them():
    from invfast.reproduce.sections import learning as LR

    def probes(default, spatial, appearance, random=0.2):
        scores = {"Random": random, "Default": default, "Spatial": spatial, "Appearance": appearance}
        return {"identity": {"scores": {k: {"mean": v} for k, v in scores.items()}}}

    ai = {"identity": {"trained": {"mean": 0.3}, "init": {"mean": 0.2}}}  # its 5-fold probe, trained and at init
    r0 = LR.under_trained({"probes": probes(0.2, 0.3, 0.25), "pretrain-amortised": ai})
    assert [m for m, v in r0.items() if not v["learned"]] == ["default"]
    assert r0["spatial"]["ratio"] == pytest.approx(1.5) and r0["amortised"]["ratio"] == pytest.approx(1.5)
    r1 = LR.under_trained({"probes": probes(0.3, 0.3, 0.3)})
    assert all(v["learned"] for v in r1.values()) and "amortised" not in r1
    note = SUM.under_trained_note({"learned": {"0": r0, "1": r1}})
    assert "default on seed 0" in note and "Findings C4, E1, E2, E3, E4, E5 rest on this model" in note
    assert SUM.under_trained_note({"learned": {"1": r1}}) == ""


def test_learning_ratio_carries_its_standard_error_and_marks_a_clear_miss(rng):
    """The report's learning table: ratio ± SE from the probes' fold scores (numpy, ddof 1, first-order error
    propagation); ✗ below the line, ✗✗ where ratio + 2 SE is still below it; the verdict rule itself unchanged."""
    from invfast.reproduce.sections import learning as LR

    def folds(centre, spread):
        f = list(centre + spread * rng.standard_normal(5))
        return {"mean": float(np.mean(f)), "fold_scores": f}

    ai = {"identity": {"trained": folds(0.16, 0.01), "init": folds(0.13, 0.01)}}
    r = LR.under_trained({"pretrain-amortised": ai})["amortised"]
    a, b = (np.array(ai["identity"][k]["fold_scores"]) for k in ("trained", "init"))
    want = a.mean() / b.mean() * np.hypot(a.std(ddof=1) / 5**0.5 / a.mean(), b.std(ddof=1) / 5**0.5 / b.mean())
    assert r["ratio"] == pytest.approx(a.mean() / b.mean(), rel=1e-12) and r["se"] == pytest.approx(want, rel=1e-9)
    assert r["learned"] == (r["ratio"] >= LR.LEARNED_RATIO)
    assert LR._ratio_cell({"ratio": 1.36, "se": 0.14, "learned": True}) == "1.36 ± 0.14"
    assert LR._ratio_cell({"ratio": 1.16, "se": 0.06, "learned": False}) == "1.16 ± 0.06 ✗"  # 1.28 > 1.2
    assert LR._ratio_cell({"ratio": 0.97, "se": 0.05, "learned": False}) == "0.97 ± 0.05 ✗✗"  # 1.07 < 1.2
    assert LR._ratio_cell({"ratio": 1.1, "learned": False}) == "1.10 ✗"  # a results.json from before 'se'


def test_learning_curve_table_lists_every_probed_epoch_per_model(rng):
    from invfast.reproduce.sections import learning as LR

    def curve(epochs):
        return {
            "probe": [{"epoch": e, "linear": float(rng.uniform()), "knn": float(rng.uniform())} for e in epochs],
            "loss": [{"epoch": 0.0, "loss": 6.0}],
        }

    curves = {"default": curve([0.0, 2.0, 4.0, 5.0]), "amortised": curve([0.0, 2.0, 3.0])}
    rows = LR.curve_table(curves)
    assert rows[0] == "| epoch | default linear / kNN | amortised linear / kNN |"
    body = [r.strip("|").split("|") for r in rows[2:]]
    assert [float(r[0]) for r in body] == [0.0, 2.0, 3.0, 4.0, 5.0]
    for cells in body:
        e = float(cells[0])
        for key, cell in zip(curves, cells[1:]):
            hit = [r for r in curves[key]["probe"] if r["epoch"] == e]
            assert cell.strip() == (f"{hit[0]['linear']:.3f} / {hit[0]['knn']:.3f}" if hit else "–"), (key, e)


def test_moco_queue_size_is_the_library_default_or_a_multiple_of_the_batch():
    from invfast.pretrain import default_queue_size

    cfg = RP.preset("quick")
    assert (
        cfg.pretrain.queue_size == 0
        and cfg.moco_queue_size() == default_queue_size(cfg.data.n_pretrain, cfg.pretrain.batch_size) == 256
    )
    assert RP.preset("quick", {"pretrain.queue_size": 512}).moco_queue_size() == 512
    for bad in (-64, 100, True, 64.0):
        with pytest.raises(ValueError, match="queue_size must be 0"):
            RP.preset("quick", {"pretrain.queue_size": bad})


def test_head_norm_reaches_every_contrastive_model_and_old_folders_resume_without_it(tmp_path):
    from invfast.reproduce.stages.pretraining import amortised_method, policy_method

    cfg = RP.preset("tiny", {"pretrain.head_norm": "bn"})
    for method in (policy_method(cfg, "default"), amortised_method(cfg, "amortised")):
        assert {h.norm for h in method.online.heads} == {"bn"} and method.config()["head_norm"] == "bn"
    assert {h.norm for h in policy_method(RP.preset("tiny"), "spatial").online.heads} == {"none"}
    with pytest.raises(ValueError, match="head_norm must be one of none, bn, got 'layer'"):
        RP.preset("tiny", {"pretrain.head_norm": "layer"})
    assert "pretrain.head_norm" not in RP.preset("quick").claim_dict()  # folders of before hold none: they resume
    assert RP.preset("quick", {"pretrain.head_norm": "bn"}).claim_dict()["pretrain.head_norm"] == "bn"


def test_warmup_is_a_fraction_of_each_pretraining_run_and_old_folders_resume_without_it(tmp_path):
    from invfast.reproduce import ConfigMismatchError
    from invfast.reproduce.folders import claim_folder
    from invfast.reproduce.stages.context import Context
    from invfast.reproduce.stages.pretraining import train_config

    cfg = RP.preset("quick", {"pretrain.warmup": 0.1})
    ctx = Context(cfg, str(tmp_path), progress=False)
    steps = cfg.pretrain.epochs * (cfg.data.n_pretrain // cfg.pretrain.batch_size)
    assert train_config(
        ctx, "default", cfg.pretrain.epochs, cfg.data.n_pretrain, warmup=cfg.pretrain.warmup
    ).warmup_steps == (steps // 10)
    assert train_config(ctx, "transfer/x", 5, 1200).warmup_steps == 0  # supervised runs: no warm-up
    for bad in (-0.1, 1.0, True, "0.1"):
        with pytest.raises(ValueError, match="warmup must be a fraction"):
            RP.preset("quick", {"pretrain.warmup": bad})
    # a folder made before the field existed holds no 'warmup': it resumes at 0 and only at 0
    old = RP.preset("quick").claim_dict()
    assert "pretrain.warmup" not in old and cfg.claim_dict()["pretrain.warmup"] == 0.1
    claim_folder(str(tmp_path / "old"), old, "folder")
    claim_folder(str(tmp_path / "old"), RP.preset("quick").claim_dict(), "folder")
    with pytest.raises(ConfigMismatchError, match=r"warmup: folder has '<absent>', this run has 0.1"):
        claim_folder(str(tmp_path / "old"), cfg.claim_dict(), "folder")


@pytest.mark.parametrize("case", ["later default", "own settings", "both"])
def test_a_refused_folder_says_the_options_that_resume_it(tmp_path, case):
    """Issue 63: an older folder resumed only with its old values given by --set, and the error did not say so.
    The options the message names, read back through --set's own parser, resume the folder."""
    from invfast.reproduce import ConfigMismatchError

    ADDED_FIELDS = RP.ReproduceConfig.added_fields()
    from invfast.reproduce.folders import claim_folder

    made = (
        {"run.seed": 0}
        if case == "later default"
        else {"run.seed": 3, "pretrain.width": 16, "speicher.categories": ("translate", "hflip")}
    )
    saved = RP.preset("quick", made).claim_dict()
    if case != "own settings":  # made before vit.dim existed; today's run asks for another one
        saved.pop("vit.dim", None)
    claim_folder(str(tmp_path / "f"), saved, "folder", ADDED_FIELDS)
    now = RP.preset("quick", {"vit.dim": 96})
    with pytest.raises(ConfigMismatchError, match="to resume it as it was made, add: ") as err:
        claim_folder(str(tmp_path / "f"), now.claim_dict(), "folder", ADDED_FIELDS)
    options = str(err.value).split("add: ", 1)[1].rstrip(").").split(" ")
    overrides: dict = {}
    for opt, arg in zip(options[::2], options[1::2]):
        key, value = RP.parse_override(arg) if opt == "--set" else ("run." + opt.lstrip("-"), int(arg))
        overrides[key] = value
    assert ("--set" in options) and (case == "later default" or "--seed" in options)
    claim_folder(
        str(tmp_path / "f"), RP.preset("quick", {"vit.dim": 96, **overrides}).claim_dict(), "folder", ADDED_FIELDS
    )


def _stage_sleeps(ctx):
    with open(os.path.join(os.path.dirname(ctx.cache), "worker.pid"), "w") as f:
        f.write(str(os.getpid()))
    import time

    time.sleep(120)
    return {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_a_killed_run_leaves_no_worker_running(tmp_path):
    """A stage worker must not outlive a killed parent (it would go on writing into the cache)."""
    import signal
    import subprocess
    import time

    from test_reliability import _alive

    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import test_reproduce as T\n"
        "from invfast.reproduce import presets as C, pipeline as R\n"
        "cfg = C.preset('tiny')\n"
        "R.run_parallel([(cfg, sys.argv[2], [R.Stage('sleeps', T._stage_sleeps)])], workers=2)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script, os.path.dirname(__file__), str(tmp_path / "seed")])
    pid_file = tmp_path / "worker.pid"
    deadline = time.time() + 120
    while not pid_file.exists() and time.time() < deadline and parent.poll() is None:
        time.sleep(0.2)
    assert pid_file.exists(), "the worker never started its stage"
    time.sleep(0.2)
    worker = int(pid_file.read_text())
    assert _alive(worker)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 15
    while _alive(worker) and time.time() < deadline:
        time.sleep(0.2)
    alive = _alive(worker)
    if alive:
        os.kill(worker, signal.SIGKILL)
    assert not alive, "the stage worker outlived its killed parent"


def _stage_crashes_once(ctx):
    """Dies of SIGSEGV the first time (as a native crash would), succeeds when run again."""
    import signal

    flag = os.path.join(ctx.cache, "crashed-once")
    if not os.path.exists(flag):
        open(flag, "w").close()
        os.kill(os.getpid(), signal.SIGSEGV)
    return {"seed_seen": ctx.cfg.run.seed}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a worker killed by a signal")
def test_a_worker_killed_by_a_native_crash_stops_the_run_and_it_resumes(tmp_path):
    cfg = RP.preset("tiny")
    a = R.Stage("a", _stage_a, writes=("a.txt",), disk_mb=_tiny_disk)
    crash = R.Stage("crash", _stage_crashes_once, needs=("a",))
    jobs = [(cfg, str(tmp_path / "s0"), [a, crash])]
    with pytest.raises(R.StageWorkerDied, match=r"died .* \[seed 0: crash\].*run the same command again"):
        R.run_parallel(jobs, workers=2)  # multiprocessing.Pool waited forever here
    assert sorted(os.listdir(tmp_path / "s0" / "stages")) == ["a.json"]
    results, timings = R.run_parallel(jobs, workers=2)
    assert timings[0]["a"]["cached"] and not timings[0]["crash"]["cached"]
    assert results[0]["crash"] == {"seed_seen": cfg.run.seed}


def test_a_damaged_cache_file_is_named_with_the_fix_and_the_fix_works(tiny_run, tmp_path, capsys):
    out = tmp_path / "copy"
    shutil.copytree(tiny_run, out)
    cache = out / "cache"
    feats = cache / "features" / "default.npy"
    np.save(feats, np.array([{"not": "numbers"}], dtype=object), allow_pickle=True)
    (cache / "stages" / "probes.json").unlink()  # the probes stage reads the features again
    capsys.readouterr()
    assert run_cli("--preset", "tiny", "--out", str(out)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0] and "internal error" not in err[0]
    assert f"damaged cache file {feats}" in err[0] and str(cache / "stages" / "features.json") in err[0]
    feats.unlink()
    (cache / "stages" / "features.json").unlink()
    assert run_cli("--preset", "tiny", "--out", str(out)) == 0
    a = json.loads((tiny_run / "results.json").read_text())
    b = json.loads((out / "results.json").read_text())
    assert a["probes"] == b["probes"] and a["findings"] == b["findings"]


def test_the_disk_estimate_bounds_what_the_tiny_run_wrote(tiny_run):
    # the estimate (each selected stage's disk_mb on every seed) against the bytes the cache holds after the run
    cfg = RP.preset("tiny")
    wrote = sum(p.stat().st_size for p in (tiny_run / "cache").rglob("*") if p.is_file()) / 2**20
    need = R.disk_estimate_mb(cfg, S.STAGES)
    assert wrote <= need <= 2 * wrote + 20, (wrote, need)


def test_a_stage_that_cannot_make_its_model_is_refused_before_any_folder(capsys, tmp_path):
    # E5 reads the K = 5 amortised model: resnet34-cifar has no Hyper-ResNet (a C-finding check missed this)
    cfg = RP.preset("tiny", {"pretrain.arch": "resnet34-cifar", "run.findings": ("E5",)})
    with pytest.raises(ValueError, match=r"stage 'pretrain-amortised-k5' cannot make its model .*hyper-resnet34"):
        R.reproduce(cfg, str(tmp_path / "a"), progress=False)
    assert not (tmp_path / "a").exists()
    argv = ["reproduce", "--preset", "tiny", "--findings", "C3", "--set", "pretrain.arch=resnet34-cifar"]
    assert main([*argv, "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "cannot make its model" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_a_one_family_transform_selection_is_refused_where_a_finding_needs_both(capsys, tmp_path):
    assert (
        main(["reproduce", "--preset", "tiny", "--set", "measurement.transforms=hflip", "--out", str(tmp_path / "a")])
        == 2
    )
    err = capsys.readouterr().err
    assert "has no appearance transform; E1 and C1 compare" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a").exists()
    cfg = RP.preset(
        "tiny", {"measurement.transforms": "hflip", "run.findings": ("S8",)}
    )  # no finding of S8 measures families
    assert cfg.measurement.transforms == "hflip"
    with pytest.raises(ValueError, match="unknown transform"):
        RP.preset("tiny", {"measurement.transforms": "bogus"})


def test_the_commit_is_read_without_writing_to_the_checkout(tmp_path):
    """The report's commit comes from `git rev-parse` / `git status` in invfast's own checkout: neither may
    write there (a touched file made `git status` rewrite .git/index and create .git/index.lock)."""
    import shutil
    import subprocess

    from invfast.reproduce.provenance import git_commit

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "checkout"
    (repo / "invfast").mkdir(parents=True)
    init = repo / "invfast" / "__init__.py"
    init.write_text("x = 1\n")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for cmd in (["init", "-q"], ["add", "invfast"], ["commit", "-q", "-m", "c"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True, env=env, capture_output=True)
    os.utime(init, ns=(1, 1))  # stat data the index does not know: a plain `git status` refreshes the index
    index = repo / ".git" / "index"
    os.utime(index, ns=(10**18, 10**18))  # an index older than now: git refreshes it when it may write
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    commit = git_commit(str(init))
    assert commit and "modified" not in commit
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    assert not (repo / ".git" / "index.lock").exists()


@pytest.mark.parametrize(
    "text", ["[1, 2]", '{"format": "x", "config": [1]}', "\udcff"], ids=["list", "config-list", "bytes"]
)
def test_a_config_json_that_is_not_a_configuration_is_one_line(tmp_path, capsys, text):
    from invfast.cli import main

    out = tmp_path / "r"
    out.mkdir()
    (out / "config.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    assert main(["reproduce", "--preset", "tiny", "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "config.json" in err and "delete the folder or choose another one" in err and "internal error" not in err


def test_the_console_names_each_reason_once_in_one_short_line():
    from invfast.reproduce.pipeline import console_why

    seeds = [
        "a learned (1.00× its baseline); b learned (0.90× its baseline); ≥ 2000 sensitivity pairs: fewer: x 16, y 16",
        "a learned (1.10× its baseline); c learned (0.80× its baseline); ≥ 2000 sensitivity pairs: fewer: x 16",
        "needs the crossed S2 model",
        "every model trained to ≥ 0.9 (s8 0.41; test_accuracy not recorded)",
    ]
    line = console_why(seeds)
    assert line == (
        "not learned: a, b, c; ≥ 2000 sensitivity pairs; needs the crossed S2 model; every model trained to ≥ 0.9; "
        "details in report.md"
    )
    long = console_why([f"model-{i} learned (0.5× its baseline)" for i in range(60)])
    assert len(long) <= 160 + len("; details in report.md") and "…" in long
    assert console_why(["", ""]) == ""


def test_c6_times_whole_epochs_of_every_model_in_turns(tmp_path):
    """C6's stage times cost_epochs epochs of each model (SPEC 5.2: the median of >= 5), so its rule is testable."""
    out = tmp_path / "c6"
    assert run_cli("--preset", "tiny", "--findings", "C6", "--set", "run.seeds=1", "--out", str(out)) == 0
    doc = json.loads((out / "results.json").read_text())
    cost = next(iter(doc["per_seed"].values()))["stages"]["amortised-cost"]
    assert cost["timed_epochs"] == 5
    models = cost["models"]
    assert sorted(models) == ["amortised", "appearance", "default", "spatial"]
    assert {len(m["epoch_seconds"]) for m in models.values()} == {5}
    assert len({m["steps_per_epoch"] for m in models.values()}) == 1
    assert all(t > 0 for m in models.values() for t in m["epoch_seconds"])
    for m in models.values():
        median = sorted(m["epoch_seconds"])[2]
        assert m["seconds_per_step"] == pytest.approx(median / m["steps_per_epoch"])
    (c6,) = [f for f in next(iter(doc["per_seed"].values()))["findings"] if f["id"] == "C6"]
    assert c6["verdict"]["verdict"] != "not testable", c6["verdict"]


def test_s6_probes_the_untrained_network_as_its_control(tmp_path):
    """S6's rule compares with the untrained network's accuracy, so the stage probes it on every column."""
    out = tmp_path / "s6"
    assert run_cli("--preset", "tiny", "--findings", "S6", "--set", "run.seeds=1", "--out", str(out)) == 0
    doc = json.loads((out / "results.json").read_text())
    s6 = next(iter(doc["per_seed"].values()))["stages"]["s6-probe"]
    cats = s6["categories"]
    assert set(s6["accuracy"]) == {*cats, "none", "untrained"}
    n = {c: len(s6["accuracy"][cats[0]][c]["oof_correct"]) for c in cats}
    assert all(len(s6["accuracy"]["untrained"][c]["oof_correct"]) == n[c] for c in cats)
    assert "| untrained network (control) |" in (out / "report.md").read_text()


def test_s2_probes_the_crossed_model_on_all_four_sets(tmp_path):
    """S2's crossed design: the (O1, T2) model is probed on the four sets beside the (O1, T1) model."""
    out = tmp_path / "s2"
    assert run_cli("--preset", "tiny", "--findings", "S2", "--set", "run.seeds=1", "--out", str(out)) == 0
    doc = json.loads((out / "results.json").read_text())
    s2 = next(iter(doc["per_seed"].values()))["stages"]["s2-probe"]
    sets = ["all", "none", "objects", "transforms"]
    assert sorted(s2["accuracy"]) == ["different", "same"]
    assert all(sorted(s2["accuracy"][m]) == sets for m in s2["accuracy"])
    assert s2["scores"] == s2["accuracy"]["same"]
    for name in sets:
        a, b = (s2["accuracy"][m][name]["oof_correct"] for m in ("same", "different"))
        assert len(a) == len(b) > 0
    assert "| dataset | (O1, T1) model | (O1, T2) model |" in (out / "report.md").read_text()
    (s2_verdict,) = [f for f in next(iter(doc["per_seed"].values()))["findings"] if f["id"] == "S2"]
    assert "crossed" not in s2_verdict["verdict"]["why"]


def test_s5_scores_the_pairs_the_oplus_model_never_saw(tmp_path):
    """S5's rule reads each model's out-of-fold correctness on D_T1's O2 images and D_T2's O1 images."""
    from invfast.reproduce.stages.class_transfer import class_transfer_dataset

    out = tmp_path / "s5"
    assert run_cli("--preset", "tiny", "--findings", "S5", "--set", "run.seeds=1", "--out", str(out)) == 0
    doc = json.loads((out / "results.json").read_text())
    s5 = next(iter(doc["per_seed"].values()))["stages"]["s5-probe"]
    cfg = RP.preset("tiny", {"run.seeds": 1})
    n, k = cfg.speicher.transfer_n_target, cfg.speicher.s5_objects
    for d, group in (("T1", "O2"), ("T2", "O1")):
        labels = class_transfer_dataset(cfg, "val", n, d).generate(range(n))[1].numpy()
        shows = labels >= k if group == "O2" else labels < k
        for m in ("T1", "T2", "oplus"):
            want = np.asarray(s5["accuracy"][m][d]["oof_correct"])[shows]
            got = s5["unseen"][m][d]
            assert got["group"] == group and got["oof_correct"] == want.tolist()
            assert got["mean"] == pytest.approx(want.mean())
    (s5_verdict,) = [f for f in next(iter(doc["per_seed"].values()))["findings"] if f["id"] == "S5"]
    assert "never saw" not in s5_verdict["verdict"]["why"]


def test_c3_learns_i_from_five_starts_per_task(tmp_path):
    """C3's rule needs >= 5 restarts of the learned i per task, each with the score at i = (0.5, 0.5)."""
    out = tmp_path / "c3"
    assert run_cli("--preset", "tiny", "--findings", "C3", "--set", "run.seeds=1", "--out", str(out)) == 0
    doc = json.loads((out / "results.json").read_text())
    learned = next(iter(doc["per_seed"].values()))["stages"]["amortised-learned-i"]
    for task in learned.values():
        restarts = task["restarts"]
        assert len(restarts) == 5 and restarts[0]["start"] == 0.5
        assert len({r["start"] for r in restarts}) == 5 and all(0.1 <= r["start"] <= 0.9 for r in restarts)
        assert task["i"] == restarts[0]["i"] and task["score"] == restarts[0]["score"]
        assert all(math.isfinite(r["score_at_half"]) for r in restarts)
    (c3,) = [f for f in next(iter(doc["per_seed"].values()))["findings"] if f["id"] == "C3"]
    assert "restarts of the learned i per task" not in c3["verdict"]["why"]


def test_console_summary_says_when_a_presets_verdicts_are_not_evidence():
    """Issue 62: `--preset tiny` printed 'finding E3: reproduced' with no caveat."""
    from invfast.reproduce.pipeline import console_lines

    findings = [{"id": "E3", "status": "reproduced", "label": "reproduced, 2 of 2 seeds", "per_seed_verdict": {}}]
    tiny = console_lines(findings, "tiny")
    assert tiny[0].startswith("preset tiny:") and "not evidence" in tiny[0]
    assert tiny[1] == "finding E3: reproduced, 2 of 2 seeds"
    assert console_lines(findings, "quick") == ["finding E3: reproduced, 2 of 2 seeds"]


def test_setup_says_each_papers_scale_against_the_runs():
    """SPEC §5.2: what differs in scale from the paper (model, data, epochs) is said once per paper."""
    from invfast.reproduce.sections.summary import _scale_lines

    cfg = RP.preset("quick")
    lines = _scale_lines(cfg, {"speicher", "chavhan"})
    assert len(lines) == 2 and lines[0].startswith("- Scale against the paper — Speicher et al.")
    assert (
        "50 000 training images" in lines[0]
        and f"{cfg.speicher.transfer_n_source} training images per model" in lines[0]
    )
    assert "ImageNet-100" in lines[1] and f"{cfg.chavhan.amortised_epochs} epochs" in lines[1]
    assert _scale_lines(cfg, set()) == []
