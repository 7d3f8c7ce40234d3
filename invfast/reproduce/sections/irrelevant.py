"""S3 (Speicher et al. 2023, §4.2, Tab. 1): irrelevant features make harmful invariances; S4 (Speicher et
al., "Invariance makes a difference" §4.1, Fig. 4; App. C.3 of the first): relevance matters more than
availability. Their sections: the transfer and sensitivity table of Tab. 1 and the α / β curves."""

from __future__ import annotations

import os
from typing import Any

from invfast.io import save_figure
from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.speicher import judge_s3, judge_s4
from invfast.reproduce.sections.base import (
    ReportView,
    Section,
    combine_statuses,
    figure,
    paired,
    pm,
    trend,
)
from invfast.reproduce.stages.irrelevant import TASKS_XY

__all__ = ["check_s3", "check_s4", "FINDINGS", "SECTIONS"]

XY = [f"{x}/{y}" for x, y in TASKS_XY]


def check_s3(s3: dict[str, Any]) -> dict[str, Any]:
    """What S3's table shows (its verdict is :func:`invfast.reproduce.rules.speicher.judge_s3`): each C+O model
    against the model trained on the same label without the irrelevant feature, at predicting the other label
    on the C+O images, and their sensitivities to that feature."""
    acc, sens = s3["accuracy"], s3["sensitivity"]
    obj, cls = "C+O/O", "C+O/C"
    summary = (
        f"objects on C+O: (C, C) {acc['C/C'][obj]['mean']:.3f} vs (C+O, C) {acc['C+O/C'][obj]['mean']:.3f}; "
        f"base classes on C+O: (O, O) {acc['O/O'][cls]['mean']:.3f} vs (C+O, O) {acc['C+O/O'][cls]['mean']:.3f}; "
        f"sensitivity to the object (C+O, C) {sens['C+O/C']['object']:.3f} vs (C, C) {sens['C/C']['object']:.3f}, "
        f"to the base (C+O, O) {sens['C+O/O']['base']:.3f} vs (O, O) {sens['O/O']['base']:.3f}"
    )
    return {"summary": summary}


def check_s4(s4: dict[str, Any]) -> dict[str, Any]:
    """Object accuracy rises with the correlation α (Spearman) and falls from β = 0 to the first β > 0."""
    alpha, beta = s4["alpha"], s4["beta"]
    rises = trend([r["value"] for r in alpha], [r["accuracy_O"]["mean"] for r in alpha])
    first = next(r for r in beta if r["value"] > 0)
    falls = paired(beta[0]["accuracy_O"]["fold_scores"], first["accuracy_O"]["fold_scores"])
    checks = {
        "object accuracy rises with α": rises["status"],
        f"object accuracy falls from β = 0 to β = {first['value']:g}": falls["status"],
    }
    summary = (
        "object accuracy along α "
        + ", ".join(f"{r['accuracy_O']['mean']:.3f}" for r in alpha)
        + f" (Spearman {rises['rho']:+.2f}, p {rises['p']:.3f}); along β "
        + ", ".join(f"{r['accuracy_O']['mean']:.3f}" for r in beta)
    )
    return {
        "status": combine_statuses(list(checks.values())),
        "checks": checks,
        "alpha_trend": rises,
        "beta_drop": falls,
        "summary": summary,
    }


