"""The ``invfast`` command. Each subcommand lives in its own module exposing
``add_arguments(parser)`` and ``run(args) -> int``; only the chosen one is imported.

Errors a subcommand raises become one line on stderr, ``invfast <command>: error: <cause>``, and an
exit code: 2 for bad usage (a wrong value, a missing or damaged input file, a folder already in
use by another kind of file), 1 for a failure at run time (a read-only or full disk, the output
folder locked by another run, a numerical blow-up). ``--debug`` (anywhere on the command line, or
``INVFAST_DEBUG=1``) shows the traceback instead.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import os
import sys
import traceback

# name -> (module, one-line help). Modules that are not present in this checkout are left out.
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("invfast.backend_cli", "what this installation can run (compiled core, CUDA, DALI, threads)"),
    "demo": ("invfast.demo", "minimal invariance demo on real photographs with exact transforms"),
    "transforms": ("invfast.transforms.cli", "preview the test transforms as a contact sheet"),
    "generate": ("invfast.synthetic.cli", "generate a Transforms-2D synthetic data set"),
    "measure": ("invfast.measure.cli", "measure the invariances of a model"),
    "pretrain": ("invfast.pretrain.cli", "contrastive pretraining (MoCo-v2, SimCLR, amortised)"),
    "probe": ("invfast.probes.cli", "linear probes with cross-validation on saved features"),
    "reproduce": ("invfast.reproduce.cli", "the papers' findings end to end on built-in synthetic data"),
    "bench": ("invfast.bench", "quick throughput numbers of the compiled ops"),
}


def _available() -> dict[str, tuple[str, str]]:
    out = {}
    for name, (mod, help_) in COMMANDS.items():
        try:
            if importlib.util.find_spec(mod) is not None:
                out[name] = (mod, help_)
        except ModuleNotFoundError:
            continue
    return out


# exception type -> exit code; the first matching entry wins (subclasses before their bases)
USAGE_ERROR, RUNTIME_ERROR = 2, 1
_EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (FileNotFoundError, USAGE_ERROR), (FileExistsError, USAGE_ERROR), (IsADirectoryError, USAGE_ERROR),
    (NotADirectoryError, USAGE_ERROR), (ValueError, USAGE_ERROR), (TypeError, USAGE_ERROR),
    (KeyError, USAGE_ERROR), (IndexError, USAGE_ERROR), (ImportError, USAGE_ERROR),
    (OSError, RUNTIME_ERROR), (MemoryError, RUNTIME_ERROR), (ArithmeticError, RUNTIME_ERROR),
    (RuntimeError, RUNTIME_ERROR), (Exception, RUNTIME_ERROR),
)

_OS_FIXES = {
    errno.EROFS: "the file system is read-only; choose a writable --out folder",
    errno.ENOSPC: "no space left on the device; free some space or choose another --out folder",
    errno.EDQUOT: "the disk quota is exhausted; free some space or choose another --out folder",
    errno.EACCES: "permission denied; choose a folder you can write to",
    errno.EPERM: "operation not permitted; choose a folder you can write to",
}


def exit_code(exc: BaseException) -> int:
    """The exit code of an exception that ends a command (2 bad usage, 1 runtime failure)."""
    for cls, code in _EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return RUNTIME_ERROR


def error_line(exc: BaseException) -> str:
    """One line naming the cause (and, for file-system errors, the fix)."""
    if isinstance(exc, OSError) and not isinstance(exc, (FileNotFoundError, FileExistsError)) and exc.errno in _OS_FIXES:
        where = f" {exc.filename!r}" if exc.filename else ""
        return f"cannot write{where}: {_OS_FIXES[exc.errno]}"
    if isinstance(exc, KeyError):  # str(KeyError) is just the repr of the key
        msg = f"missing entry {exc.args[0]!r}" if exc.args else "missing entry"
    else:
        msg = str(exc).strip() or type(exc).__name__
    if isinstance(exc, FileNotFoundError) and exc.filename and str(exc.filename) not in msg:
        msg = f"{msg}: {exc.filename!r}"
    line = " ".join(msg.split())
    if type(exc).__module__ not in ("builtins", "invfast.io") and not type(exc).__module__.startswith("invfast"):
        line = f"{type(exc).__name__}: {line}"
    return line


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("INVFAST_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    commands = _available()
    parser = argparse.ArgumentParser(prog="invfast", description="measure and exploit the invariances of representations")
    from invfast import __version__

    parser.add_argument("--version", action="version", version=f"invfast {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error (any position)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = None
    for name, (mod, help_) in commands.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        if argv and argv[0] == name:
            chosen = importlib.import_module(mod)
            chosen.add_arguments(sp)
    args = parser.parse_args(argv)
    if chosen is None:
        parser.print_help()
        return 2
    args.debug = debug
    from invfast import backend

    if backend.env_problem() is not None:  # a mistyped INVFAST_BACKEND is a usage error of every command
        print(f"invfast {args.command}: error: {backend.env_problem()}", file=sys.stderr)
        return USAGE_ERROR
    try:
        return int(chosen.run(args) or 0)
    except KeyboardInterrupt:
        print(f"invfast {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the one place every command's errors become one line
        if debug:
            traceback.print_exc()
        else:
            hint = " (--debug shows the traceback)" if exit_code(exc) == RUNTIME_ERROR else ""
            print(f"invfast {args.command}: error: {error_line(exc)}{hint}", file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
