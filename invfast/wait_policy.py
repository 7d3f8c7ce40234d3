"""How torch's OpenMP threads wait in ``invfast measure``: they sleep, they do not poll (issues 42, 43).

torch's CPU ops run on an OpenMP team. Between parallel regions its threads poll for the next one by default
(libgomp: 300 000 polls before they sleep), and on a machine where another process holds a core that polling
costs more than it saves: a polling thread takes the core a working one needs, and the OS later keeps the
poller's peers off a core for tens of milliseconds. On a 2-core VM beside one busy process, small ops stalled
that way and the per-layer measurement at 2 threads fell behind 1 thread; with ``OMP_WAIT_POLICY=PASSIVE`` they
did not, quiet the same. But sleeping threads must be woken for every region, so a pretraining step of many
small ops is slower with it, quiet and loaded (the measurements: docs/performance.md).

The runtime reads the policy once, when torch is loaded, so it can only be chosen before ``import torch``. So
``invfast measure`` (its console script, ``python -m invfast measure``, torchrun) sets ``OMP_WAIT_POLICY=PASSIVE``
at its start unless the user set ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` (``GOMP_SPINCOUNT=300000`` keeps
libgomp's own default); the other commands, whose jobs were not measured faster with it (pretraining slower),
keep the runtime's default, and ``import invfast`` in a user's program changes nothing: the process is the user's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence

#: the variables by which a user chooses the wait policy; invfast never overrides them
USER_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
#: the policy ``invfast measure`` sets
CLI_POLICY = "PASSIVE"
#: the subcommands that set it: their jobs were measured faster with it beside a busy process, and not slower quiet
COMMANDS = ("measure",)

#: whether this process's policy was set by the invfast command (by its ``main``, before torch loads)
set_by_invfast = False


def is_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` (the command line, program first) is the ``invfast`` command: its console script,
    or ``python -m invfast`` (whose ``sys.argv[0]`` is ``"-m"`` while the package is located)."""
    if not argv:
        return False
    name = argv[0].replace("\\", "/").rsplit("/", 1)[-1]  # a Windows script path too
    return argv[0] == "-m" or os.path.splitext(name)[0] == "invfast"


def subcommand(argv: Sequence[str]) -> str | None:
    """The invfast subcommand in ``argv``: its first argument that is not an option (``--debug`` may come first)."""
    return next((a for a in argv[1:] if not a.startswith("-")), None)


def cli_policy(argv: Sequence[str], environ: Mapping[str, str], torch_loaded: bool) -> str | None:
    """The policy to set for this process, or None: ``CLI_POLICY`` for one of ``COMMANDS`` of the invfast command
    started before torch is loaded, when the user has set none of ``USER_KEYS``."""
    if torch_loaded or not is_command(argv) or subcommand(argv) not in COMMANDS:
        return None
    if any(k in environ for k in USER_KEYS):
        return None
    return CLI_POLICY


def apply(argv: Sequence[str]) -> None:
    """Set the policy of the command line ``argv`` (``["invfast", subcommand, ...]``) in ``os.environ``; called by
    the command's ``main`` before it loads torch (see the module docstring). ``import invfast`` sets nothing."""
    global set_by_invfast
    policy = cli_policy(argv, os.environ, "torch" in sys.modules)
    if policy is not None:
        os.environ["OMP_WAIT_POLICY"] = policy
        set_by_invfast = True


def describe() -> str:
    """One line: the OpenMP wait policy of this process, who chose it, and what ``invfast measure`` does."""
    if set_by_invfast:
        return f"{CLI_POLICY} (set by invfast {subcommand(sys.argv)}; OMP_WAIT_POLICY overrides it)"
    chosen = [f"{k}={os.environ[k]}" for k in USER_KEYS if k in os.environ]
    if chosen:
        return ", ".join(chosen) + " (set by the user; every invfast command keeps it)"
    return f"the OpenMP runtime's default (poll, then sleep); invfast {'/'.join(COMMANDS)} sets {CLI_POLICY}"
