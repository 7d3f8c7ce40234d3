"""Issue 59 (2): the measurement hands the allocator's free host memory back every few seconds, and the command
keeps glibc's heaps (arenas) few."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from measure_helpers import Brightness, random_images, small_net

import invfast.measure.engine as engine
from invfast.measure import measure_invariance
from invfast.measure.host_memory import ARENAS, HeapTrim, limit_arenas, malloc_trim


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_trims_at_most_once_per_period():
    clock, calls = _Clock(), []
    h = HeapTrim(5.0, trim=lambda: calls.append(clock.t), clock=clock)
    for dt in (1.0, 3.9, 0.2, 4.0, 0.5, 0.6, 10.0):
        clock.t += dt
        h.maybe()
    assert calls == pytest.approx([105.1, 110.2, 120.2]) and h.calls == 3


def test_no_trim_function_means_nothing_is_done():
    h = HeapTrim(1.0, clock=_Clock())
    h.trim = None
    h.maybe()
    assert h.calls == 0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_a_period_that_cannot_work_is_refused(bad):
    with pytest.raises(ValueError, match="every_s must be > 0 seconds"):
        HeapTrim(bad)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim is Linux's")
def test_glibc_malloc_trim_is_found_and_runs():
    trim = malloc_trim()
    assert trim is not None
    assert trim() in (0, 1)  # 1: memory was released, 0: none could be


def test_a_measurement_trims_during_its_passes(monkeypatch):
    """Every batch's checkpoint asks; with a period of 0+ every batch trims (the statistics pass and the scoring)."""
    made = []

    class Eager(HeapTrim):
        def __init__(self) -> None:
            super().__init__(1e-9, trim=lambda: None, clock=iter(range(10**6)).__next__)
            made.append(self)

    monkeypatch.setattr(engine, "HeapTrim", Eager)
    x = random_images(12, seed=1)
    a = measure_invariance(small_net(dim=6), x, [Brightness()], grid_size=4, batch_size=3)
    assert len(made) == 1 and made[0].calls >= 12 // 3 * 2  # a statistics batch and a scoring group each
    monkeypatch.undo()
    b = measure_invariance(small_net(dim=6), x, [Brightness()], grid_size=4, batch_size=3)
    torch.testing.assert_close(a["brightness"].per_image_cosine, b["brightness"].per_image_cosine, rtol=0, atol=0)


# In a fresh process: cap the heaps (argv[1] == "cap") or not, then 8 threads malloc blocks below the mmap
# threshold at the same time (glibc's malloc itself, whatever allocator Python's objects use); prints glibc's
# own count of its heaps (malloc_info's <heap nr=...> entries).
_HEAPS = r"""
import ctypes, os, sys, tempfile, threading
from invfast.measure.host_memory import limit_arenas
if sys.argv[1] == "cap":
    print("capped", limit_arenas())
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
start = threading.Barrier(8)
def work():
    start.wait()
    keep = [libc.malloc(100_000) for _ in range(50)]
    start.wait()
    for p in keep: libc.free(p)
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
path = tempfile.mktemp()
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes, libc.malloc_info.argtypes = [ctypes.c_char_p, ctypes.c_char_p], [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
fp = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, fp)
libc.fclose(fp)
print("heaps", open(path).read().count("<heap nr="))
os.remove(path)
"""


def _heaps(cap: bool, /, **env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k not in ("MALLOC_ARENA_MAX", "GLIBC_TUNABLES")}
    environ.update(env, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run(
        [sys.executable, "-c", _HEAPS, "cap" if cap else "-"], capture_output=True, text=True, env=environ, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, int(done.stdout.split("heaps")[1])


@pytest.mark.skipif(malloc_trim() is None, reason="needs glibc")
def test_the_cap_keeps_the_heaps_of_eight_threads_at_two():
    out, capped = _heaps(True)
    assert "capped True" in out and capped <= ARENAS == 2, out
    _, uncapped = _heaps(False)  # the control: without the cap the eight threads spread over more heaps
    assert uncapped > ARENAS, uncapped


@pytest.mark.skipif(malloc_trim() is None, reason="needs glibc")
@pytest.mark.parametrize("env", [{"MALLOC_ARENA_MAX": "4"}, {"GLIBC_TUNABLES": "glibc.malloc.arena_max=4"}])
def test_a_heap_count_set_in_the_environment_stands(env):
    out, heaps = _heaps(True, **env)
    assert "capped False" in out and 2 < heaps <= 4, out


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_heap_count_that_cannot_work_is_refused(bad):
    with pytest.raises(ValueError, match="number of heaps must be an integer >= 1"):
        limit_arenas(bad)


def test_the_measure_command_caps_its_heaps_before_it_measures(monkeypatch, tmp_path):
    """One process (and each torchrun rank: run()) and each --world-size process (_local_rank)."""
    import invfast.measure.cli as cli

    calls: list[str] = []
    monkeypatch.setattr(cli, "limit_arenas", lambda: calls.append("cap"))
    monkeypatch.setattr(cli, "check_args", lambda args: None)
    monkeypatch.setattr(cli, "_folder", lambda args: _Lock())

    def measure(args: object) -> int:
        calls.append("measure")
        return 0

    monkeypatch.setattr(cli, "_measure", measure)
    monkeypatch.setattr(cli, "_as_rank", measure)

    class Args:
        world_size = 1

    assert cli.run(Args()) == 0 and calls == ["cap", "measure"]
    calls.clear()
    Args.world_size = 2
    assert cli._local_rank(Args()) == 0 and calls == ["cap", "measure"]


class _Lock:
    def lock(self) -> contextlib.nullcontext:
        return contextlib.nullcontext()
