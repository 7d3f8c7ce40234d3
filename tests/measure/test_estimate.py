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
