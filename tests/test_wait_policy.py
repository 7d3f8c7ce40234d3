"""The OpenMP wait policy of ``invfast measure`` (invfast/wait_policy.py): passive for that command, untouched for
the other commands, for ``import invfast`` and whenever the user chose one. Checked in fresh processes against
what libgomp itself reports (``OMP_DISPLAY_ENV=VERBOSE`` prints its settings when torch loads it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from invfast import wait_policy


@pytest.mark.parametrize(
    "argv",
    [
        ["/usr/local/bin/invfast", "measure", "--model", "resnet18"],
        ["invfast", "--debug", "measure"],
        ["C:\\venv\\Scripts\\invfast.exe", "measure"],
        ["-m", "measure", "--help"],
        ["./invfast", "measure"],
    ],
)
def test_invfast_measure_gets_the_passive_policy(argv):
    assert wait_policy.cli_policy(argv, {}, torch_loaded=False) == "PASSIVE"


@pytest.mark.parametrize(
    "argv",
    [
        ["invfast", "pretrain", "--method", "moco"],  # many small ops: slower quiet with sleeping threads
        ["invfast", "reproduce"],
        ["invfast", "info"],
        ["invfast"],
        ["-m"],
        ["invfast", "--debug"],
    ],
)
def test_the_other_commands_keep_the_runtime_default(argv):
    assert wait_policy.cli_policy(argv, {}, torch_loaded=False) is None


@pytest.mark.parametrize(
    "argv",
    [["/venv/bin/pytest", "measure"], ["-c", "measure"], ["train.py", "measure"], [""], [], ["invfasta", "measure"]],
)
def test_a_users_program_keeps_the_runtime_default(argv):
    assert wait_policy.cli_policy(argv, {}, torch_loaded=False) is None


@pytest.mark.parametrize("env", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": ""}, {"GOMP_SPINCOUNT": "300000"}])
def test_a_users_choice_is_never_overridden(env):
    assert wait_policy.cli_policy(["invfast", "measure"], env, torch_loaded=False) is None


def test_too_late_once_torch_is_loaded():
    assert wait_policy.cli_policy(["invfast", "measure"], {}, torch_loaded=True) is None


def _runtime_settings(args: list[str], **env: str) -> tuple[dict[str, str], str]:
    """libgomp's settings as it printed them in a fresh process running ``python args``, and its stdout."""
    environ = {k: v for k, v in os.environ.items() if k not in wait_policy.USER_KEYS}
    environ.update(env, OMP_DISPLAY_ENV="VERBOSE")
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=environ, timeout=300)
    assert out.returncode == 0, out.stderr
    settings = dict(re.findall(r"^\s+(\w+) = '([^']*)'", out.stderr, flags=re.M))
    if "GOMP_SPINCOUNT" not in settings:
        pytest.skip("torch's OpenMP runtime is not libgomp (no GOMP_SPINCOUNT in OMP_DISPLAY_ENV)")
    return settings, out.stdout


def test_invfast_measure_runs_torch_with_threads_that_sleep():
    settings, stdout = _runtime_settings(["-m", "invfast", "measure", "--help"])
    assert settings["GOMP_SPINCOUNT"] == "0"  # libgomp's PASSIVE: no polling before a thread sleeps
    assert "usage:" in stdout


def test_other_commands_and_import_invfast_leave_the_runtime_default():
    settings, stdout = _runtime_settings(["-m", "invfast", "info"])
    assert settings["GOMP_SPINCOUNT"] == "300000"  # libgomp's own default
    assert re.search(
        r"^openmp_wait_policy\s+the OpenMP runtime's default .* invfast measure sets PASSIVE", stdout, re.M
    )
    settings, stdout = _runtime_settings(["-c", "import os, invfast, torch; print(os.environ.get('OMP_WAIT_POLICY'))"])
    assert settings["GOMP_SPINCOUNT"] == "300000"
    assert stdout.strip() == "None"


def test_the_users_policy_reaches_the_command_unchanged():
    settings, _ = _runtime_settings(["-m", "invfast", "measure", "--help"], OMP_WAIT_POLICY="ACTIVE")
    assert settings["OMP_WAIT_POLICY"] == "ACTIVE" and settings["GOMP_SPINCOUNT"] != "0"
    _, stdout = _runtime_settings(["-m", "invfast", "info"], OMP_WAIT_POLICY="ACTIVE")
    assert re.search(r"^openmp_wait_policy\s+OMP_WAIT_POLICY=ACTIVE \(set by the user", stdout, flags=re.M)
