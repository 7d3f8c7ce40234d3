"""The report of ``invfast reproduce``: checks of the papers' five findings computed from the numbers,
``results.json``, ``report.md`` and the figures.

Every verdict is a function of the measured numbers; nothing in the report text is decided in
advance. Comparisons of probe scores are paired over the cross-validation folds (the same folds
for every model): a claim "A beats B" counts as *reproduced* when the mean fold difference is
positive and its one-sided paired t statistic reaches the 95% critical value, as *direction only*
when the difference is positive but not significant, and as *not reproduced* otherwise.
"""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from typing import Any, Sequence

import numpy as np

from invfast.io import atomic_write_text
from invfast.reproduce.config import FORMAT, ReproduceConfig
from invfast.reproduce.stages import FUSIONS, LABELS, TASKS, TRANSFER_SOURCES, stage_seed

REPRODUCED, PARTLY, DIRECTION, NOT, NOT_RUN = "reproduced", "partly reproduced", "direction only", "not reproduced", "not run"
MODEL_ORDER = [*LABELS.values(), *(label for label, _ in FUSIONS.values())]
PRETRAINED = ["Default", "Spatial", "Appearance", "Spa+App", "Def+Spa+App"]
#: a regression task where no single model reaches this R² is not learned by any: no preference can be read off
R2_FLOOR = 0.02
#: where each finding comes from
SOURCES = {1: "Ericsson et al. 2021", 2: "Ericsson et al. 2021", 3: "Ericsson et al. 2021",
           4: "Speicher et al.", 5: "Chavhan et al. 2023"}


