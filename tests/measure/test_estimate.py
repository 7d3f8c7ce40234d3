"""The up-front estimate of a CPU measurement (issue 62): views per image from the transforms' own grids, the
timed forward pass, and the line that announces a long run with the --quick alternative."""

from __future__ import annotations

import pytest
import torch

from invfast.measure import estimate
from invfast.measure.estimate import estimate_line, seconds_per_image, views_per_image
from invfast.measure.selection import resolve_transforms


def test_views_per_image_counts_the_statistics_pass_and_every_grid_parameter():
    rot, hue = resolve_transforms("rotation,hue")
    want = 1 + len(rot.grid(8)) + len(hue.grid(8))
    assert views_per_image("rotation,hue", 8) == want
    assert views_per_image("all", 8) > views_per_image("all", 4)


class _Model:
    """A model that costs ``fixed`` seconds per call plus ``per`` per image on a fake clock."""

    def __init__(self, fixed: float, per: float) -> None:
        self.now, self.fixed, self.per, self.calls = 0.0, fixed, per, []

    def clock(self) -> float:
        return self.now

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.append(x.shape[0])
        self.now += self.fixed + self.per * x.shape[0]
        return x.flatten(1)


def test_seconds_per_image_times_the_runs_batch_size():
    m = _Model(fixed=0.08, per=0.001)
    per = seconds_per_image(m, torch.zeros(8, 3, 8, 8), batch=256, clock=m.clock)
    assert m.calls == [8, 8, 16, 32, 64, 128, 256]  # a warm-up, then doubling to the run's batch
    assert per == pytest.approx(0.001 + 0.08 / 256)  # not 0.001 + 0.08 / 8: 3.5x the run's cost
    m = _Model(fixed=0.0, per=0.5)
    per = seconds_per_image(m, torch.zeros(8, 3, 8, 8), batch=256, budget_s=2.0, clock=m.clock)
    assert m.calls == [8, 8] and per == pytest.approx(0.5)  # a slow model: one timed call of 4 s is enough
    m = _Model(fixed=0.0, per=0.1)
    assert seconds_per_image(m, torch.zeros(8, 3, 8, 8), batch=3, clock=m.clock) == pytest.approx(0.1)
    assert m.calls == [3, 3]


def test_seconds_per_image_repeats_the_given_images():
    seen = []
    x = torch.arange(3.0).view(3, 1, 1, 1)
    seconds_per_image(lambda v: seen.append(v.flatten().tolist()), x, batch=6)
    assert seen == [[0, 1, 2], [0, 1, 2], [0, 1, 2, 0, 1, 2]]


@pytest.mark.parametrize("n,batch,budget", [(0, 256, 2.0), (4, 0, 2.0), (4, 256, 0.0)])
def test_seconds_per_image_refuses_bad_input(n, batch, budget):
    with pytest.raises(ValueError, match="no images|batch must be"):
        seconds_per_image(lambda v: v, torch.zeros(n, 3, 8, 8), batch=batch, budget_s=budget)


def test_estimate_line_only_for_long_cpu_runs():
    line = estimate_line(1000, 2000, 0.001, 150, 100)
    assert line is not None and "about 33 min on the CPU" in line
    assert "1000 images x 2000 views at 1.00 ms per view" in line
    assert "--quick would take about 0.2 min" in line  # 100 images x 150 views x 1 ms = 15 s
    assert estimate_line(10, 20, 0.001, 5, 100) is None  # 0.2 s: said by nobody
    assert estimate_line(1000, 2000, 0.001, 150, 100, device="cuda") is None


def test_measure_announces_a_long_run(tmp_path, capsys, monkeypatch):
    from invfast.cli import main

    monkeypatch.setattr(estimate, "LONG_RUN_S", 0.0)  # every run is long
    argv = [
        "measure",
        "--model",
        "resnet18-cifar",
        "--model-arg",
        "width=4",
        "--data",
        "synthetic:n=4",
        "--transforms",
        "rotation",
        "--grid-size",
        "4",
        "--out",
        str(tmp_path / "m"),
        "--no-progress",
        "--no-plots",
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "estimate: about" in err and "4 images x " in err and "--quick would take" in err
    assert main([*argv[:-6], "--quick", "--out", str(tmp_path / "q"), "--no-progress", "--no-plots"]) == 0
    assert "estimate:" not in capsys.readouterr().err  # --quick runs are not announced


def test_unit_moment_bytes_is_a_float64_mean_and_m2_per_view_and_unit():
    from invfast.measure.estimate import unit_moment_bytes, views_per_transform

    # one transform live at a time (the largest grid at worst), plus a copy of one layer's while it is assembled
    assert unit_moment_bytes([3, 5], [10, 2]) == 16 * 5 * (12 + 10)
    rot, hue = resolve_transforms("rotation,hue")
    assert views_per_transform("rotation,hue", 8) == [len(rot.grid(8)), len(hue.grid(8))]
    assert sum(views_per_transform("all", 8)) == views_per_image("all", 8) - 1


def test_moments_line_refuses_more_than_is_free_and_announces_large_ones():
    from invfast.measure.estimate import LARGE_MOMENTS_BYTES, moments_line

    with pytest.raises(ValueError, match=r"about 8\.0 GiB on cpu .* more than the 2\.0 GiB free; choose --units"):
        moments_line(8 << 30, 2 << 30, "cpu", [1000], [10, 20])
    line = moments_line(LARGE_MOMENTS_BYTES, 4 << 30, "cuda:0", [5, 7], [3])
    assert (
        line is not None
        and line.startswith("memory: ")
        and "12 units over 2 layer(s)" in line
        and "4.0 GiB free" in line
    )
    assert moments_line(LARGE_MOMENTS_BYTES - 1, None, "cpu", [1], [1]) is None  # small: said by nobody
    assert moments_line(LARGE_MOMENTS_BYTES, None, "cpu", [1], [1]) is not None  # free memory unknown: still said


def test_free_memory_bytes_reads_the_hosts_available_memory():
    from invfast.measure.estimate import free_memory_bytes

    free = free_memory_bytes(torch.device("cpu"))
    assert free is not None and 0 < free


def test_measure_refuses_per_element_moments_larger_than_free_memory(tmp_path, capsys, monkeypatch):
    """A --units elements run whose [V, U] moments would not fit is refused before any work, with one line (exit
    2) naming the size."""
    from invfast.cli import main

    monkeypatch.setattr(estimate, "free_memory_bytes", lambda device: 1 << 10)  # 1 KiB free
    out = tmp_path / "m"
    argv = ["measure", "--model", "resnet18-cifar", "--model-arg", "width=4", "--data", "synthetic:n=4"]
    argv += ["--transforms", "rotation", "--grid-size", "4", "--units", "elements", "--layers", "layer1"]
    argv += ["--out", str(out), "--no-progress", "--no-plots", "--device", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    # layer1 of a width-4 CIFAR ResNet on 32-px images: 4 channels x 32 x 32 = 4096 units
    assert "4096 units over 1 layer(s)" in err and "more than the 0.0 GiB free" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2
    monkeypatch.setattr(estimate, "free_memory_bytes", lambda device: 1 << 40)
    monkeypatch.setattr(estimate, "LARGE_MOMENTS_BYTES", 1)
    assert main(argv) == 0
    assert "memory: the per-element moments need about" in capsys.readouterr().err
