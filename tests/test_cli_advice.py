"""Every ``--option`` that invfast's messages, help texts and docstrings name is an option some invfast
command has (an error's advice once named ``--shrinkage``, which no command took)."""

from __future__ import annotations

import argparse
import ast
import importlib
import pathlib
import re

from invfast.cli import COMMANDS

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: flags of other tools that invfast's text names on purpose: pip, torchrun, git, a matplotlib line style
OTHER_TOOLS = {"--no-build-isolation", "--nproc-per-node", "--short", "--porcelain", "--untracked-files", "--s"}
TOKEN = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def invfast_options() -> set[str]:
    options = {"--debug", "--version", "--help"}
    for module, _ in COMMANDS.values():
        p = argparse.ArgumentParser()
        importlib.import_module(module).add_arguments(p)
        for a in p._actions:
            options.update(o for o in a.option_strings if o.startswith("--"))
    return options


def named_options(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, token) of every ``--word`` in a string literal of ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, t) for t in TOKEN.findall(node.value)]
    return found


def test_every_option_named_in_invfasts_text_exists():
    options = invfast_options() | OTHER_TOOLS
    unknown = [
        f"{p.relative_to(ROOT)}:{line}: {t}"
        for p in sorted((ROOT / "invfast").rglob("*.py"))
        for line, t in named_options(p)
        if t not in options
    ]
    assert unknown == [], "\n".join(unknown)


def test_the_scan_sees_a_made_up_option(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('raise ValueError("use --shrinkage-factor or --eps")\n')
    assert [t for _, t in named_options(f) if t not in invfast_options()] == ["--shrinkage-factor"]
