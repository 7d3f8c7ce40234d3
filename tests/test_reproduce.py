"""``invfast reproduce``: the tiny configuration end to end (report structure, every number finite),
resume without recomputation, interrupted runs, configuration mismatch, and the statistics behind
the verdict against independent references (scipy, colorsys)."""
import colorsys
import json
import math
import os
import shutil

import numpy as np
import pytest

from invfast.reproduce import config as RCfg
from invfast.reproduce import pipeline as R
from invfast.reproduce import report as RR
from invfast.reproduce import stages as S
from invfast.cli import main

STATUSES = {RR.REPRODUCED, RR.PARTLY, RR.NOT, RR.NOT_RUN}


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
    # every model, transform, task and transfer source is there
    models = ["Random", "Default", "Spatial", "Appearance"]
    assert sorted(doc["invariance"]["cosine"]) == sorted(models)
    import invfast.transforms as T
    for m in models:
        assert set(doc["invariance"]["cosine"][m]) == set(T.SYNTHETIC)
        assert all(v is not None for v in doc["invariance"]["cosine"][m].values())
    for task in ("identity", "position", "rotation", "colour"):
        sc = doc["probes"][task]["scores"]
        assert set(sc) == set(models) | {"Spa+App", "Def+Spa+App"}
        for s in sc.values():
            assert len(s["fold_scores"]) == doc["config"]["folds"]
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
    # findings: five, each with a status computed from the numbers, and a verdict naming each
    assert [f["id"] for f in doc["findings"]] == [1, 2, 3, 4, 5]
    assert all(f["status"] in STATUSES for f in doc["findings"])
    for f in doc["findings"]:
        assert f"§5.{f['id']} ({f['status']})" in doc["verdict"]
    assert doc["verdict"] == RR.verdict(doc["findings"])
    # seeds, machine, versions, time per stage
    assert doc["seeds"]["master"] == 0 and len(doc["seeds"]) > 5
    assert doc["environment"]["versions"]["torch"]
    assert set(doc["timings"]) == set(R.stage_names(RCfg.preset("tiny")))
    md = (out / "report.md").read_text()
    for heading in ("## Verdict", "## 1. Invariances (Table 1)", "## 2. Probes (Table 2)",
                    "## 3. Same vs different transformations", "## 4. Amortised invariance", "## Findings in detail",
                    "## Machine, versions, time"):
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
    ckpts = {p: os.stat(p).st_mtime_ns for p in
             (os.path.join(cache, "pretrain", k, "model.pt") for k in ("default", "spatial", "appearance", "amortised"))}
    rc = run_cli("--preset", "tiny", "--out", str(tiny_run))
    assert rc == 0
    assert _stage_mtimes(cache) == before
    assert {p: os.stat(p).st_mtime_ns for p in ckpts} == ckpts
    doc = json.loads((tiny_run / "results.json").read_text())
    assert all(t["cached"] for t in doc["timings"].values())
    assert "cached from an earlier invocation" in (tiny_run / "report.md").read_text()


