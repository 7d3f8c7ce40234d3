"""The report's probe section (Table 2): every task x model, mean ± std over folds, the probe figure
and the consistency table behind E3."""

from __future__ import annotations

import os
from typing import Any

from invfast.io import save_figure
from invfast.reproduce.sections.base import MODEL_ORDER, PRETRAINED, ReportView, Section, figure, pm
from invfast.reproduce.stages.data import TASKS

__all__ = ["plot_probes", "SECTION"]


def plot_probes(probes: dict[str, Any], path: str) -> None:
    """One panel per task: mean ± std over folds for every model."""
    fig = figure(3.0 * len(probes), 3.2)
    colours = ["C0", "C1", "C2", "C3", "C4", "C5"]  # the radar's colours for the four single models
    for k, (task, res) in enumerate(probes.items()):
        ax = fig.add_subplot(1, len(probes), k + 1)
        m = [res["scores"][n]["mean"] for n in MODEL_ORDER]
        s = [res["scores"][n]["std"] for n in MODEL_ORDER]
        ax.bar(range(len(MODEL_ORDER)), m, yerr=s, color=colours, capsize=2)
        ax.set_xticks(range(len(MODEL_ORDER)))
        ax.set_xticklabels(MODEL_ORDER, rotation=60, ha="right", fontsize=7)
        ax.set_title(f"{task} ({'accuracy' if res['kind'] == 'classification' else 'R²'})", fontsize=9)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_ylim(min(0.0, min(m) - max(s)), 1.0)
    save_figure(fig, path, dpi=90)


def _content(view: ReportView) -> dict[str, Any]:
    return {"probes": view.first.results["probes"]}


def _figures(view: ReportView) -> dict[str, str]:
    plot_probes(view.first.results["probes"], os.path.join(view.out, "figures", "probes.png"))
    return {"probes": "figures/probes.png"}


def _markdown(view: ReportView) -> list[str]:
    doc = view.doc
    probes = doc["probes"]
    L = [
        "## Probes (Table 2) — E2, E3: mean ± std over folds\n",
        "| model | "
        + " | ".join(f"{t} ({'acc' if v['kind'] == 'classification' else 'R²'})" for t, v in probes.items())
        + " |",
        "|---|" + "|".join("---:" for _ in probes) + "|",
    ]
    for m in MODEL_ORDER:
        cells = []
        for v in probes.values():
            best = max(PRETRAINED + ["Random"], key=lambda n: v["scores"][n]["mean"])
            c = pm(v["scores"][m])
            cells.append(f"**{c}**" if m == best else c)
        L.append(f"| {m} | " + " | ".join(cells) + " |")
    L.append("\nTargets: " + "; ".join(f"{t}: {TASKS[t][1]}" for t in probes) + ". Bold: best mean.\n")
    L.append(f"![probe scores per task]({doc['figures']['probes']})\n")
    f3: dict[str, Any] = next((f for f in doc["findings"] if f["id"] == "E3"), {})
    if "mean_rank" in f3:
        L.append(
            "Consistency across tasks (rank 1 = best of the five pretrained models and fusions; normalised "
            "score 0 = worst, 1 = best on a task):\n"
        )
        L.append("| model | mean rank | worst-task normalised score |\n|---|---:|---:|")
        for m in PRETRAINED:
            L.append(f"| {m} | {f3['mean_rank'][m]:.2f} | {f3['worst_normalised_score'][m]:.2f} |")
    L.append("")
    return L


SECTION = Section("probes", _markdown, content=_content, figures=_figures, needs=("probes",))
