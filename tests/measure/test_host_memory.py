"""Issue 59 (2): the measurement hands the allocator's free host memory back every few seconds."""

from __future__ import annotations

import sys

import pytest
import torch
from measure_helpers import Brightness, random_images, small_net

import invfast.measure.engine as engine
from invfast.measure import measure_invariance
from invfast.measure.host_memory import HeapTrim, malloc_trim


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
