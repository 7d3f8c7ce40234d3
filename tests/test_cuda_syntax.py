"""Every .cu file under csrc/ compiles with nvcc using the flags a real CUDA build passes.

A CUDA extension cannot be linked against a CPU torch, but nvcc can still compile each translation unit to
an object against torch's headers. The flags are not written here: a subprocess builds the core's
``CUDAExtension`` from ``csrc/build_config.py`` (the definition setup.py uses) and runs torch's own
``BuildExtension`` on it up to the point where it would write the ninja file, and records the nvcc flags it
computed there (torch's COMMON_NVCC_FLAGS, -fPIC for the host compiler, the -gencode arch flags, the include
paths, WITH_CUDA, TORCH_EXTENSION_NAME, TORCH_API_INCLUDE_EXTENSION_H, -std, plus the project's
NVCC_FLAGS). What compiles here therefore compiles in a real build with the same nvcc and torch headers.

What a CPU torch needs, all outside the flag list itself:
* ``torch.utils.cpp_extension.CUDA_HOME`` is None in a CPU torch whatever the environment; the capture sets
  it to the toolkit found (CUDA_HOME, CUDA_PATH, the nvcc on PATH, /usr/local/cuda).
* ``TORCH_CUDA_ARCH_LIST`` must be set (BuildExtension reads the arch from the visible GPUs otherwise);
  unset, the test uses ``9.0`` (H100), the arch the GPU instructions in README.md build for.
* a CPU torch ships without ``c10/cuda/impl/cuda_cmake_macros.h`` (generated when torch is built with
  CUDA); only then is ``-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE`` added, which makes c10 skip that header.

Skips when nvcc is absent.
"""

import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CU_FILES = sorted((ROOT / "csrc").rglob("*.cu"))

_CAPTURE = r"""
import importlib.util, json, os, sys, tempfile
import torch.utils.cpp_extension as ce
from setuptools import Distribution

spec = importlib.util.spec_from_file_location("invfast_build_config", sys.argv[1])
cfg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cfg)
seen = {}

class Captured(Exception):
    pass

def capture(**kw):
    seen.update(cuda_cflags=kw["cuda_cflags"], cuda_post_cflags=kw["cuda_post_cflags"],
                sources=[str(s) for s in kw["sources"]])
    raise Captured

ce._write_ninja_file_and_compile_objects = capture
ce.CUDA_HOME = ce.CUDA_HOME or os.environ["CUDA_HOME"]  # a CPU torch leaves it unset whatever the environment
dist = Distribution({"name": "invfast", "ext_modules": [cfg.extension(with_cuda=True)]})
cmd = ce.BuildExtension.with_options(use_ninja=True)(dist)
cmd.ensure_finalized()
cmd.build_temp = cmd.build_lib = tempfile.mkdtemp()
try:
    cmd.run()
except Captured:
    pass
print(json.dumps({"cuda_home": ce.CUDA_HOME, **seen}))
"""


def _cuda_home() -> str | None:
    """The CUDA toolkit: CUDA_HOME / CUDA_PATH, the toolkit of the nvcc on PATH, or /usr/local/cuda."""
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    found = shutil.which("nvcc")
    if found:
        cands.append(os.path.dirname(os.path.dirname(os.path.realpath(found))))
    cands.append("/usr/local/cuda")
    for c in cands:
        if c and all(os.path.exists(os.path.join(c, *p)) for p in (("bin", "nvcc"), ("include", "cuda_runtime.h"))):
            return c
    return None


pytestmark = pytest.mark.skipif(_cuda_home() is None, reason="nvcc (CUDA toolkit) not installed")


@pytest.fixture(scope="module")
def build_flags(tmp_path_factory):
    """nvcc path and argv pieces (before and after ``-c src -o obj``) that torch's BuildExtension uses."""
    home = _cuda_home()
    env = {**os.environ, "CUDA_HOME": home, "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST") or "9.0"}
    res = subprocess.run(
        [sys.executable, "-c", _CAPTURE, str(ROOT / "csrc" / "build_config.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path_factory.mktemp("capture"),
    )
    assert res.returncode == 0, res.stderr[-4000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got.get("cuda_post_cflags"), f"BuildExtension computed no nvcc flags: {got}"
    assert {pathlib.Path(s).name for s in got["sources"]} >= {p.name for p in CU_FILES}
    pre, post = list(got["cuda_cflags"]), list(got["cuda_post_cflags"])  # shell-quoted, as ninja gets them
    import torch.utils.cpp_extension as ce

    if not any(
        os.path.exists(os.path.join(inc, "c10", "cuda", "impl", "cuda_cmake_macros.h")) for inc in ce.include_paths()
    ):
        post.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")  # CPU torch: the CUDA build's generated header is absent
    return os.path.join(got["cuda_home"], "bin", "nvcc"), pre, post


def test_flags_are_torchs_and_the_projects(build_flags):
    """The captured flags carry torch's extension flags and csrc/build_config.py's, not a hand-made list."""
    import torch.utils.cpp_extension as ce

    _, pre, post = build_flags
    flags = shlex.split(" ".join(pre + post))  # the shell's view
    for f in ce.COMMON_NVCC_FLAGS + [
        "-DWITH_CUDA",
        "-DTORCH_EXTENSION_NAME=_C",
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        "-O3",
        "-std=c++17",
        "'-fPIC'",
    ]:
        assert f in flags, f
    assert any(f.startswith("-gencode=arch=compute_") for f in flags)
    assert f"-I{ROOT / 'csrc'}" in flags and any(f.startswith("-I") and f.endswith("include") for f in flags)


@pytest.mark.parametrize("cu", CU_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_cu_compiles(cu, build_flags, tmp_path):
    """The command of torch's ninja rule for CUDA sources, run through the shell as ninja runs it."""
    nvcc, pre, post = build_flags
    out = tmp_path / "out.o"
    cmd = " ".join(
        [
            shlex.quote(nvcc),
            "--generate-dependencies-with-compile",
            "--dependency-output",
            shlex.quote(f"{out}.d"),
            *pre,
            "-c",
            shlex.quote(str(cu)),
            "-o",
            shlex.quote(str(out)),
            *post,
        ]
    )
    res = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert res.returncode == 0, f"nvcc failed on {cu.name}:\n{cmd}\n{res.stderr[-6000:]}"
    assert out.stat().st_size > 0
