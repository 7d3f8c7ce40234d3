"""No input reaches an internal error (issue 35): every file the commands read, fed every malformation that
applies to it, ends in one line ``invfast <command>: error: ...`` (exit 2, no traceback) that names it.

The table is READERS x malformations. A reader is a command line that reads one file (``measure --data
npy:F``, ``probe --targets F``, ``compare RUN``, ``measure --checkpoint F``, an image in a ``--strict``
folder, ``generate``'s manifest ...); its ``prepare`` lays out a valid input (the ``valid`` row of each
reader, exit 0, shows the command works), and each malformation then breaks it: cut short, altered, empty,
not the format, wrong dtype / rank / JSON type, missing keys, NaN/Inf, huge values, Python objects. Every
pair runs the real command in-process (``invfast.cli.main``). Accepted variants (every image mode and bit
depth, integer ``.npy`` images) are rows with exit 0.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from measure_helpers import small_net
from PIL import Image

import invfast
from invfast.cli import main
from invfast.io import atomic_torch_save
from invfast.measure import InvarianceResult, TransformResult
from invfast.stats import FeatureStats

pytestmark = pytest.mark.usefixtures("cli_env")

Write = Callable[[Path], None]


# ------------------------------------------------------------------------------------------- valid inputs
class Shared:
    """Valid inputs the readers need besides the file under test (written once per module)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, name: str) -> str:
        return str(self.root / name)


def _result(model: str, seed: int) -> str:
    r = np.random.default_rng(seed)
    trs = {}
    for name, fam in (("hflip", "spatial"), ("brightness", "appearance")):
        cos = r.uniform(0.2, 0.9, 6)
        f64 = dict(dtype=torch.float64)
        trs[name] = TransformResult(
            name=name,
            family=fam,
            mean_distance=float((1 - cos).mean()),
            mean_cosine=float(cos.mean()),
            n_images=6,
            params=torch.arange(3.0, **f64),
            identity=torch.arange(3) == 0,
            distance=torch.tensor([0.0, 0.3, 0.4], **f64),
            cosine=torch.tensor([1.0, 0.6, 0.5], **f64),
            distance_std=torch.zeros(3, **f64),
            cosine_std=torch.zeros(3, **f64),
            per_image_cosine=torch.from_numpy(cos),
            per_image_distance=torch.from_numpy(1 - cos),
        )
    meta = {"mode": "transforms", "grid_size": 3, "images": {"n": 6, "id": "5e" * 32}, "config": {"grid_size": 3}}
    return InvarianceResult(model=model, transforms=trs, n_images=6, meta=meta, stats={"n": 6, "dim": 4}).to_json()


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Shared:
    root = tmp_path_factory.mktemp("valid")
    rng = np.random.default_rng(0)
    torch.save(small_net().state_dict(), root / "ck.pt")
    stats = FeatureStats()
    stats.update(torch.from_numpy(rng.normal(size=(40, 24))))  # small_net's 24 features at 16 px
    stats.save(root / "stats.pt")
    np.save(root / "images.npy", rng.integers(0, 256, (6, 3, 16, 16), dtype=np.uint8))
    np.save(root / "X.npy", rng.normal(size=(12, 3)))
    np.save(root / "yc.npy", np.arange(12) % 2)
    (root / "A.json").write_text(_result("A", 0))
    (root / "B.json").write_text(_result("B", 1))
    (root / "probe.json").write_text(json.dumps({"best_index": 0, "cv_results": {"mean_test_score": [0.5]}}))
    (root / "scores.json").write_text(json.dumps({"tasks": {"t": {"A": 0.5, "B": 0.7}}}))
    Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(root / "good.png")
    disc = (np.hypot(*np.mgrid[-10:10, -10:10]) < 8).astype(np.uint8) * 255
    Image.fromarray(np.dstack([rng.integers(0, 256, (20, 20, 3), dtype=np.uint8), disc])).save(root / "object.png")
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        assert main(["generate", "--n", "4", "--size", "16", "--out", str(root / "ds"), "--no-progress"]) == 0
    return Shared(root)


