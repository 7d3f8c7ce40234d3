"""Per-seed verdicts of two `invfast reproduce` runs side by side, as a markdown table (docs/reproduce.md).

    python scripts/verdict_table.py BEFORE/results.json AFTER/results.json [--labels "0.4 examples" "0.6"]

For each finding and seed: the verdict before and after, and after it the reason a seed was not testable or the
criteria that decided it (estimate [95 % interval] against the minimum). A finding only one run tested shows
"–" on the other side.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def _per_seed(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """finding id -> seed -> its record (``status``, ``verdict`` where the rules of 0.5+ judged it)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for seed, run in results.get("per_seed", {}).items():
        for f in run.get("findings", []):
            out.setdefault(f["id"], {})[str(seed)] = f
    return out


def _over(results: dict[str, Any]) -> dict[str, str]:
    over = results.get("over_seeds", {}).get("verdicts") or {}
    return {k: (v.get("verdict") if isinstance(v, dict) else str(v)) for k, v in over.items()}


def _detail(record: dict[str, Any]) -> str:
    v = record.get("verdict")
    if not isinstance(v, dict):
        return ""
    if v.get("verdict") == "not testable":
        unmet = [p for p in v.get("preconditions", []) if not p.get("met")]
        return "; ".join(f"{p['name']} ({p.get('detail', '')})" for p in unmet) or v.get("why", "")
    crit = v.get("criteria", [])
    short = [c for c in crit if c.get("verdict") != "reproduced"]
    if not short:
        return f"all {len(crit)} parts reach their minimum with CI clear of the boundary"
    parts = []
    for c in short:
        i = c["interval"]
        mark = "✗" if c.get("verdict") == "contradicted" else "short"
        parts.append(
            f"{c['name']}: {i['estimate']:.3f} [{i['low']:.3f}, {i['high']:.3f}] {mark} (min {c['minimum']:g})"
        )
    return "; ".join(parts)


def table(before: dict[str, Any], after: dict[str, Any], labels: tuple[str, str]) -> str:
    b, a = _per_seed(before), _per_seed(after)
    seeds = sorted({s for f in a.values() for s in f} | {s for f in b.values() for s in f}, key=int)
    lines = [f"| finding | seed | {labels[0]} | {labels[1]} | what decided it ({labels[1]}) |", "|---|---|---|---|---|"]
    for fid in sorted(set(a) | set(b), key=lambda k: (k[0] != "E", k[0] != "S", int(k[1:]))):
        for s in seeds:
            rb, ra = b.get(fid, {}).get(s), a.get(fid, {}).get(s)
            if rb is None and ra is None:
                continue
            vb = rb.get("status", "–") if rb else "–"
            va = ra.get("status", "–") if ra else "–"
            lines.append(f"| {fid} | {s} | {vb} | {va} | {_detail(ra) if ra else ''} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--labels", nargs=2, default=("before", "after"))
    args = p.parse_args()
    with open(args.before, encoding="utf-8") as f:
        before = json.load(f)
    with open(args.after, encoding="utf-8") as f:
        after = json.load(f)
    print(table(before, after, tuple(args.labels)))


if __name__ == "__main__":
    main()
