"""Issue 44: every write of every command goes through one safe path (docs/guarantees.md).

A symbolic link anywhere under an output or cache folder is refused with one line naming it, and nothing is
written through it: the table test runs each command once, records every path it writes (audit events: opens
for writing, folders made, renames), then plants a link at each of them, in a copy of the finished run and in
a fresh folder, and checks the victim folder's checksums. The per-case tests replay the issue's cases 1-8, 10,
11 and its unclear errors; each failed on the code before the change.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import secrets
import shutil
import sys
import warnings

import numpy as np
import pytest
import torch
from PIL import Image

from invfast.cli import main
from invfast.runtime.run_folder import MARKER

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = "test_pretrain_fixtures:TinyEncoder"
COMMANDS = ("measure", "pretrain", "compare", "generate", "reproduce")
#: what each command does again on its finished folder (the row's second variant)
AGAIN = {"measure": ["--overwrite"], "pretrain": ["--resume"], "compare": ["--overwrite"], "generate": ["--overwrite"]}
DEAD = 2**22 + 12345  # above pid_max on Linux by default: no live process has it

pytestmark = pytest.mark.usefixtures("cli_env")


# ------------------------------------------------------------------------------------------- recording
_RECORD: list[tuple[str, str]] | None = None


def _audit(event: str, args: tuple) -> None:
    """Every path opened for writing, made, renamed to or removed while a run is recorded."""
    if _RECORD is None:
        return
    if event == "open":
        path, mode, flags = args
        writes = bool(mode and any(c in mode for c in "wax+")) or bool(
            flags and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        )
        if writes and isinstance(path, (str, bytes, os.PathLike)):
            _RECORD.append(("file", os.fsdecode(path)))
    elif event == "os.mkdir":
        _RECORD.append(("dir", os.fsdecode(args[0])))
    elif event == "os.rename":
        _RECORD.append(("file", os.fsdecode(args[1])))
    elif event == "os.remove":
        _RECORD.append(("file", os.fsdecode(args[0])))


if not getattr(sys, "_invfast_write_safety_hook", False):  # an audit hook cannot be removed: add it once
    sys.addaudithook(_audit)
    sys._invfast_write_safety_hook = True  # type: ignore[attr-defined]


@contextlib.contextmanager
def _names():
    """Deterministic random names (temporaries, staging folders): the same sequence in every run."""
    count = itertools.count()
    real = secrets.token_hex
    secrets.token_hex = lambda n=None: f"{next(count):0{2 * (n or 4)}x}"  # type: ignore[assignment]
    try:
        yield
    finally:
        secrets.token_hex = real  # type: ignore[assignment]


def _written(argv: list[str], out: str) -> dict[str, str]:
    """Run ``argv`` once (it must succeed) and return every path below ``out`` it wrote: rel -> 'file'/'dir'."""
    global _RECORD
    _RECORD = []
    try:
        with _names():
            assert main(argv) == 0
    finally:
        events, _RECORD = _RECORD, None
    root = os.path.abspath(out)
    found: dict[str, str] = {}
    for kind, p in events:
        p = os.path.abspath(p)
        if not p.startswith(root + os.sep):
            continue
        rel = os.path.relpath(p, root)
        found[rel] = "dir" if kind == "dir" or found.get(rel) == "dir" else "file"
        parent = os.path.dirname(rel)
        while parent:
            found[parent] = "dir"
            parent = os.path.dirname(parent)
    return found


# ------------------------------------------------------------------------------------------- inputs, runs
@pytest.fixture(scope="module")
def env():
    with pytest.MonkeyPatch.context() as m:
        m.syspath_prepend(HERE)
        n = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(n)


@pytest.fixture(scope="module")
def inputs(env, tmp_path_factory):
    from measure_helpers import random_images
    from test_pretrain_fixtures import blob_images

    root = tmp_path_factory.mktemp("inputs")
    imgs = root / "imgs"
    imgs.mkdir()
    x = random_images(12, size=30, seed=3).permute(0, 2, 3, 1).numpy()
    for i in range(12):
        Image.fromarray(x[i]).save(imgs / f"{i:02d}.png")
    np.save(root / "x.npy", blob_images(48, size=16).numpy())
    return {"imgs": str(imgs), "npy": str(root / "x.npy"), "root": root}


def command(name: str, out, inputs, measured: str | None = None) -> list[str]:
    """The argv of one tiny run of ``name`` into ``out``."""
    out = str(out)
    if name == "measure":
        return [
            "measure", "--model", "measure_helpers:small_net", "--transforms", "rotation,hflip", "--grid-size", "3",
            "--resize", "24", "--images", "0", "--no-progress", "--pair-scores", "--data", f"folder:{inputs['imgs']}",
            "--out", out,
        ]  # fmt: skip
    if name == "pretrain":
        return [
            "pretrain", "--data", f"npy:{inputs['npy']}", "--arch", TINY, "--batch-size", "16", "--steps", "4",
            "--checkpoint-every", "2", "--log-every", "1", "--no-progress", "--out", out,
        ]  # fmt: skip
    if name == "compare":
        return ["compare", f"a={measured}", f"b={measured}", "--bootstrap", "50", "--out", out]
    if name == "generate":
        return [
            "generate", "--transforms", "rotate,hue", "--objects", "5", "--n", "40", "--shard-size", "16",
            "--batch-size", "8", "--no-progress", "--out", out, "--preview", os.path.join(out, "preview.png"),
        ]  # fmt: skip
    assert name == "reproduce"
    return ["reproduce", "--preset", "tiny", "--set", "run.seeds=1", "--findings", "E1", "--no-progress", "--out", out]


@pytest.fixture(scope="module")
def runs(inputs, tmp_path_factory):
    """One finished run per command, and every path it wrote (recorded while it ran)."""
    root = tmp_path_factory.mktemp("runs")
    done: dict[str, tuple[str, dict[str, str]]] = {}
    for name in COMMANDS:
        out = str(root / name)
        measured = done["measure"][0] if "measure" in done else None
        done[name] = (out, _written(command(name, out, inputs, measured), out))
    return done


# ------------------------------------------------------------------------------------------- the victim
def _victim(root) -> str:
    v = os.path.join(root, "victim")
    os.makedirs(os.path.join(v, "folder"))
    for rel in ("precious.txt", os.path.join("folder", "thesis.tex")):
        with open(os.path.join(v, rel), "w") as f:
            f.write("precious " + rel)
    return v


def _checksums(v: str) -> dict[str, str]:
    out = {}
    for dirpath, dirs, files in os.walk(v):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, v)] = "dir" if os.path.isdir(p) else hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def _plant(folder: str, rel: str, kind: str, victim: str) -> None:
    """A link at ``folder/rel`` (whatever was there removed) to the victim's folder or file."""
    p = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    if os.path.isdir(p) and not os.path.islink(p):
        shutil.rmtree(p)
    elif os.path.lexists(p):
        os.remove(p)
    os.symlink(os.path.join(victim, "folder" if kind == "dir" else "precious.txt"), p)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and "warning" not in ln]
    assert len(lines) == 1, err
    return lines[0]