# ---------------------------------------------------------------------------------------------- the readers
@dataclass(frozen=True)
class Reader:
    """A command reading one file, at ``file`` in the case's folder. ``prepare(folder, shared)`` puts a valid
    one there (``valid=False``: only what else the command needs); ``argv(folder, shared)`` is the command."""

    name: str
    file: str
    argv: Callable[[Path, Shared], list[str]]
    prepare: Callable[[Path, Shared], None]
    valid: bool = True
    after: Callable[[Path], None] | None = None  # what must hold once the command has run


def _measure(d: Path, s: Shared, data: str = "", *extra: str, checkpoint: str = "") -> list[str]:
    fixed = ["--grid-size", "2", "--transforms", "hflip", "--resize", "16", "--workers", "0", "--no-plots"]
    return [
        "measure",
        *("--model", "measure_helpers:small_net", "--checkpoint", checkpoint or s("ck.pt")),
        *("--data", data or f"npy:{s('images.npy')}", "--out", str(d / "out"), "--no-progress"),
        *fixed,
        *extra,
    ]


def _pretrain(d: Path, s: Shared, data: str, *extra: str) -> list[str]:
    small = ["--arch", "resnet18-cifar", "--width", "4", "--size", "16", "--batch-size", "2", "--queue-size", "4"]
    return ["pretrain", "--data", data, "--out", str(d / "out"), "--steps", "1", "--no-progress", *small, *extra]


def _probe(features: str, targets: str, task: str) -> list[str]:
    return ["probe", "--features", features, "--targets", targets, "--task", task, "--folds", "2"]


_SMALL_SHEET = ("--k", "2", "--tile", "8", "--names", "hflip", "rotation")


def _compare(d: Path, *args: str) -> list[str]:
    return ["compare", *args, "--out", str(d / "cmp"), "--no-plots", "--bootstrap", "10"]


def _generate(d: Path, *args: str) -> list[str]:
    return ["generate", *args, "--n", "4", "--size", "16", "--no-progress"]


def _copy(name: str, to: str, *beside: tuple[str, str]) -> Callable[[Path, Shared], None]:
    """prepare: shared ``name`` copied to ``to`` (and each (shared, to) of ``beside``)."""

    def prepare(d: Path, s: Shared) -> None:
        for src, dst in ((name, to), *beside):
            (d / dst).parent.mkdir(parents=True, exist_ok=True)
            if (s.root / src).is_dir():
                shutil.copytree(s(src), d / dst)
            else:
                shutil.copy(s(src), d / dst)

    return prepare


def _save(a: Any) -> Callable[[Path, Shared], None]:
    def prepare(d: Path, s: Shared) -> None:
        with open(d / "x.npy", "wb") as f:
            np.save(f, a)

    return prepare


def _marker(out: str, command: str, *files: str) -> Callable[[Path, Shared], None]:
    """prepare: ``out`` marked as a running invfast ``command`` run that wrote ``files``."""

    def prepare(d: Path, s: Shared) -> None:
        (d / out / "state").mkdir(parents=True)
        doc = {"format": "invfast.run/1", "command": command, "invfast": invfast.__version__, "state": "running"}
        (d / out / ".invfast-run.json").write_text(json.dumps({**doc, "files": list(files)}))
        (d / out / "notes.txt").write_text("the user's")

    return prepare


