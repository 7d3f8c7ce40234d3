"""Host memory that the C allocator keeps after it is freed, handed back to the system now and then.

A measurement frees and allocates the same tensors batch after batch (model activations, views, decoded
images). glibc keeps freed heap memory for reuse, per thread arena, and from the first large free on it
raises its own thresholds so that more of that memory stays: the process's resident memory grows with the
number of images although its live tensors do not. ``malloc_trim(0)`` returns the free pages; called every few
seconds it keeps resident memory flat (issue 59.2; a 64-d conv net at 32 px on 32 000 in-memory images, 2
transforms at grid 8, 2 cores, nothing else running; RSS every 3 s from 401 MiB at the start: without it rising
for a minute to 984 MiB, with it at most 565 MiB and flat after 20 s; the run's time within 3 %: 69.0 -> 71.3
s). Fixing the mmap threshold instead (``MALLOC_MMAP_THRESHOLD_``) kept it low too but made the run 45 % slower.

What the trim cannot hand back is memory fragmented across glibc's heaps (arenas: each new thread that allocates
gets its own, up to 8 per core). ``invfast measure`` caps them at
:data:`ARENAS` for its process (:func:`limit_arenas`): with elements units on four layers, from 5 000 to 50 000
images the peak grew +10.9 % uncapped (3 runs each) and +0.6 % / +3.6 % capped at 2 (two settings, one run each, 2
cores), in about the same time (docs/measure.md, Scale).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Callable
from typing import Any

__all__ = ["ARENAS", "TRIM_EVERY_S", "HeapTrim", "limit_arenas", "malloc_trim"]

#: seconds between two hand-backs of the allocator's free memory during a measurement
TRIM_EVERY_S = 5.0

#: glibc heaps (arenas) a measurement command's process may use; measured on 2 cores (see the module docstring)
ARENAS = 2

_M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)


def limit_arenas(n: int = ARENAS) -> bool:
    """Cap glibc's number of heaps (arenas) at ``n`` for the rest of the process (``mallopt(M_ARENA_MAX, n)``):
    threads that allocate later share them instead of each fragmenting its own. Call it before the threads
    start: heaps that exist already stay. Left alone where the environment chooses (``MALLOC_ARENA_MAX``, or
    ``glibc.malloc.arena_max`` in ``GLIBC_TUNABLES``) and where there is no glibc. True where the cap was set."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the number of heaps must be an integer >= 1, got {n!r}")
    if "MALLOC_ARENA_MAX" in os.environ or "malloc.arena_max" in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    fn = _glibc("mallopt", [ctypes.c_int, ctypes.c_int])
    return fn is not None and fn(_M_ARENA_MAX, n) == 1


def _glibc(name: str, argtypes: list[Any]) -> Any:
    """The C library's function ``name`` returning an int, typed with ``argtypes``; None where there is none
    (not Linux, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return fn


def malloc_trim() -> Callable[[], object] | None:
    """glibc's ``malloc_trim(0)`` as a function of no arguments; None where there is none (not Linux, musl)."""
    fn = _glibc("malloc_trim", [ctypes.c_size_t])
    return None if fn is None else lambda: fn(0)


class HeapTrim:
    """Calls ``trim`` (default :func:`malloc_trim`) from :meth:`maybe` at most once every ``every_s`` seconds of
    ``clock``; does nothing where there is no such function."""

    def __init__(
        self,
        every_s: float = TRIM_EVERY_S,
        trim: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not every_s > 0:
            raise ValueError(f"every_s must be > 0 seconds, got {every_s}")
        self.every_s, self.clock = float(every_s), clock
        self.trim = malloc_trim() if trim is None else trim
        self.last = clock()
        self.calls = 0

    def maybe(self) -> None:
        """Hand the free memory back if ``every_s`` seconds passed since the last time (or the start)."""
        if self.trim is None:
            return
        now = self.clock()
        if now - self.last >= self.every_s:
            self.trim()
            self.last, self.calls = now, self.calls + 1
