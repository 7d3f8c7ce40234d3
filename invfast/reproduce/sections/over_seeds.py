"""Findings over seeds: every seed's verdict combined into one (docs/findings.md: the seed is the unit), each
criterion's seed-level mean with its t interval, the descriptive seed-level numbers as mean ± sd, and the
*Over seeds* section with every seed's statistics, intervals, minimum effects, controls and the paper's values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from invfast.evidence import (
    CONTRADICTED,
    NOT_TESTABLE,
    REPRODUCED,
    Interval,
    SeedVerdict,
    judge_over_seeds,
    not_testable,
)
from invfast.reproduce.finding import NOT_RUN
from invfast.reproduce.sections.base import ReportView, Section

__all__ = ["combine_over_seeds", "aggregate_statistics", "criteria_table", "SECTION"]


def aggregate_statistics(per_seed: Sequence[dict[str, float]]) -> dict[str, dict[str, Any]]:
    """``{name: {mean, sd, values}}`` over seeds (sd with ddof = 1; 0 for one seed)."""
    out = {}
    for name in per_seed[0]:
        v = np.array([s[name] for s in per_seed if name in s], np.float64)
        out[name] = {"mean": float(v.mean()), "sd": float(v.std(ddof=1)) if v.size > 1 else 0.0, "values": v.tolist()}
    return out


def combine_over_seeds(per_seed: Sequence[Sequence[dict[str, Any]]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One finding list from the findings of every seed (docs/findings.md, *over seeds*): the verdict word with
    its counts (``label``: 'reproduced, 3 of 3 seeds'), each criterion's seed-level mean with its t interval over
    the testable seeds (``over_seeds``), and every seed's verdict (``per_seed_status``, ``per_seed_verdict``).
    Each finding keeps the first seed's description."""
    out = []
    for i, first in enumerate(per_seed[0]):
        statuses = [fs[i]["status"] for fs in per_seed]
        f = dict(first)
        f["per_seed_status"] = {str(sd): st for sd, st in zip(seeds, statuses)}
        if all(s == NOT_RUN for s in statuses):
            f["status"], f["label"] = NOT_RUN, NOT_RUN
            out.append(f)
            continue
        verdicts = [
            SeedVerdict.from_dict(fs[i]["verdict"]) if "verdict" in fs[i] else not_testable("not run on this seed")
            for fs in per_seed
        ]
        ov = judge_over_seeds(seeds, verdicts)
        f["status"], f["label"] = ov.verdict, ov.label
        f["over_seeds"] = ov.to_dict()
        f["per_seed_verdict"] = {str(sd): v.to_dict() for sd, v in zip(seeds, verdicts)}
        out.append(f)
    return out


def _cell(c: dict[str, Any]) -> str:
    iv = Interval.from_dict(c["interval"])
    mark = {REPRODUCED: " ✓", CONTRADICTED: " ✗"}.get(c["verdict"], "")
    return f"{iv}{mark}"


def criteria_table(f: dict[str, Any], seeds: Sequence[int]) -> list[str]:
    """Markdown rows: per criterion of finding ``f``, every seed's estimate [95 % interval] (✓ the part holds,
    ✗ it is contradicted), the minimum effect, the control, the mean over testable seeds [t interval] and the
    paper's value."""
    per = f.get("per_seed_verdict") or {}
    names = list(dict.fromkeys(c["name"] for v in per.values() for c in v["criteria"]))
    L = [
        "| statistic | " + " | ".join(f"seed {s}" for s in seeds) + " | minimum | control | over seeds | paper |",
        "|---|" + "---|" * len(seeds) + "---:|---|---|---|",
    ]
    effects = (f.get("over_seeds") or {}).get("effects") or {}
    for name in names:
        cells, minimum, control, paper = [], "", "", ""
        for s in seeds:
            v = per.get(str(s)) or {"verdict": NOT_TESTABLE, "criteria": []}
            c = next((c for c in v["criteria"] if c["name"] == name), None)
            if c is None or v["verdict"] == NOT_TESTABLE:
                cells.append("–" if c is None else f"({_cell(c)})")
                if c is None:
                    continue
            else:
                cells.append(_cell(c))
            minimum = f"≥ {c['minimum']:g}"
            if c.get("control") is not None:
                control = str(Interval.from_dict(c["control"]))
            if c.get("paper") is not None:
                paper = f"{c['paper']:g}"
        eff = effects.get(name)
        mean = str(Interval.from_dict(eff)) if eff else "–"
        label = name.replace("|", "\\|")  # a statistic such as |acc(a) − acc(b)| inside a table cell
        L.append(f"| {label} | " + " | ".join(cells) + f" | {minimum} | {control or '–'} | {mean} | {paper or '–'} |")
    return L


def _markdown(view: ReportView) -> list[str]:
    doc = view.doc
    ov = doc["over_seeds"]
    seeds = ov["seeds"]
    L = [
        "## Over seeds\n",
        f"Master seeds {', '.join(map(str, seeds))}: every stage (data, initialisation, pretraining, probes) is "
        "rerun per seed, and the seed is the unit of replication. Within a seed each statistic has a 95 % "
        "percentile-bootstrap interval over its test units (images, pairs, out-of-fold probe predictions); a seed "
        "*reproduces* a finding when every part reaches its minimum effect with its interval clear of 0 (or of the "
        "non-inferiority margin), *contradicts* it when some part's interval lies on the other side, is "
        "*inconclusive* otherwise and *not testable* when a precondition failed (a model did not learn, a number "
        "the rule needs was not made). Over seeds: *reproduced* needs ≥ 3 testable seeds, all reproduced; "
        "*contradicted* a majority of testable seeds contradicted; *mixed* some of each; *not testable* fewer than "
        "2 testable seeds (docs/findings.md). Tables and figures below show seed "
        f"{seeds[0]}; `results.json` has every seed's numbers under `per_seed`.\n",
        "| finding | " + " | ".join(f"seed {s}" for s in seeds) + " | over seeds |",
        "|---|" + "---|" * (len(seeds) + 1),
    ]
    for f in doc["findings"]:
        L.append(f"| {f['id']} | " + " | ".join(f["per_seed_status"][str(s)] for s in seeds) + f" | **{f['label']}** |")
    L.append("")
    for f in doc["findings"]:
        if f["status"] == NOT_RUN:
            continue
        L.append(f"### {f['id']} — {f['label']}\n")
        L.append(f"Rule: {f['rule']}." + (f" The paper: {f['paper_value']}." if f.get("paper_value") else "") + "\n")
        whys = {s: v.get("why") for s, v in (f.get("per_seed_verdict") or {}).items() if v.get("why")}
        if any(v["criteria"] for v in (f.get("per_seed_verdict") or {}).values()):
            L.extend(criteria_table(f, seeds))
            L.append("")
        for s, why in whys.items():
            L.append(f"- seed {s}, {f['per_seed_status'][s]}: {why}")
        L.append("")
    L.append("\n| seed-level number | mean ± sd | per seed |\n|---|---:|---|")
    for name, v in ov["statistics"].items():
        L.append(f"| {name} | {v['mean']:.3f} ± {v['sd']:.3f} | {', '.join(f'{x:.3f}' for x in v['values'])} |")
    L.append("")
    return L


SECTION = Section("over-seeds", _markdown)
