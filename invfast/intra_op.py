"""How much of torch's intra-op parallelism small work gets (issues 42, 43).

A torch op that forks its thread team waits at the end for every thread. Beside another busy process the OS can
keep one of them off a core for a scheduler slice, so a small op forked over two threads took 5-20x its quiet
time on a loaded 2-core machine (docs/performance.md, *Where the time goes*). The compiled core applies the same
rule to its own loops (``csrc/common/parallel.h``: no team below 2 ms of one-thread work).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["SERIAL_MACS", "serial_if_small", "at_threads"]

#: multiply-adds below which an op runs on one thread: about 2 ms of one float64 CPU thread
SERIAL_MACS = 2e7


@contextlib.contextmanager
def serial_if_small(macs: float, device: torch.device | str = "cpu") -> Iterator[None]:
    """torch at one intra-op thread inside the block where ``macs`` (its multiply-adds) is below
    :data:`SERIAL_MACS` on the CPU; the caller's thread count otherwise and afterwards."""
    if torch.device(device).type != "cpu" or macs >= SERIAL_MACS:
        yield
        return
    with at_threads(1):
        yield


@contextlib.contextmanager
def at_threads(n: int) -> Iterator[None]:
    """torch at ``n`` (>= 1) intra-op threads inside the block, the caller's count afterwards (nothing is set
    where it is ``n`` already, nor while a graph is being compiled: its threads are not set from Python).
    torch's count is the process's, not the calling thread's: the block is for work that the caller runs alone."""
    if torch.compiler.is_compiling() or torch.get_num_threads() == n:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
