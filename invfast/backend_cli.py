"""``invfast info``: what this installation can run, and the dispatch table (op x device: compiled kernel
available, measured faster, what backend ``auto`` runs, and the benchmark that showed it)."""

from __future__ import annotations

import argparse
import json
import shutil


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print as JSON (the table under 'dispatch')")
    parser.add_argument(
        "--evidence", action="store_true", help="also print each dispatch row's evidence (the benchmark behind it)"
    )


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
        f"or {dispatch.CUDA_KERNELS_ENV} opts a CUDA entry in"
        + ("):" if args.evidence else "; --evidence adds the benchmark behind each row):")
    )
    width = max(100, shutil.get_terminal_size((140, 24)).columns)
    print(dispatch.format_table(width=width, evidence=args.evidence))
    return 0
