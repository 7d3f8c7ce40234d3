"""Input checks shared by the public functions of every package: clear errors that name the argument. The
module is the library's own (not for users, hence the underscore); ``__all__`` is what its packages take."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["as_features", "as_labels", "check_finite", "compiling", "require"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def as_features(x: Any, name: str, ndim: int | None = 2, finite: bool = True) -> torch.Tensor:
    """``x`` as a floating tensor of ``ndim`` dims (None: any >= 1), checked for NaN/Inf."""
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if x.dtype not in _FLOATS:
        raise TypeError(
            f"{name} must have a floating dtype (float16/bfloat16/float32/float64), got {x.dtype}; "
            f"convert with {name}.float()"
        )
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    if ndim is None and x.dim() < 1:
        raise ValueError(f"{name} must have at least 1 dimension, got a scalar")
    if finite:
        check_finite(
            x, f"{name} contains NaN/Inf values; remove or impute them first (nothing is dropped silently)", count=True
        )
    return x


def compiling() -> bool:
    """Whether torch.compile is tracing this call (data-dependent Python checks would break its graph)."""
    return bool(torch.compiler.is_compiling())


def check_finite(x: torch.Tensor, message: str, count: bool = False) -> None:
    """Raise ValueError(``message``) when ``x`` holds NaN/Inf. Under ``torch.compile`` the same check runs
    inside the graph (``torch._assert_async``: a RuntimeError with ``message`` when the graph executes), so
    a compiled call with ``fullgraph=True`` keeps it without a graph break."""
    if compiling():
        torch._assert_async(torch.isfinite(x).all(), message)
        return
    if x.numel() and not bool(torch.isfinite(x).all()):
        if count:
            bad = int((~torch.isfinite(x)).sum())
            message = message.replace("contains NaN/Inf", f"contains {bad} NaN/Inf", 1)
        raise ValueError(message)


def as_labels(y: Any, name: str, n: int | None = None) -> torch.Tensor:
    """``y`` as a 1-D int64 tensor of length ``n``."""
    if isinstance(y, np.ndarray):
        y = torch.from_numpy(y)
    if not isinstance(y, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(y).__name__}")
    if y.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(y.shape)}")
    if y.is_floating_point():
        if not bool((y == y.round()).all()):
            raise TypeError(f"{name} must hold integer class labels")
    if n is not None and y.shape[0] != n:
        raise ValueError(f"{name} has {y.shape[0]} labels but there are {n} samples")
    return y.long()


def require(ok: torch.Tensor, message: str) -> None:
    """ValueError(``message``) where the 0-dim bool tensor ``ok`` is False. On the CPU it is read at once; on
    another device it is an asynchronous device assertion, so a check inside a loop never waits for the device (a
    failure surfaces at the next synchronisation as a device-side assertion naming ``message``)."""
    if ok.device.type == "cpu":
        if not bool(ok):
            raise ValueError(message)
    else:
        torch._assert_async(ok, message)
