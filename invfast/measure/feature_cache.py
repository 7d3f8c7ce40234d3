"""Per-batch tensors a measurement keeps for every transform (the reference features and their whitened rows),
held in one preallocated block per name instead of one small tensor per batch.

Thousands of small long-lived tensors, each allocated between a batch's large temporaries, pin the heap pages
around them so the allocator cannot return those pages: at 50 000 images (4 layers, 0.9 KiB per image, 46 MiB
kept) the process grew by ~150 MiB over the first transform, and by nothing with the cache off (docs/measure.md,
*Scale*). One block per name, sized once, is one allocation that no temporary sits beside.
"""

from __future__ import annotations

import torch

__all__ = ["FeatureCache"]


class FeatureCache:
    """Rows of tensors kept by (batch start, name), up to a byte budget.

    Args:
        budget_bytes: the most the blocks may hold in all.
        rows: how many rows (images) the run can put under one name at most (its images on this rank).

    Each name's block ``[capacity, *row_shape]`` is allocated at its first :meth:`put`, on that tensor's device
    and dtype, with as many rows as the budget left over allows (at most ``rows``); a batch that does not fit
    is not kept (the caller recomputes it). :meth:`get` returns a view of the block.
    """

    def __init__(self, budget_bytes: int, rows: int) -> None:
        if budget_bytes < 0 or rows < 0:
            raise ValueError(f"budget_bytes and rows must be >= 0, got {budget_bytes} and {rows}")
        self.budget, self.rows = int(budget_bytes), int(rows)
        self.blocks: dict[str, torch.Tensor] = {}
        self.used: dict[str, int] = {}  # rows filled in each block
        self.where: dict[tuple[int, str], tuple[int, int]] = {}  # (start, name) -> (first row, rows)

    @property
    def reserved_bytes(self) -> int:
        """Bytes of the blocks allocated so far."""
        return sum(b.numel() * b.element_size() for b in self.blocks.values())

    def get(self, start: int, name: str, rows: int) -> torch.Tensor | None:
        """The ``rows`` rows kept for ``(start, name)`` (a view), or None when none or another count is kept."""
        at = self.where.get((start, name))
        if at is None or at[1] != rows:
            return None
        return self.blocks[name][at[0] : at[0] + rows]

    def put(self, start: int, name: str, t: torch.Tensor) -> bool:
        """Keep a copy of ``t`` (``[b, ...]``) for ``(start, name)`` if its block has room; whether it was kept."""
        if (start, name) in self.where:
            raise ValueError(f"rows for batch {start} of {name!r} are kept already")
        block = self.blocks.get(name)
        if block is None:
            if t.shape[0] == 0:  # nothing to keep, and no block sized from an empty batch
                return False
            row_bytes = max(1, t[0].numel() * t.element_size())
            capacity = min(self.rows, (self.budget - self.reserved_bytes) // row_bytes)
            if capacity < t.shape[0] or capacity <= 0:
                return False
            block = torch.empty((capacity, *t.shape[1:]), dtype=t.dtype, device=t.device)
            self.blocks[name], self.used[name] = block, 0
        if block.shape[1:] != t.shape[1:] or block.dtype != t.dtype or block.device != t.device:
            raise ValueError(
                f"rows of {name!r} must be {tuple(block.shape[1:])} {block.dtype} on {block.device}, got "
                f"{tuple(t.shape[1:])} {t.dtype} on {t.device}"
            )
        first, b = self.used[name], t.shape[0]
        if first + b > block.shape[0]:
            return False
        block[first : first + b].copy_(t)
        self.used[name] = first + b
        self.where[(start, name)] = (first, b)
        return True

    def clear(self) -> None:
        """Drop every block."""
        self.blocks.clear()
        self.used.clear()
        self.where.clear()
