"""The machine, the versions and the time of every stage: ``environment()`` and the report's last section."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

import numpy as np

from invfast.reproduce.provenance import describe, git_commit
from invfast.reproduce.sections.base import ReportView, Section

__all__ = ["environment", "SECTION"]


def environment() -> dict[str, Any]:
    """Machine and versions."""
    import scipy
    import sklearn
    import torch

    import invfast

    mem = _memory_gib()
    cpu = _cpu_name()
    commit = git_commit(invfast.__file__)
    return {
        "machine": {
            "platform": platform.platform(),
            "cpu": cpu,
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "memory_gib": mem,
            "cuda": torch.cuda.is_available(),
        },
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "scikit-learn": sklearn.__version__,
            "invfast": invfast.__version__,
            "git_commit": commit,
            "compiled_core": bool(invfast.backend_info().get("cpp")),
        },
    }


def _memory_gib() -> float | None:
    """Physical memory in GiB (one decimal), None where the system does not say."""
    mem = None
    try:
        mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return mem


def _cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what :mod:`platform` says."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return cpu


def _markdown(view: ReportView) -> list[str]:
    doc = view.doc
    env, mch = doc["environment"], doc["environment"]["machine"]
    L = [
        "## Machine, versions, time\n",
        f"- Machine: {mch['cpu']}, {mch['cpu_count']} CPUs ({mch['torch_threads']} torch threads), "
        f"{mch['memory_gib']} GiB, CUDA {'yes' if mch['cuda'] else 'no'}; {mch['platform']}.",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + ".",
        f"- Total elapsed (sum of stages): {doc['stages_elapsed_s'] / 60:.1f} min.\n",
        "| stage | elapsed (s) | |\n|---|---:|---|",
    ]
    current = describe(env["versions"]["invfast"], env["versions"]["git_commit"])
    for name, t in doc["timings"].items():
        note = "cached from an earlier invocation" if t["cached"] else ""
        by = t.get("computed_by") or "not recorded"
        if by != current:
            note += f"; computed by {by}"
        L.append(f"| {name} | {t['elapsed_s']:.1f} | {note} |")
    L.append("")
    return L


SECTION = Section("environment", _markdown)
