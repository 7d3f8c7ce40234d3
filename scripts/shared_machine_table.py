"""The quiet / loaded table of docs/performance.md from repeated runs of benchmarks/bench_shared_machine.py.

    for i in 1 2 3 4 5; do python -m pytest benchmarks/bench_shared_machine.py --benchmark-only \\
        -o addopts="" -q --benchmark-json=/tmp/shared_$i.json; done
    python scripts/shared_machine_table.py /tmp/shared_*.json

One row per benchmark: the ratio to its baseline quiet and loaded (of the medians over a run's rounds; min-max over
the runs, median in bold), the loaded ratio of the means over a run's rounds (a round that a descheduled thread
held up moves the mean, not the median; "–" for runs that did not record means), kept = loaded / quiet ratio, and
invfast's median time quiet and loaded (median over the runs).
"""

from __future__ import annotations

import json
import statistics
import sys


def rows(docs: list[dict]) -> dict[str, list[dict]]:
    """Benchmark name -> its extra_info in every run, in run order."""
    out: dict[str, list[dict]] = {}
    for doc in docs:
        for b in doc["benchmarks"]:
            if "kept" in b["extra_info"]:
                out.setdefault(b["name"], []).append(b["extra_info"])
    return out


def span(values: list[float], fmt: str = "{:.2f}") -> str:
    """'lo–hi (**median**)' of the values."""
    lo, hi, med = min(values), max(values), statistics.median(values)
    return f"{fmt.format(lo)}–{fmt.format(hi)} (**{fmt.format(med)}**)"


def table(docs: list[dict]) -> list[str]:
    lines = [
        "| benchmark | ratio quiet | ratio loaded | loaded, ratio of means | kept (loaded / quiet) "
        "| invfast ms quiet → loaded | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, runs in rows(docs).items():
        short = name.replace("test_compiled_op_quiet_and_loaded", "op").replace("_quiet_and_loaded", "")
        q = statistics.median(r["quiet_ours_s"] for r in runs) * 1e3
        lo = statistics.median(r["loaded_ours_s"] for r in runs) * 1e3
        means = [r["loaded_mean_ratio"] for r in runs if "loaded_mean_ratio" in r]
        lines.append(
            f"| `{short}` | {span([r['quiet_ratio'] for r in runs])} | {span([r['loaded_ratio'] for r in runs])} | "
            f"{span(means) if means else '–'} | {span([r['kept'] for r in runs])} | {q:.2f} → {lo:.2f} | "
            f"{runs[0].get('goal', '')} |"
        )
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    docs = []
    for path in argv:
        with open(path, encoding="utf-8") as f:
            docs.append(json.load(f))
    print(f"{len(docs)} runs\n")
    print("\n".join(table(docs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
