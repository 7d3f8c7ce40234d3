"""Issue 59 (4): a rank that dies or stops ends the others with one line, within a bounded time."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest
import torch

from invfast.measure.state import RankLostError, barrier, gather_objects, merge_stats, sum_in_rank_order
from invfast.runtime.launch import Rank, free_port, join_group
from invfast.stats import FeatureStats


def _peer(rank: int, port: int, mode: str, timeout_s: float, out: multiprocessing.Queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    join_group("gloo", timeout_s, rank=rank, world_size=2)
    shard = Rank(rank, 2)
    first = sum_in_rank_order(torch.full((3,), float(rank + 1), dtype=torch.float64), shard)
    if rank == 1:
        if mode == "dies":
            os._exit(3)
        time.sleep(3 * timeout_s + 5)  # stopped: alive, holding its connections, never at the next collective
        os._exit(0)
    t0 = time.monotonic()
    ops = {
        "sum": lambda: sum_in_rank_order(torch.ones(3, dtype=torch.float64), shard),
        "stats": lambda: merge_stats(FeatureStats(), shard),
        "objects": lambda: gather_objects({"a": 1}, shard),
        "barrier": lambda: barrier(shard),
    }
    try:
        ops[os.environ["OP"]]()
        out.put(("no error", first.tolist(), time.monotonic() - t0))
    except RankLostError as e:
        out.put((str(e), first.tolist(), time.monotonic() - t0))
    except Exception as e:  # noqa: BLE001 - reported to the test, which names what came instead
        out.put((f"{type(e).__name__}: {e}", first.tolist(), time.monotonic() - t0))
    out.close()
    out.join_thread()  # the report is on its way before the process ends without running atexit
    os._exit(0)


def _run(mode: str, op: str, timeout_s: float) -> tuple[str, list[float], float]:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    os.environ["OP"] = op
    procs = [ctx.Process(target=_peer, args=(r, port, mode, timeout_s, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        return out.get(timeout=120)
    finally:
        for p in procs:
            p.kill()
            p.join(10)


@pytest.mark.parametrize("op", ["sum", "stats", "objects", "barrier"])
def test_a_dead_rank_ends_the_other_with_one_line(op):
    msg, first, waited = _run("dies", op, timeout_s=600.0)
    assert first == [3.0, 3.0, 3.0]  # the group worked before the peer died
    assert msg.startswith("rank 0 of 2 lost another rank while "), msg
    assert "\n" not in msg and "rerun the same command to resume" in msg, msg
    assert waited < 300  # a closed connection, not the 600 s timeout


def test_a_stopped_rank_ends_the_other_after_the_timeout():
    msg, _, waited = _run("stops", "sum", timeout_s=4.0)
    assert msg.startswith("rank 0 of 2 lost another rank while adding the ranks' sums"), msg
    assert "\n" not in msg
    assert 3.0 <= waited < 100, waited


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_rank_timeout_that_cannot_work_is_refused(bad):
    with pytest.raises(ValueError, match="rank timeout must be a number of seconds > 0"):
        join_group("gloo", bad, rank=0, world_size=1)


@pytest.mark.parametrize("bad", ["0", "-5", "nan"])
def test_the_cli_refuses_a_rank_timeout_that_cannot_work(bad, tmp_path, capsys):
    from invfast.cli import main

    out = tmp_path / "out"
    args = ["measure", "--model", "resnet18-cifar", "--data", "synthetic", "--out", str(out), "--rank-timeout", bad]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("invfast measure: error: --rank-timeout must be a number of seconds > 0") and "\n" not in err
    assert not out.exists()
