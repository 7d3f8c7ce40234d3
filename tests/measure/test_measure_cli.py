"""`invfast measure`: report folder, resume state, refusal to overwrite, decode errors, bad input."""

from __future__ import annotations

import json
import os

import pytest
import torch
from measure_helpers import random_images
from PIL import Image

from invfast.cli import main

BASE = [
    "measure",
    "--model",
    "measure_helpers:small_net",
    "--transforms",
    "rotation,hflip,brightness",
    "--grid-size",
    "4",
    "--resize",
    "24",
    "--images",
    "0",
    "--no-progress",
]


@pytest.fixture
def folder(tmp_path):
    x = random_images(12, size=30, seed=3).permute(0, 2, 3, 1).numpy()
    d = tmp_path / "imgs"
    d.mkdir()
    for i in range(12):
        Image.fromarray(x[i]).save(d / f"{i:02d}.png")
    (d / "zz_bad.png").write_bytes(b"not a png")
    return d


def test_cli_writes_report(folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(out)]) == 0
    files = sorted(f for f in os.listdir(out) if not f.startswith("."))
    assert files == ["curves.png", "heatmap.png", "radar.png", "result.json", "table.md"]  # state removed when done
    doc = json.loads((out / "result.json").read_text())
    assert [t["name"] for t in doc["transforms"]] == ["rotation", "hflip", "brightness"]
    assert doc["errors"]["count"] == 1 and doc["transforms"][0]["n_images"] == 12
    printed = capsys.readouterr()
    assert "| model | rotation | hflip | brightness |" in printed.out
    assert "could not be read" in printed.err
    # a finished report is never overwritten without --overwrite
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(out)]) == 2
    assert "finished report" in capsys.readouterr().err
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(out), "--overwrite", "--no-plots"]) == 0


def test_cli_strict_stops(folder, tmp_path, capsys):
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(tmp_path / "o"), "--strict"]) == 2
    assert "zz_bad.png" in capsys.readouterr().err
    assert not (tmp_path / "o" / "result.json").exists()


def test_cli_refuses_foreign_folder_and_bad_input(folder, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(other)]) == 2
    assert "no invfast run" in capsys.readouterr().err
    assert main(BASE[:4] + ["nope", "--data", f"folder:{folder}", "--out", str(tmp_path / "x")]) == 2
    assert "unknown transform 'nope'" in capsys.readouterr().err
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(tmp_path / "y"), "--batch-size", "0"]) == 2
    assert (
        main(["measure", "--model", "measure_helpers:nothing", "--data", str(folder), "--out", str(tmp_path / "z")])
        == 2
    )
    assert "cannot load model factory" in capsys.readouterr().err


def _partial(folder, out, transforms, monkeypatch):
    """Leave a killed `invfast measure` run behind in ``out``: the model raises KeyboardInterrupt at its second
    call of more than one image (the statistics take one; the one-image call before it only measures the model's
    activations, ``FeatureExtractor.images_per_call``), so the state holds the statistics and nothing of the
    transforms."""
    import measure_helpers

    real = measure_helpers.small_net

    def killing_net(*a, **k):
        m = real(*a, **k)
        orig, calls = m.forward, {"n": 0}

        def forward(x):
            calls["n"] += x.shape[0] > 1
            if calls["n"] > 1:
                raise KeyboardInterrupt("simulated kill")
            return orig(x)

        m.forward = forward
        return m

    monkeypatch.setattr(measure_helpers, "small_net", killing_net)
    # the up-front time estimate calls the model too: left out, so that the kill comes at the measurement's call
    monkeypatch.setattr("invfast.measure.cli._announce_estimate", lambda *a, **k: None)
    args = BASE[:4] + [transforms] + BASE[5:] + ["--data", f"folder:{folder}", "--out", str(out), "--batch-size", "32"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one model call per chunk (no split_forward): the kill comes at a known call
    try:
        assert main(args) == 130
    finally:
        torch.set_num_threads(threads)
    monkeypatch.setattr(measure_helpers, "small_net", real)
    assert (out / "state" / "state.pt").exists()


def test_cli_resumes_partial_state_and_refuses_other_runs_state(folder, tmp_path, capsys, monkeypatch):
    clean = tmp_path / "clean"
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(clean)]) == 0
    out = tmp_path / "out"
    _partial(folder, out, "rotation,hflip,brightness", monkeypatch)
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(out)]) == 0
    a = json.loads((clean / "result.json").read_text())["transforms"]
    b = json.loads((out / "result.json").read_text())["transforms"]
    assert [t["mean_cosine"] for t in a] == pytest.approx([t["mean_cosine"] for t in b], rel=1e-9)
    for run in (clean, out):  # the state and each finished transform's file go when the report is written
        assert not (run / "state").exists() or not any((run / "state").iterdir()), list((run / "state").iterdir())
    other = tmp_path / "other"
    _partial(folder, other, "hflip", monkeypatch)
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(other)]) == 2
    assert "another run" in capsys.readouterr().err


