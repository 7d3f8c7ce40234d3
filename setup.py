"""Build invfast and its compiled core ``invfast._C``.

Always install with ``pip install --no-build-isolation -e .`` against an installed torch.
The CUDA sources are compiled only when the installed torch is a CUDA build
(``torch.version.cuda`` is set) and ``INVFAST_NO_CUDA`` is not set. Without an importable torch the
build stops with an error (an isolated build would otherwise ship no compiled core) unless
``INVFAST_NO_EXT`` is set.
"""
import importlib.util
import os

from setuptools import setup


def _build_config():
    """csrc/build_config.py: the flags and sources of the core, shared with tests/test_cuda_syntax.py."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "build_config.py")
    spec = importlib.util.spec_from_file_location("invfast_build_config", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _extensions():
    if os.environ.get("INVFAST_NO_EXT"):  # explicit pure-Python install: the torch reference path serves
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import BuildExtension, CUDA_HOME
    except ImportError:
        # an isolated build (plain `pip install .`) lands here: refuse rather than ship a wheel without the core
        raise SystemExit(
            "invfast: torch is not importable at build time, so the compiled core cannot be built.\n"
            "  Install torch first, then build against it: pip install --no-build-isolation -e .\n"
            "  (or set INVFAST_NO_EXT=1 to install without the compiled core; the torch reference path serves)")
    with_cuda = bool(torch.version.cuda) and CUDA_HOME is not None and not os.environ.get("INVFAST_NO_CUDA")
    return [_build_config().extension(with_cuda)], {"build_ext": BuildExtension.with_options(use_ninja=True)}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
