"""C7 (Chavhan et al. 2023, Tab. 3): what C1-C4 say of the amortised Hyper-ResNet holds for transformers too —
an amortised Prompt-ViT (AI-MoCo) against plain ViTs of the same shape trained with MoCo-v2 and each policy,
judged by C1-C4's own checks; the transformers section."""

from __future__ import annotations

import os
from typing import Any

from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.chavhan import judge_c7
from invfast.reproduce.sections.amortised import FINDINGS as AMORTISED_FINDINGS
from invfast.reproduce.sections.amortised import (
    check_c1,
    check_c2,
    check_c3,
    check_c4,
    downstream_lines,
    interpolation_lines,
    learned_i_lines,
    plot_interpolation,
)
from invfast.reproduce.sections.base import ReportView, Section, combine_statuses
from invfast.reproduce.stages.context import VIT

__all__ = ["STAGES", "check_c7", "FINDING", "SECTION"]

#: the stages C7 reads: C2's measurement of the ViT specialists, then C1's, C3's and C4's of the Prompt-ViT
STAGES = (f"{VIT}measure", f"{VIT}interpolation", f"{VIT}learned-i", f"{VIT}downstream")


def check_c7(results: dict[str, Any]) -> dict[str, Any]:
    """C1-C4, each by its own check, on the transformers' results: *reproduced* when all four are."""
    parts = {
        "C1": check_c1(results[f"{VIT}interpolation"]),
        "C2": check_c2(results[f"{VIT}measure"], results[f"{VIT}interpolation"]),
        "C3": check_c3(results[f"{VIT}learned-i"]),
        "C4": check_c4(results[f"{VIT}downstream"]),
    }
    return {
        "status": combine_statuses([p["status"] for p in parts.values()]),
        "parts": parts,
        "summary": "with transformers " + ", ".join(f"{k} {p['status']}" for k, p in parts.items()),
    }


#: the seed-level statistics of C1-C4, each part of C7 reported through its own finding's
_PART_STATISTICS = {f.id: f.statistics for f in AMORTISED_FINDINGS if f.id in ("C1", "C2", "C3", "C4")}


def _statistics(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    """C1-C4's statistics of the transformers, named 'C7 (C1): ...'."""
    return {
        f"C7 ({fid}): {name.split(': ', 1)[1]}": v
        for fid, part in finding["parts"].items()
        for name, v in _PART_STATISTICS[fid](results, part).items()  # type: ignore[misc]
    }


FINDING = Finding(
    "C7",
    "chavhan",
    "Tab. 3 (Prompt-ViT)",
    "the amortised findings hold for transformers: a Prompt-ViT against ViT specialists",
    ("features at i = [1, 0] and [0, 1] differ by ≥ 5 % of their norm; then C1–C4's rules on the transformers"),
    STAGES,
    check_c7,
    "transformers",
    _statistics,
    models=(VIT,),
    judge=judge_c7,
    paper_value="AI 73.7 vs MoCo-v3 71.5 average (Tab. 3)",
)


# ---------------------------------------------------------------------------------------------- section
def _content(view: ReportView) -> dict[str, Any]:
    r = view.first.results
    return {
        "transformers": {
            "measure": r[f"{VIT}measure"],
            "interpolation": r[f"{VIT}interpolation"],
            "learned_i": r[f"{VIT}learned-i"],
            "downstream": r[f"{VIT}downstream"],
            "parts": {str(run.seed): check_c7(run.results)["parts"] for run in view.runs},
        }
    }


def _figures(view: ReportView) -> dict[str, str]:
    path = os.path.join(view.out, "figures", "vit-interpolation.png")
    plot_interpolation(view.doc["transformers"]["interpolation"], path)
    return {"vit-interpolation": "figures/vit-interpolation.png"}


def _markdown(view: ReportView) -> list[str]:
    cfg, tr = view.cfg, view.doc["transformers"]
    seeds = list(tr["parts"])
    L = [
        "## Transformers — C7\n",
        f"C1-C4 again, with transformers: an amortised Prompt-ViT (AI-MoCo; its prompt token from i through "
        f"8 averaged two-layer MLPs) against plain ViTs of the same shape trained with MoCo-v2 and each policy — "
        f"{cfg.vit.patch}-px patches, width {cfg.vit.dim}, {cfg.vit.depth} blocks of {cfg.vit.heads} heads, "
        f"{cfg.vit.epochs} epochs each with Adam at lr {cfg.vit.lr:g}. Whether each learned is in *Do the models "
        "learn?* (rows 'vit-'). Each part is judged by its own finding's rule:\n",
        "| part | " + " | ".join(f"seed {s}" for s in seeds) + f" | seed {seeds[0]} in numbers |",
        "|---|" + "---|" * len(seeds) + "---|",
    ]
    for part in tr["parts"][seeds[0]]:
        cells = [tr["parts"][s][part]["status"] for s in seeds]
        L.append(f"| {part} | " + " | ".join(cells) + f" | {tr['parts'][seeds[0]][part]['summary']} |")
    L.append(f"\nSeed {view.first.seed}, the Prompt-ViT:\n")
    L += interpolation_lines(tr["interpolation"], view.doc["figures"]["vit-interpolation"])
    L += downstream_lines(tr["downstream"], "Downstream (C4 with transformers)")
    L += learned_i_lines(tr["learned_i"])
    L.append("")
    return L


SECTION = Section("transformers", _markdown, content=_content, figures=_figures, needs=STAGES)
