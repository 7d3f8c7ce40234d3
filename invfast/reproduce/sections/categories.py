"""S6 (Speicher et al., "Invariance makes a difference" §4.3, Fig. 6): some invariances are harder to
acquire — translation, rotation and colour jitter — and the between/within-class distance ratio tracks
transfer; S7 (Speicher et al. 2023, §5.1, Tab. 2, App. D.2): invariance transfers out of distribution.
Their sections: the transfer matrix and distance ratios as heat maps, and the OOD sensitivity table."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.speicher import judge_s6, judge_s7
from invfast.reproduce.sections.base import (
    DIRECTION,
    NOT,
    REPRODUCED,
    ReportView,
    Section,
    at_least,
    combine_statuses,
    trend,
)
from invfast.reproduce.stages.categories import KINDS, NONE, OOD

__all__ = ["HARD", "column_means", "check_s6", "ood_summary", "check_s7", "FINDINGS", "SECTIONS"]

#: the categories the paper found hard to transfer to, by the types that make them
HARD = {"translate": "translate", "rotate": "rotate", "hue+brightness+contrast": "colour jitter"}


def column_means(s6: dict[str, Any]) -> dict[str, float]:
    """Per category: mean accuracy on its data of the models trained on the other categories."""
    acc, cats = s6["accuracy"], s6["categories"]
    return {c: float(np.mean([acc[m][c]["mean"] for m in cats if m != c])) for c in cats}


def check_s6(s6: dict[str, Any]) -> dict[str, Any]:
    """The hard categories present are the lowest columns (each among the |hard| lowest); the distance
    ratio rank-correlates with transfer accuracy over every (model, category) cell."""
    cols = column_means(s6)
    hard = [c for c in s6["categories"] if c in HARD]
    lowest = sorted(cols, key=lambda c: cols[c])[: len(hard)]
    checks = {f"{HARD[c]} among the {len(hard)} lowest columns": at_least(c in lowest) for c in hard}
    models = [*s6["categories"], NONE]
    pairs = [(s6["distance_ratio"][m][c], s6["accuracy"][m][c]["mean"]) for m in models for c in s6["categories"]]
    corr = trend([p[0] for p in pairs], [p[1] for p in pairs])
    checks["distance ratio rank-correlates with transfer accuracy"] = corr["status"]
    summary = (
        "mean transfer to each category from the others: "
        + ", ".join(f"{c} {v:.3f}" for c, v in sorted(cols.items(), key=lambda kv: kv[1]))
        + f"; Spearman(distance ratio, accuracy) {corr['rho']:+.2f} (p {corr['p']:.3f}, {len(pairs)} cells)"
    )
    return {
        "status": combine_statuses(list(checks.values())),
        "checks": checks,
        "columns": cols,
        "correlation": corr,
        "summary": summary,
    }


def ood_summary(rows: dict[str, dict[str, float]], cats: list[str]) -> dict[str, Any]:
    """One (model kind, OOD level) block: sensitivity of each model to its own category (Same), of the
    other trained models to it (Other), of the none and untrained models; columns where the diagonal is
    the lowest of the trained models, and below the none model."""
    same = [rows[c][c] for c in cats]
    other = [rows[m][c] for c in cats for m in cats if m != c]
    diag_min = sum(all(rows[c][c] < rows[m][c] for m in cats if m != c) for c in cats)
    below_none = sum(rows[c][c] < rows[NONE][c] for c in cats)
    return {
        "same": float(np.mean(same)),
        "other": float(np.mean(other)),
        "none": float(np.mean([rows[NONE][c] for c in cats])),
        "untrained": float(np.mean([rows["untrained"][c] for c in cats])),
        "diagonal_lowest": int(diag_min),
        "below_none": int(below_none),
        "columns": len(cats),
    }


def _graded(all_columns: bool, on_average: bool) -> str:
    return REPRODUCED if all_columns else DIRECTION if on_average else NOT


def check_s7(s7: dict[str, Any]) -> dict[str, Any]:
    """In every (model kind, OOD level): each category's own model is the most invariant to it (every
    column; *direction only* when Same < Other on average) and more invariant than the model trained
    without transformations (every column; *direction only* on average)."""
    cats = s7["categories"]
    blocks = {
        kind: {level: ood_summary(rows, cats) for level, rows in s7["sensitivity"][kind].items()} for kind in KINDS
    }
    checks = {}
    for kind, levels in blocks.items():
        for level, b in levels.items():
            n = b["columns"]
            checks[f"{kind} models, {level}: own category most invariant"] = _graded(
                b["diagonal_lowest"] == n, b["same"] < b["other"]
            )
            checks[f"{kind} models, {level}: below the no-transformation baseline"] = _graded(
                b["below_none"] == n, b["same"] < b["none"]
            )
    summary = "; ".join(
        f"{kind}, {level}: Same {b['same']:.3f} / Other {b['other']:.3f} / None {b['none']:.3f}"
        for kind, levels in blocks.items()
        for level, b in levels.items()
    )
    return {"status": combine_statuses(list(checks.values())), "checks": checks, "blocks": blocks, "summary": summary}


def _statistics_s6(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    out = {f"S6: transfer to {c} from the other categories": v for c, v in finding["columns"].items()}
    out["S6: Spearman(distance ratio, accuracy)"] = finding["correlation"]["rho"]
    return out


def _statistics_s7(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    return {
        f"S7: {kind}, {level}: sensitivity {k}": b[k]
        for kind, levels in finding["blocks"].items()
        for level, b in levels.items()
        for k in ("same", "other", "none")
    }


FINDINGS = (
    Finding(
        "S6",
        "speicher",
        "Invariance makes a difference §4.3, Fig. 6",
        "some invariances (translation, rotation, colour jitter) are harder to acquire, and the between/within "
        "class distance ratio tracks it",
        (
            "columns normalised by their native model: the three hard categories are the three lowest column "
            "means in ≥ 80 % of bootstrap resamples; the distance ratio tracks accuracy within columns, above"
            " the untrained network"
        ),
        ("s6-probe",),
        lambda r: check_s6(r["s6-probe"]),
        "categories",
        _statistics_s6,
        models=("cat-image-",),
        judge=judge_s6,
    ),
    Finding(
        "S7",
        "speicher",
        "Understanding the role of invariance §5.1, Tab. 2",
        "invariance transfers out of distribution",
        (
            "per level, in ≥ 75 % of columns the own model is less sensitive than every other model, the none"
            " model and an untrained network, each CI excluding 0 (≥ 2 000 pairs)"
        ),
        ("s7-sensitivity",),
        lambda r: check_s7(r["s7-sensitivity"]),
        "ood",
        _statistics_s7,
        models=("cat-image-", "cat-random-"),
        judge=judge_s7,
    ),
)


# ---------------------------------------------------------------------------------------------- sections
def _label(c: str) -> str:
    return "colour jitter" if c == "hue+brightness+contrast" else c


def _s6_figures(view: ReportView) -> dict[str, str]:
    from invfast.report import plot_matrix

    r = view.first.results["s6-probe"]
    cats = r["categories"]
    models = [*cats, NONE]
    acc = [[r["accuracy"][m][c]["mean"] for c in cats] for m in models]
    ratio_models = [*models, "untrained"]
    ratio = [[r["distance_ratio"][m][c] for c in cats] for m in ratio_models]
    cols = [_label(c) for c in cats]
    plot_matrix(
        acc,
        [_label(m) for m in models],
        cols,
        xlabel="probed on",
        ylabel="trained on",
        label="accuracy",
        path=os.path.join(view.out, "figures", "categories_transfer.png"),
    )
    plot_matrix(
        ratio,
        [_label(m) for m in ratio_models],
        cols,
        xlabel="features of data under",
        ylabel="model",
        label="between / within L2",
        vmin=None,
        vmax=None,
        cmap="magma",
        path=os.path.join(view.out, "figures", "categories_ratio.png"),
    )
    return {
        "categories_transfer": "figures/categories_transfer.png",
        "categories_ratio": "figures/categories_ratio.png",
    }


def _s6_markdown(view: ReportView) -> list[str]:
    r = view.first.results["s6-probe"]
    cols = column_means(r)
    L = [
        "## Which invariances are hard to acquire — S6\n",
        f"One model per category ({', '.join(_label(c) for c in r['categories'])}) and one without transformations; "
        "rows: training category, columns: linear-probe accuracy on each category's data.\n",
        "| trained on \\ probed on | " + " | ".join(_label(c) for c in r["categories"]) + " |",
        "|---|" + "---:|" * len(r["categories"]),
    ]
    for m in [*r["categories"], NONE]:
        L.append(f"| {_label(m)} | " + " | ".join(f"{r['accuracy'][m][c]['mean']:.3f}" for c in r["categories"]) + " |")
    L.append("| *mean from the other categories* | " + " | ".join(f"*{cols[c]:.3f}*" for c in r["categories"]) + " |")
    if "untrained" in r["accuracy"]:  # S6's control (folders before 0.6 did not probe it)
        cells = " | ".join(f"{r['accuracy']['untrained'][c]['mean']:.3f}" for c in r["categories"])
        L.append(f"| untrained network (control) | {cells} |")
    L.append(f"\n![transfer matrix]({view.doc['figures']['categories_transfer']})\n")
    L.append(f"![distance ratios]({view.doc['figures']['categories_ratio']})\n")
    return L


def _s7_markdown(view: ReportView) -> list[str]:
    r = view.first.results["s7-sensitivity"]
    cats = r["categories"]
    L = [
        "## Invariance out of distribution — S7\n",
        f"L2 sensitivity (lower = more invariant) on {r['n']} pairs per category that differ only in that "
        "category's transformation, averaged over the categories: of each model to its own category (Same), of "
        "the trained models to the others' (Other), of the model trained without transformations (None) and "
        "of the untrained network. Image models train on Transforms-2D objects, random models on random "
        "patterns; mild OOD = other objects (other patterns), strong OOD = the other kind of data.\n",
        "| models | data | Same | Other | None | untrained | own model lowest | Same < None |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in KINDS:
        for level, rows in r["sensitivity"][kind].items():
            b = ood_summary(rows, cats)
            L.append(
                f"| {kind} | {level} | {b['same']:.3f} | {b['other']:.3f} | {b['none']:.3f} | {b['untrained']:.3f} | "
                f"{b['diagonal_lowest']}/{b['columns']} | {b['below_none']}/{b['columns']} |"
            )
    L.append("")
    return L


SECTIONS = (
    Section(
        "categories",
        _s6_markdown,
        content=lambda view: {"categories": view.first.results["s6-probe"]},
        figures=_s6_figures,
        needs=("s6-probe",),
    ),
    Section(
        "ood",
        _s7_markdown,
        content=lambda view: {"ood": {**view.first.results["s7-sensitivity"], "levels": OOD}},
        needs=("s7-sensitivity",),
    ),
)
