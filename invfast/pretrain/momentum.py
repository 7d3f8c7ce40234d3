"""Momentum (exponential moving average) update of MoCo's key network."""

from __future__ import annotations

import torch
import torch.nn as nn


@torch.no_grad()
def momentum_update(key: nn.Module, query: nn.Module, m: float) -> None:
    """``θ_k ← m·θ_k + (1 − m)·θ_q`` for every parameter pair (same order, same shapes).

    Buffers (BatchNorm running statistics) are not touched: the key network keeps its own, as in MoCo.
    """
    if not 0.0 <= m <= 1.0:
        raise ValueError(f"momentum m must be in [0, 1], got {m}")
    pk: list[torch.Tensor] = list(key.parameters())
    pq: list[torch.Tensor] = list(query.parameters())
    if len(pk) != len(pq):
        raise ValueError(f"key and query networks differ: {len(pk)} vs {len(pq)} parameters")
    for a, b in zip(pk, pq):
        if a.shape != b.shape:
            raise ValueError(f"key and query parameter shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    torch._foreach_mul_(pk, m)
    torch._foreach_add_(pk, pq, alpha=1.0 - m)
