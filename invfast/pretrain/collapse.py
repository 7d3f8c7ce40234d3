"""Whether a contrastive model's projection head collapsed: its outputs on held-out images all pointing one way.

InfoNCE compares normalised head outputs; when every image's output points the same way, every logit is equal,
the loss sits at ln(1 + K) (K negatives) and no gradient leads out of that state. The encoder's own collapse
indicators (effective rank, kNN) need not show it: a head can collapse over an encoder whose features still
spread (issue 57: seed 105's Default, head cosine 1.000 over an encoder of effective rank 32).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["head_collapse", "output_collapse"]


def output_collapse(z: torch.Tensor) -> dict[str, float]:
    """For outputs ``z`` [N, D] (N >= 2): ``cos``, the mean cosine between the outputs of two different images
    (about 0 for outputs spread over the sphere, 1 when all point one way), and ``mean_share``, |mean z|² over the
    mean |z|² (the part of the outputs that is one vector common to all images)."""
    if z.dim() != 2 or z.shape[0] < 2:
        raise ValueError(f"outputs must be [N >= 2, D], got {tuple(z.shape)}")
    z = z.double()
    n = z.shape[0]
    zn = torch.nn.functional.normalize(z, dim=1)
    total = zn.sum(0)
    cos = (total.dot(total) - zn.square().sum()) / (n * (n - 1))  # sum over pairs i != j of zn_i . zn_j
    share = z.mean(0).square().sum() / z.square().sum(1).mean().clamp_min(1e-300)
    return {"cos": float(cos), "mean_share": float(share)}


@torch.no_grad()
def head_collapse(method: Any, images: torch.Tensor, size: int, d: int = 0, batch: int = 256) -> dict[str, float]:
    """:func:`output_collapse` of a contrastive ``method``'s online network (encoder and head of descriptor ``d``)
    on ``images`` (uint8 or 0..1 [N, 3, H, W], resized to ``size`` and ImageNet-normalised as the held-out probe
    feeds them), in eval mode (the method's mode is restored)."""
    from invfast.pretrain.invariance import to_input

    online = method.online
    device = next(online.parameters()).device
    was = online.training
    online.eval()
    try:
        z = torch.cat(
            [online(to_input(images[s : s + batch].to(device), size), d) for s in range(0, len(images), batch)]
        )
    finally:
        online.train(was)
    return output_collapse(z)
