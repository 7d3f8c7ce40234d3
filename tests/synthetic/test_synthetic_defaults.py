"""Issue 27: `invfast generate` and the ``synthetic:`` spec share one set of defaults
(``invfast.data.synthetic.SYNTHETIC_DEFAULTS``), and every help text and document that states them
agrees with the code. Each test failed on the code before the change."""

from __future__ import annotations

import argparse
import importlib
import os
import re

import pytest

from invfast.data.synthetic import SYNTHETIC_DEFAULTS, parse_synthetic_spec, synthetic_help

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ["docs/synthetic.md", "docs/data.md"]
#: generate's option for each spec key
OPTION = {
    "objects": "--objects",
    "transforms": "--transforms",
    "n": "--n",
    "size": "--size",
    "seed": "--seed",
    "split": "--split",
    "order": "--order",
}


def parser_of(module: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    importlib.import_module(module).add_arguments(p)
    return p


def action(p: argparse.ArgumentParser, option: str) -> argparse.Action:
    return next(a for a in p._actions if option in a.option_strings)


def spec_mentions(text: str) -> list[dict[str, str]]:
    """The key=value pairs of every ``synthetic:...`` / ``synthetic[:...]`` written in ``text``."""
    out = []
    for m in re.finditer(r"synthetic\[?:([a-z_]+=[^\s`|\]]+)", text):
        out.append(dict(kv.split("=", 1) for kv in m.group(1).split(",") if "=" in kv))
    return out


def assert_defaults(pairs: dict[str, str], where: str) -> None:
    for k, v in pairs.items():
        assert k in SYNTHETIC_DEFAULTS, f"{where}: {k} is not a synthetic spec key"
        assert v == str(SYNTHETIC_DEFAULTS[k]), f"{where}: {k}={v}, the code's default is {SYNTHETIC_DEFAULTS[k]}"


def test_generate_defaults_are_the_spec_defaults():
    from invfast.synthetic.cli import dataset_from_args

    p = parser_of("invfast.synthetic.cli")
    for key, option in OPTION.items():
        assert action(p, option).default == SYNTHETIC_DEFAULTS[key], option
    # `invfast generate` without options writes the data set `synthetic:` names, byte for byte
    args = p.parse_args([])
    assert dataset_from_args(args).fingerprint() == parse_synthetic_spec("synthetic:").dataset().fingerprint()


def test_help_texts_state_the_code_defaults():
    p = parser_of("invfast.synthetic.cli")
    for key, option in OPTION.items():
        text = " ".join(action(p, option).help.split())
        said = re.findall(r"\(default ([^;)]+)[;)]", text)
        assert said == [str(SYNTHETIC_DEFAULTS[key])], (option, text)
    line = synthetic_help()
    assert "\n" not in line and spec_mentions(line) and set(spec_mentions(line)[0]) == set(SYNTHETIC_DEFAULTS)
    assert_defaults(spec_mentions(line)[0], "synthetic_help()")
    measure_data = action(parser_of("invfast.measure.cli"), "--data").help
    assert line in measure_data, measure_data
    for module in ("invfast.measure.cli", "invfast.pretrain.cli"):
        text = action(parser_of(module), "--data").help
        assert spec_mentions(text), (module, text)
        for pairs in spec_mentions(text):
            assert_defaults(pairs, f"{module} --data help")


def _tables(text: str) -> list[list[list[str]]]:
    """Markdown and reST (simple) tables of ``text`` with a 'default' column: rows of cells."""
    tables, rows = [], []
    for ln in text.splitlines() + [""]:
        s = ln.strip()
        if s.startswith("|"):
            cells = [c.strip().strip("`") for c in s.strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
            continue
        if rows:
            tables.append(rows)
            rows = []
    out = [t for t in tables if "default" in [c.lower() for c in t[0]]]
    rst = re.findall(r"^=+ =+ =+\n(.*?)\n=+ =+ =+\n(.*?)\n=+ =+ =+$", text, flags=re.MULTILINE | re.DOTALL)
    for head, body in rst:
        rows = [head.split()[:2]] + [ln.split(None, 2)[:2] for ln in body.splitlines() if ln[:1].strip()]
        if "default" in rows[0]:
            out.append(rows)
    return out


@pytest.mark.parametrize("doc", DOCS + ["invfast/data/synthetic.py"])
def test_documents_state_the_code_defaults(doc):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        text = f.read()
    tables = _tables(text)
    assert tables, f"{doc} has no table of defaults"
    gp = parser_of("invfast.synthetic.cli")
    for rows in tables:
        col = [c.lower() for c in rows[0]].index("default")
        seen = set()
        for row in rows[1:]:
            name, default = row[0].strip("`"), row[col].strip("`")
            if name.startswith("--"):
                a = action(gp, name)
                expect = "-" if a.default is None else str(a.default)
                seen.add(next((k for k, o in OPTION.items() if o == name), name))
            else:
                assert name in SYNTHETIC_DEFAULTS, f"{doc}: {name} is not a synthetic spec key"
                expect = str(SYNTHETIC_DEFAULTS[name])
                seen.add(name)
            assert default == expect, f"{doc}: {name} default {default!r}, the code's is {expect!r}"
        assert set(SYNTHETIC_DEFAULTS) <= seen, f"{doc}: defaults of {sorted(set(SYNTHETIC_DEFAULTS) - seen)} missing"
    for para in re.split(r"\n\s*\n", text):
        if "default" in para:
            for pairs in spec_mentions(para):
                assert_defaults(pairs, doc)
