"""S2 (Speicher et al., "Invariance makes a difference" §3.1, Fig. 2): invariance matters more than
equivariance — a model transfers to new objects under its training transformations (D_transforms)
better than to its training objects under other transformations (D_objects), and nearly as well as to
its own training distribution (D_all)."""

from __future__ import annotations

import os
from typing import Any

from invfast.io import save_figure
from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.speicher import judge_s2
from invfast.reproduce.sections.base import ReportView, Section, at_least, combine_statuses, figure, pm, unpaired

__all__ = ["FEW_POINTS", "check_s2", "FINDING", "SECTION"]

#: "within a few points" of S2 (docs/findings.md): at most this much accuracy below D_all
FEW_POINTS = 0.05
LABELS = {
    "all": "D_all (O1, T1)",
    "transforms": "D_transforms (O2, T1)",
    "objects": "D_objects (O1, T2)",
    "none": "D_none (O2, T2)",
}


def check_s2(s2: dict[str, Any]) -> dict[str, Any]:
    """acc(D_transforms) > acc(D_objects) (Welch t over folds) and acc(D_all) − acc(D_transforms) ≤ FEW_POINTS."""
    sc = s2["scores"]
    t_vs_o = unpaired(sc["transforms"]["fold_scores"], sc["objects"]["fold_scores"])
    gap = sc["all"]["mean"] - sc["transforms"]["mean"]
    checks = {
        "D_transforms > D_objects": t_vs_o["status"],
        f"D_transforms within {FEW_POINTS:.2f} of D_all": at_least(gap <= FEW_POINTS),
    }
    summary = ", ".join(f"{k} {v['mean']:.3f}" for k, v in sc.items()) + (
        f"; transforms − objects {t_vs_o['diff']:+.3f} (Welch t {t_vs_o['t']:.2f}); all − transforms {gap:+.3f}"
    )
    return {
        "status": combine_statuses(list(checks.values())),
        "checks": checks,
        "transforms_vs_objects": t_vs_o,
        "all_minus_transforms": gap,
        "summary": summary,
    }


def _statistics(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    return {f"S2: accuracy on D_{k}": v["mean"] for k, v in results["s2-probe"]["scores"].items()}


FINDING = Finding(
    "S2",
    "speicher",
    "Invariance makes a difference §3.1, Fig. 2",
    "invariance matters more for transfer than equivariance",
    ("crossed contrast C = ½{[same(O2, T1) − same(O1, T2)] + [diff(O2, T2) − diff(O1, T1)]} ≥ 0.05 with CI > 0"),
    ("s2-probe",),
    lambda r: check_s2(r["s2-probe"]),
    "equivariance",
    _statistics,
    models=("transfer-same", "transfer-different"),
    judge=judge_s2,
)


def _figures(view: ReportView) -> dict[str, str]:
    sc = view.first.results["s2-probe"]["scores"]
    fig = figure(3.6, 2.8)
    ax = fig.add_subplot(1, 1, 1)
    ax.bar(range(4), [sc[k]["mean"] for k in LABELS], yerr=[sc[k]["std"] for k in LABELS], color="C2", capsize=2)
    ax.set_xticks(range(4))
    ax.set_xticklabels([LABELS[k].split(" ")[0] for k in LABELS], fontsize=8)
    ax.set_ylabel("accuracy (linear probe)", fontsize=8)
    ax.set_ylim(0, 1)
    ax.tick_params(labelsize=7)
    save_figure(fig, os.path.join(view.out, "figures", "equivariance.png"), dpi=90)
    return {"equivariance": "figures/equivariance.png"}


def _markdown(view: ReportView) -> list[str]:
    r = view.first.results["s2-probe"]
    sc = r["scores"]
    crossed = r.get("accuracy", {}).get("different")  # folders before 0.6 did not probe it
    L = [
        "## Invariance against equivariance — S2\n",
        "The model trained on the source objects O1 under the target's transformations T1 (the transfer "
        "experiment's *same* model)"
        + (
            " and the crossed one trained on O1 under the disjoint transformations T2 (its *different* model)"
            if crossed
            else ""
        )
        + ", probed on:\n",
        "| dataset | (O1, T1) model |"
        + (" (O1, T2) model |" if crossed else "")
        + "\n|---|---:|"
        + ("---:|" if crossed else ""),
    ]
    L += [f"| {LABELS[k]} | {pm(sc[k])} |" + (f" {pm(crossed[k])} |" if crossed else "") for k in LABELS]
    L.append(f"\n![invariance vs equivariance]({view.doc['figures']['equivariance']})\n")
    return L


SECTION = Section(
    "equivariance",
    _markdown,
    content=lambda view: {"equivariance": view.first.results["s2-probe"]},
    figures=_figures,
    needs=("s2-probe",),
)
