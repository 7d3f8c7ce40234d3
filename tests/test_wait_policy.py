"""The invfast command's OpenMP wait policy (invfast/wait_policy.py): passive for the command, untouched for
``import invfast`` and whenever the user chose one. Checked in fresh processes against what libgomp itself
reports (``OMP_DISPLAY_ENV=VERBOSE`` prints its settings when torch loads it)."""

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
        ["/usr/local/bin/invfast", "info"],
        ["invfast"],
        ["C:\\venv\\Scripts\\invfast.exe"],
        ["-m"],
        ["./invfast", "measure"],
    ],
)
def test_the_command_gets_the_passive_policy(argv):
    assert wait_policy.cli_policy(argv, {}, torch_loaded=False) == "PASSIVE"


@pytest.mark.parametrize(
    "argv", [["/venv/bin/pytest"], ["-c"], ["train.py"], [""], [], ["/opt/invfast-tools/run.py"], ["invfasta"]]
)
def test_a_users_program_keeps_the_runtime_default(argv):
    assert wait_policy.cli_policy(argv, {}, torch_loaded=False) is None


@pytest.mark.parametrize("env", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": ""}, {"GOMP_SPINCOUNT": "300000"}])
def test_a_users_choice_is_never_overridden(env):
    assert wait_policy.cli_policy(["invfast"], env, torch_loaded=False) is None


def test_too_late_once_torch_is_loaded():
    assert wait_policy.cli_policy(["invfast"], {}, torch_loaded=True) is None


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


def test_the_command_runs_torch_with_threads_that_sleep():
    settings, stdout = _runtime_settings(["-m", "invfast", "info"])
    assert settings["GOMP_SPINCOUNT"] == "0"  # libgomp's PASSIVE: no polling before a thread sleeps
    assert re.search(r"^openmp_wait_policy\s+PASSIVE \(set by the invfast command", stdout, flags=re.M)


def test_import_invfast_leaves_the_runtime_default():
    code = "import os, invfast; print(os.environ.get('OMP_WAIT_POLICY'))"
    settings, stdout = _runtime_settings(["-c", code])
    assert settings["GOMP_SPINCOUNT"] == "300000"  # libgomp's own default
    assert stdout.strip() == "None"


def test_the_users_policy_reaches_the_command_unchanged():
    settings, stdout = _runtime_settings(["-m", "invfast", "info"], OMP_WAIT_POLICY="ACTIVE")
    assert settings["OMP_WAIT_POLICY"] == "ACTIVE" and settings["GOMP_SPINCOUNT"] != "0"
    assert re.search(r"^openmp_wait_policy\s+OMP_WAIT_POLICY=ACTIVE \(set by the user\)", stdout, flags=re.M)
