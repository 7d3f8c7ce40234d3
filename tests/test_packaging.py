"""Packaging promises: the build refuses to ship a wheel without the compiled core by accident, the
documented benchmark command collects every suite, and the metadata users see is consistent."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import invfast

ROOT = pathlib.Path(__file__).resolve().parents[1]
_NO_TORCH = "import sys; sys.modules['torch'] = None; sys.argv = ['setup.py', '--name']; exec(open('setup.py').read())"


def _setup_without_torch(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "INVFAST_NO_EXT"}
    return subprocess.run(
        [sys.executable, "-c", _NO_TORCH], cwd=ROOT, capture_output=True, text=True, env={**clean, **env}, timeout=300
    )


def test_build_without_torch_fails_loudly():
    res = _setup_without_torch()
    assert res.returncode != 0
    assert "--no-build-isolation" in res.stderr + res.stdout


def test_build_without_torch_allowed_when_asked():
    res = _setup_without_torch(INVFAST_NO_EXT="1")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "invfast" in res.stdout


def test_benchmark_command_collects_every_suite():
    """README: ``python -m pytest benchmarks --benchmark-only -o addopts=""`` must run every bench_*.py."""
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "benchmarks",
            "--collect-only",
            "-q",
            "-o",
            "addopts=",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    suites = sorted(p.name for p in (ROOT / "benchmarks").glob("bench_*.py"))
    assert suites
    for s in suites:
        assert re.search(rf"benchmarks/{s}::", res.stdout), f"{s} collects no benchmark"


def test_version_and_metadata():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(rf'^version = "{re.escape(invfast.__version__)}"', text, re.M)
    assert re.search(r'^license = "MIT"', text, re.M)
    assert (ROOT / "LICENSE").is_file()
    assert (ROOT / "invfast" / "py.typed").is_file()
    out = subprocess.run([sys.executable, "-m", "invfast", "--version"], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == f"invfast {invfast.__version__}"