# ------------------------------------------------------------------------------------------- the table
#: paths each command's table must cover (relative to --out; found by the recording run)
MUST_COVER = {
    "measure": [".invfast.lock", MARKER, "result.json", "radar.png", "pairs", "state", "state/state.pt", "state/pairs"],
    "pretrain": [".invfast.lock", MARKER, "checkpoint.pt", "model.pt", "metrics.jsonl", "metrics.csv"],
    "compare": [".invfast.lock", MARKER, "results.json", "report.md", "heatmap.png"],
    "generate": [".invfast.lock", MARKER, "images_00000.npy", "manifest.json", "preview.png"],
    "reproduce": [
        ".invfast.lock",
        "config.json",
        "results.json",
        "report.md",
        "figures",
        "figures/radar.png",
        "cache",
        "cache/.invfast.lock",
        "cache/stages",
        "cache/stages/measure.json",
        "cache/measure",
        "cache/pretrain/default",
        "cache/pretrain/default/metrics.jsonl",
        "cache/data",
    ],  # fmt: skip
}


@pytest.mark.parametrize("name", COMMANDS)
def test_a_link_at_any_path_a_command_writes_is_refused_and_its_target_untouched(name, runs, inputs, tmp_path, capsys):
    finished, written = runs[name]
    rows = sorted(written.items())
    assert not [p for p in MUST_COVER[name] if p not in written], [p for p in sorted(written) if ".tmp-" not in p]
    assert any(".tmp-" in p for p in written), "the recording saw no temporary file"
    if name != "reproduce":
        assert any(os.path.basename(p).startswith(".invfast-staging-") for p in written) or name == "pretrain"
    victim = _victim(tmp_path)
    before = _checksums(victim)
    measured = runs["measure"][0]
    failures = []
    capsys.readouterr()
    for i, (rel, kind) in enumerate(rows):
        for variant in ("finished", "fresh"):
            out = str(tmp_path / f"{variant}-{i}")
            if variant == "finished":
                shutil.copytree(finished, out, symlinks=True)
            else:
                os.makedirs(out)
            _plant(out, rel, kind, victim)
            argv = command(name, out, inputs, measured) + (AGAIN.get(name, []) if variant == "finished" else [])
            with _names():
                rc = main(argv)
            err = capsys.readouterr().err
            lines = [ln for ln in err.strip().splitlines() if ln.strip()]
            said = len(lines) == 1 and "symbolic link" in lines[0] and os.path.basename(rel) in lines[0]
            if rc != 2 or not said or _checksums(victim) != before:
                failures.append(f"{variant} {rel} ({kind}): exit {rc}, {err.strip()[-300:]!r}")
            shutil.rmtree(out)
    assert not failures, f"{len(failures)} of {2 * len(rows)} rows:\n" + "\n".join(failures)
    assert _checksums(victim) == before


