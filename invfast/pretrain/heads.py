"""Projection heads: MoCo-v2 / SimCLR 2-layer MLP on top of the pooled features."""

from __future__ import annotations

import torch.nn as nn


class ProjectionHead(nn.Sequential):
    """``Linear(in_dim, hidden) · ReLU · Linear(hidden, out_dim)`` — the MoCo-v2 MLP head.

    Input [B, in_dim] pooled features, output [B, out_dim] (not normalised; the losses normalise).
    """

    def __init__(self, in_dim: int, hidden: int | None = None, out_dim: int = 128) -> None:
        hidden = in_dim if hidden is None else hidden
        super().__init__(nn.Linear(in_dim, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, out_dim))
        self.in_dim, self.hidden, self.out_dim = in_dim, hidden, out_dim