def test_config_mismatch_is_refused(tiny_run, capsys):
    rc = main(["reproduce", "--preset", "tiny", "--set", "objects=5", "--out", str(tiny_run), "--no-progress"])
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
    real = S.probes

    def interrupted(ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(S, "probes", interrupted)
    assert run_cli("--preset", "tiny", "--out", str(out)) == 130
    assert _stage_mtimes(cache) == before and not (out / "results.json").exists()
    monkeypatch.setattr(S, "probes", real)
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
    assert main(["reproduce", "--set", "objects=many", "--out", str(tmp_path / "x")]) == 2
    assert "cannot read 'many' as int" in capsys.readouterr().err
    assert main(["reproduce", "--preset", "tiny", "--set", "data_transforms=rotate", "--out", str(tmp_path / "x")]) == 2
    assert "must include" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(OSError, match="not enough disk space"):
        RCfg.check_disk(str(tmp_path / "new" / "dir"), need_mb=1e12)
    assert main(["reproduce", "--preset", "tiny", "--print-config", "--out", str(tmp_path / "y")]) == 0
    assert json.loads(capsys.readouterr().out)["objects"] == 4


def test_paired_against_scipy():
    from scipy import stats

    rng = np.random.default_rng(3)
    for _ in range(20):
        a, b = rng.normal(size=5), rng.normal(size=5) + rng.normal() * 0.5
        got = RR.paired(a, b)
        ref = stats.ttest_rel(a, b, alternative="greater")
        assert got["t"] == pytest.approx(ref.statistic, rel=1e-10)
        assert got["diff"] == pytest.approx(np.mean(a - b))
        significant = ref.pvalue <= 0.05
        assert (got["status"] == RR.REPRODUCED) == (significant and got["diff"] > 0)
        assert (got["status"] == RR.NOT) == (got["diff"] <= 0)


def _probe_doc(means):
    """Probe results with 5 folds around the given means (tiny fold noise)."""
    noise = np.array([-0.002, 0.001, 0.0, 0.002, -0.001])
    return {task: {"kind": "classification" if task == "identity" else "regression",
                   "scores": {m: {"mean": v, "std": 0.0015, "fold_scores": (v + noise * (1 + k)).tolist()}
                              for k, (m, v) in enumerate(ms.items())}}
            for task, ms in means.items()}


def test_findings_follow_the_numbers():
    models = ["Random", "Default", "Spatial", "Appearance", "Spa+App", "Def+Spa+App"]
    good = {"identity": dict(zip(models, [0.2, 0.9, 0.85, 0.6, 0.88, 0.9])),
            "position": dict(zip(models, [0.1, 0.3, 0.2, 0.8, 0.75, 0.7])),
            "rotation": dict(zip(models, [0.1, 0.3, 0.2, 0.7, 0.7, 0.65])),
            "colour": dict(zip(models, [0.3, 0.5, 0.9, 0.6, 0.88, 0.85]))}
    f2, f3 = RR.finding_2(_probe_doc(good)), RR.finding_3(_probe_doc(good))
    assert f2["status"] == RR.REPRODUCED and f3["status"] == RR.REPRODUCED
    bad = {t: {m: (1.0 - v if m != "Random" else v) for m, v in ms.items()} for t, ms in good.items()}
    f2b, f3b = RR.finding_2(_probe_doc(bad)), RR.finding_3(_probe_doc(bad))
    assert f2b["status"] == RR.NOT and f3b["status"] == RR.NOT
    fam = {"rotation": "spatial", "crop": "spatial", "hue": "appearance", "blur": "appearance"}
    cos = {"Spatial": {"rotation": 0.8, "crop": 0.7, "hue": 0.2, "blur": 0.5},
           "Default": {"rotation": 0.6, "crop": 0.6, "hue": 0.4, "blur": 0.6},
           "Appearance": {"rotation": 0.3, "crop": 0.4, "hue": 0.8, "blur": 0.7},
           "Random": {"rotation": 0.5, "crop": 0.5, "hue": 0.5, "blur": 0.5}}
    f1 = RR.finding_1({"cosine": cos, "families": fam, "best": {"rotation": "Spatial", "hue": "Appearance"}})
    assert f1["status"] == RR.REPRODUCED and f1["per_transform_wins"] == {"spatial": [2, 2], "appearance": [2, 2]}
    cos["Default"]["rotation"] = 0.95
    assert RR.finding_1({"cosine": cos, "families": fam, "best": {}})["status"] == RR.PARTLY
    cos["Spatial"], cos["Appearance"] = cos["Appearance"], cos["Spatial"]
    assert RR.finding_1({"cosine": cos, "families": fam, "best": {}})["status"] == RR.NOT
    tr = {k: {"mean": v, "std": 0.01, "fold_scores": (v + np.array([0.01, -0.01, 0.0, 0.005, -0.005]) * s).tolist()}
          for (k, v), s in zip({"random": 0.3, "same": 0.8, "different": 0.6, "superset": 0.81}.items(), (1, 1, 2, 1.5))}
    assert RR.finding_4({"scores": tr})["status"] == RR.REPRODUCED
    tr["superset"] = {**tr["different"]}
    assert RR.finding_4({"scores": tr})["status"] == RR.PARTLY
    assert RR.finding_5(None)["status"] == RR.NOT_RUN
    pts = [{"i": [1 - t, t], "family_cosine": {"spatial": 0.8 - 0.4 * t, "appearance": 0.3 + 0.5 * t}}
           for t in (0.0, 0.25, 0.5, 0.75, 1.0)]
    li = {"identity": {"i": [0.9, 0.2]}, "position": {"i": [0.1, 0.8]}, "rotation": {"i": [0.2, 0.9]},
          "colour": {"i": [0.9, 0.1]}}
    assert RR.finding_5({"interpolation": {"points": pts}, "learned_i": li})["status"] == RR.REPRODUCED
    jumpy = [dict(p, family_cosine={"spatial": 0.8 if p["i"][1] < 0.9 else 0.1, "appearance": 0.3 + 0.5 * p["i"][1]})
             for p in pts]
    li_same = {k: {"i": [0.5, 0.5]} for k in li}
    assert RR.finding_5({"interpolation": {"points": jumpy}, "learned_i": li_same})["status"] == RR.NOT


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
            rgb = np.clip(np.array(colorsys.hsv_to_rgb((h + params["hue"][j]) % 1.0, s, v)) * params["brightness"][j],
                          0, 1)
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

    cfg = RCfg.preset("tiny")
    cache = tmp_path / "cache"
    marker = tmp_path / "marker"
    ctx = S.Context(cfg=cfg, cache=str(cache), progress=False)
    if where == "model":
        path = ctx.path("pretrain", "default", "model.pt")
        torch.save({"encoder": _Payload(str(marker))}, path)
        with pytest.raises(ValueError):
            S.load_model(ctx, "default")
    else:
        n = cfg.batch_size
        np.save(ctx.path("transfer", "same_images.npy"), np.zeros((n, 3, cfg.size, cfg.size), np.uint8))
        np.save(ctx.path("transfer", "same_labels.npy"), np.arange(n) % 2)
        from invfast.io import atomic_torch_save

        # even with a valid checksum trailer, the content must be plain tensors and containers
        atomic_torch_save({"net": _Payload(str(marker))}, ctx.path("transfer", "same.ckpt"))
        with pytest.raises(ValueError, match="only tensors"):
            S.transfer_train(ctx, "same")
    assert not marker.exists()
