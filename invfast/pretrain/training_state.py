"""A pretraining run's checkpoint: what it holds, and what must hold before a run resumes from one.

The trainer gathers the pieces (:class:`~invfast.pretrain.trainer.Trainer`); these functions only build and check
the record, so the format lives in one place."""

from __future__ import annotations

from typing import Any

import torch

from invfast.io import config_difference, load_verified
from invfast.pretrain.memory_layout import contiguous_state

__all__ = ["CHECKPOINT_FORMAT", "checkpoint_record", "read_checkpoint", "restore_rng"]

#: /2: random draws keyed by ``synthetic.rng.derive_seed`` (a /1 checkpoint would not resume bit-identically)
CHECKPOINT_FORMAT = "invfast.pretrain/2"


def checkpoint_record(
    *,
    config: dict,
    step: int,
    steps_per_epoch: int,
    batch_size: int,
    model: dict,
    optimizer: dict,
    scheduler: dict,
    rng: list[dict],
    loss_window: list[Any],
) -> dict[str, Any]:
    """The checkpoint of a run at ``step``: its configuration, data position, states, and per rank the RNG
    states and the loss window (the steps the next logged loss averages over)."""
    epoch, pos = divmod(step, steps_per_epoch)
    return {
        "format": CHECKPOINT_FORMAT,
        "config": config,
        "step": step,
        "data_position": {"epoch": epoch, "batch_in_epoch": pos, "images_seen": step * batch_size},
        "model": contiguous_state(model),
        "optimizer": optimizer,
        "scheduler": scheduler,
        "rng": rng,
        "loss_window": loss_window,
    }


def read_checkpoint(path: str, config: dict) -> dict[str, Any]:
    """The checkpoint at ``path``, verified, of this format and written by a run with ``config``; ValueError (one
    line) otherwise."""
    fix = "delete it to start over, or choose another --out folder"
    ck = load_verified(path, what="pretraining checkpoint", fix=fix)
    fmt = ck.get("format") if isinstance(ck, dict) else None
    if isinstance(fmt, str) and fmt.startswith("invfast.pretrain/") and fmt != CHECKPOINT_FORMAT:
        raise ValueError(
            f"{path!r} was written by another version of invfast (format {fmt!r}, this one writes "
            f"{CHECKPOINT_FORMAT!r}: its random draws are keyed differently), so it cannot be resumed exactly; "
            "start over in another --out folder"
        )
    if fmt != CHECKPOINT_FORMAT:
        raise ValueError(f"{path!r} is not an invfast pretraining checkpoint")
    diff = config_difference(ck["config"], config, "checkpoint")
    if diff:
        raise ValueError(
            f"cannot resume from {path!r}: it was written by a run with another configuration "
            f"({'; '.join(diff)}); use the same settings or another --out folder"
        )
    return ck


def restore_rng(rng: dict[str, Any], device: torch.device) -> None:
    """Set the global CPU (and, on CUDA, that device's) RNG state saved for this rank."""
    torch.set_rng_state(rng["cpu"])
    if "cuda" in rng and device.type == "cuda":
        torch.cuda.set_rng_state(rng["cuda"], device)
