"""The rank runner of the distributed tests turns a hung or failed rank into a failure that says where."""

import time

import pytest
from ranks import run_ranks


def _hangs_on_rank_1(rank: int) -> None:
    if rank == 1:
        time.sleep(600)


def _raises_on_rank_0(rank: int, word: str) -> None:
    if rank == 0:
        raise RuntimeError(f"rank 0 says {word}")


def test_a_hung_rank_is_killed_at_the_deadline_and_its_stack_shown():
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as e:
        run_ranks(_hangs_on_rank_1, 2, deadline_s=20.0)
    assert time.monotonic() - t0 < 60
    msg = str(e.value)
    assert msg.startswith("ranks [1] of 2 still running after 20 s"), msg
    assert "_hangs_on_rank_1" in msg  # the hung rank's own stack, written before it was killed


def test_a_rank_that_raises_fails_the_test_with_its_traceback():
    with pytest.raises(pytest.fail.Exception) as e:
        run_ranks(_raises_on_rank_0, 2, ("hello",), deadline_s=60.0)
    msg = str(e.value)
    assert msg.startswith("rank 0 of 2 exited with 1:") and "RuntimeError: rank 0 says hello" in msg, msg


def test_ranks_that_finish_pass():
    run_ranks(_hangs_on_rank_1, 1)  # rank 0 alone returns at once
