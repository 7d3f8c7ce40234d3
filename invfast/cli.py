"""The ``invfast`` command. Each subcommand lives in its own module exposing
``add_arguments(parser)`` and ``run(args) -> int``; only the chosen one is imported.

Exit codes (the same for every command, docs/guarantees.md): 0 ok; 2 bad usage or bad input (a wrong
value, a missing or damaged input file, a folder already in use by another kind of file); 1 a failure
during the run (a read-only or full disk, the output folder locked by another run, a numerical
blow-up, or a bug); 130 interrupted. Errors about the user's input become one line on stderr,
``invfast <command>: error: <cause>``. An error that is not about the input (a ``TypeError``,
``KeyError``, ``IndexError`` ... from a bug, or a ``ValueError`` raised inside torch/numpy rather than by
invfast's own checks) keeps its traceback and exits 1. ``--debug`` (anywhere on the command line, or
``INVFAST_DEBUG=1``) shows the traceback of every error. Warnings print as one line each, once.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys
import traceback

from invfast import wait_policy
from invfast._messages import one_line_warnings


def plain_text(text: str) -> str:
    """Docstring markup as a terminal shows it: ``code`` and :role:`~a.b.name` become code and name."""
    import re

    text = re.sub(
        r":[a-z]+:`~?([^`<]+?)(?:\s*<[^>]*>)?`",
        lambda m: m.group(1).split(".")[-1] if "~" in m.group(0) else m.group(1),
        text,
    )
    return re.sub(r"``([^`]+)``", r"\1", text)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's help layout (descriptions and epilogs as written, docstring markup shown plain) that never breaks
    a word: a spec such as ``synthetic[:objects=61,n=5000,...]`` stays whole on its line, so it can be copied."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(plain_text(text).split()), width, break_long_words=False, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return super()._fill_text(plain_text(text), width, indent)


# name -> (module, one-line help); only the chosen command's module is imported
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("invfast.backend_cli", "what this installation can run (compiled core, CUDA, DALI, threads)"),
    "demo": ("invfast.demo", "minimal invariance demo on real photographs with exact transforms"),
    "transforms": ("invfast.transforms.cli", "preview the test transforms as a contact sheet"),
    "generate": ("invfast.synthetic.cli", "generate a Transforms-2D synthetic data set"),
    "measure": ("invfast.measure.cli", "measure the invariances of a model"),
    "compare": ("invfast.comparison.cli", "models and layers side by side: significance, invariance vs transfer"),
    "pretrain": ("invfast.pretrain.cli", "contrastive pretraining (MoCo-v2, SimCLR, amortised)"),
    "features": ("invfast.measure.features_cli", "a model's features on a data source, to a .npy file"),
    "probe": ("invfast.probes.cli", "linear probes with cross-validation on saved features"),
    "reproduce": ("invfast.reproduce.cli", "the papers' findings end to end on built-in synthetic data"),
    "bench": ("invfast.bench", "quick throughput numbers of the compiled ops"),
}


USAGE_ERROR, RUNTIME_ERROR, INTERRUPTED = 2, 1, 130
#: input problems: the user's value, file or folder; any of these raised by invfast's own code is exit 2
_INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    ImportError,  # an optional package a given option needs (raised by invfast naming it: 'pip install ...')
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
)
#: failures of the run that are not bugs: one line, exit 1
_RUN_ERRORS: tuple[type[BaseException], ...] = (OSError, MemoryError, ArithmeticError, RuntimeError)


def _raised_by_invfast(exc: BaseException) -> bool:
    """Whether the innermost Python frame of ``exc``'s traceback is invfast's own code (a deliberate check),
    rather than torch's, numpy's or the user's."""
    tb = exc.__traceback__
    if tb is None:  # constructed, not raised: count it as deliberate
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    pkg = os.path.dirname(os.path.abspath(__file__))
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(pkg + os.sep)


