"""Which backends exist, and the switch between compiled ops and their torch references.

Every compiled op ``torch.ops.invfast.<name>`` has a pure-torch reference registered here with
:func:`register_reference`; :func:`call` runs one or the other as the dispatch table
(:mod:`invfast.dispatch`, printed by ``invfast info``) says for the device of the inputs and the mode:

* ``auto`` (default): the compiled kernel where the table marks it measured faster than the torch
  reference on that device, the reference elsewhere (including devices without a kernel);
* ``compiled``: the kernel, and one clear RuntimeError where that device has none;
* ``reference``: the torch reference everywhere.

The mode comes from ``INVFAST_BACKEND`` at import and :func:`use`, a call or a context manager:

>>> import invfast.backend as B
>>> with B.use("reference"):
...     pass  # everything in here runs the torch references
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch

from invfast import _loader, dispatch, wait_policy

__all__ = [
    "BACKEND_ENV",
    "CPU_ISA_ENV",
    "CPU_ISA_LEVELS",
    "env_problem",
    "cpu_isa_env_problem",
    "use",
    "mode",
    "register_reference",
    "reference",
    "references",
    "compiled_ops",
    "device_type",
    "uses_kernel",
    "compiled_for",
    "call",
    "backend_info",
]

_loader.load()  # torch.ops.invfast.* exist once this module is imported (the package root loads nothing)
_MODES = dispatch.MODES
BACKEND_ENV = "INVFAST_BACKEND"
#: lowers the instruction set of the compiled CPU kernels (read once by the core: csrc/common/cpu_isa.h)
CPU_ISA_ENV = "INVFAST_CPU_ISA"
#: its values, lowest first; unset or empty: the highest this CPU supports
CPU_ISA_LEVELS = ("baseline", "avx2", "avx512")


def _mode_from_env() -> tuple[str, str | None]:
    raw = os.environ.get(BACKEND_ENV, "")
    value = raw.strip().lower() or "auto"
    if value in _MODES:
        return value, None
    return "auto", f"{BACKEND_ENV}={raw!r} is not a backend mode; valid values: {', '.join(_MODES)}"


def _cpu_isa_from_env() -> str | None:
    raw = os.environ.get(CPU_ISA_ENV, "")
    if raw in ("", *CPU_ISA_LEVELS):
        return None
    return f"{CPU_ISA_ENV}={raw!r} is not an instruction set; valid values: {', '.join(CPU_ISA_LEVELS)}"


_mode, _env_problem = _mode_from_env()
_cpu_isa_problem = _cpu_isa_from_env()
_env_warned = False
_references: dict[str, Callable[..., Any]] = {}


def env_problem() -> str | None:
    """One line describing an invalid ``INVFAST_BACKEND`` (read at import), or None when it is valid."""
    return _env_problem


def cpu_isa_env_problem() -> str | None:
    """One line describing an invalid ``INVFAST_CPU_ISA`` (read at import), or None when it is valid."""
    return _cpu_isa_problem


def _warn_env_once() -> None:
    global _env_warned
    if _env_warned:
        return
    _env_warned = True
    if _env_problem is not None:
        warnings.warn(f"{_env_problem}; using 'auto'", RuntimeWarning, stacklevel=4)
    if _cpu_isa_problem is not None:
        warnings.warn(f"{_cpu_isa_problem}; using the CPU's highest", RuntimeWarning, stacklevel=4)


class _ModeScope:
    """The mode selected by :func:`use`; as a context manager it restores the previous mode on exit."""

    def __init__(self, previous: str) -> None:
        self.previous = previous

    def __enter__(self) -> _ModeScope:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        global _mode
        _mode = self.previous


def use(mode: str) -> _ModeScope:
    """Select the backend mode: ``use("reference")`` for the rest of the program, or
    ``with use("reference"): ...`` for a block (the previous mode comes back when the block ends).

    Modes: 'auto' (the dispatch table decides), 'compiled' (kernels; an error where a device has none),
    'reference' (torch references)."""
    global _mode
    if mode not in _MODES:
        raise ValueError(f"backend mode must be one of {', '.join(_MODES)}, got {mode!r}")
    scope = _ModeScope(_mode)
    _mode = mode
    return scope


def mode() -> str:
    """The current backend mode: 'auto', 'compiled' or 'reference'."""
    _warn_env_once()
    return _mode


def register_reference(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register the torch reference of compiled op ``name``."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        _references[name] = fn
        return fn

    return deco


def reference(name: str) -> Callable[..., Any]:
    """The registered torch reference of op ``name`` (registered when its ``invfast.ops`` module is imported)."""
    return _references[name]


def references() -> dict[str, Callable[..., Any]]:
    """Every registered torch reference, by op name."""
    return dict(_references)


def compiled_ops() -> list[str]:
    """Names of the ops the loaded compiled core provides (empty without it)."""
    return dispatch.registered_ops()


def device_type(args: tuple) -> str:
    """The device type an op call runs on: that of its first tensor argument ('cpu' without one)."""
    for a in args:
        if isinstance(a, torch.Tensor):
            return a.device.type
    return "cpu"


def uses_kernel(name: str, device_type: str) -> bool:
    """Whether op ``name`` runs its compiled kernel on ``device_type`` under the current mode (the dispatch
    table's answer; mode 'compiled' raises a RuntimeError where that device has no kernel)."""
    _warn_env_once()
    return dispatch.use_kernel(name, device_type, _mode)


def compiled_for(name: str, *args: Any) -> Callable[..., Any] | None:
    """The compiled op ``name`` if the dispatch table and the current mode pick it for ``args`` (the row's input
    condition included), else None (run the reference). Mode 'compiled' raises a RuntimeError where the device
    has no kernel."""
    dev = device_type(args)
    if not dispatch.serves(name, dev, _mode, args) or not uses_kernel(name, dev):
        return None
    return getattr(torch.ops.invfast, name)


def call(name: str, *args: Any) -> Any:
    """Run op ``name`` on ``args``: the compiled kernel where :func:`compiled_for` picks it, else the torch
    reference."""
    fn = compiled_for(name, *args)
    return fn(*args) if fn is not None else reference(name)(*args)


def backend_info() -> dict[str, Any]:
    """What this installation can run: compiled core, CUDA, DALI, threads, versions, the dispatch table."""
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
        "dali": importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None,
        "threads": torch.get_num_threads(),
        "openmp_threads": mod.openmp_threads() if mod is not None else 0,
        "cpu_isa": mod.cpu_isa() if mod is not None else "",
        "cpu_isa_supported": mod.cpu_isa_supported() if mod is not None else "",
        "openmp_wait_policy": wait_policy.describe(),
        "mode": mode(),
        "cuda_kernels_env": os.environ.get(dispatch.CUDA_KERNELS_ENV, ""),
        "compiled_ops": compiled_ops(),
        "core_error": _loader.load_error(),
        "dispatch": [e.as_dict() for e in dispatch.table()],
    }
