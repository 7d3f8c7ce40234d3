"""Issue 25, `invfast generate`: the dataset folder follows the run-folder rules (marker, lock, no links,
only invfast's own files deleted), a damaged dataset is repaired exactly or refused, stale temporaries
are cleaned, and every value is validated before any work. Every test here failed on the code before
the change (the report names the exceptions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from invfast.cli import main
from invfast.runtime.run_folder import MARKER
from invfast.synthetic import Transforms2D, storage
from invfast.synthetic.manifest import sha256

pytestmark = pytest.mark.usefixtures("cli_env")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPTS = ["--objects", "5", "--n", "40", "--shard-size", "16", "--batch-size", "8", "--no-progress"]
DATA_FILES = ["images_00000.npy", "images_00001.npy", "images_00002.npy", "labels.npy", "manifest.json", "params.npy"]
DEAD = 2**22 + 12345  # above pid_max on Linux by default: no live process has it


def gen(out, transforms="rotate,hue", *extra):
    return main(["generate", "--transforms", transforms, *OPTS, "--out", str(out), *extra])


def files(d):
    """Every visible file's bytes (the dataset as a user sees it)."""
    return {f: (d / f).read_bytes() for f in sorted(os.listdir(d)) if not f.startswith(".")}


def edit_json(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def one_line(text):
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


# ----------------------------------------------------------------------------------------- the run marker


def test_generate_marks_its_run_and_writes_nothing_outside_the_folder(tmp_path):
    d = tmp_path / "ds"
    assert gen(d) == 0
    marker = json.loads((d / MARKER).read_text())
    assert marker["command"] == "generate" and marker["state"] == "done" and marker["invfast"]
    assert marker["files"] == DATA_FILES
    assert sorted(os.listdir(tmp_path)) == ["ds"]  # no sibling temporary folder
    assert sorted(os.listdir(d)) == sorted([MARKER, *DATA_FILES])  # no lock, no staging left behind


def test_overwrite_never_deletes_a_user_file_named_in_an_edited_manifest_or_marker(tmp_path):
    d = tmp_path / "ds"
    assert gen(d) == 0
    (d / "thesis.tex").write_text("mine")
    edit_json(d / "manifest.json", lambda m: m.update(extra_files=["thesis.tex"]))
    if (d / MARKER).exists():
        edit_json(d / MARKER, lambda m: m["files"].append("thesis.tex"))
    assert gen(d, "blur", "--overwrite") == 0
    assert (d / "thesis.tex").read_text() == "mine"
    assert storage.load(d).config["transforms"] == ["blur"]


def test_a_user_file_beside_a_dataset_is_kept_when_it_is_replaced(tmp_path):
    d = tmp_path / "ds"
    assert gen(d, "rotate", "--preview", str(d / "grid.png")) == 0
    (d / "notes.txt").write_text("mine")
    assert gen(d, "hue", "--overwrite") == 0
    assert (d / "notes.txt").read_text() == "mine" and storage.load(d).config["transforms"] == ["hue"]
    assert not (d / "grid.png").exists()  # the old preview was invfast's own (it showed the old dataset)


# ----------------------------------------------------------------------------------------- damage


@pytest.mark.parametrize(
    "damage",
    [
        {"images_00000.npy": "missing", "images_00002.npy": "altered"},
        {"labels.npy": "altered", "params.npy": "missing"},
    ],
)
def test_rerun_on_a_damaged_dataset_repairs_exactly_what_is_damaged(tmp_path, capsys, damage):
    d = tmp_path / "ds"
    assert gen(d) == 0
    original = files(d)
    for name, how in damage.items():
        if how == "missing":
            os.remove(d / name)
        else:
            raw = bytearray((d / name).read_bytes())
            raw[-3] ^= 0x5A
            (d / name).write_bytes(bytes(raw))
    with pytest.raises(ValueError) as e:
        storage.load(d)
    line = one_line(str(e.value))
    assert any(name in line for name in damage) and "invfast generate" in line
    capsys.readouterr()
    assert gen(d) == 0
    out = capsys.readouterr().out
    assert "repaired" in out
    for name, how in damage.items():
        assert f"{name} ({how})" in out
    assert files(d) == original  # bytes identical to the first run's
    assert len(storage.load(d)) == 40
    assert gen(d) == 0 and "verified" in capsys.readouterr().out  # nothing left to repair


def test_damage_that_cannot_be_repaired_exactly_is_refused_in_one_line(tmp_path, capsys):
    d = tmp_path / "ds"
    assert gen(d) == 0
    shard = (d / "images_00001.npy").read_bytes()
    edit_json(d / "manifest.json", lambda m: m["shards"][1].update(sha256="0" * 64))  # no bytes match it
    capsys.readouterr()
    assert gen(d) == 2
    line = one_line(capsys.readouterr().err)
    assert "images_00001.npy" in line and "--overwrite" in line
    assert (d / "images_00001.npy").read_bytes() == shard  # refused: nothing written
    assert gen(d, "rotate,hue", "--overwrite") == 0  # as the line says: the whole dataset regenerated
    assert "replaced" in capsys.readouterr().out and len(storage.load(d)) == 40
    os.remove(d / "manifest.json")
    assert gen(d) == 2
    line = one_line(capsys.readouterr().err)
    assert "manifest.json is missing" in line and "--overwrite" in line
    assert gen(d, "rotate,hue", "--overwrite") == 0
    assert len(storage.load(d)) == 40
    edit_json(d / "manifest.json", lambda m: m.update(n=-4))  # there, but damaged: not called missing (issue 63)
    assert gen(d, "rotate,hue") == 2
    line = one_line(capsys.readouterr().err)
    assert "manifest.json" in line and "missing" not in line and "--overwrite" in line


def test_loader_refuses_an_unfinished_or_malformed_dataset_in_one_line(tmp_path):
    d = tmp_path / "ds"
    assert gen(d) == 0
    good = (d / "manifest.json").read_text()
    for bad in (
        {"n": 1e30},
        {"n": -4},
        {"n": "40"},
        {"size": 10**9},
        {"size": float("nan")},
        {"num_classes": 0},
        {"classes": "abc"},
        {"format_version": 99},
    ):
        (d / "manifest.json").write_text(good)
        edit_json(d / "manifest.json", lambda m, bad=bad: m.update(bad))
        with pytest.raises(ValueError) as e:
            storage.load(d, verify=False)
        key = next(iter(bad))
        assert key in one_line(str(e.value)), (bad, e.value)
    (d / "manifest.json").write_text(good)
    edit_json(d / "manifest.json", lambda m: m["shards"][1].update(start=17))  # a gap between shards
    with pytest.raises(ValueError, match="shard"):
        storage.load(d, verify=False)
    (d / "manifest.json").write_text(good)
    np.save(d / "images_00000.npy", np.zeros((16, 3, 8, 8), np.uint8))  # the wrong shape, checksum updated
    edit_json(d / "manifest.json", lambda m: m["shards"][0].update(sha256=sha256(d / "images_00000.npy")))
    with pytest.raises(ValueError, match=r"images_00000.npy.*not the array its manifest.json describes"):
        storage.load(d)
    with pytest.raises(ValueError, match=r"images_00000.npy.*holds uint8 \[16, 3, 8, 8\]"):
        storage.load(d, verify=False)
    assert gen(d) == 2  # not the array the manifest describes: damage; regenerated, it differs from the record
    edit_json(d / MARKER, lambda m: m.update(state="swapping"))  # killed while the new files were moved in
    with pytest.raises(ValueError, match="did not finish") as e:
        storage.load(d)
    assert "invfast generate" in one_line(str(e.value))


# ----------------------------------------------------------------------------------------- links, leftovers


def test_links_inside_the_folder_are_refused_and_their_targets_untouched(tmp_path, capsys):
    d = tmp_path / "ds"
    assert gen(d) == 0
    victim = tmp_path / "victim.npy"
    victim.write_bytes((d / "images_00001.npy").read_bytes())
    os.remove(d / "images_00001.npy")
    os.symlink(victim, d / "images_00001.npy")
    before = victim.read_bytes()
    for extra in (("rotate,hue",), ("blur", "--overwrite")):
        capsys.readouterr()
        assert gen(d, *extra) == 2
        assert "symbolic link" in one_line(capsys.readouterr().err)
        assert victim.read_bytes() == before and os.path.islink(d / "images_00001.npy")


def _killed_writers_temporary(folder, target, monkeypatch):
    """What a writer killed in the middle of writing ``target`` leaves: its temporary, in the journal."""
    from invfast.runtime import write_paths

    with monkeypatch.context() as m:
        m.setattr(os, "getpid", lambda: DEAD)
        with write_paths.write_root(folder):
            fd, tmp = write_paths.new_temporary(str(folder / target))
    os.write(fd, b"half written")
    os.close(fd)
    return os.path.basename(tmp)


def test_stale_temporaries_are_cleaned_on_the_next_run(tmp_path, monkeypatch):
    d = tmp_path / "ds"
    assert gen(d) == 0
    original = files(d)
    killed = [_killed_writers_temporary(d, name, monkeypatch) for name in ("images_00001.npy", "manifest.json")]
    stage = f".invfast-staging-{DEAD}-0badcafe"  # a killed run's staging folder, recorded in the marker
    (d / stage).mkdir()
    (d / stage / "images_00000.npy").write_bytes(b"a killed run's")
    edit_json(d / MARKER, lambda m: m.update(staging=[stage]))
    lookalikes = [f".images_00001.npy.tmp-{DEAD}", ".invfast-staging"]  # the user's, not recorded: kept
    (d / lookalikes[0]).write_bytes(b"mine")
    (d / ".invfast-staging").mkdir()
    (d / ".invfast-staging" / "keep.txt").write_text("mine")
    live = d / f".notes.tmp-{os.getpid()}"
    live.write_text("a live writer's")
    assert all((d / k).exists() for k in killed)
    assert gen(d) == 0
    left = sorted(os.listdir(d))
    assert left == sorted([MARKER, live.name, *lookalikes, *DATA_FILES]), left
    assert files(d) == original and (d / ".invfast-staging" / "keep.txt").read_text() == "mine"
    assert "staging" not in json.loads((d / MARKER).read_text())


def test_an_interrupted_generation_keeps_the_old_dataset(tmp_path, monkeypatch):
    d = tmp_path / "ds"
    assert gen(d) == 0
    original = files(d)

    def interrupted(self, indices):
        raise KeyboardInterrupt

    monkeypatch.setattr(Transforms2D, "generate", interrupted)
    assert gen(d, "blur", "--overwrite") == 130
    monkeypatch.undo()
    assert files(d) == original and storage.load(d).config["transforms"] == ["rotate", "hue"]
    assert sorted(os.listdir(tmp_path)) == ["ds"] and not (d / ".invfast.lock").exists()
    assert gen(d, "blur", "--overwrite") == 0 and storage.load(d).config["transforms"] == ["blur"]
    assert not [n for n in os.listdir(d) if n.startswith(".invfast-staging")]


def test_a_crash_while_moving_files_in_is_refused_by_the_loader_and_finished_by_a_rerun(tmp_path, monkeypatch):
    d = tmp_path / "ds"
    assert gen(d) == 0
    real = os.replace
    moved = []

    def crash_after_two(src, dst):
        if ".invfast-staging" in str(src):
            if len(moved) == 2:
                raise OSError("simulated crash while moving the new files in")
            moved.append(dst)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", crash_after_two)
    assert gen(d, "blur", "--overwrite") == 1
    monkeypatch.undo()
    with pytest.raises(ValueError, match="did not finish"):
        storage.load(d)
    assert gen(d, "blur") == 0  # the unfinished run is not a dataset to protect: no --overwrite needed
    assert storage.load(d).config["transforms"] == ["blur"] and sorted(os.listdir(tmp_path)) == ["ds"]


# ----------------------------------------------------------------------------------------- one run at a time


def test_second_generate_on_a_folder_in_use_is_refused_naming_the_holder(tmp_path, capsys):
    d = tmp_path / "ds"
    go = tmp_path / "go"
    code = (
        f"import os, sys, time; sys.path.insert(0, {ROOT!r})\n"
        "from invfast.synthetic import Transforms2D\n"
        "real = Transforms2D.generate\n"
        "def held(self, indices):\n"
        "    print('generating', flush=True)\n"
        f"    while not os.path.exists({str(go)!r}):\n"
        "        time.sleep(0.05)\n"
        "    return real(self, indices)\n"
        "Transforms2D.generate = held\n"
        "from invfast.cli import main\n"
        f"args = ['generate', '--transforms', 'rotate,hue', *{OPTS!r}, '--out', {str(d)!r}, '--overwrite']\n"
        "sys.exit(main(args))\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "generating"
        assert gen(d, "blur", "--overwrite") == 1
        line = one_line(capsys.readouterr().err)
        assert f"pid {p.pid}" in line and "in use" in line
        go.write_text("")
        assert p.wait(timeout=300) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert storage.load(d).config["transforms"] == ["rotate", "hue"]
    assert not (d / ".invfast.lock").exists()


# ----------------------------------------------------------------------------------------- values up front

BAD_SPECS = [
    "n=1e30",
    {"n": 1e30},
    {"n": 10**30},
    "n=-5",
    "n=0",
    "n=2.5",
    {"n": 2.5},
    {"n": float("nan")},
    {"n": True},
    "size=-32",
    "size=100000",
    {"size": float("inf")},
    "objects=0",
    "objects=100000",
    {"seed": 2**70},
    {"seed": float("nan")},
]


@pytest.mark.parametrize("spec", BAD_SPECS, ids=str)
def test_spec_values_that_would_break_later_are_refused_up_front(spec, monkeypatch):
    from invfast import synthetic
    from invfast.data.synthetic import parse_synthetic_spec, synthetic_source

    def no_work(*a, **k):
        raise AssertionError("a data set was built from a bad spec")

    monkeypatch.setattr(synthetic, "Transforms2D", no_work)
    key = next(iter(spec)) if isinstance(spec, dict) else spec.split("=")[0]
    for call in (parse_synthetic_spec, synthetic_source):
        with pytest.raises(ValueError) as e:
            call(spec)
        line = one_line(str(e.value))
        assert f"synthetic spec {key}" in line, line


@pytest.mark.parametrize(
    "option,value",
    [
        ("--size", "100000"),
        ("--size", "-3"),
        ("--n", "0"),
        ("--n", str(2**40)),
        ("--objects", "0"),
        ("--objects", "5000"),
        ("--batch-size", "0"),
        ("--shard-size", "-1"),
        ("--seed", str(2**70)),
    ],
)
def test_generate_refuses_bad_values_before_any_work(tmp_path, capsys, monkeypatch, option, value):
    def no_work(*a, **k):
        raise AssertionError("generation started")

    monkeypatch.setattr(Transforms2D, "generate", no_work)
    args = ["generate", "--transforms", "rotate", *OPTS, "--out", str(tmp_path / "ds"), option, value]
    assert main(args) == 2
    assert option in one_line(capsys.readouterr().err)
    assert not (tmp_path / "ds").exists()


def test_generate_refuses_a_dataset_larger_than_the_free_disk_space(tmp_path, capsys, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 1000, 1000))
    assert gen(tmp_path / "ds") == 2
    line = one_line(capsys.readouterr().err)
    assert "free" in line and "--n" in line
    assert not (tmp_path / "ds").exists()


# ----------------------------------------------------------------------------------------- advice


def test_every_piece_of_advice_names_a_real_option(tmp_path, capsys, monkeypatch):
    """The error lines of generate's refusals name only options generate has."""
    import argparse
    import re

    from invfast.synthetic import cli as gcli

    parser = argparse.ArgumentParser()
    gcli.add_arguments(parser)
    known = {s for a in parser._actions for s in a.option_strings} | {"--debug"}
    d, user = tmp_path / "ds", tmp_path / "mine"
    user.mkdir()
    (user / "a.txt").write_text("x")
    lines = []

    def collect(rc):
        assert rc in (1, 2)
        lines.append(one_line(capsys.readouterr().err))

    assert gen(d) == 0
    collect(gen(d, "blur"))  # a different dataset
    collect(gen(user))  # a folder of the user's
    collect(main(["generate", "--transforms", "spin", "--out", str(tmp_path / "x")]))
    collect(main(["generate", "--transforms", "rotate", "--order", "zzz", "--out", str(tmp_path / "x")]))
    edit_json(d / "manifest.json", lambda m: m["shards"][0].update(sha256="0" * 64))
    collect(gen(d))  # damage that cannot be repaired
    os.remove(d / "manifest.json")
    collect(gen(d))  # no manifest
    from invfast.io import output_lock

    with output_lock(tmp_path / "busy", "test holder"):
        collect(gen(tmp_path / "busy"))  # in use
    for line in lines:
        for opt in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line):
            assert opt in known, (opt, line)


