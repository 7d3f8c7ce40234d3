"""Issue 63: a FIFO, socket or device where invfast reads a file is refused in one line instead of waiting
forever, and an image whose resize would not fit in memory is skipped with a reason. Every test here hung or
failed on the code before the fix; the ones that could hang run in a subprocess with a time limit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from PIL import Image

from invfast.io import require_regular, special_file_kind

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")


def _fifo(path):
    os.mkfifo(path)
    return str(path)


def _within(code: str, seconds: float = 60.0) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; a hang fails the test instead of stalling the suite."""
    try:
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=seconds
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"still waiting after {seconds} s: {code.strip().splitlines()[-1]}")


def test_special_file_kind(tmp_path):
    regular = tmp_path / "a.npy"
    np.save(regular, np.zeros(3))
    assert special_file_kind(regular) is None and special_file_kind(tmp_path) is None
    assert special_file_kind(tmp_path / "absent") is None
    assert special_file_kind(_fifo(tmp_path / "p")) == "a FIFO (named pipe)"
    assert special_file_kind("/dev/null") == "a character device"
    with pytest.raises(ValueError, match=r"features .*'/dev/null' is a character device, not a regular file"):
        require_regular("/dev/null", "features")
    require_regular(regular, "features")


def test_cli_refuses_a_fifo_argument(tmp_path):
    fifo = _fifo(tmp_path / "f.npy")
    y = tmp_path / "y.npy"
    np.save(y, np.arange(12) % 2)
    for features in (["--features", fifo], [f"--features={fifo}"]):
        args = ["probe", *features, "--targets", str(y), "--task", "classification"]
        r = _within(f"import sys; from invfast.cli import main; sys.exit(main({args!r}))")
        err = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(err) == 1, r.stderr
        assert "is a FIFO (named pipe), not a regular file" in err[0] and fifo in err[0]


def test_probe_loader_refuses_a_fifo_without_the_cli(tmp_path):
    fifo = _fifo(tmp_path / "f.npy")
    r = _within(
        f"""
        from invfast.probes.cli import _load
        try:
            _load({fifo!r}, "--features")
        except ValueError as e:
            print("REFUSED", e)
        """
    )
    assert r.returncode == 0 and "REFUSED --features" in r.stdout and "FIFO" in r.stdout, r.stderr


def test_a_fifo_journal_is_refused_not_waited_on(tmp_path):
    from invfast.runtime.write_paths import JOURNAL

    out = tmp_path / "out"
    out.mkdir()
    _fifo(out / JOURNAL)
    r = _within(
        f"""
        from invfast.io import atomic_write_text
        from invfast.runtime.write_paths import clean_temporaries, write_root
        for action in ("clean", "write"):
            try:
                with write_root({str(out)!r}):
                    if action == "clean":
                        clean_temporaries({str(out)!r})
                    else:
                        atomic_write_text({str(out / "x.txt")!r}, "hello")
            except ValueError as e:
                print(action, "REFUSED", e)
        """
    )
    assert r.returncode == 0, r.stderr
    assert "clean REFUSED" in r.stdout and "write REFUSED" in r.stdout and "not a regular file" in r.stdout
    assert not (out / "x.txt").exists()


def test_a_fifo_config_json_is_refused(tmp_path):
    folder = tmp_path / "rep"
    folder.mkdir()
    _fifo(folder / "config.json")
    r = _within(
        f"""
        from invfast.reproduce.folders import claim_folder
        try:
            claim_folder({str(folder)!r}, {{"seed": 0}}, "report folder")
        except ValueError as e:
            print("REFUSED", e)
        """
    )
    assert r.returncode == 0 and "REFUSED" in r.stdout and "config.json" in r.stdout and "FIFO" in r.stdout, r.stderr


def _photo(path, w=40, h=30):
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)).save(path)


def test_a_fifo_in_an_image_folder_is_skipped_with_its_reason(tmp_path):
    for k in range(3):
        _photo(tmp_path / f"im{k}.png")
    _fifo(tmp_path / "z.png")
    r = _within(
        f"""
        from invfast.data.folder import FolderSource
        src = FolderSource({str(tmp_path)!r}, 16)
        images, ok = src.load(range(len(src)))
        print("OK", ok.tolist())
        print("ERR", src.errors.to_dict())
        """
    )
    assert r.returncode == 0, r.stderr
    assert "OK [True, True, True, False]" in r.stdout and "FIFO (named pipe), not a regular file" in r.stdout


def test_an_image_whose_resize_would_not_fit_is_skipped_with_its_size(tmp_path):
    from invfast.data.folder import MAX_RESIZED_PIXELS, FolderSource, decode_image

    strip = tmp_path / "strip.png"
    Image.new("RGB", (100_000, 1)).save(strip)
    with pytest.raises(ValueError, match=r"100000×1 image resized to a shorter side of 256 px would be 25600000×256"):
        decode_image(strip, 256)
    _photo(tmp_path / "photo.png", 4000, 3000)  # an ordinary aspect ratio stays far below the limit
    assert 4000 * 256 / 3000 * 256 < MAX_RESIZED_PIXELS
    src = FolderSource(tmp_path, 256)
    images, ok = src.load(range(len(src)))
    assert ok.tolist() == [True, False] and images.shape == (2, 3, 256, 256)
    assert images[1].eq(0).all() and "would be 25600000×256" in str(src.errors.to_dict())
    # the limit is on the resized image, not the file: the same strip at 1 px fits
    assert decode_image(strip, 1).shape == (3, 1, 1) and torch.is_tensor(decode_image(strip, 1))


def test_demo_json_that_is_a_folder_is_refused_before_the_demo(tmp_path, monkeypatch, capsys):
    import invfast.demo as demo
    from invfast.cli import main

    ran = []
    monkeypatch.setattr(demo, "run_demo", lambda *a, **k: ran.append(1) or {})
    assert main(["demo", "--json", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--json" in err[0] and "is a folder; give a file name" in err[0] and not ran
    assert "demo.json" in err[0]
