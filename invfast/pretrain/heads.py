"""Projection heads: the 2-layer MLP of MoCo-v2 / SimCLR on top of the pooled features, plain or with batch
normalisation (MoCo v3's / SimCLR v2's)."""

from __future__ import annotations

import torch.nn as nn

__all__ = ["HEAD_NORMS", "ProjectionHead"]

#: what normalises a projection head: nothing (MoCo-v2), or batch normalisation of its hidden and output layers
HEAD_NORMS = ("none", "bn")


class ProjectionHead(nn.Sequential):
    """The MLP head. ``norm='none'``: ``Linear(in_dim, hidden) · ReLU · Linear(hidden, out_dim)``, MoCo-v2's;
    ``norm='bn'``: ``Linear · BatchNorm1d · ReLU · Linear · BatchNorm1d(affine=False)`` (MoCo v3), whose outputs
    are centred over each batch per dimension, so they cannot all point one way (the collapse a plain head
    can fall into on small data: every logit of InfoNCE equal, loss ln(1 + K), no gradient out of it).

    Input [B, in_dim] pooled features, output [B, out_dim] (not normalised; the losses normalise).
    """

    def __init__(self, in_dim: int, hidden: int | None = None, out_dim: int = 128, norm: str = "none") -> None:
        if norm not in HEAD_NORMS:
            raise ValueError(f"head norm must be one of {', '.join(HEAD_NORMS)}, got {norm!r}")
        hidden = in_dim if hidden is None else hidden
        bn = norm == "bn"
        layers: list[nn.Module] = [nn.Linear(in_dim, hidden, bias=not bn)]
        layers += [nn.BatchNorm1d(hidden)] if bn else []
        layers += [nn.ReLU(inplace=True), nn.Linear(hidden, out_dim, bias=not bn)]
        layers += [nn.BatchNorm1d(out_dim, affine=False)] if bn else []
        super().__init__(*layers)
        self.in_dim, self.hidden, self.out_dim, self.norm = in_dim, hidden, out_dim, norm
