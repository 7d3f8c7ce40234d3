"""Issue 25, measure: nothing outside --out touched, nothing of the user's lost, no silently wrong number.
Every test here failed on the code before the fix (docs/guarantees.md names each)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image

from invfast.cli import main
from invfast.runtime.run_folder import MARKER

pytestmark = pytest.mark.usefixtures("cli_env")
MEASURE = [
    "measure",
    "--model",
    "measure_helpers:small_net",
    "--transforms",
    "rotation,hflip",
    "--grid-size",
    "4",
    "--resize",
    "24",
    "--images",
    "0",
    "--no-progress",
    "--no-plots",
]


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "imgs"
    d.mkdir()
    g = np.random.default_rng(0)
    for i in range(30):
        Image.fromarray(g.integers(0, 256, (28, 28, 3), dtype=np.uint8)).save(d / f"{i:02d}.png")
    return d


def _victim(tmp_path, names=("hflip.cosine.npy", "hflip.distance.npy", "state.pt", "thesis.tex")):
    v = tmp_path / "victim"
    v.mkdir()
    for n in names:
        (v / n).write_text("precious")
    return v


def _intact(v, names=("hflip.cosine.npy", "hflip.distance.npy", "state.pt", "thesis.tex")):
    assert sorted(os.listdir(v)) == sorted(names)
    assert all((v / n).read_text() == "precious" for n in names)


def test_pairs_symlink_is_refused_and_its_target_untouched(folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out), "--pair-scores"]) == 0
    for f in os.listdir(out / "pairs"):
        os.remove(out / "pairs" / f)
    os.rmdir(out / "pairs")
    v = _victim(tmp_path)
    os.symlink(v, out / "pairs")
    assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out), "--pair-scores", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "pairs" in err
    _intact(v)


def test_state_symlink_is_refused_and_nothing_written_through_it(folder, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    v = _victim(tmp_path)
    os.symlink(v, out / "state")
    (out / MARKER).write_text(
        json.dumps({"format": "invfast.run/1", "command": "measure", "state": "running", "files": ["state/state.pt"]})
    )
    assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out), "--overwrite"]) == 2
    assert "symbolic link" in capsys.readouterr().err
    _intact(v)


def test_a_stray_state_folder_does_not_make_a_run_and_is_never_deleted(folder, tmp_path, capsys):
    out = tmp_path / "mine"
    (out / "state").mkdir(parents=True)
    (out / "state" / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out), *extra]) == 2
        assert "no invfast run" in capsys.readouterr().err
    assert (out / "state" / "notes.txt").read_text() == "mine"


def test_overwrite_with_a_user_file_in_pairs_keeps_it_and_completes(folder, tmp_path):
    out = tmp_path / "out"
    assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out), "--pair-scores"]) == 0
    (out / "pairs" / "my_analysis.csv").write_text("keep me")
    assert (
        main(
            MEASURE
            + ["--data", f"folder:{folder}", "--out", str(out), "--pair-scores", "--overwrite", "--transforms", "hflip"]
        )
        == 0
    )
    assert (out / "pairs" / "my_analysis.csv").read_text() == "keep me"
    assert sorted(os.listdir(out / "pairs")) == ["hflip.cosine.npy", "hflip.distance.npy", "my_analysis.csv"]
    doc = json.loads((out / "result.json").read_text())
    assert [t["name"] for t in doc["transforms"]] == ["hflip"]
    marker = json.loads((out / MARKER).read_text())
    assert marker["command"] == "measure" and marker["state"] == "done" and marker["invfast"]
    assert "pairs/my_analysis.csv" not in marker["files"] and "result.json" in marker["files"]
    assert not (out / "state").exists()


def test_random_init_is_seeded_recorded_and_warned(folder, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    args = [
        "measure",
        "--model",
        "resnet18-cifar",
        "--transforms",
        "hflip",
        "--grid-size",
        "2",
        "--resize",
        "24",
        "--images",
        "0",
        "--no-progress",
        "--no-plots",
        "--data",
        f"folder:{folder}",
    ]
    assert main(args + ["--out", str(a)]) == 0
    err = capsys.readouterr().err
    assert err.count("random weights") == 1 and "invfast: warning: no --checkpoint" in err
    assert main(args + ["--out", str(b)]) == 0
    ra, rb = (json.loads((p / "result.json").read_text()) for p in (a, b))
    assert ra["meta"]["init_seed"] == 0
    assert ra["transforms"][0]["mean_cosine"] == rb["transforms"][0]["mean_cosine"]  # the same model twice
    assert main(args + ["--out", str(tmp_path / "c"), "--seed", "3"]) == 0
    rc = json.loads((tmp_path / "c" / "result.json").read_text())
    assert rc["meta"]["init_seed"] == 3 and rc["transforms"][0]["mean_cosine"] != ra["transforms"][0]["mean_cosine"]


def test_stale_temporary_files_are_cleaned(folder, tmp_path, monkeypatch):
    from invfast.runtime import write_paths

    out = tmp_path / "out"
    assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out)]) == 0
    dead = 2**22 + 12345  # above pid_max on Linux by default: no live process has it
    with monkeypatch.context() as m:  # what a writer killed while writing result.json leaves (journaled)
        m.setattr(os, "getpid", lambda: dead)
        with write_paths.write_root(out):
            fd, killed = write_paths.new_temporary(str(out / "result.json"))
    os.close(fd)
    (out / f".result.json.tmp-{dead}").write_text("a user's file of the old pattern")  # not invfast's: kept
    (out / f".user.tmp-{os.getpid()}").write_text("a live writer's")  # not stale: kept
    assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out), "--overwrite"]) == 0
    assert not os.path.exists(killed)
    assert (out / f".result.json.tmp-{dead}").exists() and (out / f".user.tmp-{os.getpid()}").exists()


def test_out_inside_data_is_refused(folder, capsys):
    assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(folder / "report")]) == 2
    assert "is inside --data" in capsys.readouterr().err
    assert not (folder / "report").exists()


def test_grid_size_one_is_refused_naming_the_transform(folder, tmp_path, capsys):
    assert (
        main(
            MEASURE[:4]
            + ["rotation"]
            + MEASURE[5:]
            + ["--grid-size", "1", "--data", f"folder:{folder}", "--out", str(tmp_path / "o")]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "leaves transform 'rotation' with only its identity parameter" in err


def test_a_random_init_run_resumes(folder, tmp_path, monkeypatch):
    """Killed after the statistics, the same command resumes (the seeded weights match the saved fingerprint)."""
    import invfast.models as models

    args = [
        "measure",
        "--model",
        "resnet18-cifar",
        "--transforms",
        "hflip",
        "--grid-size",
        "2",
        "--resize",
        "24",
        "--images",
        "0",
        "--no-progress",
        "--no-plots",
        "--data",
        f"folder:{folder}",
        "--batch-size",
        "30",
        "--out",
        str(tmp_path / "out"),
    ]
    import invfast.measure.core as core

    real, real_score = models.create, core.score_transform
    scoring = [False]  # the statistics are done: the model is killed at its first call after them

    def killing(*a, **k):
        m = real(*a, **k)
        orig = m.forward

        def forward(x):
            if scoring[0]:
                raise KeyboardInterrupt
            return orig(x)

        m.forward = forward
        return m

    def score(*a, **k):
        scoring[0] = True
        return real_score(*a, **k)

    monkeypatch.setattr(models, "create", killing)
    monkeypatch.setattr(core, "score_transform", score)
    assert main(args) == 130
    monkeypatch.setattr(models, "create", real)
    monkeypatch.setattr(core, "score_transform", real_score)
    assert main(args) == 0
    doc = json.loads((tmp_path / "out" / "result.json").read_text())
    assert doc["meta"]["resumed"] and doc["meta"]["pairs_computed"] == 30 * 2


# ---------------------------------------------------------------------------------------------- pretrain
PRETRAIN = [
    "pretrain",
    "--arch",
    "test_pretrain_fixtures:TinyEncoder",
    "--steps",
    "2",
    "--batch-size",
    "8",
    "--no-progress",
    "--checkpoint-every",
    "0",
]


def test_pretrain_never_replaces_a_users_metrics(npy, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "metrics.csv").write_text("my own numbers")
    assert main(PRETRAIN + ["--data", f"npy:{npy}", "--out", str(out)]) == 2
    assert "no invfast run" in capsys.readouterr().err
    assert (out / "metrics.csv").read_text() == "my own numbers"


def test_pretrain_marks_its_run_and_lists_its_files(npy, tmp_path):
    out = tmp_path / "run"
    assert main(PRETRAIN + ["--data", f"npy:{npy}", "--out", str(out)]) == 0
    marker = json.loads((out / MARKER).read_text())
    assert marker["command"] == "pretrain" and marker["state"] == "done"
    assert {"model.pt", "checkpoint.pt", "metrics.jsonl", "metrics.csv"} <= set(marker["files"])


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--invariance-images", "0"], "--invariance-images must be an integer >= 2, got 0"),
        (["--lr", "0"], "--lr must be a finite number > 0, got 0.0"),
        (["--sgd-momentum", "1.5"], "--sgd-momentum must be a finite number in [0, 1], got 1.5"),
        (["--weight-decay", "inf"], "--weight-decay must be a finite number >= 0, got inf"),
        (["--proj-hidden", "-1"], "--proj-hidden must be >= 1"),
        (["--queue-size", "0"], "--queue-size must be >= 1"),
        (["--workers", "-1"], "--workers must be >= 0, got -1"),
    ],
)
def test_pretrain_bad_numbers_are_one_line(npy, tmp_path, capsys, extra, words):
    assert main(PRETRAIN + ["--data", f"npy:{npy}", "--out", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and "Traceback" not in err[0]


# ---------------------------------------------------------------------------------------------- reproduce
def test_reproduce_takes_the_folder_lock(tmp_path, capsys):
    from invfast.io import output_lock

    out = tmp_path / "rep"
    with output_lock(out, "invfast reproduce"):
        assert main(["reproduce", "--preset", "tiny", "--out", str(out), "--no-progress"]) == 1
    assert "in use by another invfast run" in capsys.readouterr().err


@pytest.mark.parametrize(
    "setting, words",
    [
        ("run.seeds=1000000000", "run.seeds must be an integer in [1, 100], got 1000000000"),
        ("run.seed=-1", "run.seed must be an int in"),
    ],
)
def test_reproduce_absurd_sizes_are_refused(tmp_path, capsys, setting, words):
    assert main(["reproduce", "--preset", "tiny", "--set", setting, "--out", str(tmp_path / "x")]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