# ---------------------------------------------------------------------------------------------- statistics
def paired(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Is A better than B over paired folds? Mean difference, one-sided paired t and a status."""
    from scipy import stats as st

    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    k = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if k > 1 else 0.0
    if sd > 0:
        t = mean / (sd / math.sqrt(k))
    else:
        t = math.copysign(math.inf, mean) if mean != 0 else 0.0
    crit = float(st.t.ppf(0.95, k - 1)) if k > 1 else math.inf
    status = REPRODUCED if mean > 0 and t >= crit else DIRECTION if mean > 0 else NOT
    return {"diff": mean, "t": t if math.isfinite(t) else (1e9 if t > 0 else -1e9 if t < 0 else 0.0),
            "t_crit": crit, "status": status}


def _combine(statuses: Sequence[str]) -> str:
    if statuses and all(s == REPRODUCED for s in statuses):
        return REPRODUCED
    if any(s in (REPRODUCED, DIRECTION, PARTLY) for s in statuses):
        return PARTLY
    return NOT


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


# ---------------------------------------------------------------------------------------------- findings
def finding_1(measure: dict[str, Any]) -> dict[str, Any]:
    """Spatial more invariant to spatial transforms, Appearance to appearance ones, Default between."""
    fm = family_means(measure["cosine"], measure["families"])
    s, a, d = fm["Spatial"], fm["Appearance"], fm["Default"]
    checks = {
        "Spatial > Appearance on spatial transforms": s["spatial"] > a["spatial"],
        "Appearance > Spatial on appearance transforms": a["appearance"] > s["appearance"],
        "Default between Spatial and Appearance (spatial)": min(s["spatial"], a["spatial"]) <= d["spatial"] <= max(s["spatial"], a["spatial"]),
        "Default between Spatial and Appearance (appearance)": min(s["appearance"], a["appearance"]) <= d["appearance"] <= max(s["appearance"], a["appearance"]),
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
    summary = (f"mean cosine on spatial transforms Spatial {s['spatial']:.3f} / Default {d['spatial']:.3f} / "
               f"Appearance {a['spatial']:.3f}; on appearance transforms Spatial {s['appearance']:.3f} / Default "
               f"{d['appearance']:.3f} / Appearance {a['appearance']:.3f}; Spatial beats Appearance on "
               f"{per_t['spatial'][0]}/{per_t['spatial'][1]} spatial transforms and Appearance beats Spatial on "
               f"{per_t['appearance'][0]}/{per_t['appearance'][1]} appearance transforms")
    return {"id": 1, "claim": "Spatial models are more invariant to spatial transforms and less to appearance ones "
                              "than Appearance models, and vice versa; Default sits between",
            "status": status, "checks": {k: bool(v) for k, v in checks.items()}, "family_means": fm,
            "per_transform_wins": per_t, "significance_marks": marks, "summary": summary}


def _best_of(scores: dict[str, Any], names: Sequence[str]) -> str:
    return max(names, key=lambda n: scores[n]["mean"])


def finding_2(probes: dict[str, Any]) -> dict[str, Any]:
    """Identity prefers Default/Spatial; pose (position, rotation) Appearance; colour Spatial."""
    expect = {"identity": (["Default", "Spatial"], ["Appearance"]),
              "position": (["Appearance"], ["Default", "Spatial"]),
              "rotation": (["Appearance"], ["Default", "Spatial"]),
              "colour": (["Spatial"], ["Default", "Appearance"])}
    sub = {}
    for task, (winners, losers) in expect.items():
        sc = probes[task]["scores"]
        w = _best_of(sc, winners)
        comps = {f"{w} > {l}": paired(sc[w]["fold_scores"], sc[l]["fold_scores"]) for l in losers}
        st = [c["status"] for c in comps.values()]
        status = (REPRODUCED if all(s == REPRODUCED for s in st) else DIRECTION if all(s != NOT for s in st)
                  else NOT)
        best3 = _best_of(sc, ["Default", "Spatial", "Appearance"])
        learned = not (probes[task]["kind"] == "regression" and sc[best3]["mean"] < R2_FLOOR)
        if not learned:  # differences between models that all predict the mean are noise, not a preference
            status = NOT
        sub[task] = {"expected": " or ".join(winners), "best_single_model": best3, "comparisons": comps,
                     "status": status, "learned": learned}
    statuses = [v["status"] for v in sub.values()]
    status = REPRODUCED if all(s == REPRODUCED for s in statuses) else NOT if all(s == NOT for s in statuses) else PARTLY
    summary = "; ".join(f"{t}: expected {v['expected']}, best {v['best_single_model']} ({v['status']}"
                        + ("" if v["learned"] else f"; no model predicts the target, best R² < {R2_FLOOR}") + ")"
                        for t, v in sub.items())
    return {"id": 2, "claim": "tasks needing object identity prefer Default/Spatial features, pose/position "
                              "(regression) Appearance features, colour Spatial features",
            "status": status, "tasks": sub, "summary": summary}


def finding_3(probes: dict[str, Any]) -> dict[str, Any]:
    """A fusion (Spa+App or Def+Spa+App) is the most consistent model across tasks."""
    ranks: dict[str, list[int]] = {m: [] for m in PRETRAINED}
    rel: dict[str, list[float]] = {m: [] for m in PRETRAINED}
    for task in TASKS:
        sc = probes[task]["scores"]
        vals = {m: sc[m]["mean"] for m in PRETRAINED}
        order = sorted(PRETRAINED, key=lambda m: -vals[m])
        lo, hi = min(vals.values()), max(vals.values())
        for m in PRETRAINED:
            ranks[m].append(1 + sum(1 for o in PRETRAINED if vals[o] > vals[m]))
            rel[m].append(1.0 if hi == lo else (vals[m] - lo) / (hi - lo))
        del order
    mean_rank = {m: float(np.mean(r)) for m, r in ranks.items()}
    worst = {m: float(min(r)) for m, r in rel.items()}
    best_rank = min(mean_rank.values())
    most_consistent = [m for m in PRETRAINED if mean_rank[m] == best_rank]
    fusion_best = any(m in ("Spa+App", "Def+Spa+App") for m in most_consistent)
    best_worst = max(worst.values())
    fusion_worst_best = best_worst > 0 and any(worst[m] == best_worst for m in ("Spa+App", "Def+Spa+App"))
    status = REPRODUCED if fusion_best and fusion_worst_best else PARTLY if (fusion_best or fusion_worst_best) else NOT
    summary = (f"best mean rank over the {len(TASKS)} tasks: {', '.join(most_consistent)} ({best_rank:.2f}); "
               f"mean ranks " + ", ".join(f"{m} {mean_rank[m]:.2f}" for m in PRETRAINED)
               + "; worst-task normalised score " + ", ".join(f"{m} {worst[m]:.2f}" for m in PRETRAINED))
    return {"id": 3, "claim": "concatenating Spatial + Appearance (+ Default) features is the most consistent "
                              "across all tasks",
            "status": status, "mean_rank": mean_rank, "ranks": ranks, "worst_normalised_score": worst,
            "most_consistent": most_consistent, "summary": summary}


def finding_4(transfer: dict[str, Any]) -> dict[str, Any]:
    """Same-transformation pretraining transfers better than different; a superset does not hurt."""
    sc = transfer["scores"]
    same_vs_diff = paired(sc["same"]["fold_scores"], sc["different"]["fold_scores"])
    sup_vs_same = paired(sc["superset"]["fold_scores"], sc["same"]["fold_scores"])
    # "does not hurt": superset is not significantly worse than same
    no_hurt = sup_vs_same["t"] > -sup_vs_same["t_crit"]
    checks = {"same > different": same_vs_diff["status"], "superset not worse than same": REPRODUCED if no_hurt else NOT}
    status = _combine(list(checks.values()))
    summary = (f"target accuracy same {sc['same']['mean']:.3f} ± {sc['same']['std']:.3f}, different "
               f"{sc['different']['mean']:.3f} ± {sc['different']['std']:.3f}, superset {sc['superset']['mean']:.3f} ± "
               f"{sc['superset']['std']:.3f}, random init {sc['random']['mean']:.3f}; same − different "
               f"{same_vs_diff['diff']:+.3f} (t {same_vs_diff['t']:.2f}), superset − same {sup_vs_same['diff']:+.3f} "
               f"(t {sup_vs_same['t']:.2f})")
    return {"id": 4, "claim": "pretraining with the same transformations as the target transfers better than with "
                              "disjoint ones, and invariance to a superset does not hurt",
            "status": status, "checks": checks, "same_vs_different": same_vs_diff, "superset_vs_same": sup_vs_same,
            "summary": summary}


def finding_5(amortised: dict[str, Any] | None, threshold: float = 0.1) -> dict[str, Any]:
    """The amortised model's invariances move smoothly with i; learned i differs between recognition
    (identity) and regression (position, rotation) tasks by at least ``threshold`` in some entry."""
    claim = "an amortised model moves its invariances smoothly with i, and the learned i differs between recognition and regression tasks"
    if amortised is None:
        return {"id": 5, "claim": claim, "status": NOT_RUN,
                "summary": "the amortised model is trained only in --full (or with --set amortised=true)"}
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
        smooth[fam] = {"values": v.tolist(), "spearman": rho, "change": total, "max_step": max_step,
                       "expected_direction": "down" if sign < 0 else "up", "monotone": bool(ok_dir),
                       "smooth": bool(ok_smooth)}
    li = amortised["learned_i"]
    diffs = {task: float(np.max(np.abs(np.array(li["identity"]["i"]) - np.array(li[task]["i"]))))
             for task in ("position", "rotation")}
    differs = max(diffs.values()) >= threshold
    smooth_ok = all(v["monotone"] and v["smooth"] for v in smooth.values())
    status = REPRODUCED if smooth_ok and differs else PARTLY if (smooth_ok or differs) else NOT
    summary = (f"along i = (1−t, t) the spatial-family cosine goes {smooth['spatial']['values'][0]:.3f} → "
               f"{smooth['spatial']['values'][-1]:.3f} (Spearman {smooth['spatial']['spearman']:+.2f}) and the "
               f"appearance-family cosine {smooth['appearance']['values'][0]:.3f} → "
               f"{smooth['appearance']['values'][-1]:.3f} (Spearman {smooth['appearance']['spearman']:+.2f}); learned i: "
               + ", ".join(f"{k} ({v['i'][0]:.2f}, {v['i'][1]:.2f})" for k, v in li.items())
               + f"; largest entry difference identity vs regression {max(diffs.values()):.2f} (threshold {threshold})")
    return {"id": 5, "claim": claim, "status": status, "smoothness": smooth, "i_differences": diffs,
            "threshold": threshold, "summary": summary}


def verdict(findings: Sequence[dict[str, Any]]) -> str:
    """One paragraph, computed from the finding statuses and their numbers."""
    tested = [f for f in findings if f["status"] != NOT_RUN]
    by = {s: [f["id"] for f in tested if f["status"] == s] for s in (REPRODUCED, PARTLY, NOT)}

    def ids(xs: list[int]) -> str:
        return ", ".join(f"finding {i}" for i in xs) if xs else "none"

    parts = [f"Of the {len(tested)} findings of the papers tested in this run, {len(by[REPRODUCED])} reproduced "
             f"({ids(by[REPRODUCED])}), {len(by[PARTLY])} partly ({ids(by[PARTLY])}) and {len(by[NOT])} did not "
             f"({ids(by[NOT])})."]
    for f in findings:
        parts.append(f"finding {f['id']} ({f['status']}): {f['summary']}.")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------- over seeds
def findings_of(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The five findings of one seed's numbers (``run``: measure, probes, transfer, amortised)."""
    return [finding_1(run["measure"]), finding_2(run["probes"]), finding_3(run["probes"]),
            finding_4(run["transfer"]), finding_5(run["amortised"])]


def seed_statistics(run: dict[str, Any], findings: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The numbers behind the findings for one seed, flat ``{name: value}`` (aggregated over seeds)."""
    out: dict[str, float] = {}
    for model, fams in findings[0]["family_means"].items():
        for fam, v in fams.items():
            out[f"finding 1: mean cosine, {fam} transforms: {model}"] = v
    for task in TASKS:
        for model, sc in run["probes"][task]["scores"].items():
            out[f"finding 2: {task} probe: {model}"] = sc["mean"]
    idn = run["probes"]["identity"]["scores"]
    best = _best_of(idn, ["Default", "Spatial", "Appearance"])
    out["identity probe: best of Default/Spatial/Appearance − Random"] = idn[best]["mean"] - idn["Random"]["mean"]
    # paired over the CV folds, which every model shares; one-sided 5% needs t >= 2.13 with 5 folds
    out["identity probe: paired t over folds, that model − Random"] = paired(idn[best]["fold_scores"],
                                                                           idn["Random"]["fold_scores"])["t"]
    for m, r in findings[2]["mean_rank"].items():
        out[f"finding 3: mean rank: {m}"] = r
    for src, sc in run["transfer"]["scores"].items():
        out[f"finding 4: transfer accuracy: {src}"] = sc["mean"]
    f5 = findings[4]
    if f5["status"] != NOT_RUN:
        for fam, v in f5["smoothness"].items():
            out[f"finding 5: Spearman along i, {fam}"] = v["spearman"]
        out["finding 5: largest learned-i difference identity vs regression"] = max(f5["i_differences"].values())
    return {k: float(v) for k, v in out.items()}


def aggregate_statistics(per_seed: Sequence[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """``{name: {mean, sd, values}}`` over seeds (sd with ddof = 1; 0 for one seed)."""
    out = {}
    for name in per_seed[0]:
        v = np.array([s[name] for s in per_seed if name in s], np.float64)
        out[name] = {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0,
                     "values": v.tolist()}
    return out


def combine_over_seeds(per_seed: Sequence[Sequence[dict[str, Any]]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One finding list from the findings of every seed: *reproduced* only when every seed reproduces
    it, *not reproduced* when no seed shows it even partly, *partly* otherwise. Each finding keeps
    the first seed's details, with ``per_seed_status`` and the status counts in its summary."""
    out = []
    for i, first in enumerate(per_seed[0]):
        statuses = [fs[i]["status"] for fs in per_seed]
        if all(s == NOT_RUN for s in statuses):
            status = NOT_RUN
        elif all(s == REPRODUCED for s in statuses):
            status = REPRODUCED
        elif all(s in (NOT, NOT_RUN) for s in statuses):
            status = NOT
        else:
            status = PARTLY
        f = dict(first)
        f["status"] = status
        f["per_seed_status"] = {str(sd): st for sd, st in zip(seeds, statuses)}
        if len(seeds) > 1 and status != NOT_RUN:
            counts = {st: statuses.count(st) for st in dict.fromkeys(statuses)}
            f["summary"] = (f"over {len(seeds)} seeds: " + ", ".join(f"{n}× {st}" for st, n in counts.items())
                            + f"; seed {seeds[0]}: {first['summary']}")
        out.append(f)
    return out


# ---------------------------------------------------------------------------------------------- environment
def environment() -> dict[str, Any]:
    """Machine and versions."""
    import scipy
    import sklearn
    import torch

    import invfast

    mem = None
    try:
        mem = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    commit = None
    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(invfast.__file__)))
        commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        if commit:
            dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "invfast"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            commit += " (invfast/ modified)" if dirty else ""
    except (OSError, subprocess.SubprocessError):
        pass
    return {"machine": {"platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
                        "torch_threads": torch.get_num_threads(), "memory_gib": mem,
                        "cuda": torch.cuda.is_available()},
            "versions": {"python": sys.version.split()[0], "torch": torch.__version__, "numpy": np.__version__,
                         "scipy": scipy.__version__, "scikit-learn": sklearn.__version__,
                         "invfast": invfast.__version__, "git_commit": commit,
                         "compiled_core": bool(invfast.backend_info().get("cpp"))}}


