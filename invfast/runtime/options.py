"""A command's options made from its configuration's declarations: a field declared with ``option`` (see
:func:`invfast.config_base.declare`) is an option of every command that takes that configuration, once
(``batch_size``: ``--batch-size``).

Its type, bounds or choices, default and help come from the declaration; a value given on the command line is
checked against the same declaration, and the error names the option (``--batch-size must be an integer >= 1,
got 0``). A command's other options — where it writes, how it launches, values whose defaults depend on other
options — stay ``argparse`` lines of its own.

    >>> import argparse
    >>> from dataclasses import dataclass
    >>> from invfast.config_base import Config, declare
    >>> @dataclass(frozen=True)
    ... class Job(Config):
    ...     epochs: int = declare(10, at_least=1, option="passes over the data")
    >>> parser = argparse.ArgumentParser()
    >>> add_config_options(parser, Job)
    >>> config_options(parser.parse_args(["--epochs", "3"]), Job)
    {'epochs': 3}
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from invfast.config_base import Config, declared_problem

__all__ = ["add_config_options", "check_seed", "config_options", "option_name"]


def option_name(field: str) -> str:
    """The command-line spelling of config field ``field``: ``batch_size`` -> ``--batch-size``."""
    return "--" + field.replace("_", "-")


def _help(f: dataclasses.Field) -> str:
    text = f.metadata["option"]
    if f.metadata.get("accepts", {}).get("kind") == "flag" or f.default is None or "default" in text:
        return text
    shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else f.default
    if isinstance(shown, float):
        shown = f"{shown:g}"
    return f"{text} (default {shown})"


def add_config_options(parser: argparse.ArgumentParser, config: type[Config]) -> None:
    """Add an option (:func:`option_name`) to ``parser`` for every field of ``config`` declared with an ``option``, in
    declaration order: a flag as ``store_true``, an integer as ``int``, a number as ``float``, choices as
    argparse choices, anything else as a string; the default is the field's."""
    for f in config.options():
        meta, kwargs = f.metadata, dict[str, Any](default=f.default, help=_help(f), dest=f.name)
        kind = meta.get("accepts", {}).get("kind")
        if kind == "flag":
            parser.add_argument(option_name(f.name), action="store_true", **kwargs)
            continue
        if "choices" in meta:
            kwargs["choices"] = meta["choices"]
        plain = type(meta["choices"][0]) if "choices" in meta else str
        parser.add_argument(option_name(f.name), type={"integer": int, "number": float}.get(kind, plain), **kwargs)


def config_options(args: argparse.Namespace, config: type[Config]) -> dict[str, Any]:
    """The values of ``config``'s declared options in ``args`` (given or default), by field name, each checked
    against its declaration: a bad one raises one ValueError (TypeError) naming the option."""
    out = {}
    for f in config.options():
        v = getattr(args, f.name)
        problem = declared_problem(option_name(f.name), v, f.metadata, none="")
        if problem is not None:
            raise problem[0](problem[1])
        out[f.name] = v
    return out


def check_seed(seed: int, option: str = "--seed") -> None:
    """Refuse, with one ValueError naming ``option``, a seed outside ``torch.manual_seed``'s range."""
    if not -(2**63) <= seed < 2**63:
        raise ValueError(f"{option} must be a 64-bit signed integer (-2^63 to 2^63 - 1), got {seed}")