IMAGE_READERS = [
    Reader(
        "measure-folder",
        "img/1.png",
        lambda d, s: _measure(d, s, str(d / "img"), "--strict"),
        _copy("good.png", "img/1.png", ("object.png", "img/0.png")),
    ),
    Reader(
        "pretrain-folder",
        "img/1.png",
        lambda d, s: _pretrain(d, s, f"folder:{d / 'img'}", "--load-size", "16", "--workers", "1"),
        _copy("good.png", "img/1.png", ("object.png", "img/0.png")),
    ),
    Reader(
        "transforms-image",
        "x.png",
        lambda d, s: ["transforms", "--image", str(d / "x.png"), "--preview", str(d / "o.png"), *_SMALL_SHEET],
        _copy("good.png", "x.png"),
    ),
    Reader(
        "generate-backgrounds",
        "bg/x.png",
        lambda d, s: _generate(d, "--background-dir", str(d / "bg"), "--out", str(d / "g")),
        _copy("good.png", "bg/x.png"),
    ),
    Reader(
        "generate-objects",
        "obj/a/x.png",
        lambda d, s: _generate(d, "--object-dir", str(d / "obj"), "--out", str(d / "g")),
        _copy("object.png", "obj/a/x.png"),
    ),
]
_G = np.random.default_rng(2)
_IMAGES = _G.integers(0, 256, (6, 3, 16, 16), dtype=np.uint8)
#: what each .npy reader accepts (its valid row); the malformations are made from it
NPY_VALID = {
    "measure-npy": _IMAGES,
    "pretrain-npy": _IMAGES.transpose(0, 2, 3, 1),
    "probe-features": np.arange(36.0).reshape(12, 3) % 5,
    "probe-labels": np.arange(12) % 2,
    "probe-targets": np.linspace(0, 1, 12),
}


def _npy_reader(name: str, argv: Callable[[Path, Shared], list[str]]) -> Reader:
    return Reader(name, "x.npy", argv, _save(NPY_VALID[name]))


NPY_READERS = [
    _npy_reader("measure-npy", lambda d, s: _measure(d, s, f"npy:{d / 'x.npy'}")),
    _npy_reader("pretrain-npy", lambda d, s: _pretrain(d, s, f"npy:{d / 'x.npy'}")),
    _npy_reader("probe-features", lambda d, s: _probe(str(d / "x.npy"), s("yc.npy"), "classification")),
    _npy_reader("probe-labels", lambda d, s: _probe(s("X.npy"), str(d / "x.npy"), "classification")),
    _npy_reader("probe-targets", lambda d, s: _probe(s("X.npy"), str(d / "x.npy"), "regression")),
]
PT_READERS = [
    Reader(
        "measure-checkpoint",
        "ck.pt",
        lambda d, s: _measure(d, s, checkpoint=str(d / "ck.pt")),
        _copy("ck.pt", "ck.pt"),
    ),
    Reader(
        "measure-stats",
        "st.pt",
        lambda d, s: _measure(d, s, "", "--stats", str(d / "st.pt")),
        _copy("stats.pt", "st.pt"),
    ),
    Reader(
        "pretrain-resume",
        "out/checkpoint.pt",
        lambda d, s: _pretrain(d, s, f"npy:{s('images.npy')}", "--resume"),
        _marker("out", "pretrain", "checkpoint.pt"),
        valid=False,
    ),
    Reader(
        "measure-state",
        "out/state/state.pt",
        lambda d, s: _measure(d, s),
        _marker("out", "measure", "state/state.pt"),
        valid=False,
    ),
]
JSON_READERS = [
    Reader(
        "compare-run", "r.json", lambda d, s: _compare(d, s("A.json"), str(d / "r.json")), _copy("B.json", "r.json")
    ),
    Reader(
        "compare-scores",
        "p.json",
        lambda d, s: _compare(d, s("A.json"), s("B.json"), "--probes", str(d / "p.json")),
        _copy("scores.json", "p.json"),
    ),
    Reader(
        "compare-probe-file",
        "p.json",
        lambda d, s: _compare(d, s("A.json"), s("B.json"), "--probes", f"A:t={d / 'p.json'}", f"B:t={s('probe.json')}"),
        _copy("probe.json", "p.json"),
    ),
    Reader(
        "run-marker",
        "out/.invfast-run.json",
        lambda d, s: _measure(d, s),
        _marker("out", "measure"),
        after=lambda d: _assert_kept(d / "out" / "notes.txt"),
    ),
    Reader(
        "dataset-manifest", "ds/manifest.json", lambda d, s: _generate(d, "--out", str(d / "ds")), _copy("ds", "ds")
    ),
]


def _assert_kept(p: Path) -> None:
    assert p.read_text() == "the user's", "a file invfast did not write was changed or deleted"


