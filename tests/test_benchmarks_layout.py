"""The benchmark suites share one reading of INVFAST_BENCH_SMALL (benchmarks/conftest.py) and one ratio table."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def _conftest():
    spec = importlib.util.spec_from_file_location("bench_conftest", BENCH / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_only_the_conftest_reads_the_small_flag():
    readers = [
        p.name
        for p in sorted(BENCH.glob("*.py"))
        if p.name != "conftest.py" and "environ" in p.read_text() and '"INVFAST_BENCH_SMALL"' in p.read_text()
    ]
    assert readers == []


@pytest.mark.parametrize(
    "value, on",
    [
        ("", False),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("1", True),
        ("true", True),
        ("yes", True),
    ],
)
def test_the_small_flag_reads_the_usual_spellings(monkeypatch, value, on):
    monkeypatch.setenv("INVFAST_BENCH_SMALL", value)
    assert _conftest().env_flag("INVFAST_BENCH_SMALL") is on


def test_ratios_stored_in_extra_info_reach_the_summary():
    class B:
        def __init__(self, name, info):
            self.name, self.extra_info = name, info

    class Session:
        benchmarks = [B("test_blur", {"speedup_vs_torch_path": 3.5, "images": 16}), B("test_x", {"ratio": 2.0})]

    class Config:
        _benchmarksession = Session()

    rows = _conftest()._extra_ratios(Config())
    assert rows == [("test_blur: speedup_vs_torch_path", 3.5, ""), ("test_x: ratio", 2.0, "")]