# ---------------------------------------------------------------------------------------------- figures
def _figure(w: float, h: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), layout="constrained")


def plot_probes(probes: dict[str, Any], path: str) -> None:
    """One panel per task: mean ± std over folds for every model."""
    fig = _figure(3.0 * len(TASKS), 3.2)
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
        lo = min(0.0, min(m) - max(s))
        ax.set_ylim(lo, 1.0)
    fig.savefig(path, dpi=90)


def plot_transfer(transfer: dict[str, Any], path: str) -> None:
    fig = _figure(3.4, 2.8)
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


def plot_interpolation(interp: dict[str, Any], path: str) -> None:
    pts = [p for p in interp["points"] if not (p["i"][0] == 1.0 and p["i"][1] == 1.0)]
    t = [p["i"][1] for p in pts]
    fig = _figure(4.0, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    for fam, c in (("spatial", "C1"), ("appearance", "C2")):
        ax.plot(t, [p["family_cosine"][fam] for p in pts], "-o", color=c, ms=4, label=f"{fam} transforms")
    ax.set_xlabel("t in i = (1 − t, t): Spatial [1,0] → Appearance [0,1]", fontsize=8)
    ax.set_ylabel("mean standardised cosine", fontsize=8)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)
    fig.savefig(path, dpi=90)