# ------------------------------------------------------------------------------------------- case 1
@pytest.mark.parametrize("name", COMMANDS)
def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(name, runs, inputs, tmp_path, capsys):
    canary = tmp_path / "canary.txt"
    canary.write_text("precious")
    out = tmp_path / "o"
    out.mkdir()
    (out / ".invfast.lock").symlink_to(canary)
    assert main(command(name, out, inputs, runs["measure"][0])) == 2
    line = _one_line(capsys.readouterr().err)
    assert "symbolic link" in line and ".invfast.lock" in line
    assert canary.read_text() == "precious" and (out / ".invfast.lock").is_symlink()


def test_a_hard_linked_lock_file_is_refused(tmp_path):
    from invfast.io import output_lock

    canary = tmp_path / "canary.txt"
    canary.write_text("precious")
    (tmp_path / "o").mkdir()
    os.link(canary, tmp_path / "o" / ".invfast.lock")
    with pytest.raises(ValueError, match="hard link"):
        with output_lock(tmp_path / "o", "test"):
            pytest.fail("a hard-linked lock file was taken as the lock")
    assert canary.read_text() == "precious"


# ------------------------------------------------------------------------------------------- case 2
def test_planted_temporary_names_are_never_written_through(runs, inputs, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "o"
    out.mkdir()
    for pid in range(os.getpid(), os.getpid() + 400):  # the names, for the next 400 pids
        (out / f".{MARKER}.tmp-{pid}").symlink_to(victim)
    assert main(command("measure", out, inputs)) == 2
    assert "symbolic link" in _one_line(capsys.readouterr().err)
    assert victim.read_text() == "precious"


def test_atomic_write_never_opens_an_existing_temporary_name(tmp_path):
    """The temporary is created with O_EXCL | O_NOFOLLOW: a link (or file) at the name it draws is skipped."""
    from invfast.io import atomic_write_text
    from invfast.runtime.write_paths import write_root

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "o"
    out.mkdir()
    for token in range(3):  # the first three names the writer will draw
        (out / f".result.json.tmp-{os.getpid()}-{token:08x}").symlink_to(victim)
    with _names(), write_root(out):
        atomic_write_text(out / "result.json", "new")
    assert (out / "result.json").read_text() == "new" and victim.read_text() == "precious"
    with _names():  # outside any output folder too
        atomic_write_text(out / "result.json", "newer")
    assert (out / "result.json").read_text() == "newer" and victim.read_text() == "precious"


# ------------------------------------------------------------------------------------------- case 3
CASE_3 = [
    ("figures", "dir", None),
    ("figures/radar.png", "file", None),
    ("cache/measure", "dir", "cache/stages/measure.json"),
]


@pytest.mark.parametrize("link, kind, gone", CASE_3)
def test_reproduce_never_writes_through_a_link(runs, inputs, tmp_path, capsys, link, kind, gone):
    out = str(tmp_path / "r")
    shutil.copytree(runs["reproduce"][0], out, symlinks=True)
    if gone:
        os.remove(os.path.join(out, gone))
    victim = _victim(tmp_path)
    before = _checksums(victim)
    _plant(out, link, kind, victim)
    assert main(command("reproduce", out, inputs)) == 2
    line = _one_line(capsys.readouterr().err)
    assert "symbolic link" in line and link.split("/")[-1] in line
    assert _checksums(victim) == before


# ------------------------------------------------------------------------------------------- cases 4, 5
def _users_files(out):
    (out / ".invfast-staging").mkdir(parents=True)
    (out / ".invfast-staging" / "keep.txt").write_text("mine")
    (out / ".mydiary.txt.tmp-31999").write_text("mine too")


def _kept(out):
    assert (out / ".invfast-staging" / "keep.txt").read_text() == "mine"
    assert (out / ".mydiary.txt.tmp-31999").read_text() == "mine too"


def test_a_users_staging_and_tmp_lookalikes_are_never_deleted(runs, inputs, tmp_path):
    fresh = tmp_path / "fresh"
    _users_files(fresh)
    assert main(command("measure", fresh, inputs)) == 0
    _kept(fresh)
    assert main(command("measure", fresh, inputs) + ["--overwrite"]) == 0
    _kept(fresh)
    again = tmp_path / "again"
    shutil.copytree(runs["measure"][0], again, symlinks=True)
    _users_files(again)
    assert main(command("measure", again, inputs) + ["--overwrite"]) == 0
    _kept(again)
    ds = tmp_path / "ds"
    _users_files(ds)
    assert main(command("generate", ds, inputs)[:-2]) == 0
    assert main(command("generate", ds, inputs)[:-2] + ["--overwrite", "--transforms", "blur"]) == 0
    _kept(ds)
    assert not [n for n in os.listdir(ds) if n.startswith(".invfast-staging-")]


def test_a_killed_runs_staging_folder_is_removed(runs, inputs, tmp_path):
    out = tmp_path / "m"
    shutil.copytree(runs["measure"][0], out, symlinks=True)
    stage = f".invfast-staging-{DEAD}-0badcafe"
    (out / stage / "pairs").mkdir(parents=True)
    (out / stage / "table.md").write_text("half")
    marker = json.loads((out / MARKER).read_text())
    (out / MARKER).write_text(json.dumps({**marker, "staging": [stage]}))
    assert main(command("measure", out, inputs) + ["--overwrite"]) == 0
    assert not (out / stage).exists() and "staging" not in json.loads((out / MARKER).read_text())


# ------------------------------------------------------------------------------------------- case 6
def test_a_figure_cut_short_leaves_the_old_figure(runs, inputs, tmp_path, monkeypatch, capsys):
    from matplotlib.figure import Figure

    out = tmp_path / "r"
    shutil.copytree(runs["reproduce"][0], out, symlinks=True)
    before = {f: (out / "figures" / f).read_bytes() for f in os.listdir(out / "figures")}
    inode = (out / "figures" / "radar.png").stat().st_ino
    real = Figure.savefig

    def killed(self, fname, **kw):  # the first bytes written, then the process dies
        if isinstance(fname, (str, os.PathLike)):
            with open(fname, "wb") as f:
                f.write(b"\x89PNG\r\n")
        else:
            fname.write(b"\x89PNG\r\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", killed)
    assert main(command("reproduce", out, inputs)) == 130
    assert {f: (out / "figures" / f).read_bytes() for f in os.listdir(out / "figures")} == before
    assert not [n for n in os.listdir(out / "figures") if ".tmp-" in n]
    monkeypatch.setattr(Figure, "savefig", real)
    capsys.readouterr()
    assert main(command("reproduce", out, inputs)) == 0
    assert (out / "figures" / "radar.png").stat().st_ino != inode  # replaced by a rename, never rewritten in place


# ------------------------------------------------------------------------------------------- case 7
def test_a_cache_in_use_by_another_run_is_refused(inputs, tmp_path, capsys):
    from invfast.io import output_lock

    cache = tmp_path / "shared-cache"
    with output_lock(cache, "invfast reproduce"):  # the first run, still going
        argv = command("reproduce", tmp_path / "second", inputs) + ["--cache-dir", str(cache)]
        assert main(argv) == 1
    line = _one_line(capsys.readouterr().err)
    assert "in use by another invfast run" in line and f"pid {os.getpid()}" in line and "--cache-dir" in line


# ------------------------------------------------------------------------------------------- case 8
def test_a_resumed_pretraining_logs_the_losses_of_an_uninterrupted_one(inputs, tmp_path, monkeypatch):
    from invfast.pretrain.trainer import Trainer

    def run(out, *extra):
        return main(command("pretrain", out, inputs)[:-2] + ["--out", str(out), *extra])

    steps = ["--steps", "24", "--checkpoint-every", "3", "--log-every", "10"]
    assert run(tmp_path / "whole", *steps) == 0
    real = Trainer.batch_indices

    def killed(self, step):  # the run dies during step 19; its last checkpoint is step 18's
        if step == 20:
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(Trainer, "batch_indices", killed)
    assert run(tmp_path / "cut", *steps) == 130
    monkeypatch.setattr(Trainer, "batch_indices", real)
    assert run(tmp_path / "cut", *steps, "--resume") == 0

    def log(out):
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    whole, cut = log(tmp_path / "whole"), log(tmp_path / "cut")
    assert [r["step"] for r in cut] == [r["step"] for r in whole] == [10, 20, 24]
    assert [r["loss"] for r in cut] == [r["loss"] for r in whole]  # bit-identical, step 20's mean of 11-20 too


def test_resume_never_replaces_a_model_pt_put_in_a_killed_runs_folder(inputs, tmp_path, monkeypatch, capsys):
    """A killed run has no model.pt (it is written at the end): one found there on --resume is the user's; the
    resume is refused naming it and the file stays. Once moved away, the run resumes and writes its own."""
    from invfast.pretrain.trainer import Trainer

    out = tmp_path / "cut"
    argv = command("pretrain", out, inputs)[:-2] + ["--out", str(out), "--steps", "8", "--checkpoint-every", "2"]
    real = Trainer.batch_indices

    def killed(self, step):
        if step == 6:
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(Trainer, "batch_indices", killed)
    assert main(argv) == 130
    monkeypatch.setattr(Trainer, "batch_indices", real)
    (out / "model.pt").write_bytes(b"the user's own model")
    assert main([*argv, "--resume"]) != 0
    err = capsys.readouterr().err
    assert "model.pt" in err and "not this run's" in err
    assert (out / "model.pt").read_bytes() == b"the user's own model"
    (out / "model.pt").rename(tmp_path / "mine.pt")
    assert main([*argv, "--resume"]) == 0 and (out / "model.pt").stat().st_size > 1000


# ------------------------------------------------------------------------------------------- case 10
@pytest.mark.parametrize(
    "field, value, words",
    [
        ("mean_cosine", 0.99, "must be the mean of its per_image_cosine values"),
        ("mean_cosine", 5.0, "must be a cosine in [-1, 1]"),
        ("mean_distance", float("inf"), "must be a number or null"),
        ("distance", "negative", "must be a distance >= 0"),
        ("per_image_cosine", "scaled", "must be a cosine in [-1, 1]"),
    ],
)
def test_compare_refuses_an_edited_result_naming_the_field(runs, tmp_path, capsys, field, value, words):
    measured = runs["measure"][0]
    doc = json.loads(open(os.path.join(measured, "result.json")).read())
    t = doc["transforms"][0]
    if value == "scaled":
        value = [None if x is None else 2.0 * x + 1.5 for x in t["per_image_cosine"]]
    elif value == "negative":
        value = [-1.0, *t["distance"][1:]]
    t[field] = value
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))  # Infinity as json writes it
    assert main(["compare", f"a={measured}", f"b={edited}", "--no-plots", "--out", str(tmp_path / "c")]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"transforms[0].{field}" in line and words in line and "edited.json" in line
    assert not (tmp_path / "c").exists()


# ------------------------------------------------------------------------------------------- case 11
@pytest.mark.parametrize(
    "apply, words",
    [
        (lambda x, p: torch.full((x.shape[0], p.shape[0], *x.shape[1:]), float("nan"), device=x.device), "NaN"),
        (lambda x, p: 255.0 * x[:, None].expand(-1, p.shape[0], -1, -1, -1), "values from"),
        (lambda x, p: x[:, None].expand(-1, p.shape[0], -1, -1, -1) - 0.5, "values from"),
    ],
)
def test_a_registered_transform_must_return_finite_images_in_0_1(apply, words):
    import invfast.transforms as T

    with pytest.raises(ValueError, match=words):
        T.register("ws_bad", grid=[0.0, 1.0], apply=apply, family="appearance")
    assert "ws_bad" not in T.names()


def test_a_registered_transform_that_breaks_later_is_refused_where_it_breaks():
    """NaN only for parameters the registration probe does not call: refused when measuring meets them."""
    import invfast.transforms as T

    def apply(x, p):
        y = x[:, None].expand(-1, p.shape[0], -1, -1, -1).clone()
        y[:, p > 1.5] = float("nan")
        return y

    t = T.register("ws_late", grid=[0.0, 1.0, 2.0], apply=apply, family="appearance")
    try:
        images = torch.rand(2, 3, 8, 8)
        assert t.apply(images, [0.0, 1.0]).shape == (2, 2, 3, 8, 8)
        with pytest.raises(ValueError, match="ws_late.*NaN.*in \\[0, 1\\]"):
            t.apply(images, [0.0, 1.0, 2.0])
    finally:
        T.unregister("ws_late")


# ------------------------------------------------------------------------------------------- unclear errors
def test_reproduce_out_that_is_a_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    assert main(["reproduce", "--preset", "tiny", "--out", str(f), "--no-progress"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--out" in line and "is not a folder" in line and "Errno" not in line
    assert f.read_text() == "mine"


def test_an_unknown_cuda_kernels_setting_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("INVFAST_CUDA_KERNELS", "garbage")
    assert main(["info"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "INVFAST_CUDA_KERNELS='garbage'" in line and "augment" in line
    monkeypatch.setenv("INVFAST_CUDA_KERNELS", "augment,pair_scores")
    assert main(["info"]) == 0


def test_probe_json_that_is_a_folder_is_refused_before_the_fit(tmp_path, capsys, monkeypatch):
    import invfast.probes as P

    rng = np.random.default_rng(0)
    np.save(tmp_path / "f.npy", rng.random((40, 4)).astype(np.float32))
    np.save(tmp_path / "t.npy", rng.integers(0, 2, 40))
    (tmp_path / "pr").mkdir()
    fits = []
    monkeypatch.setattr(P.LogisticCV, "fit", lambda self, *a, **k: fits.append(1))
    argv = ["probe", "--features", str(tmp_path / "f.npy"), "--targets", str(tmp_path / "t.npy")]
    assert main([*argv, "--task", "classification", "--json", str(tmp_path / "pr") + "/"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--json" in line and "is a folder; give a file name" in line and not fits


@pytest.mark.parametrize("which", ["features", "targets", "features-via-link"])
def test_probe_json_naming_an_input_is_refused_and_the_input_kept(which, tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "f.npy", rng.random((40, 4)).astype(np.float32))
    np.save(tmp_path / "t.npy", rng.integers(0, 2, 40))
    (tmp_path / "alias.npy").symlink_to(tmp_path / "f.npy")
    target = {"features": "f.npy", "targets": "t.npy", "features-via-link": "alias.npy"}[which]
    before = (tmp_path / target).read_bytes()
    argv = ["probe", "--features", str(tmp_path / "f.npy"), "--targets", str(tmp_path / "t.npy")]
    assert main([*argv, "--task", "classification", "--json", str(tmp_path / target)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--json" in line and "would overwrite that input" in line
    assert (tmp_path / target).read_bytes() == before


def test_transforms_preview_naming_its_image_is_refused_and_the_image_kept(tmp_path, capsys):
    from PIL import Image

    img = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(img)
    before = img.read_bytes()
    assert main(["transforms", "--preview", str(img), "--image", str(img), "--k", "2"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--preview" in line and "--image file" in line and img.read_bytes() == before


_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _warns(seen: dict) -> None:
    seen.update({k: os.environ.get(k) for k in _TORCHRUN_VARS})
    warnings.warn("no --checkpoint: the model is measured with random weights", stacklevel=1)
    warnings.warn("no --checkpoint: the model is measured with random weights", stacklevel=1)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_workers_warnings_are_one_line_and_only_rank_0s(rank, capsys, monkeypatch):
    """A local worker sees the environment torchrun would give it, and only rank 0 says a warning, once."""
    from invfast.runtime import launch

    for k in _TORCHRUN_VARS:  # _child sets them for the worker; setenv records each for restoring afterwards
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    monkeypatch.setattr(launch, "die_with_parent", lambda pid: None)
    seen: dict = {}
    launch._child(rank, _warns, os.getppid(), 2, 29500, seen)
    err = capsys.readouterr().err
    want = ["invfast: warning: no --checkpoint: the model is measured with random weights"] if rank == 0 else []
    assert err.splitlines() == want
    assert seen == dict(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="29500",
    )
    assert launch.under_torchrun(seen)


@pytest.mark.slow
def test_measure_on_two_workers_warns_once_in_one_line(inputs, tmp_path, capfd):
    argv = ["measure", "--model", "resnet18-cifar", "--data", "synthetic:n=8,size=32", "--images", "8"]
    argv += ["--grid-size", "3", "--transforms", "hflip,brightness", "--no-progress", "--no-plots"]
    assert main([*argv, "--world-size", "2", "--out", str(tmp_path / "o")]) == 0
    err = capfd.readouterr().err.splitlines()
    random = [ln for ln in err if "random weights" in ln]
    assert random == [ln for ln in random if ln.startswith("invfast: warning: ")] and len(random) == 1, err


@pytest.mark.parametrize("name", ["measure", "compare"])
def test_overwrite_never_replaces_a_users_file_with_an_outputs_name(name, runs, inputs, tmp_path, capsys):
    """A finished run without plots, then the user's own picture under a name the next run writes: --overwrite
    with plots refuses, naming it; the user's file and the old report stay as they were."""
    measured = runs["measure"][0]
    out = tmp_path / name
    argv = command(name, out, inputs, measured)
    assert main([*argv, "--no-plots"]) == 0
    picture = "radar.png" if name == "measure" else "heatmap.png"
    (out / picture).write_bytes(b"the user's own picture")
    report = "result.json" if name == "measure" else "results.json"
    before = (out / report).read_bytes()
    assert main([*argv, "--overwrite"]) != 0
    err = capsys.readouterr().err
    assert picture in err and "which invfast did not write" in err
    assert (out / picture).read_bytes() == b"the user's own picture" and (out / report).read_bytes() == before
    assert not [p for p in out.iterdir() if p.name.startswith(".invfast-staging")]


@pytest.mark.parametrize("content, words", [("text", "not a .npy array file"), ("lying", "header promises more data")])
def test_probe_names_an_unreadable_features_file_without_unsafe_advice(content, words, tmp_path, capsys):
    y = tmp_path / "y.npy"
    np.save(y, np.arange(10) % 2)
    f = tmp_path / "f.npy"
    if content == "text":
        f.write_text("hello\n")
    else:  # a header claiming 99 rows over 10 rows of data
        np.save(f, np.random.default_rng(0).random((10, 4)).astype(np.float32))
        f.write_bytes(f.read_bytes().replace(b"(10, 4)", b"(99, 4)"))
    assert main(["probe", "--features", str(f), "--targets", str(y), "--task", "classification"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(f) in line and words in line and "pickle" not in line and "numpy.save" in line
