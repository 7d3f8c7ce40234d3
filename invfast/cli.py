"""The ``invfast`` command. Each subcommand lives in its own module exposing
``add_arguments(parser)`` and ``run(args) -> int``; only the chosen one is imported."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = _available()
    parser = argparse.ArgumentParser(prog="invfast", description="measure and exploit the invariances of representations")
    from invfast import __version__

    parser.add_argument("--version", action="version", version=f"invfast {__version__}")
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
    return int(chosen.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
