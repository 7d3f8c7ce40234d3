"""Run a function as the ranks of a process group, each in a fresh (spawned) process, with a deadline.

``mp.spawn(..., join=True)`` waits forever for a rank that hangs (one did in a CI run, eating its whole budget
with no output). Here a rank still running at the deadline is killed and the test fails naming it, with the
stacks of every thread of every rank still running, written by the rank itself shortly before the deadline.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest

#: seconds the ranks of a test get in all before they are killed and the test fails
DEADLINE_S = 300.0


def _entry(target: Callable[..., None], rank: int, args: tuple[Any, ...], report: str, dump_after_s: float) -> None:
    with open(report, "w") as f:
        faulthandler.dump_traceback_later(dump_after_s, exit=False, file=f)
        try:
            target(rank, *args)
        except BaseException:
            faulthandler.cancel_dump_traceback_later()
            f.write(traceback.format_exc())
            f.flush()
            os._exit(1)
        faulthandler.cancel_dump_traceback_later()


def run_ranks(target: Callable[..., None], world: int, args: tuple[Any, ...] = (), deadline_s: float = DEADLINE_S):
    """Call ``target(rank, *args)`` for rank 0..world-1, each in its own spawned process; fail the test when a
    rank raises, dies, or is still running ``deadline_s`` seconds after the start."""
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        reports = [os.path.join(tmp, f"rank{r}.txt") for r in range(world)]
        dump_after = max(deadline_s - 15.0, deadline_s / 2)
        procs = [
            ctx.Process(target=_entry, args=(target, r, args, reports[r], dump_after))  # may start workers
            for r in range(world)
        ]
        for p in procs:
            p.start()
        end = time.monotonic() + deadline_s
        for p in procs:
            p.join(max(0.0, end - time.monotonic()))
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)

        def said(r: int) -> str:
            with open(reports[r]) as f:
                return f.read().strip() or "(nothing)"

        if hung:
            pytest.fail(
                f"ranks {hung} of {world} still running after {deadline_s:.0f} s; their stacks:\n"
                + "\n".join(f"--- rank {r} ---\n{said(r)}" for r in hung)
            )
        failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
        if failed:
            pytest.fail("\n".join(f"rank {r} of {world} exited with {procs[r].exitcode}:\n{said(r)}" for r in failed))