def test_a_dataset_of_an_earlier_invfast_is_verified_but_never_written_into(tmp_path, capsys):
    d = tmp_path / "old"
    assert gen(d) == 0
    os.remove(d / MARKER)  # what invfast wrote before run markers: the dataset and its manifest only
    edit_json(d / "manifest.json", lambda m: m.update(extra_files=["thesis.tex"]))
    (d / "thesis.tex").write_text("mine")
    original = files(d)
    capsys.readouterr()
    assert gen(d) == 0 and "verified" in capsys.readouterr().out  # the same dataset, intact: nothing to do
    for extra in (("blur", "--overwrite"), ("rotate,hue", "--preview", str(d / "grid.png"))):
        assert gen(d, *extra) == 2
        assert "earlier invfast" in one_line(capsys.readouterr().err)
    raw = bytearray((d / "images_00001.npy").read_bytes())
    raw[-1] ^= 1
    (d / "images_00001.npy").write_bytes(bytes(raw))
    assert gen(d) == 2 and "earlier invfast" in one_line(capsys.readouterr().err)  # damaged: refused, not "kept"
    original["images_00001.npy"] = bytes(raw)
    assert files(d) == original and not (d / MARKER).exists()


def test_preview_inside_out_is_part_of_the_run_and_must_be_directly_in_it(tmp_path, capsys):
    d = tmp_path / "ds"
    assert gen(d, "rotate", "--preview", str(d / "sub" / "grid.png")) == 2
    assert "--preview" in one_line(capsys.readouterr().err) and not d.exists()
    assert gen(d, "rotate", "--preview", str(d / "grid.jpg")) == 2
    assert ".png" in one_line(capsys.readouterr().err)
    assert gen(d, "rotate", "--preview", str(d / "grid.png")) == 0
    assert "grid.png" in json.loads((d / MARKER).read_text())["files"]
    (d / "grid.png").unlink()
    assert gen(d, "rotate", "--preview", str(d / "grid.png")) == 0  # the same dataset: only the preview is written
    assert (d / "grid.png").stat().st_size > 0 and len(storage.load(d)) == 40
