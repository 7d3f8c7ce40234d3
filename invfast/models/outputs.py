"""A model's output as features: what invfast reads from the objects other libraries' models return."""

from __future__ import annotations

from typing import Any

import torch


def pooled_output(out: Any) -> Any:
    """The pooled features of a model's output: a tensor as it is; a Hugging Face ``ModelOutput`` (or any object
    with these attributes) by its ``pooler_output`` when it has one, else the mean over tokens of its
    ``last_hidden_state`` [B, T, D] -> [B, D]; anything else unchanged (the caller refuses it)."""
    if isinstance(out, torch.Tensor):
        return out
    pooled = getattr(out, "pooler_output", None)
    if isinstance(pooled, torch.Tensor):
        return pooled
    hidden = getattr(out, "last_hidden_state", None)
    if isinstance(hidden, torch.Tensor) and hidden.dim() == 3:
        return hidden.mean(1)
    return out


__all__ = ["pooled_output"]
