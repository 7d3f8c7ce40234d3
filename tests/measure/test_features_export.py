"""``invfast features`` / :func:`invfast.measure.export.export_features`: the rows are the model's features of
each readable image (checked against the model called directly), unreadable files are skipped and named, class
subfolders become labels, an interrupted export resumes to the same file, and bad requests get one line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from invfast.cli import main
from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
from invfast.data.sources import as_source
from invfast.measure.export import ExportPaths, export_features
from invfast.models import create


def _folder(root) -> str:
    rng = np.random.default_rng(0)
    for cls, n in (("cat", 3), ("dog", 4)):
        os.makedirs(root / cls)
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (40, 36, 3), dtype=np.uint8)).save(root / cls / f"{i}.png")
    (root / "dog" / "broken.png").write_bytes(b"not an image at all")
    (root / "README.txt").write_text("a stray file at the top: no class of its own")
    return str(root)


def _reference(model, images: torch.Tensor) -> np.ndarray:
    x = images.float() / 255.0
    x = (x - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        return model.eval()(x).numpy()


def test_features_command_writes_rows_labels_and_names_the_unreadable(tmp_path, capsys):
    data = _folder(tmp_path / "photos")
    out = tmp_path / "f.npy"
    argv = [
        "features",
        "--model",
        "resnet18-cifar",
        "--model-arg",
        "width=8",
        "--data",
        f"folder:{data}",
        "--resize",
        "32",
        "--out",
        str(out),
        "--workers",
        "0",
        "--batch-size",
        "3",
        "--no-progress",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    assert "7 x 64 features, 2 unreadable image(s) skipped" in capsys.readouterr().out
    feats, labels = np.load(out), np.load(tmp_path / "f.labels.npy")
    meta = json.loads((tmp_path / "f.json").read_text())
    assert feats.shape == (7, 64) and feats.dtype == np.float32
    assert labels.tolist() == [0, 0, 0, 1, 1, 1, 1] and meta["classes"] == ["cat", "dog"]
    assert meta["n_images"] == 7 and sorted(os.path.basename(p) for p in meta["skipped"]) == [
        "README.txt",
        "broken.png",
    ]
    torch.manual_seed(0)  # the command's random initialisation (--seed 0)
    model = create("resnet18-cifar", width=8)
    src = as_source(f"folder:{data}", resize=32)
    images, ok = src.load(list(range(len(src))))
    np.testing.assert_allclose(feats, _reference(model, images[ok]), rtol=1e-5, atol=1e-6)
    assert main(argv) == 2  # the file exists: refused without --overwrite
    assert "exists; add --overwrite" in capsys.readouterr().err
    assert main(argv + ["--overwrite"]) == 0
    np.testing.assert_array_equal(np.load(out), feats)
    assert not os.path.exists(str(out) + ".partial.npy")


class _Stop(Exception):
    pass


def test_an_interrupted_export_resumes_to_the_same_rows(tmp_path):
    torch.manual_seed(3)
    model = create("resnet18-cifar", width=8).eval()
    images = torch.randint(0, 256, (10, 3, 32, 32), dtype=torch.uint8)
    src = as_source(images)
    paths = ExportPaths(str(tmp_path / "g.npy"))
    key = {"model": "m"}
    calls = []

    def extract(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        if len(calls) == 3:
            raise _Stop
        return torch.from_numpy(_reference(model, x))

    with pytest.raises(_Stop):
        export_features(extract, src, paths, key, batch_size=4, save_every=0)
    assert json.loads(open(paths.record).read())["done"] == 8
    calls.clear()
    calls.append(-1)  # the third call no longer raises
    export_features(extract, src, paths, key, batch_size=4, save_every=0)
    assert calls == [-1, 2]  # only the last two images were computed again
    np.testing.assert_allclose(np.load(paths.features), _reference(model, images), rtol=1e-5, atol=1e-6)
    assert not os.path.exists(paths.partial) and not os.path.exists(paths.record)


def test_a_partial_export_of_another_key_is_refused(tmp_path):
    images = torch.randint(0, 256, (6, 3, 8, 8), dtype=torch.uint8)
    paths = ExportPaths(str(tmp_path / "h.npy"))

    def stop_after_one(x: torch.Tensor) -> torch.Tensor:
        if stop_after_one.n:
            raise _Stop
        stop_after_one.n += 1
        return x.float().mean((2, 3))

    stop_after_one.n = 0
    with pytest.raises(_Stop):
        export_features(stop_after_one, as_source(images), paths, {"model": "a"}, batch_size=3, save_every=0)
    with pytest.raises(ValueError, match="partial export of another model.*--overwrite"):
        export_features(lambda x: x.float().mean((2, 3)), as_source(images), paths, {"model": "b"}, batch_size=3)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--out", "x.txt"], "must name a .npy file"),
        (["--batch-size", "0"], "--batch-size must be >= 1"),
        (["--model-arg", "oops"], "KEY=VALUE"),
        (["--seed", str(2**63)], "--seed must be a 64-bit signed integer"),
    ],
)
def test_bad_requests_are_one_line(tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    argv = ["features", "--model", "resnet18-cifar", "--data", "synthetic:n=4", "--out", "f.npy", "--no-progress"]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_features_file_cannot_be_the_data_it_reads(tmp_path, capsys):
    arr = tmp_path / "images.npy"
    np.save(arr, np.zeros((4, 8, 8, 3), dtype=np.uint8))
    assert (
        main(
            [
                "features",
                "--model",
                "resnet18-cifar",
                "--data",
                f"npy:{arr}",
                "--out",
                str(arr),
                "--overwrite",
                "--no-progress",
            ]
        )
        == 2
    )
    assert "overwrite that input" in capsys.readouterr().err