# ------------------------------------------------------------------------------------------ malformations
def _bytes(b: bytes) -> Write:
    return lambda p: p.write_bytes(b)


def _npy(a: Any) -> Write:
    def write(p: Path) -> None:
        with open(p, "wb") as f:
            np.save(f, a, allow_pickle=True)  # allow_pickle: to write the object arrays readers must refuse

    return write


def _cut(p: Path) -> None:
    b = p.read_bytes()
    p.write_bytes(b[: len(b) // 2])


def _then(first: Write, then: Write) -> Write:
    def write(p: Path) -> None:
        first(p)
        then(p)

    return write


def _npz(a: np.ndarray) -> Write:
    def write(p: Path) -> None:
        with open(p, "wb") as f:
            np.savez(f, a=a)

    return write


def _flip(p: Path) -> None:
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0xFF
    p.write_bytes(bytes(b))


def _torch(obj: Any, checksum: bool = False) -> Write:
    return lambda p: atomic_torch_save(obj, p, checksum=checksum)


def _pil(mode: str, fmt: str = "PNG", values: Any = None) -> Write:
    """An image of ``mode`` (pixels ``values``, else random in the mode's range) saved as ``fmt``."""

    def write(p: Path) -> None:
        rng = np.random.default_rng(1)
        if values is not None:
            im = Image.fromarray(values)
        elif mode == "I;16":
            im = Image.fromarray(rng.integers(0, 65536, (12, 10)).astype(np.uint16))
        elif mode == "I":
            im = Image.fromarray(rng.integers(0, 65536, (12, 10)).astype(np.int32))
        elif mode == "F":
            im = Image.fromarray(rng.random((12, 10)).astype(np.float32))
        else:
            im = Image.fromarray(rng.integers(0, 256, (12, 10, 3), dtype=np.uint8)).convert(mode)
        im.save(p, format=fmt)

    return write


def _edit(change: Callable[[Any], Any]) -> Write:
    """The valid JSON file, changed."""
    return lambda p: p.write_text(json.dumps(change(json.loads(p.read_text()))))


def _set(*path: Any) -> Callable[[Any], Any]:
    """Set the field at ``path[:-1]`` to ``path[-1]`` (a value of ``DROP`` deletes it)."""

    def change(doc: Any) -> Any:
        *keys, value = path
        node = doc
        for k in keys[:-1]:
            node = node[k]
        if value is DROP:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
        return doc

    return change


DROP = object()

COMMON: dict[str, Write] = {"zero-byte": _bytes(b""), "truncated": _cut, "garbage": _bytes(b"hello, world\n")}


def _npy_malformed(valid: np.ndarray) -> dict[str, Write]:
    f = valid.astype(np.float64)
    nan, inf = f.copy(), f.copy()
    nan.flat[1], inf.flat[1] = np.nan, -np.inf
    return {
        **COMMON,
        "npz": _npz(valid),
        "object": _npy(valid.astype(object)),
        "complex": _npy(f + 1j),
        "string": _npy(valid.astype(str)),
        "structured": _npy(np.zeros(valid.shape, [("a", "f4"), ("b", "f4")])),
        "scalar": _npy(np.array(1.0)),
        "wrong-rank": _npy(valid[..., None, None]),
        "empty": _npy(valid[:0]),
        "nan": _npy(nan),
        "inf": _npy(inf),
        "huge": _npy(np.full(valid.shape, 1e300)),
    }


NPY_EXTRA: dict[str, dict[str, Write]] = {
    "measure-npy": {
        "bool": _npy(_IMAGES > 0),
        "int64-negative": _npy(_IMAGES.astype(np.int64) - 300),
        "int32-above-16-bit": _npy(_IMAGES.astype(np.int32) + 70000),
        "one-channel": _npy(_IMAGES[:, :1]),
        "grey-3d": _npy(_IMAGES[:, 0]),
        "float-0-1000": _npy(_IMAGES.astype(np.float32) * 4),
        "float-negative": _npy(_IMAGES.astype(np.float32) - 1),
    },
    "pretrain-npy": {"bool": _npy(_IMAGES > 0), "uint64-huge": _npy(_IMAGES.astype(np.uint64) + 2**40)},
    "probe-features": {"no-columns": _npy(np.zeros((12, 0))), "one-d": _npy(np.arange(12.0))},
    "probe-labels": {
        "fractional": _npy(np.arange(12) / 4),
        "one-class": _npy(np.zeros(12, np.int64)),
        "too-short": _npy(np.arange(8) % 2),
        "two-columns": _npy(np.stack([np.arange(12) % 2] * 2, 1)),
    },
    "probe-targets": {"too-short": _npy(np.linspace(0, 1, 8)), "three-d": _npy(np.zeros((12, 2, 2)))},
}
#: accepted variants (exit 0): integer images by the documented rule
NPY_ACCEPTED = {
    "measure-npy": {
        "uint16": _npy(_G.integers(0, 65536, (6, 3, 16, 16)).astype(np.uint16)),
        "int64-0-255": _npy(_G.integers(0, 256, (6, 16, 16, 3))),
        "float-0-1": _npy(_G.random((6, 16, 16, 3), dtype=np.float32)),
    },
    "probe-labels": {"strings": _npy(np.array(["cat", "dog"] * 6)), "whole-floats": _npy((np.arange(12) % 2) * 1.0)},
}
#: accepted JSON variants (exit 0): a marker listing its files as a string owns none (nothing is deleted)
JSON_ACCEPTED = {"run-marker": {"files-string": _edit(_set("files", "notes.txt"))}}

_F_NAN = np.full((12, 10), 0.5, np.float32)
_F_NAN[3, 4] = np.nan
IMAGE_MALFORMED: dict[str, Write] = {
    **COMMON,
    "truncated-jpeg": _then(_pil("RGB", "JPEG"), _cut),
    "npy-named-png": _npy(np.zeros((4, 4, 3), np.uint8)),
    "float-nan": _pil("F", "TIFF", _F_NAN),
    "float-huge": _pil("F", "TIFF", np.full((12, 10), 1e6, np.float32)),
    "int-negative": _pil("I", "TIFF", np.full((12, 10), -5, np.int32)),
}
IMAGE_EXTRA = {
    "generate-objects": {
        "no-alpha": _pil("RGB"),
        "transparent": _pil("RGBA", values=np.zeros((12, 10, 4), np.uint8)),
    },
}
#: every mode and bit depth an image file may have (Pillow): read by what it holds
IMAGE_MODES: dict[str, Write] = {
    "1-bit": _pil("1"),
    "L": _pil("L"),
    "LA": _pil("LA"),
    "P": _pil("P"),
    "RGBA": _pil("RGBA"),
    "I;16": _pil("I;16"),
    "I-32-bit": _pil("I", "TIFF"),
    "F-0-1": _pil("F", "TIFF"),
    "F-0-255": _pil("F", "TIFF", np.full((12, 10), 200.0, np.float32)),
    "CMYK-jpeg": _pil("CMYK", "JPEG"),
    "RGB-jpeg": _pil("RGB", "JPEG"),
}

_SD = small_net().state_dict()
_FIRST = next(iter(_SD))
PT_MALFORMED: dict[str, Write] = {
    **COMMON,
    "altered": _then(_torch(_SD, checksum=True), _flip),
    "list": _torch([1, 2]),
    "tensor": _torch(torch.zeros(3)),
    "strings": _torch({"a": "b"}),
    "code": _torch({"f": print}),  # a pickled global: refused, never loaded
}
_STATS = {"format": "invfast.FeatureStats/1", "n": 40, "mean": torch.zeros(24), "m2": torch.eye(24)}
_STATS |= {"m3": torch.zeros(24), "m4": torch.tensor(1.0)}
PT_EXTRA = {
    "measure-checkpoint": {
        "wrong-keys": _torch({"conv.weight": torch.zeros(3)}),
        "wrong-shape": _torch({**_SD, _FIRST: torch.zeros(2, 2)}),
    },
    "measure-stats": {
        "other-dim": _torch({**_STATS, "mean": torch.zeros(5), "m2": torch.eye(5), "m3": torch.zeros(5)}),
        "nan": _torch({**_STATS, "m2": torch.full((24, 24), float("nan"))}),
        "count-string": _torch({**_STATS, "n": "x"}),
        "count-list": _torch({**_STATS, "n": [1]}),
        "inconsistent-shapes": _torch({**_STATS, "m3": torch.zeros(2)}),
        "complex": _torch({**_STATS, "m2": torch.eye(24, dtype=torch.complex64)}),
        "missing-key": _torch({k: v for k, v in _STATS.items() if k != "m4"}),
    },
}

JSON_MALFORMED: dict[str, Write] = {
    **COMMON,
    "not-utf8": _bytes(b"\xff\xfe\x00{"),
    "list": _bytes(b"[1, 2]"),
    "string": _bytes(b'"result"'),
    "number": _bytes(b"3"),
    "null": _bytes(b"null"),
    "empty-object": _bytes(b"{}"),
    "nan-literal": _bytes(b'{"tasks": NaN, "best_index": NaN, "format": NaN}'),
    "huge-number": _bytes(b'{"tasks": 1e999, "best_index": 1e999}'),
}
_T0 = ("transforms", 0)
JSON_EXTRA = {
    "compare-run": {
        "no-transforms": _edit(_set("transforms", DROP)),
        "transforms-object": _edit(_set("transforms", {})),
        "transform-string": _edit(_set("transforms", ["x"])),
        "no-name": _edit(_set(*_T0, "name", DROP)),
        "name-number": _edit(_set(*_T0, "name", 3)),
        "duplicate-transform": _edit(lambda d: {**d, "transforms": [d["transforms"][0]] * 2}),
        "params-string": _edit(_set(*_T0, "params", "abc")),
        "params-ragged": _edit(_set(*_T0, "params", [[0.0], [1.0, 2.0], [3.0]])),
        "params-3d": _edit(_set(*_T0, "params", [[[0.0]], [[1.0]], [[2.0]]])),
        "identity-short": _edit(_set(*_T0, "identity", [True])),
        "identity-numbers": _edit(_set(*_T0, "identity", [1, 0, 0])),
        "cosine-short": _edit(_set(*_T0, "cosine", [1.0])),
        "cosine-null": _edit(_set(*_T0, "cosine", None)),
        "mean-string": _edit(_set(*_T0, "mean_cosine", "x")),
        "mean-infinity": _edit(_set(*_T0, "mean_cosine", float("inf"))),
        "per-image-strings": _edit(_set(*_T0, "per_image_cosine", ["x"] * 6)),
        "per-image-2d": _edit(_set(*_T0, "per_image_cosine", [[0.5]] * 6)),
        "per-image-infinity": _edit(_set(*_T0, "per_image_cosine", [float("inf")] * 6)),
        "n-images-string": _edit(_set("n_images", "6")),
        "n-images-negative": _edit(_set("n_images", -1)),
        "n-pairs-string": _edit(_set(*_T0, "n_pairs", "x")),
        "model-number": _edit(_set("model", 5)),
        "model-list": _edit(_set("model", ["a"])),
        "meta-list": _edit(_set("meta", [1])),
        "meta-images-list": _edit(_set("meta", "images", [1])),
        "meta-config-string": _edit(_set("meta", "config", "x")),
        "stats-list": _edit(_set("stats", [1])),
        "stats-n-string": _edit(_set("stats", "n", "x")),
        "errors-list": _edit(_set("errors", [1])),
        "layer-number": _edit(_set("layer", 3)),
        "layers-string": _edit(_set("layers", "x")),
        "layers-entry-string": _edit(_set("layers", ["x"])),
        "layers-entry-no-layer": _edit(_set("layers", [{"transforms": []}])),
        "pair-scores-list": _edit(_set(*_T0, "pair_scores", [1])),
    },
    "compare-scores": {
        "tasks-string": _edit(_set("tasks", "x")),
        "task-list": _edit(_set("tasks", "t", [1])),
        "score-nan": _edit(_set("tasks", "t", "A", float("nan"))),
        "score-missing-file": _edit(_set("tasks", "t", "A", "no-such-probe.json")),
        "score-not-probe": _edit(_set("tasks", "t", "A", {"best_index": 0})),
        "higher-is-better-string": _edit(lambda d: {**d, "higher_is_better": "yes"}),
        "higher-is-better-of-task": _edit(lambda d: {**d, "higher_is_better": {"t": "yes"}}),
        "unknown-model": _edit(_set("tasks", "t", "Z", 1.0)),
        "no-tasks": _edit(_set("tasks", {})),
    },
    "compare-probe-file": {
        "no-cv-results": _edit(_set("cv_results", DROP)),
        "cv-results-list": _edit(_set("cv_results", [1])),
        "best-index-out-of-range": _edit(_set("best_index", 5)),
        "best-index-negative": _edit(_set("best_index", -1)),
        "best-index-bool": _edit(_set("best_index", True)),
        "best-index-float": _edit(_set("best_index", 0.0)),
        "score-string": _edit(_set("cv_results", "mean_test_score", ["x"])),
        "score-infinity": _edit(_set("cv_results", "mean_test_score", [float("inf")])),
    },
    "run-marker": {"command-number": _edit(_set("command", 3))},
    "dataset-manifest": {
        "n-string": _edit(_set("n", "x")),
        "shards-string": _edit(_set("shards", "x")),
        "shard-entry": _edit(_set("shards", [1])),
        "shard-outside": _edit(_set("shards", 0, "file", "../x.npy")),
        "files-list": _edit(_set("files", [])),
        "classes-number": _edit(_set("classes", 3)),
        "format-version": _edit(_set("format_version", 99)),
        "size-huge": _edit(_set("size", 10**9)),
    },
}


# --------------------------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Case:
    reader: Reader
    what: str
    write: Write | None  # None: the valid input as prepared
    code: int = 2
    expect: str = ""  # in the error line; default: the file's name

    @property
    def id(self) -> str:
        return f"{self.reader.name}-{self.what}"


#: the error line names the problem rather than the file (the file is named by the option it came from)
EXPECT = {
    "probe-features-huge": "too large",
    "probe-targets-huge": "too large",
    "measure-stats-other-dim": "D=24",
    "run-marker-command-number": "holds an invfast 3 run",
    "run-marker-": ".invfast-run.json",
    "compare-scores-unknown-model": "unknown model 'Z'",
    "compare-scores-no-tasks": "holds no scores",
    "compare-scores-score-missing-file": "no-such-probe.json",
}


def _expect(case_id: str, reader: Reader) -> str:
    for prefix, text in EXPECT.items():
        if case_id.startswith(prefix):
            return text
    return Path(reader.file).name


def _cases() -> list[Case]:
    out: list[Case] = []

    def add(reader: Reader, table: dict[str, Write], code: int = 2) -> None:
        for what, write in table.items():
            out.append(Case(reader, what, write, code, _expect(f"{reader.name}-{what}", reader)))

    for reader in NPY_READERS:
        bad = _npy_malformed(NPY_VALID[reader.name])
        if reader.name == "probe-labels":
            del bad["string"]  # strings are class labels
        add(reader, {**bad, **NPY_EXTRA.get(reader.name, {})})
        add(reader, NPY_ACCEPTED.get(reader.name, {}), code=0)
    for reader in IMAGE_READERS:
        bad = {**IMAGE_MALFORMED, **IMAGE_EXTRA.get(reader.name, {})}
        if reader.name == "pretrain-folder":  # the decoder of measure-folder; a worker process per run: a sample
            bad = {k: bad[k] for k in ("truncated", "garbage", "float-nan")}
        add(reader, bad)
        if reader.name not in ("generate-objects", "pretrain-folder"):  # objects need alpha (their own extras)
            add(reader, IMAGE_MODES, code=0)
    for reader in PT_READERS:
        add(reader, {**PT_MALFORMED, **PT_EXTRA.get(reader.name, {})})
    for reader in JSON_READERS:
        add(reader, {**JSON_MALFORMED, **JSON_EXTRA.get(reader.name, {})})
        add(reader, JSON_ACCEPTED.get(reader.name, {}), code=0)
    out += [Case(r, "valid", None, 0) for r in NPY_READERS + IMAGE_READERS + PT_READERS + JSON_READERS if r.valid]
    return out


CASES = _cases()


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_no_input_reaches_an_internal_error(case: Case, shared: Shared, tmp_path: Path, capsys) -> None:
    case.reader.prepare(tmp_path, shared)
    if case.write is _cut and not case.reader.valid:
        _torch(_SD, checksum=True)(tmp_path / case.reader.file)  # a real checksummed file to cut short
    if case.write is not None:
        case.write(tmp_path / case.reader.file)
    argv = case.reader.argv(tmp_path, shared)
    code, err = _run(argv, capsys)
    assert "Traceback" not in err and "internal error" not in err, err
    assert code == case.code, err
    if case.code:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(f"invfast {argv[0]}: error: "), err
        assert case.expect in lines[0], lines[0]
    if case.reader.after is not None:
        case.reader.after(tmp_path)


# ---------------------------------------------------------------------------------------- command options
OPTION_CASES = [
    (["demo", "--size", "0"], "--size must be from 1 to 299"),
    (["demo", "--size", "300"], "--size must be from 1 to 299"),
    (["demo", "--seed", "-1"], "--seed must be an integer from 0"),
    (["transforms", "--preview", "{tmp}/sheet.txt", "--k", "2"], "image extension such as .png"),
    (["transforms", "--preview", "{tmp}", "--k", "2"], "image extension such as .png"),
    (["transforms", "--preview", "{tmp}/s.png", "--k", "100000"], "--k must be from 1 to 64"),
    (["transforms", "--preview", "{tmp}/s.png", "--tile", "100000"], "--tile must be from 1 to 1024"),
    (["measure", "--model", "m:f", "--data", "{tmp}", "--out", "{tmp}/o", "--seed", str(10**21)], "64-bit signed"),
    (["pretrain", "--data", "synthetic:n=8", "--out", "{tmp}/o", "--seed", str(-(10**21))], "64-bit signed"),
    (["probe", "--features", "X", "--targets", "y", "--task", "classification", "--n-models", "0"], "--n-models"),
]


@pytest.mark.parametrize(
    "argv, expect", OPTION_CASES, ids=[" ".join(a[:3]) + f" {i}" for i, (a, _) in enumerate(OPTION_CASES)]
)
def test_option_values_are_refused_in_one_line(argv: list[str], expect: str, tmp_path: Path, capsys) -> None:
    code, err = _run([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"invfast {argv[0]}: error: "), err
    assert expect in lines[0]


def test_an_output_path_that_is_a_folder_is_refused(shared: Shared, tmp_path: Path, capsys) -> None:
    code, err = _run(_probe(shared("X.npy"), shared("yc.npy"), "classification") + ["--json", str(tmp_path)], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == (
        f"invfast probe: error: --json {str(tmp_path)!r} is a folder; give a file name "
        f"(e.g. {os.path.join(str(tmp_path), 'probe.json')})"
    )


# ----------------------------------------------------------------------- the synthetic loader (Python API)
@pytest.mark.parametrize("what", sorted({**JSON_MALFORMED, **JSON_EXTRA["dataset-manifest"]}))
def test_the_dataset_loader_refuses_a_malformed_manifest_in_one_value_error(what: str, shared: Shared, tmp_path):
    from invfast.synthetic.storage import MaterializedTransforms2D

    shutil.copytree(shared("ds"), tmp_path / "ds")
    {**JSON_MALFORMED, **JSON_EXTRA["dataset-manifest"]}[what](tmp_path / "ds" / "manifest.json")
    with pytest.raises(ValueError) as info:
        MaterializedTransforms2D(tmp_path / "ds")
    assert "\n" not in str(info.value) and "manifest" in str(info.value)
