"""Ericsson's E4-E5 and Chavhan's C2, C4-C7 in ``invfast reproduce``: the tiny preset end to end, the snapshots
they rest on, and each verdict against numbers built to pass and to fail."""

import json
import math

import numpy as np
import pytest
import torch

from invfast.cli import main
from invfast.reproduce.finding import NOT_RUN
from invfast.reproduce.sections import amortised as C
from invfast.reproduce.sections import base as B
from invfast.reproduce.sections import specialisation as E
from invfast.reproduce.sections import transformers as V


@pytest.fixture(scope="module")
def part2_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("part2") / "report"
    threads = torch.get_num_threads()
    try:
        findings = "E4,E5,C2,C4,C5,C6,C7"
        args = ["reproduce", "--preset", "tiny", "--findings", findings, "--out", str(out), "--no-progress"]
        assert main([*args, "--threads", "1", "--set", "run.seeds=1"]) == 0
    finally:
        torch.set_num_threads(threads)
    return out


def test_e4_e5_c2_c4_c5_c6_run_on_the_tiny_preset(part2_run):
    doc = json.loads((part2_run / "results.json").read_text())
    assert [f["id"] for f in doc["findings"]] == ["E4", "E5", "C2", "C4", "C5", "C6", "C7"]
    assert all(f["status"] != NOT_RUN for f in doc["findings"])
    report = (part2_run / "report.md").read_text()
    for title in ("— E4", "— E5", "Amortised invariance — C2, C4, C5, C6", "Training cost (C6)", "Downstream (C4)"):
        assert title in report
    for fig in ("specialisation", "block_structure"):
        assert (part2_run / doc["figures"][fig]).stat().st_size > 1000
    # E5 correlates a population of final models: Random, the three policies, the K = 5 model at its 26 descriptors
    e5 = doc["block_structure"]
    assert e5["population"] == "final models" and len(e5["models"]) == 4 + 26 == len(set(e5["models"]))
    assert e5["models"][:4] == ["Random", "Default", "Spatial", "Appearance"]
    assert all(m.startswith("AI K=5 @ ") for m in e5["models"][4:])
    assert set(e5["invariance"]) == set(e5["scores"]) == set(e5["models"])
    assert all(v is None or -1.0 <= v <= 1.0 for row in e5["rho"].values() for v in row.values())
    # the final Spatial model's invariance is its last snapshot's (E4 measures the same images the same way)
    last = [r for r in doc["specialisation"]["models"] if r["policy"] == "spatial"][-1]
    for t, v in e5["invariance"]["Spatial"].items():
        assert v == pytest.approx(last["cosine"][t], abs=1e-6) if v is not None else last["cosine"][t] is None
    # the amortised model's descriptors change its invariance: not 26 copies of one model
    amortised = [tuple(e5["invariance"][m].values()) for m in e5["models"][4:]]
    assert len(set(amortised)) > 1
    # C4: every model ranked on every (task, setting)
    d4 = doc["amortised"]["downstream"]
    assert set(d4["mean_rank"]) == {"Default", "Spatial", "Appearance", "AI (learned i)"}
    for j in range(len(d4["ranks"]["Default"])):  # competition ranks per setting: 1 for the best, ties share
        col = sorted(r[j] for r in d4["ranks"].values())
        assert col[0] == 1.0 and all(col[k] <= k + 1 for k in range(len(col)))
    # C4's few-shot settings: every model scored on the same episodes, the amortised one with i learned per episode
    assert d4["few_shot_i"] == "per episode"
    for task, settings in d4["few_shot"].items():
        for setting, per_model in settings.items():
            assert set(per_model) == set(d4["mean_rank"]) and len({len(v) for v in per_model.values()}) == 1
            for m, v in per_model.items():
                assert d4["scores"][task][m][setting] == pytest.approx(np.mean(v))
    assert len(d4["few_shot"]["identity"]["5-way 1-shot"]["AI (learned i)"]) == 10  # the tiny preset's episodes
    c4 = next(f for f in doc["findings"] if f["id"] == "C4")
    assert "needs few-shot" not in json.dumps(c4), c4
    # C5: AI-SimCLR at K = 2 and K = 5, each probe's out-of-fold predictions kept for every image of its task
    d5 = doc["amortised"]["downstream_k5"]
    assert set(d5["mean_rank"]) == {"AI-SimCLR (learned i)", "AI-SimCLR K=5 (learned i)"}
    for task, rec in d5["probes"].items():
        for label, score in rec["scores"].items():
            oof = score.get("oof_correct", score.get("oof_prediction"))
            assert len(oof) == len(rec["y"]), (task, label)
    for key in ("amortised-simclr", "amortised-simclr-k5"):
        assert (part2_run / "cache" / "pretrain" / key / "model.pt").exists()
    c5 = next(f for f in doc["findings"] if f["id"] == "C5")
    assert "needs" not in json.dumps(c5.get("seeds", c5)), c5  # every number C5 reads is made
    assert doc["learned"]["0"].keys() >= {"amortised", "amortised-k5", "amortised-simclr", "amortised-simclr-k5"}
    cost = doc["amortised"]["cost"]["models"]
    assert set(cost) == {"default", "spatial", "appearance", "amortised"}
    assert all(v["training_seconds"] == pytest.approx(v["seconds_per_step"] * v["steps"]) for v in cost.values())


