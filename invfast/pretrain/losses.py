"""Contrastive losses as pure functions: InfoNCE with a queue of negatives (MoCo) and NT-Xent
with in-batch negatives (SimCLR). All embeddings are L2-normalised inside; ``tau`` is the
softmax temperature. Results are the mean cross-entropy over anchors (a scalar tensor)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check_tau(tau: float) -> None:
    if not (isinstance(tau, (int, float)) and tau > 0):
        raise ValueError(f"tau (temperature) must be a number > 0, got {tau!r}")


def _check_2d(x: torch.Tensor, name: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"{name} must be [N, D], got shape {tuple(x.shape)}")


def infonce(q: torch.Tensor, k: torch.Tensor, queue: torch.Tensor | None, tau: float = 0.2) -> torch.Tensor:
    """MoCo InfoNCE: each query's positive is its own key, its negatives are the queue.

    Args:
        q: [B, D] queries (online encoder + head).
        k: [B, D] positive keys (momentum encoder; pass them detached for MoCo).
        queue: [K, D] negative keys, or None / [0, D] for no negatives.
        tau: temperature.

    Returns:
        ``mean_b −log( exp(q̂_b·k̂_b/τ) / (exp(q̂_b·k̂_b/τ) + Σ_j exp(q̂_b·n̂_j/τ)) )`` with hats for L2-normalised rows.
    """
    _check_2d(q, "q")
    _check_2d(k, "k")
    _check_tau(tau)
    if q.shape != k.shape:
        raise ValueError(f"q and k must have the same shape, got {tuple(q.shape)} and {tuple(k.shape)}")
    qn, kn = F.normalize(q, dim=1), F.normalize(k, dim=1)
    pos = (qn * kn).sum(1, keepdim=True)
    if queue is None or queue.shape[0] == 0:
        logits = pos
    else:
        _check_2d(queue, "queue")
        if queue.shape[1] != q.shape[1]:
            raise ValueError(f"queue has D={queue.shape[1]} but q has D={q.shape[1]}")
        neg = qn @ F.normalize(queue.to(qn.dtype), dim=1).T
        logits = torch.cat([pos, neg], dim=1)
    labels = torch.zeros(q.shape[0], dtype=torch.long, device=q.device)
    return F.cross_entropy(logits / tau, labels)


def contrastive_rows(
    anchors: torch.Tensor, candidates: torch.Tensor, positive: torch.Tensor, self_index: torch.Tensor | None, tau: float
) -> torch.Tensor:
    """Mean cross-entropy of ``anchors [A, D]`` against ``candidates [C, D]``.

    Row ``a``'s target is ``candidates[positive[a]]``; ``candidates[self_index[a]]`` (the anchor
    itself) is excluded from the softmax. The building block of :func:`nt_xent` and its
    multi-process form, where the candidates are gathered from every rank.
    """
    _check_tau(tau)
    an, cn = F.normalize(anchors, dim=1), F.normalize(candidates, dim=1)
    logits = an @ cn.T / tau
    if self_index is not None:
        logits = logits.scatter(1, self_index.view(-1, 1), float("-inf"))
    return F.cross_entropy(logits, positive)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, tau: float = 0.2) -> torch.Tensor:
    """SimCLR NT-Xent over a batch of view pairs with in-batch negatives.

    Args:
        z1, z2: [B, D] projections of the two views of the same B images.
        tau: temperature.

    Returns:
        Mean over the 2B anchors of ``−log( exp(ẑ_a·ẑ_p/τ) / Σ_{c≠a} exp(ẑ_a·ẑ_c/τ) )`` where ``p`` is
        the other view of the same image and ``c`` runs over all 2B projections except ``a``.
    """
    _check_2d(z1, "z1")
    _check_2d(z2, "z2")
    if z1.shape != z2.shape:
        raise ValueError(f"z1 and z2 must have the same shape, got {tuple(z1.shape)} and {tuple(z2.shape)}")
    b = z1.shape[0]
    if b < 1:
        raise ValueError("nt_xent needs at least one pair")
    z = torch.cat([z1, z2], dim=0)
    idx = torch.arange(2 * b, device=z.device)
    positive = (idx + b) % (2 * b)
    return contrastive_rows(z, z, positive, idx, tau)
