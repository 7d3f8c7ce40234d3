"""E4 (Ericsson et al. 2021, App. C.3, Fig. C.1): invariances specialise during pretraining; E5 (App. D.1,
Fig. D.1): spatial invariances go with classification, appearance invariances with regression. Their
sections: the family invariance of each policy per epoch, and the transforms × tasks correlation heat map."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from invfast.io import save_figure
from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.ericsson import judge_e4, judge_e5
from invfast.reproduce.sections.base import ReportView, Section, at_least, combine_statuses, figure, trend

__all__ = ["family_curve", "check_e4", "block_means", "check_e5", "FINDINGS", "SECTIONS"]

#: the specialised policies and the family each specialises in
OWN = {"spatial": "spatial", "appearance": "appearance"}
POSE = ("position", "rotation")


def family_curve(curves: dict[str, Any], policy: str, family: str) -> tuple[list[float], list[float]]:
    """(epochs, mean standardised cosine over ``family``'s transforms) of one policy's snapshots."""
    fams = curves["families"]
    rows = [r for r in curves["models"] if r["policy"] == policy]
    means = [float(np.mean([v for t, v in r["cosine"].items() if fams[t] == family and v is not None])) for r in rows]
    return [r["epoch"] for r in rows], means


def check_e4(curves: dict[str, Any]) -> dict[str, Any]:
    """Each specialised model's own-family invariance rises with the epochs (trend) and ends above Default's."""
    checks, stats = {}, {}
    for policy, fam in OWN.items():
        epochs, own = family_curve(curves, policy, fam)
        _, default = family_curve(curves, "default", fam)
        rises = trend(epochs, own)
        checks[f"{policy}: {fam} invariance rises with epochs"] = rises["status"]
        checks[f"{policy}: ends above Default on {fam}"] = at_least(own[-1] > default[-1])
        stats[policy] = {"rho": float(rises["rho"]), "start": own[0], "end": own[-1], "default_end": default[-1]}
    summary = "; ".join(
        f"{p} {OWN[p]}-family cosine {v['start']:.3f} → {v['end']:.3f} (Spearman over epochs {v['rho']:+.2f}), "
        f"Default ends at {v['default_end']:.3f}"
        for p, v in stats.items()
    )
    return {"status": combine_statuses(list(checks.values())), "checks": checks, "curves": stats, "summary": summary}


def block_means(e5: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Mean ρ of each family's transforms with identity and with the pose tasks (position, rotation)."""
    out: dict[str, dict[str, float]] = {}
    for fam in ("spatial", "appearance"):
        ts = [t for t, f in e5["families"].items() if f == fam]
        for name, tasks in (("identity", ("identity",)), ("pose", POSE)):
            vals = [e5["rho"][t][k] for t in ts for k in tasks if e5["rho"][t][k] is not None]
            out.setdefault(fam, {})[name] = float(np.mean(vals)) if vals else float("nan")
    return out


def check_e5(e5: dict[str, Any]) -> dict[str, Any]:
    """Spatial transforms correlate more with identity than with pose; appearance transforms the reverse."""
    b = block_means(e5)
    checks = {
        "spatial: identity > pose": at_least(b["spatial"]["identity"] > b["spatial"]["pose"]),
        "appearance: pose > identity": at_least(b["appearance"]["pose"] > b["appearance"]["identity"]),
    }
    summary = (
        f"over {len(e5['models'])} models: mean ρ of spatial transforms with identity {b['spatial']['identity']:+.2f}, "
        f"with pose {b['spatial']['pose']:+.2f}; of appearance transforms with identity "
        f"{b['appearance']['identity']:+.2f}, with pose {b['appearance']['pose']:+.2f}"
    )
    return {"status": combine_statuses(list(checks.values())), "checks": checks, "blocks": b, "summary": summary}


def _statistics_e4(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    return {f"E4: {p}: Spearman of own-family cosine over epochs": v["rho"] for p, v in finding["curves"].items()}


def _statistics_e5(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    return {f"E5: mean ρ, {fam} transforms × {k}": v for fam, d in finding["blocks"].items() for k, v in d.items()}


FINDINGS = (
    Finding(
        "E4",
        "ericsson",
        "App. C.3, Fig. C.1",
        "invariances specialise during pretraining",
        (
            "G_S = spatial(Spatial) − spatial(Default) and G_A = appearance(Appearance) − "
            "appearance(Default): ≥ 0.05 at the end with CI > 0, and > 0 at every checkpoint from 30 % of "
            "training on"
        ),
        ("invariance-curves", "probes"),
        lambda r: check_e4(r["invariance-curves"]),
        "specialisation",
        _statistics_e4,
        models=("default", "spatial", "appearance"),
        judge=judge_e4,
    ),
    Finding(
        "E5",
        "ericsson",
        "App. D.1, Fig. D.1",
        "spatial invariances correlate with classification, appearance invariances with regression",
        (
            "over a population of final models, the block contrast B of Spearman's ρ between each transform's"
            " invariance and each task's probe score ≥ 0.1, CI over models > 0"
        ),
        ("invariance-transfer", "probes"),
        lambda r: check_e5(r["invariance-transfer"]),
        "block-structure",
        _statistics_e5,
        models=("default", "spatial", "appearance", "amortised-k5"),
        judge=judge_e5,
    ),
)


# ---------------------------------------------------------------------------------------------- sections
def _e4_figures(view: ReportView) -> dict[str, str]:
    curves = view.first.results["invariance-curves"]
    fig = figure(6.4, 2.8)
    for k, fam in enumerate(("spatial", "appearance")):
        ax = fig.add_subplot(1, 2, k + 1)
        for policy, colour in (("default", "C1"), ("spatial", "C2"), ("appearance", "C3")):
            ax.plot(*family_curve(curves, policy, fam), "-o", ms=3, color=colour, label=policy)
        ax.set_xlabel("epoch", fontsize=8)
        ax.set_ylabel(f"{fam} transforms: mean cosine", fontsize=8)
        ax.legend(fontsize=7)
        ax.tick_params(labelsize=7)
    save_figure(fig, os.path.join(view.out, "figures", "specialisation.png"), dpi=90)
    return {"specialisation": "figures/specialisation.png"}


def _e4_markdown(view: ReportView) -> list[str]:
    curves = view.first.results["invariance-curves"]
    L = [
        "## Invariances during pretraining — E4\n",
        f"Each policy's encoder kept every {view.cfg.pretrain.curve_every} epochs, measured on "
        f"{curves['images']} measurement "
        f"images (grid {min(view.cfg.measurement.grid_size, view.cfg.measurement.snapshot_grid)}, reference "
        "statistics from the snapshot's "
        "probe-set features): mean standardised cosine per family.\n",
        "| policy | epoch | spatial | appearance |\n|---|---:|---:|---:|",
    ]
    for policy in ("default", "spatial", "appearance"):
        ep, sp = family_curve(curves, policy, "spatial")
        _, ap = family_curve(curves, policy, "appearance")
        L += [f"| {policy} | {e:g} | {s:.3f} | {a:.3f} |" for e, s, a in zip(ep, sp, ap)]
    L.append(f"\n![invariance per epoch]({view.doc['figures']['specialisation']})\n")
    return L


def _e5_figures(view: ReportView) -> dict[str, str]:
    from invfast.report import plot_correlation

    e5 = view.first.results["invariance-transfer"]
    ts = list(e5["rho"])
    tasks = list(next(iter(e5["rho"].values())))
    vals = np.array([[np.nan if e5["rho"][t][k] is None else e5["rho"][t][k] for k in tasks] for t in ts])
    rows = [f"{t} ({e5['families'][t][:3]})" for t in ts]
    title = f"Spearman ρ over {len(e5['models'])} models"
    plot_correlation(vals, rows, tasks, title=title, path=os.path.join(view.out, "figures", "block_structure.png"))
    return {"block_structure": "figures/block_structure.png"}


def _e5_markdown(view: ReportView) -> list[str]:
    e5 = view.first.results["invariance-transfer"]
    b = block_means(e5)
    L = [
        "## Which invariance predicts which task — E5\n",
        f"{len(e5['models'])} final models that differ in their augmentations (Random, the three policies and the "
        "amortised K = 5 model at each of its descriptors), each with an invariance per test transform (measured as "
        "E4's snapshots) and a probe score per task; Spearman's ρ across the models:\n",
        "| transforms | with identity | with pose (position, rotation) |\n|---|---:|---:|",
    ]
    L += [f"| {fam} | {v['identity']:+.3f} | {v['pose']:+.3f} |" for fam, v in b.items()]
    L.append(f"\n![correlation heat map]({view.doc['figures']['block_structure']})\n")
    return L


SECTIONS = (
    Section(
        "specialisation",
        _e4_markdown,
        content=lambda view: {"specialisation": view.first.results["invariance-curves"]},
        figures=_e4_figures,
        needs=("invariance-curves",),
    ),
    Section(
        "block-structure",
        _e5_markdown,
        content=lambda view: {"block_structure": view.first.results["invariance-transfer"]},
        figures=_e5_figures,
        needs=("invariance-transfer",),
    ),
)