def test_c7_runs_the_transformers(part2_run):
    """C7's models are transformers of the configured shape, its verdict is C1-C4's checks on their numbers,
    and the report says whether each of them learned."""
    from invfast.io import load_verified
    from invfast.reproduce.presets import preset

    doc = json.loads((part2_run / "results.json").read_text())
    cfg = preset("tiny")
    encoders = {
        k: load_verified(part2_run / "cache" / "pretrain" / f"vit-{k}" / "model.pt")["encoder"]
        for k in ("default", "spatial", "appearance", "amortised")
    }
    for k, state in encoders.items():
        assert state["patch_embed.weight"].shape == (cfg.vit.dim, 3, cfg.vit.patch, cfg.vit.patch), k
        assert sum(name.endswith("qkv.weight") for name in state) == cfg.vit.depth
        assert ("prompt_w1" in state) == (k == "amortised")  # the Prompt-ViT only for the amortised model
    tr = doc["transformers"]
    c7 = next(f for f in doc["findings"] if f["id"] == "C7")
    parts = tr["parts"]["0"]
    assert list(parts) == ["C1", "C2", "C3", "C4"] and c7["parts"] == parts
    assert parts["C4"] == C.check_c4(tr["downstream"]) and parts["C3"] == C.check_c3(tr["learned_i"])
    assert set(tr["downstream"]["mean_rank"]) == {"Default", "Spatial", "Appearance", "AI (learned i)"}
    assert doc["learned"]["0"].keys() >= {"vit-default", "vit-spatial", "vit-appearance", "vit-amortised"}
    idn = tr["downstream"]["identity"]
    ratio = idn["models"]["vit-spatial"]["mean"] / idn["random"]["mean"]
    assert doc["learned"]["0"]["vit-spatial"]["ratio"] == pytest.approx(ratio)
    report = (part2_run / "report.md").read_text()
    assert "## Transformers — C7" in report and "Downstream (C4 with transformers)" in report
    assert (part2_run / doc["figures"]["vit-interpolation"]).stat().st_size > 1000
    # C1's control (here C7's): the Prompt-ViT as it started (warm-started from the Default ViT) at both corners
    init = doc["transformers"]["interpolation"]["init"]["points"]
    assert [p["i"] for p in init] == [[1.0, 0.0], [0.0, 1.0]]
    assert all(len(v) == doc["config"]["data"]["n_measure"] for p in init for v in p["per_image_cosine"].values())
    assert "initialisation" not in json.dumps(c7), c7  # the control exists: never 'needs … initialisation'
    # the ResNets' numbers are not the transformers': C2 of each family reads its own measurement
    assert not (part2_run / "cache" / "measure" / "vit-spatial.json").samefile(
        part2_run / "cache" / "measure" / "spatial.json"
    )


def test_the_last_snapshot_is_the_trained_model(part2_run):
    """Snapshots are the encoder as it was when the probe ran: the one at the last step is model.pt's."""
    from invfast.io import load_verified

    for policy in ("default", "spatial", "appearance"):
        folder = part2_run / "cache" / "pretrain" / policy
        steps = sorted(int(p.stem[len("step-") :]) for p in (folder / "snapshots").glob("step-*.pt"))
        assert steps[0] == 0 and len(steps) >= 2
        last = load_verified(folder / "snapshots" / f"step-{steps[-1]}.pt")
        final = load_verified(folder / "model.pt")["encoder"]
        assert last.keys() == final.keys() and all(torch.equal(last[k], final[k]) for k in last)
        first = load_verified(folder / "snapshots" / "step-0.pt")
        assert any(not torch.equal(first[k], final[k]) for k in first if first[k].is_floating_point())


