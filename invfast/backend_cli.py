"""``invfast info``: what this installation can run, and the dispatch table (op x device: compiled kernel
available, measured faster, what backend ``auto`` runs, and the benchmark that showed it)."""

from __future__ import annotations

import argparse
import json
import shutil


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print as JSON (the table under 'dispatch')")


def run(args: argparse.Namespace) -> int:
    from invfast import backend_info, dispatch

    info = backend_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    rest = {k: v for k, v in info.items() if k != "dispatch"}
    width = max(len(k) for k in rest)
    for k, v in rest.items():
        if isinstance(v, list):
            v = ", ".join(v) or "-"
        print(f"{k:<{width}}  {v}")
    print(
        f"\ndispatch table (mode {info['mode']!r}; auto runs the kernel where 'default' says it was measured faster, "
        f"or {dispatch.CUDA_KERNELS_ENV} opts a CUDA entry in):"
    )
    print(dispatch.format_table(width=max(100, shutil.get_terminal_size((140, 24)).columns)))
    return 0
