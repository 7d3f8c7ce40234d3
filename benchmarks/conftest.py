"""Shared pieces of the benchmark suites: a ratio recorder printed at the end of the run.

Run: python -m pytest benchmarks --benchmark-only -o addopts=""
Set INVFAST_BENCH_SMALL=1 for reduced sizes (a quick smoke run, not the published numbers).
"""

import os
import subprocess
import sys
import time

import pytest


def env_flag(name: str) -> bool:
    """An on/off environment variable: unset, empty, 0, false, no and off are off; anything else is on."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


#: reduced sizes for a quick smoke run (INVFAST_BENCH_SMALL); the one place every suite reads it
SMALL = env_flag("INVFAST_BENCH_SMALL")
_RATIOS: list[tuple[str, float, str]] = []


class Competitor:
    """One CPU-bound process (``while True: pass``) beside a benchmark while started: a shared node, a laptop
    with other work (issue 43). Started and stopped by the benchmark; stopped at the latest by its fixture."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(0.3)  # let it reach the run queue

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def competitor():
    """A :class:`Competitor`, not started."""
    c = Competitor()
    yield c
    c.stop()


@pytest.fixture
def competing_process(competitor):
    """A :class:`Competitor` running for the whole benchmark."""
    competitor.start()
    yield competitor


@pytest.fixture(scope="session")
def torch_default_threads() -> int:
    """torch's default intra-op threads, read in a fresh interpreter (some suites set 1 thread on import)."""
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True, text=True
    )
    import torch

    return int(out.stdout.strip()) if out.returncode == 0 else torch.get_num_threads()


@pytest.fixture
def default_threads(torch_default_threads):
    """The benchmark runs at torch's default thread count (what a user gets), restored afterwards."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(torch_default_threads)
    yield torch_default_threads
    torch.set_num_threads(old)


@pytest.fixture
def record_ratio(benchmark):
    """record_ratio(label, baseline_seconds, goal): ratio = baseline / invfast's best time in this benchmark."""

    def rec(label: str, baseline_s: float, goal: str = "") -> float:
        ours = benchmark.stats.stats.min
        ratio = baseline_s / ours
        benchmark.extra_info[label] = {"baseline_s": baseline_s, "invfast_s": ours, "ratio": ratio, "goal": goal}
        _RATIOS.append((label, ratio, goal))
        return ratio

    return rec


def _extra_ratios(config) -> list[tuple[str, float, str]]:
    """Ratios the suites stored directly in a benchmark's extra_info (keys naming a ratio or speedup)."""
    session = getattr(config, "_benchmarksession", None)
    out = []
    for b in getattr(session, "benchmarks", None) or []:
        for key, value in (getattr(b, "extra_info", None) or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and ("ratio" in key or "speedup" in key):
                out.append((f"{b.name}: {key}", float(value), ""))
    return out


def pytest_terminal_summary(terminalreporter, config):
    rows = _RATIOS + _extra_ratios(config)
    if not rows:
        return
    terminalreporter.section("invfast speed ratios (baseline time / invfast time, same run)")
    for label, ratio, goal in rows:
        terminalreporter.write_line(f"{label:<70} {ratio:9.2f}x   goal: {goal}")
