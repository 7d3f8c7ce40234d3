"""S5 (Speicher et al., "Invariance makes a difference" §4.2, Fig. 5): invariance transfers between
classes — the model trained on D_T1⊕T2 (O1 under T1, O2 under T2) does nearly as well as the native
models on D_T1 and D_T2, but poorly on D_T1∘T2; the section with the transfer matrix."""

from __future__ import annotations

import os
from typing import Any

from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.speicher import judge_s5
from invfast.reproduce.sections.base import (
    DIRECTION,
    NOT,
    REPRODUCED,
    ReportView,
    Section,
    combine_statuses,
    paired,
    pm,
)
from invfast.reproduce.stages.class_transfer import DATASETS

__all__ = ["check_s5", "FINDING", "SECTION"]


def _near(oplus: float, native: float, other: float) -> str:
    """⊕ 'near' the native model: it closes at least half of the gap from the other set's model to the
    native one (*reproduced*), or at least beats the other set's model (*direction only*)."""
    if oplus - other >= 0.5 * (native - other) and native > other:
        return REPRODUCED
    return DIRECTION if oplus > other else NOT


def check_s5(s5: dict[str, Any]) -> dict[str, Any]:
    acc = s5["accuracy"]
    checks = {}
    for d, other in (("T1", "T2"), ("T2", "T1")):
        m = {k: acc[k][d]["mean"] for k in ("oplus", d, other)}
        checks[f"⊕ near the native model on {DATASETS[d]}"] = _near(m["oplus"], m[d], m[other])
    poor = paired(acc["circ"]["circ"]["fold_scores"], acc["oplus"]["circ"]["fold_scores"])
    checks["⊕ below the ∘ model on D_T1∘T2"] = poor["status"]
    summary = "; ".join(
        f"on {DATASETS[d]}: " + ", ".join(f"{DATASETS[m].replace('D_', '')} {acc[m][d]['mean']:.3f}" for m in DATASETS)
        for d in DATASETS
    )
    return {
        "status": combine_statuses(list(checks.values())),
        "checks": checks,
        "circ_vs_oplus": poor,
        "summary": summary,
    }


def _statistics(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    acc = results["s5-probe"]["accuracy"]
    return {f"S5: trained on {DATASETS[m]}, probed on {DATASETS[d]}": acc[m][d]["mean"] for m in acc for d in acc[m]}


FINDING = Finding(
    "S5",
    "speicher",
    "Invariance makes a difference §4.2, Fig. 5",
    "invariance learned on some classes transfers to other classes",
    (
        "on the (object, transformation) pairs the ⊕ model never saw, transfer (⊕ − other)/(native − "
        "other) ≥ 0.7 with CI above 0.5; the ∘ model beats ⊕ on D_T1∘T2 by ≥ 0.05; native models ≥ 0.8"
    ),
    ("s5-probe",),
    lambda r: check_s5(r["s5-probe"]),
    "class-transfer",
    _statistics,
    models=("s5-",),
    judge=judge_s5,
)


def _figures(view: ReportView) -> dict[str, str]:
    from invfast.report import plot_matrix

    acc = view.first.results["s5-probe"]["accuracy"]
    names = [DATASETS[k] for k in DATASETS]
    values = [[acc[m][d]["mean"] for d in DATASETS] for m in DATASETS]
    path = os.path.join(view.out, "figures", "class_transfer.png")
    plot_matrix(values, names, names, xlabel="probed on", ylabel="trained on", label="accuracy", path=path)
    return {"class_transfer": "figures/class_transfer.png"}


def _markdown(view: ReportView) -> list[str]:
    r = view.first.results["s5-probe"]
    acc = r["accuracy"]
    L = [
        "## Invariance across classes — S5\n",
        f"O1, O2: {r['objects_per_group']} objects each; T1 = {{{', '.join(r['T1'])}}}, T2 = {{{', '.join(r['T2'])}}}. "
        "Rows: training set; columns: linear-probe accuracy on each set.\n",
        "| trained on \\ probed on | " + " | ".join(DATASETS.values()) + " |",
        "|---|" + "---:|" * len(DATASETS),
    ]
    for m in DATASETS:
        L.append(f"| {DATASETS[m]} | " + " | ".join(pm(acc[m][d]) for d in DATASETS) + " |")
    L.append(f"\n![class transfer]({view.doc['figures']['class_transfer']})\n")
    return L


SECTION = Section(
    "class-transfer",
    _markdown,
    content=lambda view: {"class_transfer": view.first.results["s5-probe"]},
    figures=_figures,
    needs=("s5-probe",),
)
