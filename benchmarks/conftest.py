"""Shared pieces of the benchmark suites: a ratio recorder printed at the end of the run.

Run: python -m pytest benchmarks --benchmark-only -o addopts=""
Set INVFAST_BENCH_SMALL=1 for reduced sizes (a quick smoke run, not the published numbers).
"""
import os
import time

import pytest

SMALL = bool(os.environ.get("INVFAST_BENCH_SMALL"))
_RATIOS: list[tuple[str, float, str]] = []


def best_time(fn, repeat: int = 3) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (seconds)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


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