# ---------------------------------------------------------------------------------------------- markdown
def _pm(s: dict[str, Any]) -> str:
    return f"{s['mean']:.3f} ± {s['std']:.3f}"


def _seeds_markdown(doc: dict[str, Any]) -> list[str]:
    ov = doc["over_seeds"]
    seeds = ov["seeds"]
    L = ["## Over seeds\n",
         f"Master seeds {', '.join(map(str, seeds))}: every stage (data, initialisation, pretraining, probes' folds "
         "aside) is rerun per seed. A finding is *reproduced* only when it is reproduced for every seed, *not "
         "reproduced* when no seed shows it even partly, *partly* otherwise. Tables and figures below show seed "
         f"{seeds[0]}.\n",
         "| finding | " + " | ".join(f"seed {s}" for s in seeds) + " | over seeds |",
         "|---|" + "---|" * (len(seeds) + 1)]
    for f in doc["findings"]:
        L.append(f"| {f['id']} | " + " | ".join(f["per_seed_status"][str(s)] for s in seeds) + f" | **{f['status']}** |")
    L.append("\n| seed-level statistic | mean ± sd | per seed |\n|---|---:|---|")
    for name, v in ov["statistics"].items():
        L.append(f"| {name} | {v['mean']:.3f} ± {v['sd']:.3f} | {', '.join(f'{x:.3f}' for x in v['values'])} |")
    L.append("")
    return L


