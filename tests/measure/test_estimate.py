"""The up-front estimate of a CPU measurement (issue 62): views per image from the transforms' own grids, the
timed forward pass, and the line that announces a long run with the --quick alternative."""

from __future__ import annotations

import time

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


def test_seconds_per_image_times_a_warm_call():
    calls = []

    def slow(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[0])
        time.sleep(0.02)
        return x.flatten(1)

    per = seconds_per_image(slow, torch.zeros(4, 3, 8, 8))
    assert calls == [4, 4, 4] and 0.005 <= per < 0.05  # 20 ms over 4 images, plus scheduling
    with pytest.raises(ValueError, match="no images"):
        seconds_per_image(slow, torch.zeros(0, 3, 8, 8))


def test_estimate_line_only_for_long_cpu_runs():
    line = estimate_line(1000, 2000, 0.001, 150, 100)
    assert line is not None and "about 33 min on the CPU" in line and "1000 images x 2000 views at 1.0 ms" in line
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
