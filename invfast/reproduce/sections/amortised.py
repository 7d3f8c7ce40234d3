"""Finding 5 (Chavhan et al. 2023): an amortised model moves its invariances smoothly with its
descriptor i, and the i learned per task differs between recognition and regression; its section."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from invfast.reproduce.sections.base import NOT, NOT_RUN, PARTLY, REPRODUCED, Finding, ReportView, Section, figure

__all__ = ["finding_5", "amortised_results", "plot_interpolation", "FINDING", "SECTION"]

CLAIM = (
    "an amortised model moves its invariances smoothly with i, and the learned i differs between recognition "
    "and regression tasks"
)


def amortised_results(results: dict[str, Any]) -> dict[str, Any] | None:
    """``{interpolation, learned_i}`` of one seed's stage results (None when the amortised stages did not run)."""
    if "amortised-interpolation" not in results:
        return None
    return {"interpolation": results["amortised-interpolation"], "learned_i": results["amortised-learned-i"]}


def finding_5(amortised: dict[str, Any] | None, threshold: float = 0.1) -> dict[str, Any]:
    """The amortised model's invariances move smoothly with i; learned i differs between recognition
    (identity) and regression (position, rotation) tasks by at least ``threshold`` in some entry."""
    claim = CLAIM
    if amortised is None:
        return {
            "id": 5,
            "claim": claim,
            "status": NOT_RUN,
            "summary": "the amortised model is not trained in this configuration (--set amortised=true adds it)",
        }
    from scipy import stats as st

    pts = [p for p in amortised["interpolation"]["points"] if not (p["i"][0] == 1.0 and p["i"][1] == 1.0)]
    t = np.array([p["i"][1] for p in pts])
    smooth = {}
    for fam, sign in (("spatial", -1), ("appearance", 1)):
        v = np.array([p["family_cosine"][fam] for p in pts])
        rho = float(st.spearmanr(t, v).statistic) if len(v) > 2 and np.ptp(v) > 0 else 0.0
        total = float(v[-1] - v[0])
        max_step = float(np.abs(np.diff(v)).max()) if len(v) > 1 else 0.0
        ok_dir = sign * rho >= 0.8
        ok_smooth = len(v) < 3 or max_step <= 0.5 * abs(total) + 1e-12 or max_step <= 0.02
        smooth[fam] = {
            "values": v.tolist(),
            "spearman": rho,
            "change": total,
            "max_step": max_step,
            "expected_direction": "down" if sign < 0 else "up",
            "monotone": bool(ok_dir),
            "smooth": bool(ok_smooth),
        }
    li = amortised["learned_i"]
    diffs = {
        task: float(np.max(np.abs(np.array(li["identity"]["i"]) - np.array(li[task]["i"]))))
        for task in ("position", "rotation")
    }
    differs = max(diffs.values()) >= threshold
    smooth_ok = all(v["monotone"] and v["smooth"] for v in smooth.values())
    status = REPRODUCED if smooth_ok and differs else PARTLY if (smooth_ok or differs) else NOT
    summary = (
        f"along i = (1−t, t) the spatial-family cosine goes {smooth['spatial']['values'][0]:.3f} → "
        f"{smooth['spatial']['values'][-1]:.3f} (Spearman {smooth['spatial']['spearman']:+.2f}) and the "
        f"appearance-family cosine {smooth['appearance']['values'][0]:.3f} → "
        f"{smooth['appearance']['values'][-1]:.3f} (Spearman {smooth['appearance']['spearman']:+.2f}); learned i: "
        + ", ".join(f"{k} ({v['i'][0]:.2f}, {v['i'][1]:.2f})" for k, v in li.items())
        + f"; largest entry difference identity vs regression {max(diffs.values()):.2f} (threshold {threshold})"
    )
    return {
        "id": 5,
        "claim": claim,
        "status": status,
        "smoothness": smooth,
        "i_differences": diffs,
        "threshold": threshold,
        "summary": summary,
    }


def _statistics(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    if finding["status"] == NOT_RUN:
        return {}
    out = {f"finding 5: Spearman along i, {fam}": v["spearman"] for fam, v in finding["smoothness"].items()}
    out["finding 5: largest learned-i difference identity vs regression"] = max(finding["i_differences"].values())
    return out


FINDING = Finding(5, "Chavhan et al. 2023", CLAIM, (), lambda r: finding_5(amortised_results(r)), _statistics)


# ---------------------------------------------------------------------------------------------- section
def plot_interpolation(interp: dict[str, Any], path: str) -> None:
    """Family-mean standardised cosine along i = (1 − t, t)."""
    pts = [p for p in interp["points"] if not (p["i"][0] == 1.0 and p["i"][1] == 1.0)]
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
    return {"amortised": amortised_results(view.first.results)}


def _figures(view: ReportView) -> dict[str, str]:
    am = amortised_results(view.first.results)
    if am is None:
        return {}
    os.makedirs(os.path.join(view.out, "figures"), exist_ok=True)
    plot_interpolation(am["interpolation"], os.path.join(view.out, "figures", "interpolation.png"))
    return {"interpolation": "figures/interpolation.png"}


def _markdown(view: ReportView) -> list[str]:
    am = view.doc.get("amortised")
    L = ["## 4. Amortised invariance\n"]
    if am is None:
        L.append("Not run in this configuration (`--set amortised=true` adds it to any preset).\n")
        return L
    L.append("Invariance along i = (1 − t, t) (mean standardised cosine per family):\n")
    L.append("| i | spatial | appearance |\n|---|---:|---:|")
    for p in am["interpolation"]["points"]:
        L.append(
            f"| ({p['i'][0]:.2f}, {p['i'][1]:.2f}) | {p['family_cosine'].get('spatial', float('nan')):.3f} | "
            f"{p['family_cosine'].get('appearance', float('nan')):.3f} |"
        )
    L.append(f"\n![invariance vs i]({view.doc['figures']['interpolation']})\n")
    L.append("Learned i per task (InvarianceProbe: linear head and i from 0.5, held-out score):\n")
    L.append("| task | learned i (spatial, appearance) | held-out score |\n|---|---|---:|")
    for t, v in am["learned_i"].items():
        L.append(f"| {t} | ({v['i'][0]:.3f}, {v['i'][1]:.3f}) | {v['score']:.3f} |")
    L.append("")
    return L


SECTION = Section("amortised", _markdown, content=_content, figures=_figures)