# ---------------------------------------------------------------------------------------------- verdicts
def _curves(spatial_rises=True):
    fams = {"rotation": "spatial", "crop": "spatial", "hue": "appearance", "blur": "appearance"}
    rows = []
    for policy, (sp, ap) in {"default": (0.3, 0.3), "spatial": (0.6, 0.2), "appearance": (0.2, 0.7)}.items():
        for k, epoch in enumerate((0, 2, 4, 6)):
            grow = k / 3 if (policy != "spatial" or spatial_rises) else 1 - k / 3
            s = 0.1 + (sp - 0.1) * (grow if policy == "spatial" else 1.0)
            a = 0.1 + (ap - 0.1) * (grow if policy == "appearance" else 1.0)
            cos = {"rotation": s, "crop": s + 0.01, "hue": a, "blur": a - 0.01}
            rows.append({"model": f"{policy}@{epoch}", "policy": policy, "epoch": epoch, "cosine": cos})
    return {"models": rows, "families": fams}


def test_e4_follows_the_numbers():
    assert E.check_e4(_curves())["status"] == B.REPRODUCED
    r = E.check_e4(_curves(spatial_rises=False))
    assert r["status"] == B.PARTLY and r["checks"]["spatial: spatial invariance rises with epochs"] == B.NOT


def test_e5_block_structure_against_scipy(rng):
    from scipy import stats as st

    fams = {"rotation": "spatial", "crop": "spatial", "hue": "appearance", "blur": "appearance"}
    rho = {
        "rotation": {"identity": 0.8, "position": -0.2, "rotation": 0.1, "colour": 0.0},
        "crop": {"identity": 0.6, "position": 0.0, "rotation": -0.1, "colour": 0.2},
        "hue": {"identity": -0.3, "position": 0.5, "rotation": 0.7, "colour": -0.5},
        "blur": {"identity": 0.1, "position": 0.4, "rotation": None, "colour": 0.1},
    }
    e5 = {"models": list("abcdefg"), "rho": rho, "families": fams}
    b = E.block_means(e5)
    assert b["spatial"]["identity"] == pytest.approx(0.7) and b["appearance"]["pose"] == pytest.approx(1.6 / 3)
    assert E.check_e5(e5)["status"] == B.REPRODUCED
    swapped = {t: {**v, "identity": -v["identity"]} for t, v in rho.items()}
    assert E.check_e5({**e5, "rho": swapped})["status"] == B.PARTLY
    # the stage's correlations are scipy's Spearman across the models
    from invfast.comparison.transfer import spearman_rows

    x, y = rng.random((3, 9)), rng.random(9)
    got = spearman_rows(x, np.broadcast_to(y, x.shape))
    assert np.allclose(got, [st.spearmanr(row, y).statistic for row in x])


def test_c2_c6_follow_the_numbers():
    ts = [f"t{k}" for k in range(8)]
    spatial = {t: k / 8 for k, t in enumerate(ts)}
    appearance = {t: 1 - k / 8 for k, t in enumerate(ts)}
    measure = {"cosine": {"Spatial": spatial, "Appearance": appearance}}
    good = {"points": [{"i": [1.0, 0.0], "cosine": spatial}, {"i": [0.0, 1.0], "cosine": appearance}]}
    assert C.check_c2(measure, good)["status"] == B.REPRODUCED
    crossed = {"points": [{"i": [1.0, 0.0], "cosine": appearance}, {"i": [0.0, 1.0], "cosine": spatial}]}
    assert C.check_c2(measure, crossed)["status"] == B.NOT

    def cost(ai, spec):
        m = {p: {"training_seconds": spec, "seconds_per_step": 1.0, "steps": 1, "parameters": 10} for p in "abc"}
        m["amortised"] = {"training_seconds": ai, "seconds_per_step": 1.0, "steps": 1, "parameters": 100}
        return {"models": m}

    assert C.check_c6(cost(2.0, 1.0))["status"] == B.REPRODUCED  # 2 s against 3 x 1 s
    assert C.check_c6(cost(4.0, 1.0))["status"] == B.NOT
    assert math.isclose(C.check_c6(cost(2.0, 1.0))["minutes"]["specialists"], 3 / 60)