def _markdown(doc: dict[str, Any], table1: str, figs: dict[str, str]) -> str:
    cfg, L = doc["config"], []
    L.append(f"# invfast reproduce — `{cfg['preset']}` report\n")
    L.append(f"Generated {doc['generated_at']} by `invfast reproduce` ({doc['environment']['versions']['invfast']}, "
             f"commit {doc['environment']['versions']['git_commit']}). The stages took {doc['stages_elapsed_s'] / 60:.1f} min "
             f"in total (each timed when it ran; this invocation {doc['total_elapsed_s'] / 60:.1f} min, see *Time*). "
             "Every number below is in `results.json`.\n")
    L.append("## Verdict\n")
    L.append(doc["verdict"] + "\n")
    L.append("| finding (source) | status |\n|---|---|")
    for f in doc["findings"]:
        L.append(f"| {f['id']}. {f['claim']} | **{f['status']}** |")
    L.append("\nA probe comparison counts as *reproduced* when the paired difference over the CV folds is positive "
             "with a one-sided paired t at the 95% level, *direction only* when it is positive but not significant.\n")
    L.extend(_seeds_markdown(doc))

    L.append("## Setup\n")
    L.append(f"- Data: Transforms-2D, {cfg['objects']} built-in objects under {', '.join(cfg['data_transforms'])}, "
             f"{cfg['size']}×{cfg['size']} px, backgrounds `{cfg.get('backgrounds', 'builtin')}`; {cfg['n_pretrain']} pretraining, "
             f"{cfg['n_probe']} probe and {cfg['n_measure']} measurement images (train / val / test splits), and "
             f"{cfg['n_probe']} rotation-probe images in which only the rotation varies.")
    L.append(f"- Models: `{cfg['arch']}` width {cfg['width']} ({doc['features']['dims']['Default']}-d features); "
             f"MoCo-v2 with the Default / Spatial / Appearance policies, {cfg['pretrain_epochs']} epochs, batch "
             f"{cfg['batch_size']}, lr {cfg['lr']}, key momentum {cfg['key_momentum']}; Random = the same architecture "
             "at its seeded initialisation.")
    L.append(f"- Invariance: the {len(doc['invariance']['families'])} test transforms, grid size {cfg['grid_size']}, "
             "standardised cosine and Mahalanobis distance, identity parameters excluded.")
    grid = "the published 45-value" if cfg["n_penalties"] == 45 else f"a {cfg['n_penalties']}-value subset of the published"
    L.append(f"- Probes: {cfg['folds']}-fold CV over {grid} penalty range (shifted for fusions; at most "
             f"{cfg['logistic_max_iter']} L-BFGS iterations per value); logistic regression for identity, ridge for "
             "the regressions.")
    L.append(f"- Seeds: master seed {cfg['seed']}; stage seeds in `results.json` (`seeds`).\n")

    L.append("## 1. Invariances (Table 1)\n")
    L.append(table1)
    n_img, n_models = cfg["n_measure"], len(doc["invariance"]["cosine"])
    need = 4.0 * math.sqrt(math.log((n_models - 1) / 0.05) / (2 * n_img))
    n_marks = sum(1 for v in doc["invariance"]["best"].values() if v)
    L.append(f"\n{n_marks} of {len(doc['invariance']['best'])} transforms carry a significance mark. With "
             f"{n_img} images, cosines bounded in [−2, 2] and {n_models - 1} Bonferroni comparisons, Hoeffding's test "
             f"marks a model only when its mean per-image cosine exceeds every other model's by more than {need:.2f}.")
    L.append("\nMean standardised cosine per family:\n")
    L.append("| model | spatial | appearance |\n|---|---:|---:|")
    for m, fam in doc["invariance"]["family_means"].items():
        L.append(f"| {m} | {fam.get('spatial', float('nan')):.3f} | {fam.get('appearance', float('nan')):.3f} |")
    L.append(f"\n![radar of invariances]({figs['radar']})\n")

    L.append("## 2. Probes (Table 2): mean ± std over folds\n")
    L.append("| model | " + " | ".join(f"{t} ({'acc' if v['kind'] == 'classification' else 'R²'})"
                                       for t, v in doc["probes"].items()) + " |")
    L.append("|---|" + "|".join("---:" for _ in doc["probes"]) + "|")
    for m in MODEL_ORDER:
        cells = []
        for t, v in doc["probes"].items():
            best = max(PRETRAINED + ["Random"], key=lambda n: v["scores"][n]["mean"])
            c = _pm(v["scores"][m])
            cells.append(f"**{c}**" if m == best else c)
        L.append(f"| {m} | " + " | ".join(cells) + " |")
    L.append("\nTargets: " + "; ".join(f"{t}: {TASKS[t][1]}" for t in doc["probes"]) + ". Bold: best mean.\n")
    L.append(f"![probe scores per task]({figs['probes']})\n")
    f3 = next(f for f in doc["findings"] if f["id"] == 3)
    L.append("Consistency across tasks (rank 1 = best of the five pretrained models and fusions; normalised score "
             "0 = worst, 1 = best on a task):\n")
    L.append("| model | mean rank | worst-task normalised score |\n|---|---:|---:|")
    for m in PRETRAINED:
        L.append(f"| {m} | {f3['mean_rank'][m]:.2f} | {f3['worst_normalised_score'][m]:.2f} |")
    L.append("")

    tr = doc["transfer"]
    L.append("## 3. Same vs different transformations (transfer)\n")
    L.append(f"Source objects {len(tr['setup']['source_objects'])}, disjoint target objects "
             f"{len(tr['setup']['target_objects'])}. Target transformations: {', '.join(tr['setup']['target_transforms'])}; "
             f"disjoint set: {', '.join(tr['setup']['other_transforms'])}. Each source model is trained supervised "
             f"({cfg['transfer_epochs']} epochs, {cfg['transfer_n_source']} images) and probed linearly on "
             f"{cfg['transfer_n_target']} target images.\n")
    L.append("| pretraining source | transformations | target accuracy | source train accuracy |\n|---|---|---:|---:|")
    L.append(f"| random init | – | {_pm(tr['scores']['random'])} | – |")
    for s in TRANSFER_SOURCES:
        L.append(f"| {s} | {', '.join(tr['setup']['sources'][s])} | {_pm(tr['scores'][s])} | "
                 f"{tr['training'][s]['train_accuracy']:.3f} |")
    L.append(f"\n![transfer]({figs['transfer']})\n")

    L.append("## 4. Amortised invariance\n")
    am = doc.get("amortised")
    if am is None:
        L.append("Not run in this configuration (the amortised model is part of `--full`; "
                 "`--set amortised=true` adds it to any preset).\n")
    else:
        L.append("Invariance along i = (1 − t, t) (mean standardised cosine per family):\n")
        L.append("| i | spatial | appearance |\n|---|---:|---:|")
        for p in am["interpolation"]["points"]:
            L.append(f"| ({p['i'][0]:.2f}, {p['i'][1]:.2f}) | {p['family_cosine'].get('spatial', float('nan')):.3f} | "
                     f"{p['family_cosine'].get('appearance', float('nan')):.3f} |")
        L.append(f"\n![invariance vs i]({figs['interpolation']})\n")
        L.append("Learned i per task (InvarianceProbe: linear head and i from 0.5, held-out score):\n")
        L.append("| task | learned i (spatial, appearance) | held-out score |\n|---|---|---:|")
        for t, v in am["learned_i"].items():
            L.append(f"| {t} | ({v['i'][0]:.3f}, {v['i'][1]:.3f}) | {v['score']:.3f} |")
        L.append("")

    L.append("## Findings in detail\n")
    for f in doc["findings"]:
        L.append(f"- **finding {f['id']} ({SOURCES[f['id']]}) — {f['status']}.** {f['claim']}. {f['summary']}.")
    L.append("")

    env = doc["environment"]
    L.append("## Machine, versions, time\n")
    mch = env["machine"]
    L.append(f"- Machine: {mch['cpu']}, {mch['cpu_count']} CPUs ({mch['torch_threads']} torch threads), "
             f"{mch['memory_gib']} GiB, CUDA {'yes' if mch['cuda'] else 'no'}; {mch['platform']}.")
    L.append("- Versions: " + ", ".join(f"{k} {v}" for k, v in env["versions"].items()) + ".")
    L.append(f"- Total elapsed (sum of stages): {doc['stages_elapsed_s'] / 60:.1f} min.\n")
    L.append("| stage | elapsed (s) | |\n|---|---:|---|")
    for name, t in doc["timings"].items():
        L.append(f"| {name} | {t['elapsed_s']:.1f} | {'cached from an earlier invocation' if t['cached'] else ''} |")
    L.append("")
    return "\n".join(L)


