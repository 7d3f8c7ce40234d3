"""Issue 13: no code runs from a file, nothing of the user's is lost, no two runs mix, bad input
gets one clear line. Every test here failed on the code before the fix."""

from __future__ import annotations

import errno
import json
import os
import pickle
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from PIL import Image

from invfast.cli import error_line, exit_code, main
from invfast.io import DamagedFileError, OutputLockedError, atomic_torch_save, load_verified, output_lock

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = "test_pretrain_fixtures:TinyEncoder"
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
]


pytestmark = pytest.mark.usefixtures("cli_env")


class _Payload:
    """Unpickling this runs ``open(marker, 'w')`` — what an attacker's checkpoint would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _crafted(path, marker) -> None:
    """A torch file whose unpickling would create ``marker`` (written with the pickle module directly)."""
    torch.save(
        {"format": "invfast.pretrain/1", "config": {}, "step": 0, "x": _Payload(str(marker))},
        path,
        pickle_module=pickle,
    )


def pretrain(npy, out, *extra):
    return [
        "pretrain",
        "--data",
        f"npy:{npy}",
        "--arch",
        TINY,
        "--batch-size",
        "16",
        "--out",
        str(out),
        "--no-progress",
        "--log-every",
        "1",
        *(extra if "--steps" in extra else ("--epochs", "2", *extra)),
    ]


@pytest.fixture
def folder(tmp_path):
    from measure_helpers import random_images

    x = random_images(12, size=30, seed=3).permute(0, 2, 3, 1).numpy()
    d = tmp_path / "imgs"
    d.mkdir()
    for i in range(12):
        Image.fromarray(x[i]).save(d / f"{i:02d}.png")
    return d


# ------------------------------------------------------------------------------------------ security
def test_pretrain_resume_refuses_crafted_checkpoint_without_running_it(npy, tmp_path, capsys):
    out, marker = tmp_path / "run", tmp_path / "pwned"
    out.mkdir()
    _crafted(out / "checkpoint.pt", marker)
    assert main(pretrain(npy, out, "--resume")) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint" in err and "Traceback" not in err


def test_load_verified_refuses_code_even_with_a_valid_checksum(tmp_path):
    marker = tmp_path / "pwned"
    atomic_torch_save({"x": _Payload(str(marker))}, tmp_path / "f.pt")  # checksum matches, content is hostile
    with pytest.raises(DamagedFileError, match="only tensors"):
        load_verified(tmp_path / "f.pt")
    assert not marker.exists()


# ------------------------------------------------------------------------------------------ checksums
@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_damaged_checksummed_file_is_refused(tmp_path, damage):
    p = tmp_path / "state.pt"
    x = torch.randn(300, dtype=torch.float64)
    atomic_torch_save({"x": x}, p)
    assert torch.equal(load_verified(p)["x"], x)
    assert torch.equal(torch.load(p, weights_only=True)["x"], x)  # plain torch.load still reads it
    data = bytearray(p.read_bytes())
    if damage == "flip":
        i = data.find(x.numpy().tobytes()[:16])  # inside the stored float64s
        data[i + 40 : i + 48] = b"\xff" * 8
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data = bytearray()
    p.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError):
        load_verified(p)


def test_pretrain_resume_refuses_checkpoint_with_changed_bytes(npy, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(pretrain(npy, out, "--checkpoint-every", "2", "--steps", "2")) == 0
    ck = out / "checkpoint.pt"
    data = bytearray(ck.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = os.urandom(64)
    ck.write_bytes(bytes(data))
    os.remove(out / "model.pt")
    capsys.readouterr()
    assert main(pretrain(npy, out, "--checkpoint-every", "2", "--steps", "4", "--resume")) == 2
    assert "damaged" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 cut"])
def test_pretrain_resume_zero_byte_or_truncated_checkpoint_is_one_line(npy, tmp_path, capsys, content):
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoint.pt").write_bytes(content)
    assert main(pretrain(npy, out, "--resume")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint" in err


def test_measure_state_with_garbled_floats_is_refused(folder, tmp_path, capsys):
    from measure_helpers import small_net

    from invfast.measure import measure_invariance
    from invfast.measure.finished import finished_file, load_finished
    from invfast.measure.state import load_state

    state = tmp_path / "state.pt"
    measure_invariance(small_net(), f"folder:{folder}", "hflip", resize=24, grid_size=4, state_path=state)
    done = tmp_path / finished_file("state.pt", 0)  # the finished transform's result, beside the state
    for path, key in ((state, b"stats"), (done, b"per_image_cosine")):
        data = bytearray(path.read_bytes())
        assert data.find(key) >= 0
        data[-200:-120] = b"\x3f" * 80  # garble stored float64s (the trailer is the last 81 bytes)
        path.write_bytes(bytes(data))
    with pytest.raises(DamagedFileError, match="checksum"):
        load_state(str(state), {})
    with pytest.raises(DamagedFileError, match="checksum"):
        load_finished(str(done), "hflip", {})


# ------------------------------------------------------------------------------------------ data loss
def test_pretrain_never_overwrites_a_model_pt_it_did_not_write(npy, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "model.pt").write_bytes(b"the user's own model")
    assert main(pretrain(npy, out)) == 2
    assert (out / "model.pt").read_bytes() == b"the user's own model"
    assert "model.pt" in capsys.readouterr().err


def test_measure_overwrite_replaces_only_its_own_outputs_and_only_when_done(folder, tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out), "--pair-scores"]) == 0
    assert sorted(os.listdir(out / "pairs")) == [
        "hflip.cosine.npy",
        "hflip.distance.npy",
        "rotation.cosine.npy",
        "rotation.distance.npy",
    ]
    (out / "notes.txt").write_text("mine")
    old = (out / "result.json").read_text()
    # an overwrite that fails after measuring keeps the old report whole
    from invfast import report

    def broken(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(report, "to_markdown", broken)
    assert (
        main(
            MEASURE[:4]
            + ["hflip"]
            + MEASURE[5:]
            + ["--data", f"folder:{folder}", "--out", str(out), "--overwrite", "--no-plots"]
        )
        == 1
    )
    assert (out / "result.json").read_text() == old and (out / "curves.png").exists()
    assert len(os.listdir(out / "pairs")) == 4
    monkeypatch.undo()
    monkeypatch.syspath_prepend(HERE)
    assert (
        main(
            MEASURE[:4]
            + ["hflip"]
            + MEASURE[5:]
            + ["--data", f"folder:{folder}", "--out", str(out), "--overwrite", "--no-plots"]
        )
        == 0
    )
    assert sorted(f for f in os.listdir(out) if not f.startswith(".")) == ["notes.txt", "result.json", "table.md"]
    doc = json.loads((out / "result.json").read_text())
    assert [t["name"] for t in doc["transforms"]] == ["hflip"]


def test_measure_pair_scores_live_in_out_pairs(folder, tmp_path):
    out = tmp_path / "out"
    assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out), "--pair-scores", "--no-plots"]) == 0
    doc = json.loads((out / "result.json").read_text())
    for t in doc["transforms"]:
        for path in t["pair_scores"].values():
            assert os.path.dirname(path) == str(out / "pairs") and np.load(path).shape[0] == 12


# ------------------------------------------------------------------------------------------ locking
def test_second_run_on_a_locked_folder_is_refused_naming_the_holder(folder, tmp_path, capsys):
    out = tmp_path / "out"
    with output_lock(out, "test holder"):
        assert main(MEASURE + ["--data", f"folder:{folder}", "--out", str(out)]) == 1
        err = capsys.readouterr().err
        assert f"pid {os.getpid()}" in err and "in use" in err
        with pytest.raises(OutputLockedError):
            with output_lock(out, "again"):
                pass
    assert not (out / ".invfast.lock").exists()


def test_pretrain_locked_folder_is_refused(npy, tmp_path, capsys):
    out = tmp_path / "run"
    with output_lock(out, "test holder"):
        assert main(pretrain(npy, out)) == 1
    assert f"pid {os.getpid()}" in capsys.readouterr().err
    assert not (out / "metrics.jsonl").exists()


def test_stale_lock_of_a_killed_process_does_not_block(tmp_path):
    out = tmp_path / "out"
    code = (
        f"import sys, os, time; sys.path.insert(0, {os.path.dirname(HERE)!r})\n"
        "from invfast.io import output_lock\n"
        f"with output_lock({str(out)!r}, 'victim'):\n    print('locked', flush=True); time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "locked"
        with pytest.raises(OutputLockedError, match=f"pid {p.pid}"):
            with output_lock(out, "second"):
                pass
    finally:
        p.kill()
        p.wait()
    assert (out / ".invfast.lock").exists()  # left behind by the kill ...
    with output_lock(out, "after the kill"):  # ... and does not block
        pass


# ------------------------------------------------------------------------------------------ launcher
_LAUNCHER = """
import os, sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
from invfast.runtime.launch import spawn_local
from test_reliability import sleepy_worker
print('launcher', os.getpid(), flush=True)
sys.exit(spawn_local(sleepy_worker, 2, {folder!r}, 'test'))
"""


def sleepy_worker(folder: str) -> None:
    with open(os.path.join(folder, f"worker{os.environ['RANK']}"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
    with open(os.path.join(folder, "result.json"), "w") as f:  # what a killed run must never write
        f.write("{}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its reaper is dead too
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
@pytest.mark.parametrize("sig", ["SIGKILL", "SIGTERM"])
def test_workers_die_with_their_launcher(tmp_path, sig):
    import signal

    code = _LAUNCHER.format(root=os.path.dirname(HERE), tests=HERE, folder=str(tmp_path))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().startswith("launcher")
        files = [tmp_path / f"worker{r}" for r in range(2)]
        for _ in range(600):
            if all(f.exists() and f.read_text() for f in files):
                break
            time.sleep(0.1)
        pids = [int(f.read_text()) for f in files]
        assert all(_alive(q) for q in pids)
        p.send_signal(getattr(signal, sig))
        p.wait(60)
        for _ in range(300):
            if not any(_alive(q) for q in pids):
                break
            time.sleep(0.1)
        assert not any(_alive(q) for q in pids)
        assert not (tmp_path / "result.json").exists()
    finally:
        p.kill()
        p.wait()


# ------------------------------------------------------------------------------------------ fingerprints
def test_resume_refuses_state_of_other_images_or_dtype(folder, tmp_path):
    from measure_helpers import random_images, small_net

    from invfast.measure import measure_invariance
    from invfast.measure.state import StateMismatchError

    state = tmp_path / "state.pt"
    kw = dict(resize=24, grid_size=4, state_path=state)
    measure_invariance(small_net(), f"folder:{folder}", "hflip", **kw)
    with pytest.raises(StateMismatchError, match="dtype"):
        measure_invariance(small_net(), f"folder:{folder}", "hflip", dtype=torch.bfloat16, **kw)
    # replace most images under the same names (same size on disk: raw-mode PNGs of new pixels)
    x = random_images(12, size=30, seed=99).permute(0, 2, 3, 1).numpy()
    for i in range(10):
        f = folder / f"{i:02d}.png"
        st = f.stat()
        Image.fromarray(x[i]).save(f)
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(StateMismatchError, match="files"):
        measure_invariance(small_net(), f"folder:{folder}", "hflip", **kw)


def test_content_fingerprint_sees_a_file_with_same_size_and_mtime(folder):
    from invfast.data.sources import as_source
    from invfast.measure.state import files_fingerprint

    src = as_source(f"folder:{folder}", resize=24)
    a_meta, a_content = files_fingerprint(src), files_fingerprint(src, content=True)
    f = folder / "03.png"
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[-20] ^= 0xFF
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert files_fingerprint(src) == a_meta
    assert files_fingerprint(src, content=True) != a_content


# ------------------------------------------------------------------------------------------ numbers
@pytest.mark.parametrize("backend_name", ["reference", "compiled"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_propagate_gives_nan_cosine_for_nonfinite_features(backend_name, dtype, bad):
    import invfast as ivf
    from invfast import backend

    if backend_name == "compiled" and not ivf.backend_info()["cpp"]:
        pytest.skip("compiled core not built")
    g = torch.Generator().manual_seed(7)
    ref = torch.randn(200, 8, generator=g, dtype=torch.float64)
    stats = ivf.FeatureStats().update(ref).finalize()
    f_ref = torch.randn(5, 8, generator=g, dtype=torch.float64).to(dtype)
    f_t = torch.randn(5, 3, 8, generator=g, dtype=torch.float64).to(dtype)
    f_t[1, 2, 4] = bad
    f_ref[3, 0] = bad
    with backend.use(backend_name):
        out = ivf.invariance_scores(f_ref, f_t, stats, nan_policy="propagate")
    cos = out["cosine"]
    bad_mask = torch.zeros(5, 3, dtype=torch.bool)
    bad_mask[1, 2] = True
    bad_mask[3, :] = True
    assert bool(torch.isnan(cos[bad_mask]).all())
    # the finite pairs match a float64 numpy cosine of the whitened vectors
    w = torch.linalg.inv(torch.linalg.cholesky(stats.cov_)).numpy()
    mu = stats.mean.numpy()
    a = (f_ref.double().numpy() - mu) @ w.T
    b = (f_t.double().numpy() - mu) @ w.T
    want = np.einsum("nd,npd->np", a, b) / (np.linalg.norm(a, axis=1)[:, None] * np.linalg.norm(b, axis=2))
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    np.testing.assert_allclose(cos[~bad_mask].double().numpy(), want[~bad_mask.numpy()], atol=tol)


def test_n_below_d_warns_and_the_report_shows_n_over_d(folder, tmp_path, capsys):
    from measure_helpers import small_net

    import invfast as ivf
    from invfast import report
    from invfast.measure import measure_invariance

    with pytest.warns(RuntimeWarning, match="N <= D"):
        ivf.FeatureStats().update(torch.randn(10, 16, dtype=torch.float64)).finalize()
    with pytest.warns(RuntimeWarning, match="more reference images"):
        res = measure_invariance(small_net(), f"folder:{folder}", "hflip", resize=24, grid_size=4)
    assert res.samples_per_dim == pytest.approx(res.stats["n"] / res.stats["dim"])
    md = report.to_markdown([res])
    assert f"N = {res.stats['n']} images, D = {res.stats['dim']} features" in md and "N ≤ D" in md
    assert res.to_dict()["meta"]["reference_n_over_d"] == pytest.approx(res.samples_per_dim)


# ------------------------------------------------------------------------------------------ one clear line
def _one_line(capsys, code, got, *words):
    """The command exited ``code`` with exactly one error line (one-line warnings aside) naming ``words``."""
    err = "".join(
        line for line in capsys.readouterr().err.splitlines(keepends=True) if not line.startswith("invfast: warning: ")
    )
    assert got == code, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--lr", "nan"], ["--lr"]),
        (["--steps", "3"], ["--steps", "--epochs"]),
        (["--descriptors", "individual"], ["--descriptors", "amortised"]),
        (["--device", "tpu"], ["tpu"]),
        (["--warmup-steps", "-1"], ["--warmup-steps", ">= 0"]),
        (["--warmup-steps", "3", "--steps", "3"], ["--warmup-steps 3", "shorter than the run"]),
    ],
)
def test_pretrain_bad_settings_are_refused(npy, tmp_path, capsys, extra, words):
    args = pretrain(npy, tmp_path / "o", *extra)
    if extra == ["--steps", "3"]:
        args += ["--epochs", "2"]
    _one_line(capsys, 2, main(args), *words)
    assert not (tmp_path / "o" / "metrics.jsonl").exists()
    if "--warmup-steps" in extra:  # refused before the output folder is claimed
        assert not (tmp_path / "o").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("dev", ["cuda", "cuda:0"])
def test_cuda_device_without_cuda_is_one_line(folder, npy, tmp_path, capsys, dev):
    _one_line(
        capsys,
        2,
        main(MEASURE + ["--data", f"folder:{folder}", "--out", str(tmp_path / "m"), "--device", dev]),
        dev,
        "--device cpu",
    )
    _one_line(capsys, 2, main(pretrain(npy, tmp_path / "p", "--device", dev)), "--device cpu")


def test_measure_images_above_data_size_is_refused(folder, tmp_path, capsys):
    args = MEASURE + ["--data", f"folder:{folder}", "--out", str(tmp_path / "o")]
    args[args.index("--images") + 1] = "50"
    _one_line(capsys, 2, main(args), "--images 50", "12 images")


def test_measure_stats_text_file_and_nan_stats(folder, tmp_path, capsys):
    import invfast as ivf

    txt = tmp_path / "stats.txt"
    txt.write_text("just some text\n" * 20)
    _one_line(
        capsys,
        2,
        main(MEASURE + ["--data", f"folder:{folder}", "--out", str(tmp_path / "o"), "--stats", str(txt)]),
        "FeatureStats",
    )
    st = ivf.FeatureStats().update(torch.randn(50, 24, dtype=torch.float64))
    st.mean[3] = float("nan")
    st.save(tmp_path / "nan.pt")
    _one_line(
        capsys,
        2,
        main(
            MEASURE + ["--data", f"folder:{folder}", "--out", str(tmp_path / "o2"), "--stats", str(tmp_path / "nan.pt")]
        ),
        "NaN",
    )


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--image", "/nonexistent/x.png"], ["no such file"]),
        (["--image", "CORRUPT"], ["cannot be read as an image"]),
        (["--k", "0"], ["--k"]),
        (["--tile", "0"], ["--tile"]),
        (["--names", "bogus"], ["bogus"]),
    ],
)
def test_transforms_bad_input_is_one_line(tmp_path, capsys, extra, words):
    extra = [str(tmp_path / "bad.png") if e == "CORRUPT" else e for e in extra]
    (tmp_path / "bad.png").write_bytes(b"\x89PNG garbage")
    _one_line(capsys, 2, main(["transforms", "--preview", str(tmp_path / "s.png"), *extra]), *words)


def test_unwritable_out_is_one_line_exit_1(folder, tmp_path, capsys, monkeypatch):
    import invfast.io

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "o"))

    monkeypatch.setattr(invfast.io.os, "makedirs", read_only)
    _one_line(
        capsys, 1, main(MEASURE + ["--data", f"folder:{folder}", "--out", str(tmp_path / "o")]), "read-only", "writable"
    )
    full = OSError(errno.ENOSPC, "No space left on device", "/x/table.md")
    assert exit_code(full) == 1 and "no space left" in error_line(full)
    short = OSError("92160 requested and 36736 written")  # numpy's, on a full disk (issue 63): no errno
    assert exit_code(short) == 1 and error_line(short) == (
        "cannot write: the file system took 36736 of 92160 bytes (no space left on the device?); free some space or "
        "choose another --out folder"
    )


def test_debug_shows_the_traceback(tmp_path, capsys):
    assert main(["transforms", "--preview", str(tmp_path / "s.png"), "--k", "0", "--debug"]) == 2
    assert "Traceback" in capsys.readouterr().err