def is_usage_error(exc: BaseException) -> bool:
    """An error about the user's input: a ValueError or missing/misplaced file raised by invfast itself
    (or by the argument parser), or any OS error naming a file that does not exist."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, FileExistsError)):
        return True
    return isinstance(exc, _INPUT_ERRORS) and _raised_by_invfast(exc)


def is_bug(exc: BaseException) -> bool:
    """Neither about the input nor an expected failure of the run: shown with its traceback."""
    return not is_usage_error(exc) and not isinstance(exc, _RUN_ERRORS)


_OS_FIXES = {
    errno.EROFS: "the file system is read-only; choose a writable --out folder",
    errno.ENOSPC: "no space left on the device; free some space or choose another --out folder",
    errno.EDQUOT: "the disk quota is exhausted; free some space or choose another --out folder",
    errno.EACCES: "permission denied; choose a folder you can write to",
    errno.EPERM: "operation not permitted; choose a folder you can write to",
}


def exit_code(exc: BaseException) -> int:
    """The exit code of an exception that ends a command (2 bad usage, 1 failure during the run or bug)."""
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    return USAGE_ERROR if is_usage_error(exc) else RUNTIME_ERROR


#: numpy's ``tofile`` / ``np.save`` error when fewer bytes were written than asked: "92160 requested and 36736 written"
_SHORT_WRITE = re.compile(r"(\d+) requested and (\d+) written")


def error_line(exc: BaseException) -> str:
    """One line naming the cause (and, for file-system errors, the fix)."""
    if (
        isinstance(exc, OSError)
        and not isinstance(exc, (FileNotFoundError, FileExistsError))
        and exc.errno in _OS_FIXES
    ):
        where = f" {exc.filename!r}" if exc.filename else ""
        return f"cannot write{where}: {_OS_FIXES[exc.errno]}"
    short = _SHORT_WRITE.fullmatch(str(exc).strip()) if isinstance(exc, OSError) and exc.errno is None else None
    if short:  # numpy's message for a write the file system cut short, without an errno: a full disk, nearly always
        return (
            f"cannot write: the file system took {short[2]} of {short[1]} bytes (no space left on the device?); "
            "free some space or choose another --out folder"
        )
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


def _special_path(tokens: list[str]) -> str | None:
    """The one-line refusal of the first FIFO, socket or device among the command's arguments (an option's value
    joined to it by '=' too): a reader would wait on it forever with no message. None when there is none."""
    from invfast.io import require_regular

    for token in tokens:
        value = token.split("=", 1)[1] if token.startswith("--") and "=" in token else token
        try:
            require_regular(value, "the path")
        except ValueError as exc:
            return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("INVFAST_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    wait_policy.apply(["invfast", *argv])  # before any subcommand loads torch
    parser = argparse.ArgumentParser(
        prog="invfast", description="measure and exploit the invariances of representations"
    )
    from invfast import __version__

    parser.add_argument("--version", action="version", version=f"invfast {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error (any position)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = None
    for name, (mod, help_) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_, description=help_)
        if argv and argv[0] == name:
            chosen = importlib.import_module(mod)
            chosen.add_arguments(sp)
            sp.formatter_class = HelpFormatter
    args = parser.parse_args(argv)
    if chosen is None:
        parser.print_help()
        return 2
    args.debug = debug
    from invfast import backend, dispatch

    special = _special_path(argv[1:])
    if special is not None:
        print(f"invfast {args.command}: error: {special}", file=sys.stderr)
        return USAGE_ERROR

    # a mistyped INVFAST_BACKEND, INVFAST_CPU_ISA or INVFAST_CUDA_KERNELS is a usage error of every command
    for problem in (backend.env_problem(), backend.cpu_isa_env_problem(), dispatch.cuda_env_problem()):
        if problem is not None:
            print(f"invfast {args.command}: error: {problem}", file=sys.stderr)
            return USAGE_ERROR
    try:
        with one_line_warnings():
            return int(chosen.run(args) or 0)
    except KeyboardInterrupt:
        print(f"invfast {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - the one place every command's errors become one line
        if debug or is_bug(exc):
            traceback.print_exc()
            if not debug:
                print(
                    f"invfast {args.command}: internal error ({type(exc).__name__}); this is a bug in invfast or "
                    "in the code it ran: please report it with the traceback above",
                    file=sys.stderr,
                )
        else:
            hint = " (--debug shows the traceback)" if exit_code(exc) == RUNTIME_ERROR else ""
            print(f"invfast {args.command}: error: {error_line(exc)}{hint}", file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