def write_report(out: str, cfg: ReproduceConfig, *, data: dict[str, Any], measure: dict[str, Any],
                 probes: dict[str, Any], transfer: dict[str, Any], amortised: dict[str, Any] | None,
                 timings: dict[str, dict[str, Any]], total_elapsed_s: float, cache: str,
                 other_seeds: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Compute the findings, write ``results.json``, ``report.md`` and ``figures/*.png``; return the document.

    The tables and figures show the first seed (``cfg.seed``); ``other_seeds`` holds the stage
    results of the others (``{seed, measure, probes, transfer, amortised}``): the findings' statuses
    are combined over all seeds and every seed-level statistic is reported as mean ± sd."""
    from invfast import report
    from invfast.measure.result import InvarianceResult

    results = [InvarianceResult.from_json(os.path.join(cache, measure["files"][LABELS[k]])) for k in LABELS]
    stages_dir = os.path.join(cache, "stages")
    with open(os.path.join(stages_dir, "features.json"), encoding="utf-8") as f:
        feats = json.load(f)["result"]
    training = {}
    for s in TRANSFER_SOURCES:
        with open(os.path.join(stages_dir, f"transfer-train-{s}.json"), encoding="utf-8") as f:
            training[s] = json.load(f)["result"]
    pretraining = {}
    for p in [*cfg.policies, *(["amortised"] if cfg.amortised else [])]:
        with open(os.path.join(stages_dir, f"pretrain-{p}.json"), encoding="utf-8") as f:
            pretraining[p] = json.load(f)["result"]
    transfer_setup = {k: v for k, v in _stage(stages_dir, "transfer-data").items()}

    runs = [{"seed": cfg.seed, "measure": measure, "probes": probes, "transfer": transfer, "amortised": amortised},
            *other_seeds]
    per_seed = [findings_of(r) for r in runs]
    seed_list = [int(r["seed"]) for r in runs]
    findings = combine_over_seeds(per_seed, seed_list)
    statistics = aggregate_statistics([seed_statistics(r, f) for r, f in zip(runs, per_seed)])
    fig_dir = os.path.join(out, "figures")
    os.makedirs(fig_dir, exist_ok=True)
    figs = {"radar": "figures/radar.png", "probes": "figures/probes.png", "transfer": "figures/transfer.png",
            "heatmap": "figures/heatmap.png"}
    report.plot_radar(results, path=os.path.join(out, figs["radar"]))
    report.plot_heatmap(results, path=os.path.join(out, figs["heatmap"]))
    plot_probes(probes, os.path.join(out, figs["probes"]))
    plot_transfer(transfer, os.path.join(out, figs["transfer"]))
    if amortised is not None:
        figs["interpolation"] = "figures/interpolation.png"
        plot_interpolation(amortised["interpolation"], os.path.join(out, figs["interpolation"]))

    seeds = {"master": cfg.seed,
             **{f"init/{k}": stage_seed(cfg.seed, f"init/{k}") for k in [*LABELS, "transfer", "amortised"]},
             **{f"pretrain/{k}": v["seed"] for k, v in pretraining.items()},
             **{f"transfer/{k}": v["seed"] for k, v in training.items()}}
    doc = {
        "format": FORMAT, "config": cfg.to_dict(), "generated_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "environment": environment(), "seeds": seeds, "data": data, "features": feats, "pretraining": pretraining,
        "invariance": {**measure, "family_means": family_means(measure["cosine"], measure["families"])},
        "probes": probes, "transfer": {**transfer, "setup": transfer_setup, "training": training},
        "amortised": amortised, "findings": findings, "verdict": verdict(findings), "figures": figs,
        "over_seeds": {"seeds": seed_list, "statistics": statistics,
                       "findings": {str(sd): [{"id": f["id"], "status": f["status"], "summary": f["summary"]}
                                              for f in fs] for sd, fs in zip(seed_list, per_seed)}},
        "timings": timings, "stages_elapsed_s": float(sum(t["elapsed_s"] for t in timings.values())),
        "total_elapsed_s": total_elapsed_s,
    }
    text = json.dumps(doc, indent=1, allow_nan=False)
    table1 = report.to_markdown(results, metrics=("cosine", "distance"))
    atomic_write_text(os.path.join(out, "results.json"), text)
    atomic_write_text(os.path.join(out, "report.md"), _markdown(doc, table1, figs))
    return doc


def _stage(stages_dir: str, name: str) -> dict[str, Any]:
    with open(os.path.join(stages_dir, f"{name}.json"), encoding="utf-8") as f:
        return json.load(f)["result"]
