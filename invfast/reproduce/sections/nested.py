"""S8 (Speicher et al. 2023, §5.2, Fig. 4; "Invariance makes a difference" App. C.1): a superset of the
needed invariances does not hurt, a subset does; and the transfer experiment's table (same, different
and superset sources on the target, whose same-vs-different pair is S1's at the default factor values)."""

from __future__ import annotations

import os
from typing import Any

from invfast.io import save_figure
from invfast.reproduce.finding import Finding
from invfast.reproduce.rules.speicher import judge_s8
from invfast.reproduce.sections.base import (
    REPRODUCED,
    ReportView,
    Section,
    at_least,
    combine_statuses,
    figure,
    paired,
    pm,
)
from invfast.reproduce.stages.transfer import TRANSFER_SOURCES

__all__ = ["check_s8", "plot_nested", "plot_transfer", "FINDING", "SECTION"]


def check_s8(s8: dict[str, Any]) -> dict[str, Any]:
    """On every target T_j: each model trained on a superset T_i ⊃ T_j is not significantly worse than the
    T_j model (paired over folds), and the T_j model beats each model trained on a subset T_i ⊂ T_j."""
    acc, sizes = s8["accuracy"], [str(k) for k in s8["sizes"]]
    checks: dict[str, str] = {}
    tests: dict[str, Any] = {}
    for j in sizes:
        native = acc[j][j]["fold_scores"]
        for i in sizes:
            if int(i) > int(j):
                c = paired(acc[i][j]["fold_scores"], native)
                name = f"T{i} ⊃ T{j}: not worse on T{j}"
                checks[name], tests[name] = at_least(c["t"] > -c["t_crit"]), c
            elif int(i) < int(j):
                c = paired(native, acc[i][j]["fold_scores"])
                name = f"T{i} ⊂ T{j}: worse on T{j}"
                checks[name], tests[name] = c["status"], c
    ok = sum(1 for v in checks.values() if v == REPRODUCED)
    summary = f"{ok} of {len(checks)} comparisons hold; diagonal accuracy " + ", ".join(
        f"T{k} {acc[k][k]['mean']:.3f}" for k in sizes
    )
    return {"status": combine_statuses(list(checks.values())), "checks": checks, "tests": tests, "summary": summary}


def _statistics(results: dict[str, Any], finding: dict[str, Any]) -> dict[str, float]:
    acc = results["s8-probe"]["accuracy"]
    return {f"S8: accuracy, trained on T{i}, target T{j}": acc[i][j]["mean"] for i in acc for j in acc[i]}


FINDING = Finding(
    "S8",
    "speicher",
    "Understanding the role of invariance §5.2, Fig. 4",
    "a superset of the needed invariances does not hurt, a subset does",
    (
        "superset: lower CI bound of acc(Ti on Tj) − acc(Tj on Tj) ≥ −0.03; subset: acc(Tj on Tj) − "
        "acc(Ti on Tj) ≥ 0.05 with CI > 0; models ≥ 0.9 on their own data"
    ),
    ("s8-probe", "transfer-probe"),
    lambda r: check_s8(r["s8-probe"]),
    "nested",
    _statistics,
    models=("transfer-same", "transfer-superset", "s8-"),
    judge=judge_s8,
    paper_value="≈ 100 % for same and superset (App. C.1)",
)


# ---------------------------------------------------------------------------------------------- section
def plot_nested(s8: dict[str, Any], path: str) -> None:
    """Target accuracy against the target set's size, one line per training set (Speicher's Fig. 4)."""
    fig = figure(4.0, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    sizes = [str(k) for k in s8["sizes"]]
    for n, i in enumerate(sizes):
        ax.plot(
            [int(j) for j in sizes],
            [s8["accuracy"][i][j]["mean"] for j in sizes],
            "-o",
            ms=3,
            color=f"C{n}",
            label=f"trained on T{i}",
        )
    ax.set_xlabel("target: first k transformation types", fontsize=8)
    ax.set_ylabel("target accuracy (linear probe)", fontsize=8)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)
    save_figure(fig, path, dpi=90)


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
    save_figure(fig, path, dpi=90)


def _content(view: ReportView) -> dict[str, Any]:
    r = view.first.results
    out: dict[str, Any] = {}
    if "transfer-probe" in r:
        sc = r["transfer-probe"]["scores"]
        out["transfer"] = {
            **r["transfer-probe"],
            "setup": r["transfer-data"],
            "training": {s: r[f"transfer-train-{s}"] for s in TRANSFER_SOURCES},
            "same_vs_different": paired(sc["same"]["fold_scores"], sc["different"]["fold_scores"]),
        }
    if "s8-probe" in r:
        out["nested"] = {**r["s8-probe"], "training": r["s8-train"]["models"]}
    return out


def _figures(view: ReportView) -> dict[str, str]:
    figs = {}
    if "transfer" in view.doc:
        plot_transfer(view.doc["transfer"], os.path.join(view.out, "figures", "transfer.png"))
        figs["transfer"] = "figures/transfer.png"
    if "nested" in view.doc:
        plot_nested(view.doc["nested"], os.path.join(view.out, "figures", "nested.png"))
        figs["nested"] = "figures/nested.png"
    return figs


def _transfer_lines(view: ReportView) -> list[str]:
    cfg, tr = view.cfg, view.doc["transfer"]
    setup, sd = tr["setup"], tr["same_vs_different"]
    L = [
        f"Source objects {len(setup['source_objects'])}, disjoint target objects {len(setup['target_objects'])}. "
        f"Target transformations: {', '.join(setup['target_transforms'])}; disjoint set: "
        f"{', '.join(setup['other_transforms'])}. Each source model is trained supervised "
        f"(`invfast.pretrain.Supervised`, {cfg.speicher.transfer_epochs} epochs, "
        f"{cfg.speicher.transfer_n_source} images) and probed "
        f"linearly on {cfg.speicher.transfer_n_target} target images.\n",
        "| pretraining source | transformations | target accuracy | source train accuracy |\n|---|---|---:|---:|",
        f"| random init | – | {pm(tr['scores']['random'])} | – |",
    ]
    for s in TRANSFER_SOURCES:
        L.append(
            f"| {s} | {', '.join(setup['sources'][s])} | {pm(tr['scores'][s])} | "
            f"{tr['training'][s]['train_accuracy']:.3f} |"
        )
    L.append(
        f"\nSame − different (S1's pair at the default factor values): {sd['diff']:+.3f}, paired t {sd['t']:.2f} "
        f"({sd['status']}).\n\n![transfer]({view.doc['figures']['transfer']})\n"
    )
    return L


def _markdown(view: ReportView) -> list[str]:
    L = ["## Same, different and nested transformations (transfer) — S8\n"]
    if "transfer" in view.doc:
        L += _transfer_lines(view)
    if "nested" in view.doc:
        nd = view.doc["nested"]
        sizes = [str(k) for k in nd["sizes"]]
        L.append("Nested sets " + "; ".join(f"T{k} = {{{', '.join(nd['sets'][k])}}}" for k in sizes) + ".\n")
        L.append("| trained on \\ target | " + " | ".join(f"T{j}" for j in sizes) + " |")
        L.append("|---|" + "---:|" * len(sizes))
        for i in sizes:
            L.append(f"| T{i} | " + " | ".join(pm(nd["accuracy"][i][j]) for j in sizes) + " |")
        L.append(f"\n![nested]({view.doc['figures']['nested']})\n")
    return L


SECTION = Section("nested", _markdown, content=_content, figures=_figures, needs=("transfer-probe",))
