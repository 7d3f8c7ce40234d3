"""Turning a user's ``--device`` string into a ``torch.device`` with one clear error when it cannot be used."""

from __future__ import annotations

import os

import torch

__all__ = ["resolve_device"]

_HINT = "use --device auto, cpu, cuda or cuda:N"


def resolve_device(spec: str | torch.device | None = "auto", local_rank: int | None = None) -> torch.device:
    """The device ``spec`` names, checked against what this torch and machine can run.

    ``"auto"`` (or None) is CUDA when available (GPU ``local_rank``, by default ``$LOCAL_RANK`` or 0),
    else the CPU; ``"cpu"``; ``"cuda"`` (GPU ``local_rank``) or ``"cuda:N"``; ``"mps"`` where torch
    has it. Raises ``ValueError`` naming the problem and the fix for an unknown name, a CUDA device on
    a torch without CUDA or a machine without a GPU, or a GPU index that does not exist.
    """
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "auto"):
        return (
            torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
    if isinstance(spec, torch.device):
        dev = spec
    else:
        if not isinstance(spec, str):
            raise TypeError(f"device must be a string like 'cuda:0' or a torch.device, got {type(spec).__name__}")
        try:
            dev = torch.device(spec.strip().lower())
        except (RuntimeError, ValueError):
            raise ValueError(f"unknown device {spec!r}; {_HINT}") from None
    if dev.type == "cpu":
        return torch.device("cpu")
    if dev.type == "cuda":
        if torch.version.cuda is None:
            raise ValueError(
                f"device {spec!r} needs CUDA, but this torch ({torch.__version__}) was built without it; "
                "use --device cpu, or install a CUDA build of torch"
            )
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {spec!r} needs a GPU, but CUDA sees none on this machine "
                "(check CUDA_VISIBLE_DEVICES and the driver); use --device cpu"
            )
        n = torch.cuda.device_count()
        index = local_rank if dev.index is None else dev.index
        if not 0 <= index < n:
            raise ValueError(f"device {spec!r}: there is no GPU {index} (this machine has {n}: cuda:0..cuda:{n - 1})")
        return torch.device("cuda", index)
    if dev.type == "mps":
        if not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
            raise ValueError(f"device {spec!r} is not available on this machine; use --device cpu")
        return dev
    raise ValueError(f"invfast cannot run on device {spec!r}; {_HINT}")
