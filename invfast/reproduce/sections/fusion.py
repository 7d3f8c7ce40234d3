"""E3 (Ericsson et al. 2021, §4): concatenating Spatial + Appearance (+ Default) features is the
most consistent model across all probe tasks (best mean rank and best worst-task score)."""

from __future__ import annotations

from typing import Any

import numpy as np

from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.ericsson import judge_e3
from invfast.reproduce.sections.base import NOT, PARTLY, PRETRAINED, REPRODUCED
from invfast.reproduce.stages.context import EXTRA_DEFAULTS
from invfast.reproduce.stages.data import TASKS

__all__ = ["check_e3", "FINDING"]

CLAIM = "concatenating Spatial + Appearance (+ Default) features is the most consistent across all tasks"
FUSED = ("Spa+App", "Def+Spa+App")


def check_e3(probes: dict[str, Any]) -> dict[str, Any]:
    """A fusion (Spa+App or Def+Spa+App) is the most consistent model across tasks."""
    ranks: dict[str, list[int]] = {m: [] for m in PRETRAINED}
    rel: dict[str, list[float]] = {m: [] for m in PRETRAINED}
    for task in TASKS:
        sc = probes[task]["scores"]
        vals = {m: sc[m]["mean"] for m in PRETRAINED}
        lo, hi = min(vals.values()), max(vals.values())
        for m in PRETRAINED:
            ranks[m].append(1 + sum(1 for o in PRETRAINED if vals[o] > vals[m]))
            rel[m].append(1.0 if hi == lo else (vals[m] - lo) / (hi - lo))
    mean_rank = {m: float(np.mean(r)) for m, r in ranks.items()}
    worst = {m: float(min(r)) for m, r in rel.items()}
    best_rank = min(mean_rank.values())
    most_consistent = [m for m in PRETRAINED if mean_rank[m] == best_rank]
    fusion_best = any(m in FUSED for m in most_consistent)
    best_worst = max(worst.values())
    fusion_worst_best = best_worst > 0 and any(worst[m] == best_worst for m in FUSED)
    status = REPRODUCED if fusion_best and fusion_worst_best else PARTLY if (fusion_best or fusion_worst_best) else NOT
    summary = (
        f"best mean rank over the {len(TASKS)} tasks: {', '.join(most_consistent)} ({best_rank:.2f}); "
        f"mean ranks "
        + ", ".join(f"{m} {mean_rank[m]:.2f}" for m in PRETRAINED)
        + "; worst-task normalised score "
        + ", ".join(f"{m} {worst[m]:.2f}" for m in PRETRAINED)
    )
    return {
        "status": status,
        "mean_rank": mean_rank,
        "ranks": ranks,
        "worst_normalised_score": worst,
        "most_consistent": most_consistent,
        "summary": summary,
    }


def _statistics(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    return {f"E3: mean rank: {m}": r for m, r in finding["mean_rank"].items()}


FINDING = Finding(
    "E3",
    "ericsson",
    "§4",
    CLAIM,
    (
        "Def+Spa+App's worst-task normalised score − 3×Default's ≥ 0.02 with CI > 0, and its mean score "
        "not below 3×Default's by more than 0.02"
    ),
    ("probes", "probes-3xdefault"),
    lambda r: check_e3(r["probes"]),
    "probes",
    _statistics,
    models=("default", "spatial", "appearance", *EXTRA_DEFAULTS),
    judge=judge_e3,
    paper_value="Def+Spa+App worst-task 0.92 vs 3×Default 0.69; mean 0.71 vs 0.69 (Tab. 2)",
)
