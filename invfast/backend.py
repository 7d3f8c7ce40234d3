"""Which backends exist, and the switch between compiled ops and their torch references.

Every compiled op ``torch.ops.invfast.<name>`` has a pure-torch reference registered here
with :func:`register_reference`; :func:`call` runs the compiled op when it can serve the
inputs (core built, device supported, mode allows) and the reference otherwise.

>>> import invfast.backend as B
>>> with B.using("reference"):
...     pass  # everything in here runs the torch references
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
from typing import Any, Callable, Iterator

import torch

from invfast import _loader

_MODES = ("auto", "compiled", "reference")
_mode = os.environ.get("INVFAST_BACKEND", "auto")
if _mode not in _MODES:
    raise ValueError(f"INVFAST_BACKEND must be one of {_MODES}, got {_mode!r}")

_references: dict[str, Callable[..., Any]] = {}


def use(mode: str) -> None:
    """Select the backend: 'auto' (compiled where available), 'compiled' (error if not), 'reference'."""
    global _mode
    if mode not in _MODES:
        raise ValueError(f"backend mode must be one of {_MODES}, got {mode!r}")
    _mode = mode


def mode() -> str:
    return _mode


#: environment switch for CUDA kernels not yet measured faster than the torch path on a GPU:
#: ``1`` / ``all`` for every family, or a comma list of families (``augment,hyper``); read at each call
CUDA_KERNELS_ENV = "INVFAST_CUDA_KERNELS"


def cuda_kernels_enabled(family: str) -> bool:
    """Whether op family ``family``'s CUDA kernels serve CUDA inputs: mode 'compiled', or mode 'auto'
    with ``INVFAST_CUDA_KERNELS`` naming the family (or ``1``/``all``). Mode 'reference' never.
    Under plain 'auto' the torch path serves on CUDA until a kernel is measured faster on a GPU."""
    if _mode == "reference":
        return False
    if _mode == "compiled":
        return True
    raw = os.environ.get(CUDA_KERNELS_ENV, "").strip().lower()
    if raw in ("", "0", "none"):
        return False
    return raw in ("1", "all") or family in {s.strip() for s in raw.split(",")}


@contextlib.contextmanager
def using(new_mode: str) -> Iterator[None]:
    """Temporarily select a backend mode."""
    old = _mode
    use(new_mode)
    try:
        yield
    finally:
        use(old)


def register_reference(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the torch reference of compiled op ``name``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        _references[name] = fn
        return fn

    return deco


def reference(name: str) -> Callable[..., Any]:
    return _references[name]


def compiled_ops() -> list[str]:
    """Names of the ops the loaded compiled core provides (empty without it)."""
    if _loader.load() is None:
        return []
    names = {n.split("::", 1)[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("invfast::")}
    return sorted(names)


def _has_compiled(name: str) -> bool:
    if _loader.load() is None:
        return False
    try:
        getattr(torch.ops.invfast, name)
        return True
    except (AttributeError, RuntimeError):
        return False


def _device_supported(args: tuple) -> bool:
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.device.type == "cuda":
                mod = _loader.load()
                if mod is None or not mod.built_with_cuda():
                    return False
            elif a.device.type != "cpu":
                return False
    return True


def compiled_for(name: str, *args: Any) -> Callable[..., Any] | None:
    """The compiled op ``name`` if it should serve ``args`` under the current mode, else None."""
    if _mode == "reference":
        return None
    ok = _has_compiled(name) and _device_supported(args)
    if not ok and _mode == "compiled":
        raise RuntimeError(
            f"backend 'compiled' was forced but invfast op {name!r} has no compiled kernel for these "
            f"inputs (core loaded: {_loader.load() is not None}); build with "
            "`pip install --no-build-isolation -e .` or use backend 'auto'"
        )
    return getattr(torch.ops.invfast, name) if ok else None


def call(name: str, *args: Any) -> Any:
    """Run op ``name``: the compiled kernel when it can serve ``args``, else the torch reference."""
    fn = compiled_for(name, *args)
    return fn(*args) if fn is not None else _references[name](*args)


def backend_info() -> dict[str, Any]:
    """What this installation can run: compiled core, CUDA, DALI, threads, versions."""
    from invfast import __version__

    mod = _loader.load()
    cuda_built = bool(mod is not None and mod.built_with_cuda())
    return {
        "version": __version__,
        "torch": torch.__version__,
        "cpp": mod is not None,
        "cuda": cuda_built and torch.cuda.is_available(),
        "cuda_built": cuda_built,
        "cuda_devices": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "dali": importlib.util.find_spec("nvidia") is not None
        and importlib.util.find_spec("nvidia.dali") is not None,
        "threads": torch.get_num_threads(),
        "openmp_threads": mod.openmp_threads() if mod is not None else 0,
        "mode": _mode,
        "compiled_ops": compiled_ops(),
        "core_error": _loader.load_error(),
    }
