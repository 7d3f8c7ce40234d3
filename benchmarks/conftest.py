"""Shared pieces of the benchmark suites: a ratio recorder printed at the end of the run.

Run: python -m pytest benchmarks --benchmark-only -o addopts=""
Set INVFAST_BENCH_SMALL=1 for reduced sizes (a quick smoke run, not the published numbers).
"""

import os

import pytest

from invfast.bench import best_time  # noqa: F401  (re-exported for the suites)

SMALL = bool(os.environ.get("INVFAST_BENCH_SMALL"))
_RATIOS: list[tuple[str, float, str]] = []


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


def pytest_terminal_summary(terminalreporter):
    if not _RATIOS:
        return
    terminalreporter.section("invfast speed ratios (baseline time / invfast time, same run)")
    for label, ratio, goal in _RATIOS:
        terminalreporter.write_line(f"{label:<70} {ratio:9.2f}x   goal: {goal}")