def _statistics_s3(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    r = results["s3-evaluate"]
    out = {f"S3: ({m}) on {t}": v["mean"] for m, row in r["accuracy"].items() for t, v in row.items()}
    out.update({f"S3: ({m}) sensitivity to the {k}": v for m, row in r["sensitivity"].items() for k, v in row.items()})
    return out


def _statistics_s4(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    r = results["s4-probe"]
    return {
        f"S4: object accuracy at {k} = {row['value']:g}": row["accuracy_O"]["mean"]
        for k in ("alpha", "beta")
        for row in r[k]
    }


FINDINGS = (
    Finding(
        "S3",
        "speicher",
        "Understanding the role of invariance §4.2, Tab. 1",
        "invariance to features that are available but irrelevant harms transfer to tasks that need them",
        (
            "(C, C) − (C+O, C) on objects and (O, O) − (C+O, O) on base classes each ≥ 0.05 with CI > 0, and "
            "each C+O model less sensitive to the irrelevant feature than that model (CI)"
        ),
        ("s3-evaluate",),
        lambda r: check_s3(r["s3-evaluate"]),
        "irrelevant",
        _statistics_s3,
        models=("s3-",),
        judge=judge_s3,
    ),
    Finding(
        "S4",
        "speicher",
        "Invariance makes a difference §4.1, Fig. 4",
        "relevance matters more than availability for which invariances are learned",
        "|acc(α = 1) − acc(α = 0)| − |acc(β = 0) − acc(β = 1)| ≥ 0.05 with CI > 0",
        ("s4-probe",),
        lambda r: check_s4(r["s4-probe"]),
        "relevance",
        _statistics_s4,
        models=("s4-",),
        judge=judge_s4,
    ),
)


# ---------------------------------------------------------------------------------------------- sections
def _s3_markdown(view: ReportView) -> list[str]:
    r = view.first.results["s3-evaluate"]
    L = [
        "## Irrelevant features — S3\n",
        f"Base images `{r['base_images']}` (C) with small random objects pasted (O). Rows: the model's training "
        "data and label; columns: accuracy of a linear probe on held-out images of each (X, Y); last two: the "
        "L2 sensitivity (lower = more invariant) to swapping the object, or the base image, of C+O images.\n",
        "| trained on (X, Y) | "
        + " | ".join(f"({c.replace('/', ', ')})" for c in XY)
        + " | sens. object | sens. base |",
        "|---|" + "---:|" * (len(XY) + 2),
    ]
    for m in XY:
        row = " | ".join(pm(r["accuracy"][m][c]) for c in XY)
        s = r["sensitivity"][m]
        L.append(f"| ({m.replace('/', ', ')}) | {row} | {s['object']:.3f} | {s['base']:.3f} |")
    L.append("")
    return L


def _s4_figures(view: ReportView) -> dict[str, str]:
    r = view.first.results["s4-probe"]
    fig = figure(6.4, 2.8)
    for k, (kind, label) in enumerate((("alpha", "correlation α"), ("beta", "availability β"))):
        ax = fig.add_subplot(1, 2, k + 1)
        x = [row["value"] for row in r[kind]]
        for y, colour, name in (("O", "C3", "object"), ("C", "C0", "base class")):
            ax.plot(x, [row[f"accuracy_{y}"]["mean"] for row in r[kind]], "-o", ms=3, color=colour, label=name)
        ax.set_xlabel(label, fontsize=8)
        ax.set_ylabel("accuracy on C+O (linear probe)", fontsize=8)
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7)
        ax.tick_params(labelsize=7)
    save_figure(fig, os.path.join(view.out, "figures", "relevance.png"), dpi=90)
    return {"relevance": "figures/relevance.png"}


def _s4_markdown(view: ReportView) -> list[str]:
    r = view.first.results["s4-probe"]
    L = [
        "## Relevance against availability — S4\n",
        "Models trained to predict the base class on C+O images whose object matches the base class with "
        "probability α, or is present with probability β; probed on held-out C+O images for both labels.\n",
        "| sweep | value | object accuracy | base-class accuracy |\n|---|---:|---:|---:|",
    ]
    for kind in ("alpha", "beta"):
        for row in r[kind]:
            L.append(f"| {kind} | {row['value']:g} | {pm(row['accuracy_O'])} | {pm(row['accuracy_C'])} |")
    L.append(f"\n![relevance and availability]({view.doc['figures']['relevance']})\n")
    return L


SECTIONS = (
    Section(
        "irrelevant",
        _s3_markdown,
        content=lambda view: {
            "irrelevant": {**view.first.results["s3-evaluate"], "training": view.first.results["s3-train"]["models"]}
        },
        needs=("s3-evaluate",),
    ),
    Section(
        "relevance",
        _s4_markdown,
        content=lambda view: {"relevance": view.first.results["s4-probe"]},
        figures=_s4_figures,
        needs=("s4-probe",),
    ),
)