def test_a_changed_world_size_refuses_and_keeps_the_saved_state(folder, tmp_path, capsys, monkeypatch):
    """A killed 2-process run's state is never dropped by a rerun with another number of processes: one line
    says how to resume it; --overwrite discards every state file the earlier run recorded."""
    from invfast.measure.state import saved_world_size, world_size_problem
    from invfast.runtime.launch import Rank
    from invfast.runtime.run_folder import RunFolder

    out = tmp_path / "out"
    _partial(folder, out, "rotation,hflip,brightness", monkeypatch)
    state = out / "state" / "state.pt"
    state.rename(out / "state" / "state.pt.rank0")  # as the two ranks of `--world-size 2` leave them
    (out / "state" / "state.pt.rank1").write_bytes((out / "state" / "state.pt.rank0").read_bytes())
    RunFolder(str(out), "measure").own("state/state.pt.rank0", "state/state.pt.rank1")
    assert saved_world_size(state) == 2
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "written by 2 processes and this run has one process" in err and "--world-size 2" in err
    assert sorted(p.name for p in (out / "state").iterdir()) == ["state.pt.rank0", "state.pt.rank1"]
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(out), "--overwrite"]) == 0
    assert not (out / "state").exists() or not any((out / "state").glob("state.pt.rank*"))
    # the other way round: one process's state met by two ranks
    state.parent.mkdir(exist_ok=True)
    state.write_bytes(b"x")
    assert saved_world_size(state) == 1 and world_size_problem(state, Rank(0, 1)) is None
    assert "as one process" in world_size_problem(state, Rank(1, 2))
    assert saved_world_size(tmp_path / "none" / "state.pt") is None


@pytest.mark.slow
def test_cli_world_size_two_equals_one(folder, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(BASE + ["--data", f"folder:{folder}", "--out", str(one), "--no-plots"]) == 0
    env = os.environ.get("PYTHONPATH", "")
    here = os.path.dirname(os.path.abspath(__file__))  # this module and the shared helpers one folder up
    os.environ["PYTHONPATH"] = os.pathsep.join([here, os.path.dirname(here)] + ([env] if env else []))
    try:
        assert main(BASE + ["--data", f"folder:{folder}", "--out", str(two), "--no-plots", "--world-size", "2"]) == 0
    finally:
        os.environ["PYTHONPATH"] = env
    a = json.loads((one / "result.json").read_text())
    b = json.loads((two / "result.json").read_text())
    assert b["meta"]["world_size"] == 2 and b["errors"]["count"] == a["errors"]["count"] == 1
    for ta, tb in zip(a["transforms"], b["transforms"]):
        assert ta["mean_distance"] == pytest.approx(tb["mean_distance"], rel=1e-5)
        assert ta["mean_cosine"] == pytest.approx(tb["mean_cosine"], rel=1e-4, abs=1e-6)


def test_quick_preset_and_help_defaults_from_the_code(folder, tmp_path, capsys):
    from invfast.data.synthetic import SYNTHETIC_DEFAULTS
    from invfast.measure.options import QUICK_GRID

    out = tmp_path / "q"
    assert (
        main(
            [
                "measure",
                "--model",
                "measure_helpers:small_net",
                "--transforms",
                "rotation,hflip",
                "--resize",
                "24",
                "--no-progress",
                "--no-plots",
                "--quick",
                "--data",
                f"folder:{folder}",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    doc = json.loads((out / "result.json").read_text())
    assert doc["meta"]["grid_size"] == QUICK_GRID and doc["meta"]["config"]["n_images"] == 100
    assert [t["name"] for t in doc["transforms"]] == ["rotation", "hflip"]
    assert doc["stats"]["shrinkage"] == "ledoit-wolf" and doc["meta"]["config"]["shrinkage"] == "ledoit-wolf"
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["measure", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for k, v in SYNTHETIC_DEFAULTS.items():
        assert f"{k}={v}" in text
    assert f"default 256; {QUICK_GRID} with --quick" in text


def test_shrinkage_and_eps_options(folder, tmp_path):
    base = [
        "measure",
        "--model",
        "measure_helpers:small_net",
        "--transforms",
        "hflip",
        "--resize",
        "24",
        "--no-progress",
        "--no-plots",
        "--grid-size",
        "2",
        "--data",
        f"folder:{folder}",
    ]
    assert main(base + ["--out", str(tmp_path / "lw"), "--shrinkage", "ledoit-wolf"]) == 0
    assert json.loads((tmp_path / "lw" / "result.json").read_text())["stats"]["shrinkage"] == "ledoit-wolf"
    assert main(base + ["--out", str(tmp_path / "l"), "--shrinkage", "0.5"]) == 0
    assert json.loads((tmp_path / "l" / "result.json").read_text())["stats"]["lambda"] == 0.5
    assert main(base + ["--out", str(tmp_path / "t"), "--eps", "1e-2"]) == 0
    assert json.loads((tmp_path / "t" / "result.json").read_text())["meta"]["config"]["eps"] == 1e-2
    assert main(base + ["--out", str(tmp_path / "x"), "--shrinkage", "lots"]) == 2


def _args(*extra):
    import argparse

    from invfast.measure.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--model", "m", "--data", "synthetic:n=4", "--out", "o", "--device", "cpu", *extra])


def test_real_world_measures_every_view_by_default():
    """The groups are the unit: the default 1 000 views of a folder of objects would drop the objects after them."""
    from invfast.measure.options import _n_images

    assert _n_images(_args()) == 1000 and _n_images(_args("--quick")) == 100
    assert _n_images(_args("--real-world")) is None and _n_images(_args("--real-world", "--quick")) == 100
    assert _n_images(_args("--real-world", "--images", "50")) == 50


@pytest.mark.parametrize("extra", [["--pair-scores"], ["--grid-size", "8"], ["--grid-side", "32"]])
def test_real_world_refuses_the_grid_options_it_would_ignore(extra):
    from invfast.measure.options import check_args

    check_args(_args(*extra))  # fine without --real-world
    with pytest.raises(
        ValueError, match=f"^{extra[0]} concerns the transforms' grids, which --real-world does not use"
    ):
        check_args(_args("--real-world", *extra))


def test_ericsson_draws_images_with_replacement_so_more_than_the_data_is_fine():
    from invfast.measure.options import check_args

    with pytest.raises(ValueError, match=r"--images 10 is more than the data holds \(4 images\)"):
        check_args(_args("--images", "10"))
    check_args(_args("--images", "10", "--protocol", "ericsson"))
