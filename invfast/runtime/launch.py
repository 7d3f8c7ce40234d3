"""Running a command on several ranks: where this process sits among them (:class:`Rank`, :func:`current_rank`;
measurement shards its images by it, pretraining splits its batch by it), whether torchrun started this process
(:func:`under_torchrun`), joining the process group with a timeout (:func:`join_group`), and spawning local
worker processes (gloo on localhost).

Workers never outlive their launcher: on Linux each worker asks the kernel for SIGKILL when its
parent dies (``prctl(PR_SET_PDEATHSIG)``, which also covers a launcher killed with SIGKILL), and
the launcher turns SIGTERM/SIGHUP/SIGINT into stopping every worker before it exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "RANK_TIMEOUT_S",
    "Rank",
    "current_rank",
    "under_torchrun",
    "free_port",
    "join_group",
    "group_backend",
    "die_with_parent",
    "spawn_local",
]

_PR_SET_PDEATHSIG = 1
#: seconds a rank waits at a collective for the others before it gives up (torch's own default for gloo)
RANK_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Rank:
    """Process ``rank`` of ``world_size`` in the job, ``local_rank`` on its node (its GPU)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the job's files."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def bounds(self, n: int) -> tuple[int, int]:
        """This rank's contiguous block ``[start, stop)`` of ``n`` items (the blocks of all ranks tile ``0..n``)."""
        return n * self.rank // self.world_size, n * (self.rank + 1) // self.world_size


def current_rank() -> Rank:
    """This process's place in the initialised default process group (``LOCAL_RANK`` from the environment,
    else its rank); rank 0 of 1 without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
        return Rank(rank, dist.get_world_size(), int(os.environ.get("LOCAL_RANK", rank)))
    return Rank()


def under_torchrun(env: Mapping[str, str] | None = None) -> bool:
    """Whether this process was started by torchrun (or a launcher like it): ``RANK`` and ``WORLD_SIZE`` set, and
    more than one process or ``LOCAL_RANK`` set too (torchrun sets it even for one process). ``env``: the
    environment (default ``os.environ``)."""
    env = os.environ if env is None else env
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return False
    return int(env["WORLD_SIZE"]) > 1 or "LOCAL_RANK" in env


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def join_group(backend: str, timeout_s: float = RANK_TIMEOUT_S, **kwargs: Any) -> None:
    """``torch.distributed.init_process_group(backend, ...)`` with an explicit timeout: a rank that waits longer
    than ``timeout_s`` seconds at a collective for a peer that stopped (or never came) raises instead of hanging.
    A peer that dies closes its connections, which ends the others at once whatever the timeout."""
    import datetime

    import torch.distributed as dist

    if not timeout_s > 0:
        raise ValueError(f"the rank timeout must be a number of seconds > 0, got {timeout_s}")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)


def group_backend(device: Any) -> str:
    """The process-group backend for ranks on ``device`` (a torch.device): NCCL on CUDA when each local rank
    has its own GPU (``LOCAL_WORLD_SIZE`` at most the GPU count; NCCL refuses two ranks on one GPU), gloo
    otherwise."""
    if getattr(device, "type", None) != "cuda":
        return "gloo"
    import torch

    return "nccl" if torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1) else "gloo"


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux); exit now if it already has."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _child(rank: int, worker: Callable[[Any], Any], parent_pid: int, nprocs: int, port: int, args: Any) -> None:
    import torch.distributed as dist

    from invfast._messages import one_line_warnings

    die_with_parent(parent_pid)
    os.environ.update(  # what torchrun gives each of its processes: the worker joins the group as under torchrun
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(nprocs),
        LOCAL_WORLD_SIZE=str(nprocs),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    try:
        # every rank runs the same command on the same configuration: rank 0 says each warning once, in one line
        with one_line_warnings(show=rank == 0):
            worker(args)
    finally:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop(signum)


def spawn_local(worker: Callable[[Any], Any], nprocs: int, args: Any, prog: str) -> int:
    """Run ``worker(args)`` in ``nprocs`` processes on this machine, each with the environment torchrun would
    give it (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT`` of a free local port), so
    the worker joins its group as it would under torchrun (:func:`under_torchrun` is true there); a group it
    joined is left when it returns. 0 on success, 2 (with the worker's last error line on stderr) when one of
    them raised, 1 when one died (signal, crash).

    A signal to the launcher (SIGTERM, SIGHUP, SIGINT) stops every worker, and the launcher then
    exits with 128 + the signal number; a SIGKILLed launcher takes its workers with it (Linux).
    """
    import torch.multiprocessing as mp

    port = free_port()
    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    import threading

    main_thread = threading.current_thread() is threading.main_thread()  # signal handlers live there only
    old = {s: signal.signal(s, _raise_stop) for s in handled} if main_thread else {}
    ctx = None
    try:
        ctx = mp.start_processes(
            _child, args=(worker, os.getpid(), nprocs, port, args), nprocs=nprocs, join=False, start_method="spawn"
        )
        while not ctx.join():
            pass
    except mp.ProcessRaisedException as e:
        last = str(e).strip().splitlines()[-1]
        print(f"{prog}: error in a worker process: {last}", file=sys.stderr)
        return 2
    except mp.ProcessExitedException as e:
        print(f"{prog}: a worker process died ({e}); the run was stopped", file=sys.stderr)
        return 1
    except _Stop as e:
        print(f"{prog}: stopped by {e}; the workers were stopped too", file=sys.stderr)
        return 128 + e.signum
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if ctx is not None:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            for p in ctx.processes:
                p.join(10)
    return 0
