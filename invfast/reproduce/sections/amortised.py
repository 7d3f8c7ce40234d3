"""C1 and C3 (Chavhan et al. 2023, Fig. 1-2): an amortised model moves its invariances smoothly with its
descriptor i, and the i learned per task puts more weight on spatial invariance for recognition than
for regression; the amortised section."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from invfast.reproduce.finding import Finding
from invfast.reproduce.sections.base import DIRECTION, NOT, REPRODUCED, ReportView, Section, combine_statuses, figure

__all__ = ["MONOTONE", "check_c1", "check_c3", "plot_interpolation", "FINDINGS", "SECTION"]

#: |Spearman ρ| along i at which a family's invariance counts as monotone in i
MONOTONE = 0.8
#: the regression tasks C3 compares recognition (identity) with: the pose-like ones
REGRESSION = ("position", "rotation")


def _path(interpolation: dict[str, Any]) -> list[dict[str, Any]]:
    """The points i = (1 − t, t) (Default [1, 1] left out)."""
    return [p for p in interpolation["points"] if not (p["i"][0] == 1.0 and p["i"][1] == 1.0)]


def check_c1(interpolation: dict[str, Any]) -> dict[str, Any]:
    """Along i = (1 − t, t) the spatial family's invariance falls and the appearance family's rises:
    per family *reproduced* when ±ρ ≥ :data:`MONOTONE`, *direction only* when the sign is right."""
    from scipy import stats as st

    pts = _path(interpolation)
    t = np.array([p["i"][1] for p in pts])
    fams = {}
    for fam, sign in (("spatial", -1), ("appearance", 1)):
        v = np.array([p["family_cosine"][fam] for p in pts])
        rho = float(st.spearmanr(t, v).statistic) if len(v) > 2 and np.ptp(v) > 0 else 0.0
        status = REPRODUCED if sign * rho >= MONOTONE else DIRECTION if sign * rho > 0 else NOT
        fams[fam] = {"values": v.tolist(), "spearman": rho, "expected": "down" if sign < 0 else "up", "status": status}
    summary = "; ".join(
        f"{fam}-family cosine {f['values'][0]:.3f} → {f['values'][-1]:.3f} along i (Spearman {f['spearman']:+.2f}, "
        f"expected {f['expected']}: {f['status']})"
        for fam, f in fams.items()
    )
    return {"status": combine_statuses([f["status"] for f in fams.values()]), "families": fams, "summary": summary}


def check_c3(learned_i: dict[str, Any]) -> dict[str, Any]:
    """Recognition (identity) learns a larger spatial entry of i than each pose-like regression task."""
    spatial = {task: float(v["i"][0]) for task, v in learned_i.items()}
    checks = {f"identity > {task}": REPRODUCED if spatial["identity"] > spatial[task] else NOT for task in REGRESSION}
    summary = "learned spatial entry of i: " + ", ".join(f"{t} {v:.3f}" for t, v in spatial.items())
    return {
        "status": combine_statuses(list(checks.values())),
        "spatial_entry": spatial,
        "checks": checks,
        "summary": summary,
    }


def _statistics_c1(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    return {f"C1: Spearman along i, {fam}": v["spearman"] for fam, v in finding["families"].items()}


def _statistics_c3(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    return {f"C3: learned spatial entry of i, {t}": v for t, v in finding["spatial_entry"].items()}


FINDINGS = (
    Finding(
        "C1",
        "chavhan",
        "Fig. 1",
        "an amortised model moves its invariances smoothly with i",
        "monotone family invariance along i (Spearman)",
        ("amortised-interpolation",),
        lambda r: check_c1(r["amortised-interpolation"]),
        "amortised",
        _statistics_c1,
    ),
    Finding(
        "C3",
        "chavhan",
        "Fig. 2",
        "the i learned per task differs between recognition and regression",
        "recognition tasks put more weight on spatial invariance than regression tasks",
        ("amortised-learned-i",),
        lambda r: check_c3(r["amortised-learned-i"]),
        "amortised",
        _statistics_c3,
    ),
)


# ---------------------------------------------------------------------------------------------- section
def plot_interpolation(interp: dict[str, Any], path: str) -> None:
    """Family-mean standardised cosine along i = (1 − t, t)."""
    pts = _path(interp)
    t = [p["i"][1] for p in pts]
    fig = figure(4.0, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    for fam, c in (("spatial", "C1"), ("appearance", "C2")):
        ax.plot(t, [p["family_cosine"][fam] for p in pts], "-o", color=c, ms=4, label=f"{fam} transforms")
    ax.set_xlabel("t in i = (1 − t, t): Spatial [1,0] → Appearance [0,1]", fontsize=8)
    ax.set_ylabel("mean standardised cosine", fontsize=8)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)
    fig.savefig(path, dpi=90)


def _content(view: ReportView) -> dict[str, Any]:
    r = view.first.results
    parts = {"interpolation": "amortised-interpolation", "learned_i": "amortised-learned-i"}
    return {"amortised": {k: r[stage] for k, stage in parts.items() if stage in r}}


def _figures(view: ReportView) -> dict[str, str]:
    am = view.doc["amortised"]
    if "interpolation" not in am:
        return {}
    os.makedirs(os.path.join(view.out, "figures"), exist_ok=True)
    plot_interpolation(am["interpolation"], os.path.join(view.out, "figures", "interpolation.png"))
    return {"interpolation": "figures/interpolation.png"}


def _markdown(view: ReportView) -> list[str]:
    am = view.doc["amortised"]
    L = ["## Amortised invariance — C1, C3\n"]
    if "interpolation" in am:
        L.append("Invariance along i = (1 − t, t) (mean standardised cosine per family):\n")
        L.append("| i | spatial | appearance |\n|---|---:|---:|")
        for p in am["interpolation"]["points"]:
            L.append(
                f"| ({p['i'][0]:.2f}, {p['i'][1]:.2f}) | {p['family_cosine'].get('spatial', float('nan')):.3f} | "
                f"{p['family_cosine'].get('appearance', float('nan')):.3f} |"
            )
        L.append(f"\n![invariance vs i]({view.doc['figures']['interpolation']})\n")
    if "learned_i" in am:
        L.append("Learned i per task (InvarianceProbe: linear head and i from 0.5, held-out score):\n")
        L.append("| task | learned i (spatial, appearance) | held-out score |\n|---|---|---:|")
        for t, v in am["learned_i"].items():
            L.append(f"| {t} | ({v['i'][0]:.3f}, {v['i'][1]:.3f}) | {v['score']:.3f} |")
    L.append("")
    return L


SECTION = Section("amortised", _markdown, content=_content, figures=_figures, needs=("pretrain-amortised",))
