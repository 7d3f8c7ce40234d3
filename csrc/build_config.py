"""The compiled core's build definition, read by ``setup.py`` and by ``tests/test_cuda_syntax.py``, so the
syntax check compiles the CUDA sources with exactly the flags a real build passes.

Not part of the installed package (it lives next to the sources it describes); both readers load it by
file path. Needs torch only inside :func:`extension`.
"""
from __future__ import annotations

import glob
import os
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "invfast._C"

#: C++ flags of every source. -fno-trapping-math lets float selects/max vectorise; invfast never relies on
#: FP exceptions.
CXX_FLAGS = ["-O3", "-fopenmp", "-fno-trapping-math", "-std=c++17"]
#: nvcc flags of the .cu sources (torch's BuildExtension adds its own: COMMON_NVCC_FLAGS, arch, -fPIC, ...)
NVCC_FLAGS = ["-O3", "-std=c++17"]
#: macros of a CUDA build (the C++ sources register CUDA-only pieces under WITH_CUDA)
CUDA_MACROS: list[tuple[str, str | None]] = [("WITH_CUDA", None)]
LINK_FLAGS = ["-fopenmp"]
INCLUDE_DIRS = [os.path.join(ROOT, "csrc")]


def sources(suffix: str) -> list[str]:
    """Paths (relative to the repository root) of every csrc/**/*<suffix> file, sorted."""
    found = glob.glob(os.path.join(ROOT, "csrc", "**", f"*{suffix}"), recursive=True)
    return sorted(os.path.relpath(p, ROOT) for p in found)


def extension(with_cuda: bool) -> Any:
    """The setuptools Extension of the core: ``CUDAExtension`` over the C++ and CUDA sources, or
    ``CppExtension`` over the C++ sources alone."""
    from torch.utils.cpp_extension import CppExtension, CUDAExtension

    if with_cuda:
        return CUDAExtension(NAME, sources(".cpp") + sources(".cu"), include_dirs=INCLUDE_DIRS,
                             define_macros=list(CUDA_MACROS),
                             extra_compile_args={"cxx": list(CXX_FLAGS), "nvcc": list(NVCC_FLAGS)},
                             extra_link_args=list(LINK_FLAGS))
    return CppExtension(NAME, sources(".cpp"), include_dirs=INCLUDE_DIRS, extra_compile_args={"cxx": list(CXX_FLAGS)},
                        extra_link_args=list(LINK_FLAGS))
