"""Loads the compiled core ``invfast._C`` once; says how to build it when it is missing."""

from __future__ import annotations

import warnings
from types import ModuleType

_BUILD_HINT = (
    "invfast: the compiled core (invfast._C) is not available, so the pure-torch reference "
    "path serves (same results, slower). Build it with:\n"
    "    pip install --no-build-isolation -e .\n"
    "from the repository root, with torch already installed."
)

_module: ModuleType | None = None
_error: str | None = None
_tried = False


def load() -> ModuleType | None:
    """Return the compiled module, or None (warning once) when it cannot be imported."""
    global _module, _error, _tried
    if _tried:
        return _module
    _tried = True
    import torch  # noqa: F401  (loads libc10/libtorch that _C links against)

    try:
        from invfast import _C  # noqa: F401  (registers torch.ops.invfast.*)

        _module = _C
    except ImportError as exc:  # missing or built against another torch
        _error = str(exc)
        warnings.warn(f"{_BUILD_HINT}\n(import error: {exc})", RuntimeWarning, stacklevel=3)
    return _module


def load_error() -> str | None:
    load()
    return _error
