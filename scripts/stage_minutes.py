"""Where an `invfast reproduce` run's time went: stage minutes summed over seeds, and what each paper's findings
and each finding alone would cost (the stages they need, with what those need), from a finished run's results.json.

    python scripts/stage_minutes.py RUN/results.json

The stage times are those measured in the run (each stage timed when it ran; stages run two at a time with
``--workers 2``, so wall time is about half the stage time on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict


def _base(name: str) -> str:
    return re.sub(r"^seed-\d+/", "", name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results")
    args = p.parse_args()
    with open(args.results, encoding="utf-8") as f:
        doc = json.load(f)
    per_stage: dict[str, float] = defaultdict(float)
    for name, t in doc["timings"].items():
        per_stage[_base(name)] += float(t.get("elapsed_s") or 0.0) / 60
    seeds = len(doc.get("seeds") or [0]) if isinstance(doc.get("seeds"), list) else 3
    total = sum(per_stage.values())
    print(f"stage time {total:.1f} min over {seeds} seeds; wall {doc.get('total_elapsed_s', 0) / 60:.1f} min\n")
    print("| stage | min (all seeds) |\n|---|---:|")
    for name, m in sorted(per_stage.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {m:.1f} |")
    from invfast.reproduce.findings import FINDINGS, select
    from invfast.reproduce.pipeline import stage_names
    from invfast.reproduce.presets import preset

    print("\n| finding or paper | stage min needed (all seeds) |\n|---|---:|")
    groups = {f.id: (f.id,) for f in FINDINGS}
    for paper in ("ericsson", "speicher", "chavhan"):
        groups[paper] = select(paper=paper)
    groups["default (no --paper)"] = select()
    for label, ids in groups.items():
        need = {_base(s) for s in stage_names(preset("quick", {"run.findings": ids}))}
        print(f"| {label} | {sum(per_stage.get(s, 0.0) for s in need):.1f} |")


if __name__ == "__main__":
    main()
