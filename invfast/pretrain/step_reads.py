"""What the trainer reads back from the device each step -- the loss and the time spent making the views -- read
one step late on a GPU, so the host never waits for the device inside the training loop.

On a CUDA device each step's loss is copied into pinned host memory without blocking and its views are timed by
CUDA events; the host reads them once the *next* step is queued (waiting only for the step before it, while the
GPU has the new one to work on). On the CPU (and any device without events) the values are read at once. A log
record or a checkpoint :meth:`StepReads.drain` s the last pending step first: the one wait per log window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["StepRead", "StepReads"]


@dataclass(frozen=True)
class StepRead:
    """One finished step: its index, loss, and the seconds spent loading and augmenting (``t_aug``) and in all."""

    step: int
    loss: float
    t_aug: float
    t_total: float


@dataclass
class _Pending:
    step: int
    loss: torch.Tensor  # a host scalar in the loss's dtype (pinned on CUDA, filled by a non-blocking copy)
    done: Any  # torch.cuda.Event recorded after the copy, or None
    views: tuple[Any, Any] | None  # CUDA events around the view making, or None
    t_host_aug: float  # host seconds loading (waiting for the batch, moving it), and making the views off CUDA
    t_total: float


class StepReads:
    """The per-step reads of one training run on ``device``; ``lagged`` (default: CUDA) reads one step late.

    Per step: :meth:`views_started` before making the views, :meth:`views_done` after, then :meth:`push` with
    the loss, which returns the reads now complete (this step's, or the one before it when lagged).
    """

    def __init__(self, device: torch.device, lagged: bool | None = None) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.lagged = self.cuda if lagged is None else bool(lagged)
        self._pending: _Pending | None = None
        self._events: tuple[Any, Any] | None = None
        self._t_start = self._t_end = 0.0

    def views_started(self) -> None:
        """Mark the start of the view making (the host time before it counts as loading)."""
        self._t_start = self._t_end = time.perf_counter()
        self._events = (self._event(self.device), None) if self.cuda else None

    def views_done(self) -> None:
        """Mark the end of the view making (on CUDA an event: the device's own time for it)."""
        self._t_end = time.perf_counter()
        if self._events is not None:
            self._events = (self._events[0], self._event(self.device))

    def push(self, step: int, loss: torch.Tensor, t0: float) -> list[StepRead]:
        """Queue step ``step``'s ``loss`` (a 0-d tensor), begun at host time ``t0``; the reads now complete."""
        value = loss.detach().reshape(())
        if self.cuda:
            host = torch.empty((), dtype=value.dtype, pin_memory=True)
            host.copy_(value, non_blocking=True)
            copied = self._event(value.device, timing=False)
            pending = _Pending(step, host, copied, self._events, self._t_start - t0, 0.0)
        else:
            pending = _Pending(step, value, None, None, self._t_end - t0, 0.0)
        self._events = None
        ready = [self._read(self._pending)] if self.lagged and self._pending is not None else []
        pending.t_total = time.perf_counter() - t0  # with the wait for the step before, when lagged
        if not self.lagged:
            return [self._read(pending)]
        self._pending = pending
        return ready

    def drain(self) -> list[StepRead]:
        """The pending step's read, waiting for the device if it is not done (log records, checkpoints, the end)."""
        if self._pending is None:
            return []
        pending, self._pending = self._pending, None
        t = time.perf_counter()
        if pending.done is not None:
            pending.done.synchronize()
        pending.t_total += time.perf_counter() - t  # the wait belongs to the step waited for
        return [self._read(pending)]

    @staticmethod
    def _event(device: torch.device, timing: bool = True) -> Any:
        """An event recorded on ``device``'s current stream (where its work and the copy from it are queued),
        not the current device's, which may be another GPU."""
        event = torch.cuda.Event(enable_timing=timing)
        event.record(torch.cuda.current_stream(device))
        return event

    @staticmethod
    def _read(p: _Pending) -> StepRead:
        if p.done is not None:
            p.done.synchronize()
        t_aug = p.t_host_aug
        if p.views is not None and p.views[1] is not None:
            t_aug += p.views[0].elapsed_time(p.views[1]) / 1e3
        return StepRead(p.step, float(p.loss), t_aug, p.t_total)
