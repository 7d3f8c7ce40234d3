"""Packaging promises: the build refuses to ship a wheel without the compiled core by accident, the
documented benchmark command collects every suite, and the metadata users see is consistent."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

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


_LOADED = (
    "import sys, runpy; sys.argv = ['invfast', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('invfast', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    "print(sorted(m for m in ('torch', 'numpy', 'invfast._C') if m in sys.modules))"
)


@pytest.mark.parametrize("argv", [["--help"], ["--version"], [], ["measure", "--help"], ["probe", "--help"]])
def test_help_and_version_load_neither_torch_nor_the_core(argv):
    """``invfast --help`` / ``--version`` answer at once on a fresh machine: the package root is lazy (issue 62, where
    they took 5.6 s of CPU); a subcommand's own help may load what its options need."""
    out = subprocess.run([sys.executable, "-c", _LOADED, *argv], capture_output=True, text=True, timeout=300)
    loaded = out.stdout.strip().splitlines()[-1]
    if argv in ([], ["--help"], ["--version"]):
        assert loaded == "[]", out.stdout[-2000:] + out.stderr[-2000:]
    else:
        assert "usage: invfast" in out.stdout, out.stdout[-2000:] + out.stderr[-2000:]


def test_import_invfast_loads_names_on_first_use():
    code = (
        "import sys, invfast\n"
        "assert 'torch' not in sys.modules, 'import invfast loaded torch'\n"
        "assert invfast.FeatureStats.__module__ == 'invfast.stats' and callable(invfast.standardized_cosine)\n"
        "assert set(invfast.__all__) <= set(dir(invfast))\n"
        "for name in invfast.__all__: getattr(invfast, name)\n"
        "try:\n    invfast.no_such_name\nexcept AttributeError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "module 'invfast' has no attribute 'no_such_name'"


def _imported_packages(paths: list[pathlib.Path]) -> set[str]:
    """Top-level names of every module the given files import (anywhere in them: lazily imported too)."""
    import ast

    names: set[str] = set()
    for p in paths:
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def test_what_the_default_commands_import_is_a_dependency():
    """The default outputs (pictures: matplotlib), image folders (Pillow) and the README's first check (`invfast
    demo`: scikit-image's photographs) work after a plain install; linters are the developer's extra, not the
    user-facing test one (issue 62)."""
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = {re.split(r"[<>=!~\[ ]", d)[0].lower() for d in meta["dependencies"]}
    used = _imported_packages(
        [
            ROOT / "invfast" / "report" / "plots.py",
            ROOT / "invfast" / "data" / "folder.py",
            ROOT / "invfast" / "demo.py",
        ]
    )
    provides = {"matplotlib": "matplotlib", "PIL": "pillow", "skimage": "scikit-image"}
    for module, package in provides.items():
        assert module in used, f"{module} is no longer imported where this test looks; update the test"
        assert package in deps, f"{package} (imported as {module}) must be in [project] dependencies"
    extras = meta["optional-dependencies"]
    linters = {"ruff", "mypy"}
    assert not linters & {re.split(r"[<>=!~\[ ]", d)[0] for d in extras["test"]}
    assert linters <= {re.split(r"[<>=!~\[ ]", d)[0] for d in extras["dev"]}
    assert '".[dev]"' in (ROOT / "scripts" / "setup.sh").read_text()  # check.sh runs ruff and mypy
