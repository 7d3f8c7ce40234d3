"""The invfast command's error contract: only input problems are usage errors (exit 2, one line); failures of
the run exit 1 in one line; bugs keep their traceback; interrupts exit 130; warnings are one line, once."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import invfast.measure.cli as measure_cli
from invfast.cli import exit_code, is_usage_error, main

pytestmark = pytest.mark.usefixtures("cli_env")
MEASURE = ["measure", "--model", "measure_helpers:small_net", "--data", "synthetic:n=4", "--out"]


def test_invfast_input_check_is_a_usage_error(tmp_path, capsys):
    assert main(MEASURE + [str(tmp_path / "o"), "--grid-size", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["invfast measure: error: --grid-size must be >= 1, got 0"]


def test_an_invariance_descriptor_for_a_users_factory_is_refused(tmp_path, capsys):
    """--invariance reaches only invfast's amortised models; a module:factory model would ignore it."""
    assert main(MEASURE + [str(tmp_path / "o"), "--invariance", "1,0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--invariance is for invfast's amortised models" in err[0]


def test_demo_usage_error_exits_2(capsys):
    assert main(["demo", "--images", "1"]) == 2
    assert "--images and --reference must be at least 2" in capsys.readouterr().err


@pytest.mark.parametrize(
    "make",
    [
        lambda: {}["missing"],  # KeyError: a bug, not a usage error
        lambda: None + 1,  # TypeError
        lambda: [][3],  # IndexError
        lambda: np.ones(3).reshape(2),  # ValueError raised outside invfast's checks
        lambda: torch.nn.functional.interpolate(torch.zeros(1, 1, 2, 2), size=2, scale_factor=2.0),
    ],
    ids=["KeyError", "TypeError", "IndexError", "numpy-ValueError", "torch-ValueError"],
)
def test_bugs_keep_their_traceback_and_exit_1(monkeypatch, tmp_path, capsys, make):
    monkeypatch.setattr(measure_cli, "run", lambda args: make())
    assert main(MEASURE + [str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "internal error" in err


def test_run_failure_is_one_line_exit_1(monkeypatch, tmp_path, capsys):
    def fail(args):
        raise RuntimeError("the covariance exploded")

    monkeypatch.setattr(measure_cli, "run", fail)
    assert main(MEASURE + [str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().endswith("(--debug shows the traceback)")


def test_interrupt_exits_130(monkeypatch, tmp_path, capsys):
    def stop(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(measure_cli, "run", stop)
    assert main(MEASURE + [str(tmp_path / "o")]) == 130
    assert exit_code(KeyboardInterrupt()) == 130


def test_missing_file_is_usage_error_wherever_raised():
    try:
        open("/nonexistent/definitely/not/here")
    except FileNotFoundError as e:
        assert is_usage_error(e)


def test_warnings_are_one_line_each_once(monkeypatch, tmp_path, capsys):
    def warn_twice(args):
        for _ in range(2):
            warnings.warn("N=3 reference samples for D=8 features", RuntimeWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(measure_cli, "run", warn_twice)
    assert main(MEASURE + [str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["invfast: warning: N=3 reference samples for D=8 features"]


def test_bench_repeat_zero_is_refused(capsys):
    assert main(["bench", "--repeat", "0"]) == 2
    assert "--repeat must be >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["measure", "pretrain", "probe", "reproduce", "generate", "demo"])
def test_every_command_with_a_progress_bar_takes_no_progress(command, capsys):
    """The option means the same everywhere (probe rejected it with the top-level usage)."""
    from invfast.cli import main

    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0 and "--no-progress" in capsys.readouterr().out