def test_c7_combines_c1_to_c4_on_the_transformers():
    ts = [f"t{k}" for k in range(8)]
    spatial = {t: k / 8 for k, t in enumerate(ts)}
    appearance = {t: 1 - k / 8 for k, t in enumerate(ts)}

    def point(t, cos):
        family = {"spatial": 0.6 - 0.4 * t, "appearance": 0.2 + 0.5 * t}
        return {"i": [1 - t, t], "cosine": cos, "family_cosine": family}

    results = {
        "vit-measure": {"cosine": {"Spatial": spatial, "Appearance": appearance}},
        "vit-interpolation": {"points": [point(0.0, spatial), point(0.5, spatial), point(1.0, appearance)]},
        "vit-learned-i": {t: {"i": [v, 1 - v]} for t, v in {"identity": 0.7, "position": 0.4, "rotation": 0.3}.items()},
        "vit-downstream": {"mean_rank": {"Default": 2.0, "Spatial": 3.0, "AI (learned i)": 1.5}},
    }
    r = V.check_c7(results)
    assert r["status"] == B.REPRODUCED and all(p["status"] == B.REPRODUCED for p in r["parts"].values())
    worse = {**results, "vit-downstream": {"mean_rank": {"Default": 1.0, "AI (learned i)": 2.0}}}
    r = V.check_c7(worse)
    assert r["status"] == B.PARTLY and r["parts"]["C4"]["status"] == B.NOT
    assert "C4 not reproduced" in r["summary"]
    # the checks read only the transformers' stages: the ResNets' results change nothing
    assert V.check_c7({**worse, "amortised-downstream": results["vit-downstream"]}) == r


def test_c4_c5_rank_the_amortised_models():
    def down(ranks):
        return {"mean_rank": ranks}

    assert C.check_c4(down({"Default": 2.0, "Spatial": 3.0, "AI (learned i)": 2.0}))["status"] == B.REPRODUCED
    assert C.check_c4(down({"Default": 1.5, "Spatial": 3.0, "AI (learned i)": 2.0}))["status"] == B.NOT
    both = {"AI-SimCLR (learned i)": 1.5, "AI-SimCLR K=5 (learned i)": 1.5}
    assert C.check_c5(down(both))["status"] == B.REPRODUCED
    assert C.check_c5(down({**both, "AI-SimCLR K=5 (learned i)": 2.0}))["status"] == B.NOT


def test_vit_fields_are_checked_and_old_folders_resume_without_them(tmp_path):
    from invfast.models import PromptViT, ViT
    from invfast.reproduce import ConfigMismatchError
    from invfast.reproduce.folders import claim_folder
    from invfast.reproduce.presets import preset
    from invfast.reproduce.stages.context import encoder

    for kw, msg in (
        ({"vit.patch": 5}, r"vit.patch \(5\) must divide data.size \(32\)"),
        ({"vit.heads": 3}, r"vit.heads \(3\) must divide vit.dim \(64\)"),
        ({"vit.lr": 0.0}, r"^config field vit.lr must be a finite number in \(0, 10\], got 0.0$"),
        ({"vit.lr": float("inf")}, r"^config field vit.lr must be a finite number in \(0, 10\], got inf$"),
        ({"vit.epochs": 0}, r"^config field vit.epochs must be an integer in \[1, 100000\], got 0$"),
    ):
        with pytest.raises(ValueError, match=msg):
            preset("quick", kw)
    cfg = preset("quick")
    vit, prompt = encoder(cfg, "vit-default"), encoder(cfg, "vit-amortised")
    assert type(vit) is ViT and isinstance(prompt, PromptViT) and prompt.inv_dim == 2
    assert vit.patch == prompt.patch == cfg.vit.patch and len(vit.blocks) == len(prompt.blocks) == cfg.vit.depth
    same = encoder(cfg, "vit-default").state_dict()
    assert all(torch.equal(same[k], v) for k, v in vit.state_dict().items())  # seeded by the master seed and key
    assert not torch.equal(encoder(cfg, "vit-spatial").patch_embed.weight, vit.patch_embed.weight)
    # a folder made before the transformers existed resumes at the quick values, and only at them
    # (vit.warm_start came later, with its own added default: it changes the Prompt-ViT's numbers)
    old = {k: v for k, v in cfg.claim_dict().items() if not k.startswith("vit.") or k == "vit.warm_start"}
    assert old == cfg.claim_dict()
    claim_folder(str(tmp_path / "old"), old, "folder")
    with pytest.raises(ConfigMismatchError, match=r"vit.epochs: folder has '<absent>', this run has 10"):
        claim_folder(str(tmp_path / "old"), preset("quick", {"vit.epochs": 10}).claim_dict(), "folder")
