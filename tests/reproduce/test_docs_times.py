"""The measured --quick times are written once (``presets.QUICK_MINUTES``): the command's help, the README and
docs/reproduce.md quote the same numbers (issue 62: "README '15 minutes' vs docs '13.6 min'")."""

import os
import re

from invfast.reproduce.presets import QUICK_MEASURED, QUICK_MINUTES

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def _about(v: float) -> str:
    return f"{v:.0f}"


def test_the_help_quotes_the_measured_minutes(capsys):
    import argparse

    from invfast.reproduce.cli import add_arguments

    p = argparse.ArgumentParser(prog="invfast reproduce")
    add_arguments(p)
    text = " ".join(p.format_help().split())
    assert f"3 seeds, about {_about(QUICK_MINUTES['default'])} minutes on 2 idle CPU cores" in text
    papers = ", ".join(_about(QUICK_MINUTES[k]) for k in ("ericsson", "speicher"))
    assert f"measured {QUICK_MEASURED}: about {papers} and {_about(QUICK_MINUTES['chavhan'])} minutes per paper" in text
    assert f"{_about(QUICK_MINUTES['all'])} for all" in text


def test_readme_and_docs_quote_the_same_minutes():
    readme, docs = _read("README.md"), _read(os.path.join("docs", "reproduce.md"))
    default = f"{QUICK_MINUTES['default']:g}"
    assert f"{default} minutes measured" in readme and f"{default} min measured" in docs
    e, s, c = (_about(QUICK_MINUTES[k]) for k in ("ericsson", "speicher", "chavhan"))
    assert f"about {e}, {s} and {c} minutes of wall time" in readme
    for paper, v in (("ericsson", e), ("speicher", s), ("chavhan", c)):
        line = next(x for x in docs.splitlines() if f"--paper {paper} --out" in x)
        assert re.search(rf"about {v} min wall", line), line
    every = _about(QUICK_MINUTES["all"])
    assert f"{every} min on 2 cores" in readme and f"all twenty findings: {every} min wall" in docs
