"""S1 (Speicher et al. 2023, §4.1, Fig. 2-3): invariance matters more than dataset size, architecture
and the class relationship. Per factor: the mean gap within the (same, different) pairs against the
spread of the pairs' accuracy across the factor's values; and the section with the factor gaps as bars."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from invfast.io import save_figure
from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.speicher import judge_s1
from invfast.reproduce.sections.base import ReportView, Section, at_least, combine_statuses, figure, pm

__all__ = ["factor_gaps", "check_s1", "plot_gaps", "FINDING", "SECTION"]


def factor_gaps(rows: dict[str, Any]) -> dict[str, float]:
    """One factor's gaps: ``within`` = mean over values of (same − different) target accuracy;
    ``between_same`` / ``between_different`` = max − min over values of that model's accuracy;
    ``between`` = the larger of the two."""
    same = np.array([r["same"]["mean"] for r in rows.values()])
    diff = np.array([r["different"]["mean"] for r in rows.values()])
    b_same, b_diff = float(np.ptp(same)), float(np.ptp(diff))
    return {
        "within": float((same - diff).mean()),
        "between_same": b_same,
        "between_different": b_diff,
        "between": max(b_same, b_diff),
    }


def check_s1(s1: dict[str, Any]) -> dict[str, Any]:
    """Per factor: the mean within-pair gap exceeds the gap between the factor's values."""
    gaps = {f: factor_gaps(rows) for f, rows in s1["factors"].items()}
    checks = {
        f"{f}: within-pair gap > between-value gap": at_least(g["within"] > g["between"]) for f, g in gaps.items()
    }
    summary = "; ".join(
        f"{f}: same − different {g['within']:+.3f} vs across values {g['between']:.3f}" for f, g in gaps.items()
    )
    return {"status": combine_statuses(list(checks.values())), "checks": checks, "gaps": gaps, "summary": summary}


def _statistics(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    out = {}
    for f, g in finding["gaps"].items():
        out[f"S1: {f}: within-pair gap"] = g["within"]
        out[f"S1: {f}: between-value gap"] = g["between"]
    return out


FINDING = Finding(
    "S1",
    "speicher",
    "Understanding the role of invariance §4.1, Fig. 2-3",
    "invariance matters more for transfer than dataset size, architecture and the class relationship",
    (
        "per factor, every value's within-pair gap (same − different transformation) CI > 0 and the mean "
        "gap above the mean absolute difference between values; every model ≥ 0.9 on its own data"
    ),
    ("s1-probe",),
    lambda r: check_s1(r["s1-probe"]),
    "factors",
    _statistics,
    models=("transfer-same", "transfer-different", "s1-"),
    judge=judge_s1,
)


# ---------------------------------------------------------------------------------------------- section
def plot_gaps(gaps: dict[str, dict[str, float]], path: str) -> None:
    """Per factor: the within-pair gap (invariance) beside the between-value gaps (Speicher's Fig. 3)."""
    fig = figure(4.2, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(gaps))
    parts = [
        ("within", "invariance (same − different)", "C2"),
        ("between_same", "factor, same models", "C0"),
        ("between_different", "factor, different models", "C1"),
    ]
    for k, (key, label, colour) in enumerate(parts):
        ax.bar(x + (k - 1) * 0.27, [g[key] for g in gaps.values()], 0.27, color=colour, label=label)
    ax.set_xticks(x)
    ax.set_xticklabels(list(gaps), fontsize=8)
    ax.set_ylabel("difference in target accuracy", fontsize=8)
    ax.axhline(0, color="0.3", lw=0.5)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)
    save_figure(fig, path, dpi=90)


def _content(view: ReportView) -> dict[str, Any]:
    r = view.first.results
    s1 = r["s1-probe"]
    training = {k: v for f in s1["factors"] for k, v in r[f"s1-train-{f}"]["models"].items()}
    return {
        "factors": {**s1, "gaps": {f: factor_gaps(rows) for f, rows in s1["factors"].items()}, "training": training}
    }


def _figures(view: ReportView) -> dict[str, str]:
    plot_gaps(view.doc["factors"]["gaps"], os.path.join(view.out, "figures", "factors.png"))
    return {"factors": "figures/factors.png"}


def _markdown(view: ReportView) -> list[str]:
    s1 = view.doc["factors"]
    L = [
        "## Invariance against other factors — S1\n",
        "Pairs of supervised models, one trained under the target's transformations (same), one under the "
        "disjoint set (different), per value of each factor; target accuracy of a linear probe on the target "
        "objects under the target transformations (the transfer experiment's target).\n",
        "| factor | value | same | different | same − different |\n|---|---|---:|---:|---:|",
    ]
    for f, rows in s1["factors"].items():
        for v, r in rows.items():
            gap = r["same"]["mean"] - r["different"]["mean"]
            L.append(f"| {f} | {v} | {pm(r['same'])} | {pm(r['different'])} | {gap:+.3f} |")
    L.append(
        "\n| factor | within-pair gap | between values (same) | between values (different) |\n|---|---:|---:|---:|"
    )
    for f, g in s1["gaps"].items():
        L.append(f"| {f} | {g['within']:+.3f} | {g['between_same']:.3f} | {g['between_different']:.3f} |")
    L.append(f"\n![factor gaps]({view.doc['figures']['factors']})\n")
    return L


SECTION = Section("factors", _markdown, content=_content, figures=_figures, needs=("s1-probe",))
