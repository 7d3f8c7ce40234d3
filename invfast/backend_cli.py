"""``invfast info``: what this installation can run."""
from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print as JSON")


def run(args: argparse.Namespace) -> int:
    from invfast import backend_info

    info = backend_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    width = max(len(k) for k in info)
    for k, v in info.items():
        if isinstance(v, list):
            v = ", ".join(v) or "-"
        print(f"{k:<{width}}  {v}")
    return 0
