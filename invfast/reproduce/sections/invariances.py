"""E1 (Ericsson et al. 2021, Tab. 1): Spatial models are more invariant to spatial transforms and
Appearance models to appearance ones, with Default between; and the report's Table 1 section."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.ericsson import judge_e1
from invfast.reproduce.sections.base import NOT, PARTLY, REPRODUCED, ReportView, Section
from invfast.reproduce.stages.context import LABELS

__all__ = ["family_means", "check_e1", "FINDING", "SECTION"]

CLAIM = (
    "Spatial models are more invariant to spatial transforms and less to appearance ones than Appearance "
    "models, and vice versa; Default sits between"
)


def family_means(cosine: dict[str, dict[str, float | None]], families: dict[str, str]) -> dict[str, dict[str, float]]:
    """Model -> family -> mean standardised cosine over that family's transforms."""
    out: dict[str, dict[str, float]] = {}
    for model, per_t in cosine.items():
        acc: dict[str, list[float]] = {}
        for t, v in per_t.items():
            if v is not None and math.isfinite(v):
                acc.setdefault(families[t], []).append(v)
        out[model] = {f: float(np.mean(v)) for f, v in acc.items()}
    return out


def _between(x: float, a: float, b: float) -> bool:
    return min(a, b) <= x <= max(a, b)


def check_e1(measure: dict[str, Any]) -> dict[str, Any]:
    """Spatial more invariant to spatial transforms, Appearance to appearance ones, Default between."""
    fm = family_means(measure["cosine"], measure["families"])
    s, a, d = fm["Spatial"], fm["Appearance"], fm["Default"]
    checks = {
        "Spatial > Appearance on spatial transforms": s["spatial"] > a["spatial"],
        "Appearance > Spatial on appearance transforms": a["appearance"] > s["appearance"],
        "Default between Spatial and Appearance (spatial)": _between(d["spatial"], s["spatial"], a["spatial"]),
        "Default between Spatial and Appearance (appearance)": _between(
            d["appearance"], s["appearance"], a["appearance"]
        ),
    }
    per_t = {"spatial": [0, 0], "appearance": [0, 0]}
    for t, fam in measure["families"].items():
        vs, va = measure["cosine"]["Spatial"].get(t), measure["cosine"]["Appearance"].get(t)
        if vs is None or va is None:
            continue
        per_t[fam][1] += 1
        per_t[fam][0] += int(vs > va) if fam == "spatial" else int(va > vs)
    marks = {m: sum(1 for v in measure["best"].values() if v == m) for m in measure["cosine"]}
    main = list(checks.values())[:2]
    status = REPRODUCED if all(checks.values()) else PARTLY if any(main) else NOT
    summary = (
        f"mean cosine on spatial transforms Spatial {s['spatial']:.3f} / Default {d['spatial']:.3f} / "
        f"Appearance {a['spatial']:.3f}; on appearance transforms Spatial {s['appearance']:.3f} / Default "
        f"{d['appearance']:.3f} / Appearance {a['appearance']:.3f}; Spatial beats Appearance on "
        f"{per_t['spatial'][0]}/{per_t['spatial'][1]} spatial transforms and Appearance beats Spatial on "
        f"{per_t['appearance'][0]}/{per_t['appearance'][1]} appearance transforms"
    )
    return {
        "status": status,
        "checks": {k: bool(v) for k, v in checks.items()},
        "family_means": fm,
        "per_transform_wins": per_t,
        "significance_marks": marks,
        "summary": summary,
    }


def _statistics(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    return {
        f"E1: mean cosine, {fam} transforms: {model}": v
        for model, fams in finding["family_means"].items()
        for fam, v in fams.items()
    }


FINDING = Finding(
    "E1",
    "ericsson",
    "Tab. 1",
    CLAIM,
    (
        "Δ_spa = spatial(Spatial) − spatial(Appearance) ≥ 0.10 and Δ_app = appearance(Appearance) − "
        "appearance(Spatial) ≥ 0.10, each 95 % CI over images > 0; Default's relative position in each "
        "family within [0.2, 1.2]"
    ),
    ("measure", "probes"),
    lambda r: check_e1(r["measure"]),
    "invariances",
    _statistics,
    models=("default", "spatial", "appearance"),
    judge=judge_e1,
    test_families=("spatial", "appearance"),
    paper_value="Δ_spa 0.35, Δ_app 0.37, Default's position 0.72 / 0.73 (standardised cosine, Tab. 1)",
)


# ---------------------------------------------------------------------------------------------- section
def _results(view: ReportView) -> list[Any]:
    from invfast.measure import InvarianceResult

    files = view.first.results["measure"]["files"]
    return [InvarianceResult.from_json(os.path.join(view.first.cache, files[LABELS[k]])) for k in LABELS]


def _content(view: ReportView) -> dict[str, Any]:
    m = view.first.results["measure"]
    return {"invariance": {**m, "family_means": family_means(m["cosine"], m["families"])}}


def _figures(view: ReportView) -> dict[str, str]:
    from invfast import report

    figs = {"radar": "figures/radar.png", "heatmap": "figures/heatmap.png"}
    results = _results(view)
    report.plot_radar(results, path=os.path.join(view.out, figs["radar"]))
    report.plot_heatmap(results, path=os.path.join(view.out, figs["heatmap"]))
    return figs


def _markdown(view: ReportView) -> list[str]:
    from invfast import report

    doc, cfg = view.doc, view.cfg
    inv = doc["invariance"]
    L = ["## Invariances (Table 1) — E1\n", report.to_markdown(_results(view), metrics=("cosine", "distance"))]
    n_img, n_models = cfg.data.n_measure, len(inv["cosine"])
    need = 4.0 * math.sqrt(math.log((n_models - 1) / 0.05) / (2 * n_img))
    n_marks = sum(1 for v in inv["best"].values() if v)
    L.append(
        f"\n{n_marks} of {len(inv['best'])} transforms carry a significance mark. With "
        f"{n_img} images, cosines bounded in [−2, 2] and {n_models - 1} Bonferroni comparisons, Hoeffding's test "
        f"marks a model only when its mean per-image cosine exceeds every other model's by more than {need:.2f}."
    )
    L.append("\nMean standardised cosine per family:\n")
    L.append("| model | spatial | appearance |\n|---|---:|---:|")
    for m, fam in inv["family_means"].items():
        L.append(f"| {m} | {fam.get('spatial', float('nan')):.3f} | {fam.get('appearance', float('nan')):.3f} |")
    L.append(f"\n![radar of invariances]({doc['figures']['radar']})\n")
    return L


SECTION = Section("invariances", _markdown, content=_content, figures=_figures, needs=("measure",))
