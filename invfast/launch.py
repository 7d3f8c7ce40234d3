"""Spawning local worker processes for the commands that run on several ranks (gloo on localhost)."""
from __future__ import annotations

import argparse
import socket
import sys
from typing import Callable


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_local(worker: Callable[..., None], nprocs: int, args: argparse.Namespace, prog: str) -> int:
    """Run ``worker(rank, nprocs, port, args)`` in ``nprocs`` processes; 0 on success, 2 (with the
    worker's last error line on stderr) when one of them raised."""
    import torch.multiprocessing as mp

    port = free_port()
    try:
        mp.spawn(worker, args=(nprocs, port, args), nprocs=nprocs, join=True)
    except mp.ProcessRaisedException as e:
        last = str(e).strip().splitlines()[-1]
        print(f"{prog}: error in a worker process: {last}", file=sys.stderr)
        return 2
    return 0
