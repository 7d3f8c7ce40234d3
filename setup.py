"""Build invfast and its compiled core ``invfast._C``.

Always install with ``pip install --no-build-isolation -e .`` against an installed torch.
The CUDA sources are compiled only when the installed torch is a CUDA build
(``torch.version.cuda`` is set) and ``INVFAST_NO_CUDA`` is not set. Without an importable torch the
build stops with an error (an isolated build would otherwise ship no compiled core) unless
``INVFAST_NO_EXT`` is set.
"""
import glob
import os

from setuptools import setup


def _extensions():
    if os.environ.get("INVFAST_NO_EXT"):  # explicit pure-Python install: the torch reference path serves
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension, CUDA_HOME
    except ImportError:
        # an isolated build (plain `pip install .`) lands here: refuse rather than ship a wheel without the core
        raise SystemExit(
            "invfast: torch is not importable at build time, so the compiled core cannot be built.\n"
            "  Install torch first, then build against it: pip install --no-build-isolation -e .\n"
            "  (or set INVFAST_NO_EXT=1 to install without the compiled core; the torch reference path serves)")
    root = os.path.dirname(os.path.abspath(__file__))
    cpp = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "csrc", "**", "*.cpp"), recursive=True))
    cu = sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "csrc", "**", "*.cu"), recursive=True))
    # -fno-trapping-math lets float selects/max vectorise; invfast never relies on FP exceptions
    cxx = ["-O3", "-fopenmp", "-fno-trapping-math", "-std=c++17"]
    with_cuda = bool(torch.version.cuda) and CUDA_HOME is not None and not os.environ.get("INVFAST_NO_CUDA")
    include = [os.path.join(root, "csrc")]
    if with_cuda:
        ext = CUDAExtension(
            "invfast._C", cpp + cu, include_dirs=include,
            define_macros=[("WITH_CUDA", None)],
            extra_compile_args={"cxx": cxx, "nvcc": ["-O3", "-std=c++17"]},
            extra_link_args=["-fopenmp"],
        )
    else:
        ext = CppExtension("invfast._C", cpp, include_dirs=include,
                           extra_compile_args={"cxx": cxx}, extra_link_args=["-fopenmp"])
    return [ext], {"build_ext": BuildExtension.with_options(use_ninja=True)}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
