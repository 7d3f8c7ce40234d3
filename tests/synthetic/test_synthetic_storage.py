"""Transforms-2D storage safety: the manifest loader reads only plain file names inside the dataset
folder; materialize/`invfast generate --overwrite` never deletes files it did not write and keeps the old
dataset until the new one is complete (more in test_synthetic_guarantees.py); split names of
``synthetic:`` specs are validated."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from invfast.synthetic import Transforms2D, storage


def make(transforms="rotate", n=20, **kw):
    return Transforms2D(5, transforms, n=n, **kw)


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def craft(ds_dir, edit):
    m = json.loads((ds_dir / "manifest.json").read_text())
    edit(m)
    (ds_dir / "manifest.json").write_text(json.dumps(m))


# ----------------------------------------------------------------------------- loader stays inside its folder


@pytest.mark.parametrize("where", ["dotdot", "absolute", "files-table"])
def test_loader_refuses_manifest_paths_outside_folder(tmp_path, where):
    d = make().materialize(tmp_path / "ds", progress=False)
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.npy"
    np.save(secret, np.load(d / "images_00000.npy"))  # a valid shard, with a matching sha256 below
    labels = outside / "labels.npy"
    np.save(labels, np.load(d / "labels.npy"))

    def edit(m):
        if where == "dotdot":
            m["shards"][0]["file"], m["shards"][0]["sha256"] = "../outside/secret.npy", sha(secret)
        elif where == "absolute":
            m["shards"][0]["file"], m["shards"][0]["sha256"] = str(secret), sha(secret)
        else:
            m["files"]["../outside/labels.npy"] = sha(labels)

    craft(d, edit)
    for verify in (True, False):
        with pytest.raises(ValueError, match="not a plain file name inside the dataset folder"):
            storage.load(d, verify=verify)


def test_loader_refuses_symlink_out_of_folder(tmp_path):
    d = make().materialize(tmp_path / "ds", progress=False)
    outside = tmp_path / "secret.npy"
    os.replace(d / "images_00000.npy", outside)
    os.symlink(outside, d / "images_00000.npy")
    with pytest.raises(ValueError, match="outside the dataset folder"):
        storage.load(d)


def test_loader_refuses_malformed_manifest(tmp_path):
    d = make().materialize(tmp_path / "ds", progress=False)
    craft(d, lambda m: m.pop("shards"))
    with pytest.raises(ValueError, match="malformed"):
        storage.load(d)


# ----------------------------------------------------------------------------- never delete the user's files


def user_folder(tmp_path):
    d = tmp_path / "mine"
    (d / "sub").mkdir(parents=True)
    (d / "important.txt").write_text("keep me")
    (d / "sub" / "thesis.tex").write_text("\\documentclass{article}")
    return d


def intact(d):
    return (
        (d / "important.txt").read_text() == "keep me"
        and (d / "sub" / "thesis.tex").read_text() == "\\documentclass{article}"
        and sorted(os.listdir(d)) == ["important.txt", "sub"]
    )


def test_overwrite_refuses_folder_with_user_files(tmp_path):
    d = user_folder(tmp_path)
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match="important.txt, sub/ and is not an invfast dataset") as e:
            make().materialize(d, overwrite=overwrite, progress=False)
        assert "overwrite" not in str(e.value).replace(str(d), "")
        assert intact(d)
    assert sorted(os.listdir(tmp_path)) == ["mine"]  # no temp folder left behind


def test_cli_overwrite_refuses_user_folder(tmp_path, capsys):
    from invfast.cli import main

    d = user_folder(tmp_path)
    for extra in ([], ["--overwrite"]):
        assert (
            main(
                ["generate", "--transforms", "hue", "--objects", "5", "--n", "16", "--out", str(d), "--no-progress"]
                + extra
            )
            == 2
        )
        err = capsys.readouterr().err
        assert (
            "not an invfast dataset" in err and "never deletes" in err and "--overwrite" not in err.replace(str(d), "")
        )
        assert intact(d)


def test_overwrite_keeps_a_user_file_beside_the_dataset(tmp_path):
    d = make("rotate").materialize(tmp_path / "ds", progress=False)
    (d / "notes.txt").write_text("mine")
    make("hue").materialize(d, overwrite=True, progress=False)
    assert (d / "notes.txt").read_text() == "mine" and storage.load(d).config["transforms"] == ["hue"]


def test_overwrite_replaces_dataset_and_own_preview(tmp_path):
    from invfast.cli import main
    from invfast.runtime.run_folder import MARKER

    d = tmp_path / "ds"
    args = ["--objects", "5", "--n", "16", "--out", str(d), "--preview", str(d / "grid.png"), "--no-progress"]
    assert main(["generate", "--transforms", "rotate"] + args) == 0
    assert (d / "grid.png").is_file() and "grid.png" in json.loads((d / MARKER).read_text())["files"]
    assert main(["generate", "--transforms", "hue"] + args) == 2  # a different dataset: needs --overwrite
    assert main(["generate", "--transforms", "hue", "--overwrite"] + args) == 0
    assert storage.load(d).config["transforms"] == ["hue"] and (d / "grid.png").is_file()
    # the preview the marker lists is the command's own file: replaced with the dataset it showed
    assert (
        main(
            [
                "generate",
                "--transforms",
                "blur",
                "--objects",
                "5",
                "--n",
                "16",
                "--out",
                str(d),
                "--no-progress",
                "--overwrite",
            ]
        )
        == 0
    )
    assert not (d / "grid.png").exists() and sorted(os.listdir(tmp_path)) == ["ds"]


def test_interrupted_overwrite_keeps_the_old_dataset(tmp_path, monkeypatch):
    """Interrupted while generating: the old dataset stays whole and loadable, nothing is left beside it."""
    d = make("hue").materialize(tmp_path / "ds", progress=False)
    ds = make("blur", n=64)

    def boom(indices):
        raise KeyboardInterrupt

    monkeypatch.setattr(ds, "generate", boom)
    with pytest.raises(KeyboardInterrupt):
        ds.materialize(d, overwrite=True, batch_size=16, progress=False)
    assert storage.load(d).config["transforms"] == ["hue"]
    assert sorted(os.listdir(tmp_path)) == ["ds"]


# ----------------------------------------------------------------------------- split names


def test_check_split():
    from invfast.synthetic import SPLITS, check_split

    assert SPLITS == ("train", "val", "test")
    for s in SPLITS:
        assert check_split(s) == s
    for bad in ("zzz", "", "Train", None):
        with pytest.raises(ValueError, match="split must be one of train, val, test"):
            check_split(bad)
