"""The MoCo dictionary: a FIFO queue of L2-normalised keys, one per invariance descriptor."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class KeyQueue(nn.Module):
    """``n_queues`` ring buffers of ``size`` keys of dimension ``dim``.

    ``enqueue(keys, which)`` overwrites the oldest ``len(keys)`` entries of queue ``which``; the
    number of keys enqueued at once must divide ``size`` (as in MoCo), so a queue always holds
    exactly the last ``size`` keys it was given once it has been filled. Before that it holds
    random unit vectors drawn from ``generator`` (MoCo's initialisation). State (keys and write
    pointers) is in buffers, so it is saved with the model's ``state_dict``.
    """

    keys: torch.Tensor  # [n_queues, size, dim] buffer
    ptr: torch.Tensor  # [n_queues] long buffer: the next row to overwrite in each queue

    def __init__(self, size: int, dim: int, n_queues: int = 1, generator: torch.Generator | None = None) -> None:
        super().__init__()
        if size < 1 or dim < 1 or n_queues < 1:
            raise ValueError(f"queue size, dim and n_queues must be >= 1, got {size}, {dim}, {n_queues}")
        self.size, self.dim, self.n_queues = int(size), int(dim), int(n_queues)
        dev = generator.device if generator is not None else torch.device("cpu")
        init = torch.randn(
            n_queues, size, dim, generator=generator, device=dev
        ).cpu()  # built on the CPU; .to() moves it
        self.register_buffer("keys", F.normalize(init, dim=2))
        self.register_buffer("ptr", torch.zeros(n_queues, dtype=torch.long, device="cpu"))

    def get(self, which: int = 0) -> torch.Tensor:
        """The keys of queue ``which`` ``[size, dim]`` (a view; clone before enqueueing if you keep it)."""
        return self.keys[which]

    @torch.no_grad()
    def enqueue(self, keys: torch.Tensor, which: int = 0) -> None:
        """Replace the oldest ``len(keys)`` entries of queue ``which`` with ``keys [n, dim]`` (normalised here)."""
        n = keys.shape[0]
        if keys.dim() != 2 or keys.shape[1] != self.dim:
            raise ValueError(f"keys must be [n, {self.dim}], got shape {tuple(keys.shape)}")
        if self.size % n != 0:
            raise ValueError(
                f"the queue size ({self.size}) must be divisible by the number of keys enqueued per step "
                f"({n} = global batch size); choose a queue size that is a multiple of {n}"
            )
        # the write position stays on the device (no host read per step); size % n == 0 and the pointer
        # is a multiple of n, so the n rows from the pointer never wrap around
        ptr = self.ptr[which]
        rows = ptr + torch.arange(n, device=self.keys.device)
        self.keys[which].index_copy_(0, rows, F.normalize(keys.detach().to(self.keys.dtype), dim=1))
        self.ptr[which] = (ptr + n) % self.size

    def extra_repr(self) -> str:
        return f"size={self.size}, dim={self.dim}, n_queues={self.n_queues}"


def default_queue_size(n_images: int, global_batch: int, cap: int = 65536) -> int:
    """MoCo-v2's 65 536 keys scaled down to the data: the largest multiple of ``global_batch`` that is
    at most ``min(cap, n_images / 8)``, and at least one batch. Raises when the data has fewer than
    two batches.

    MoCo-v2's queue holds 5 % of ImageNet. A queue holding a fraction f of a small data set meets a
    query's own image among the negatives (its key from one epoch before: another view of the same
    image) for about f²/2 of the queries: half of them for a queue of all but one batch, about 1 % at
    an eighth. On ``invfast reproduce --quick`` (2048 images, batch 64) a queue of 1984 kept Default
    MoCo at chance (loss 7.5 = ln 1984) and below Random's identity accuracy; 256 learned it
    (docs/reproduce.md)."""
    if global_batch < 1:
        raise ValueError(f"batch size must be >= 1, got {global_batch}")
    if n_images < 2 * global_batch:
        raise ValueError(
            f"a MoCo queue needs at least two batches of data: {n_images} images with global batch "
            f"{global_batch}; lower the batch size or give a queue size explicitly"
        )
    limit = min(cap, n_images // 8)
    return max(1, limit // global_batch) * global_batch
