"""Render the four committed example reports (docs/example-report/) from one finished
`invfast reproduce --quick --paper all --cache-dir CACHE` run: each report is made from that cache with its
selection (no stage runs), then its report.md, figures/, config.json and a verdicts.json are copied in.

    python scripts/render_examples.py CACHE [--work /tmp/examples] [--dest docs/example-report]

verdicts.json is the report's results.json without the per-seed stage results (every verdict over seeds and
per seed, with each criterion's interval, minimum, control and preconditions; the stage times; the
configuration and the environment). results.json itself (20-90 MB, every per-unit number) stays in --work.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

from invfast.reproduce.config_sections import DEFAULT_FINDINGS

#: destination subfolder -> the selection its report tests
EXAMPLES = {
    "": ["--findings", ",".join(DEFAULT_FINDINGS)],
    "ericsson": ["--paper", "ericsson"],
    "speicher": ["--paper", "speicher"],
    "chavhan": ["--paper", "chavhan"],
}
#: what verdicts.json keeps of results.json (per_seed without its "stages")
KEPT = (
    "seeds",
    "findings_selected",
    "verdict",
    "over_seeds",
    "per_seed",
    "timings",
    "stages_elapsed_s",
    "total_elapsed_s",
    "config",
    "environment",
)


def verdicts(results_path: str) -> dict:
    """The committed summary of one report's results.json."""
    size_mb = os.path.getsize(results_path) / 2**20
    with open(results_path, encoding="utf-8") as f:
        doc = json.load(f)
    out: dict = {
        "about": "every verdict of this example: over seeds and per seed (criteria with their 95 % intervals, "
        "minimum, control, preconditions); the per-unit numbers they were computed from (results.json, "
        f"{size_mb:.0f} MB) are not committed: rerun the command in docs/reproduce.md to make them"
    }
    for key in KEPT:
        out[key] = doc[key]
    out["per_seed"] = {s: {k: v for k, v in run.items() if k != "stages"} for s, run in doc["per_seed"].items()}
    return out


def _check_example_folder(dest: str) -> None:
    """Refuse a destination this script did not make (its figures/ is replaced, its files overwritten): it must
    be absent, empty, or hold an example's verdicts.json; no file it writes may be a symbolic link."""
    names = [n for n in os.listdir(dest) if n not in EXAMPLES] if os.path.isdir(dest) else []
    if names:
        try:
            with open(os.path.join(dest, "verdicts.json"), encoding="utf-8") as f:
                ok = str(json.load(f).get("about", "")).startswith("every verdict of this example")
        except (OSError, ValueError, AttributeError):
            ok = False
        if not ok:
            raise SystemExit(f"render_examples: {dest!r} holds files and no example's verdicts.json; not touching it")
    for name in ("figures", "report.md", "config.json", "verdicts.json"):
        path = os.path.join(dest, name)
        if os.path.islink(path):
            raise SystemExit(f"render_examples: {path!r} is a symbolic link; not writing through it")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("cache", help="the cache folder of a finished --quick --paper all run")
    p.add_argument("--work", default="/tmp/examples", help="where the reports are rendered (results.json stays)")
    p.add_argument("--dest", default="docs/example-report")
    args = p.parse_args()
    for sub, selection in EXAMPLES.items():
        work = os.path.join(args.work, sub or "default")
        cmd = [sys.executable, "-m", "invfast", "reproduce", "--quick", *selection]
        cmd += ["--out", work, "--cache-dir", args.cache, "--no-progress"]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        dest = os.path.join(args.dest, sub)
        _check_example_folder(dest)
        os.makedirs(dest, exist_ok=True)
        shutil.rmtree(os.path.join(dest, "figures"), ignore_errors=True)
        shutil.copytree(os.path.join(work, "figures"), os.path.join(dest, "figures"))
        for name in ("report.md", "config.json"):
            shutil.copyfile(os.path.join(work, name), os.path.join(dest, name))
        with open(os.path.join(dest, "verdicts.json"), "w", encoding="utf-8") as f:
            json.dump(verdicts(os.path.join(work, "results.json")), f, indent=1, allow_nan=False)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
