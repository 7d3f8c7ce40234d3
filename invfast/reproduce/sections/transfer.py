"""Finding 4 (Speicher et al.): pretraining with the same transformations as the target transfers
better than with disjoint ones, and invariance to a superset does not hurt; the transfer section."""

from __future__ import annotations

import os
from typing import Any

from invfast.reproduce.sections.base import (
    NOT,
    REPRODUCED,
    Finding,
    ReportView,
    Section,
    combine_statuses,
    figure,
    paired,
    pm,
)
from invfast.reproduce.stages.transfer import TRANSFER_SOURCES

__all__ = ["finding_4", "plot_transfer", "FINDING", "SECTION"]

CLAIM = (
    "pretraining with the same transformations as the target transfers better than with disjoint ones, and "
    "invariance to a superset does not hurt"
)


def finding_4(transfer: dict[str, Any]) -> dict[str, Any]:
    """Same-transformation pretraining transfers better than different; a superset does not hurt."""
    sc = transfer["scores"]
    same_vs_diff = paired(sc["same"]["fold_scores"], sc["different"]["fold_scores"])
    sup_vs_same = paired(sc["superset"]["fold_scores"], sc["same"]["fold_scores"])
    # "does not hurt": superset is not significantly worse than same
    no_hurt = sup_vs_same["t"] > -sup_vs_same["t_crit"]
    checks = {
        "same > different": same_vs_diff["status"],
        "superset not worse than same": REPRODUCED if no_hurt else NOT,
    }
    status = combine_statuses(list(checks.values()))
    summary = (
        f"target accuracy same {sc['same']['mean']:.3f} ± {sc['same']['std']:.3f}, different "
        f"{sc['different']['mean']:.3f} ± {sc['different']['std']:.3f}, superset {sc['superset']['mean']:.3f} ± "
        f"{sc['superset']['std']:.3f}, random init {sc['random']['mean']:.3f}; same − different "
        f"{same_vs_diff['diff']:+.3f} (t {same_vs_diff['t']:.2f}), superset − same {sup_vs_same['diff']:+.3f} "
        f"(t {sup_vs_same['t']:.2f})"
    )
    return {
        "id": 4,
        "claim": CLAIM,
        "status": status,
        "checks": checks,
        "same_vs_different": same_vs_diff,
        "superset_vs_same": sup_vs_same,
        "summary": summary,
    }


def _statistics(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    return {
        f"finding 4: transfer accuracy: {src}": sc["mean"] for src, sc in results["transfer-probe"]["scores"].items()
    }


FINDING = Finding(
    4, "Speicher et al.", CLAIM, ("transfer-probe",), lambda r: finding_4(r["transfer-probe"]), _statistics
)


# ---------------------------------------------------------------------------------------------- section
def plot_transfer(transfer: dict[str, Any], path: str) -> None:
    """Target accuracy (mean ± std over folds) of Random and each source model."""
    fig = figure(3.4, 2.8)
    ax = fig.add_subplot(1, 1, 1)
    keys = ["random", *TRANSFER_SOURCES]
    m = [transfer["scores"][k]["mean"] for k in keys]
    s = [transfer["scores"][k]["std"] for k in keys]
    ax.bar(range(len(keys)), m, yerr=s, color=["0.6", "C2", "C3", "C4"], capsize=2)
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels(["random init", "same T", "different T", "superset T"], fontsize=8)
    ax.set_ylabel("target accuracy (linear probe)", fontsize=8)
    ax.set_ylim(0, 1)
    ax.tick_params(labelsize=7)
    fig.savefig(path, dpi=90)


def _content(view: ReportView) -> dict[str, Any]:
    r = view.first.results
    return {
        "transfer": {
            **r["transfer-probe"],
            "setup": r["transfer-data"],
            "training": {s: r[f"transfer-train-{s}"] for s in TRANSFER_SOURCES},
        }
    }


def _figures(view: ReportView) -> dict[str, str]:
    os.makedirs(os.path.join(view.out, "figures"), exist_ok=True)
    plot_transfer(view.first.results["transfer-probe"], os.path.join(view.out, "figures", "transfer.png"))
    return {"transfer": "figures/transfer.png"}


def _markdown(view: ReportView) -> list[str]:
    cfg, tr = view.cfg, view.doc["transfer"]
    setup = tr["setup"]
    L = [
        "## 3. Same vs different transformations (transfer)\n",
        f"Source objects {len(setup['source_objects'])}, disjoint target objects {len(setup['target_objects'])}. "
        f"Target transformations: {', '.join(setup['target_transforms'])}; disjoint set: "
        f"{', '.join(setup['other_transforms'])}. Each source model is trained supervised "
        f"(`invfast.pretrain.Supervised`, {cfg.transfer_epochs} epochs, {cfg.transfer_n_source} images) and probed "
        f"linearly on {cfg.transfer_n_target} target images.\n",
        "| pretraining source | transformations | target accuracy | source train accuracy |\n|---|---|---:|---:|",
        f"| random init | – | {pm(tr['scores']['random'])} | – |",
    ]
    for s in TRANSFER_SOURCES:
        L.append(
            f"| {s} | {', '.join(setup['sources'][s])} | {pm(tr['scores'][s])} | "
            f"{tr['training'][s]['train_accuracy']:.3f} |"
        )
    L.append(f"\n![transfer]({view.doc['figures']['transfer']})\n")
    return L


SECTION = Section("transfer", _markdown, content=_content, figures=_figures)
