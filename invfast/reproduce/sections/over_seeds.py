"""Findings over seeds: every seed's finding statuses combined into one (reproduced only when every
seed reproduces it), the seed-level statistics behind them as mean ± sd, and the *Over seeds* section."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from invfast.reproduce.finding import NOT_RUN
from invfast.reproduce.sections.base import NOT, PARTLY, REPRODUCED, ReportView, Section

__all__ = ["combine_over_seeds", "aggregate_statistics", "SECTION"]


def aggregate_statistics(per_seed: Sequence[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """``{name: {mean, sd, values}}`` over seeds (sd with ddof = 1; 0 for one seed)."""
    out = {}
    for name in per_seed[0]:
        v = np.array([s[name] for s in per_seed if name in s], np.float64)
        out[name] = {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0, "values": v.tolist()}
    return out


def combine_over_seeds(per_seed: Sequence[Sequence[dict[str, Any]]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One finding list from the findings of every seed: *reproduced* only when every seed reproduces
    it, *not reproduced* when no seed shows it even partly, *partly* otherwise. Each finding keeps
    the first seed's details, with ``per_seed_status`` and the status counts in its summary."""
    out = []
    for i, first in enumerate(per_seed[0]):
        statuses = [fs[i]["status"] for fs in per_seed]
        if all(s == NOT_RUN for s in statuses):
            status = NOT_RUN
        elif all(s == REPRODUCED for s in statuses):
            status = REPRODUCED
        elif all(s in (NOT, NOT_RUN) for s in statuses):
            status = NOT
        else:
            status = PARTLY
        f = dict(first)
        f["status"] = status
        f["per_seed_status"] = {str(sd): st for sd, st in zip(seeds, statuses)}
        if len(seeds) > 1 and status != NOT_RUN:
            counts = {st: statuses.count(st) for st in dict.fromkeys(statuses)}
            f["summary"] = (
                f"over {len(seeds)} seeds: "
                + ", ".join(f"{n}× {st}" for st, n in counts.items())
                + f"; seed {seeds[0]}: {first['summary']}"
            )
        out.append(f)
    return out


def _markdown(view: ReportView) -> list[str]:
    doc = view.doc
    ov = doc["over_seeds"]
    seeds = ov["seeds"]
    L = [
        "## Over seeds\n",
        f"Master seeds {', '.join(map(str, seeds))}: every stage (data, initialisation, pretraining, probes' folds "
        "aside) is rerun per seed. A finding is *reproduced* only when it is reproduced for every seed, *not "
        "reproduced* when no seed shows it even partly, *partly* otherwise. Tables and figures below show seed "
        f"{seeds[0]}; `results.json` has every seed's numbers under `per_seed`.\n",
        "| finding | " + " | ".join(f"seed {s}" for s in seeds) + " | over seeds |",
        "|---|" + "---|" * (len(seeds) + 1),
    ]
    for f in doc["findings"]:
        L.append(
            f"| {f['id']} | " + " | ".join(f["per_seed_status"][str(s)] for s in seeds) + f" | **{f['status']}** |"
        )
    L.append("\n| seed-level statistic | mean ± sd | per seed |\n|---|---:|---|")
    for name, v in ov["statistics"].items():
        L.append(f"| {name} | {v['mean']:.3f} ± {v['sd']:.3f} | {', '.join(f'{x:.3f}' for x in v['values'])} |")
    L.append("")
    return L


SECTION = Section("over-seeds", _markdown)
