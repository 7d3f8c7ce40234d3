"""A comparison as text: the markdown report and long-format rows (CSV, data frames)."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import numpy as np

from invfast.comparison.table import HEADINGS, MEASURES, METRICS
from invfast.comparison.transfer import MIN_MODELS_MARK, Transfer

#: ``c`` below is an :class:`invfast.comparison.Comparison` (not imported: core imports this module)

ROW_KINDS = ("table", "tests", "transfer")
_PICTURES = {
    "radar": "radar chart of the rows per family (standardised cosine)",
    "heatmap": "rows × transforms (standardised cosine)",
    "significance": "how often each row is significantly more invariant than each other (cosine)",
    "correlation": "which invariance predicts transfer (Spearman ρ, cosine)",
}


def letter(i: int) -> str:
    """The short name of row ``i`` in significance marks: a, b, ..., z, aa, ab, ..."""
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(97 + r) + s
    return s


def _fmt(v: Any, digits: int) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    return f"{v:.{digits}f}"


def _test_name(test: str) -> str:
    return "paired t-test" if test == "t" else "Wilcoxon signed-rank test"


def _header(c: Any) -> list[str]:
    out = [
        f"# Comparison of {len(c.rows)} rows on {len(c.table.columns)} transforms",
        "",
        "| | row | model | layer | source |",
        "|---|---|---|---|---|",
    ]
    for i, r in enumerate(c.rows):
        out.append(f"| {letter(i)} | {r.label} | {r.model} | {r.layer or '–'} | {r.source or '(in memory)'} |")
    out.append("")
    if c.mismatch.get("differences"):
        out.append("**Compared despite differences between the runs (allow_mismatch):**")
        out.extend(f"- {d['message']}" for d in c.mismatch["differences"])
        out.append("")
    else:
        im = c.images[0] if c.images else {}
        ident = (im.get("id") or "")[:12]
        n, measured = im.get("n"), im.get("measured")
        unread = ""
        if isinstance(measured, int) and isinstance(n, int) and measured != n:
            unread = f" of {n} files listed; {n - measured} unreadable"
        out.append(
            f"The runs are comparable: the same {len(c.table.columns)} transforms and grids, the same "
            f"protocol, the same {measured if unread else n} images{unread} (identity {ident}…)."
        )
        out.append("")
    if c.notes:
        out.append("Settings that differ between the runs (allowed, but worth knowing): " + "; ".join(c.notes) + ".")
        out.append("")
    return out


def _metric_block(c: Any, metric: str, digits: int) -> list[str]:
    t = c.table
    names = t.column_names
    n_tr = len(t.columns)
    vals, ranks, best, mean_rank = t.all_values(metric), t.ranks(metric), t.best(metric), t.mean_rank(metric)
    pos = {lab: i for i, lab in enumerate(c.labels)}
    out = [f"## {HEADINGS[metric][0].upper() + HEADINGS[metric][1:]}", ""]
    out.append(
        "| | model | "
        + " | ".join(names[:n_tr])
        + " | "
        + " | ".join(f"*{f}*" for f in names[n_tr:])
        + " | mean rank |"
    )
    out.append("|---|---|" + "---:|" * (len(names) + 1))
    fam_row, prev = [], None
    for _, fam in t.columns:
        fam_row.append(f"*{fam}*" if fam != prev else "")
        prev = fam
    out.append("| | *family* | " + " | ".join(fam_row) + " | " + " | ".join("*mean*" for _ in names[n_tr:]) + " | |")
    for i, lab in enumerate(c.labels):
        cells = []
        for j, name in enumerate(names):
            cell = _fmt(vals[i, j], digits)
            if i in best[j] and len(c.labels) > 1:
                cell = f"**{cell}**"
            if j < n_tr:
                beaten = c.paired.beats(metric, name).get(lab, [])
                if beaten:
                    cell += "<sup>" + ",".join(sorted((letter(pos[b]) for b in beaten), key=len)) + "</sup>"
            cells.append(cell)
        out.append(f"| {letter(i)} | {lab} | " + " | ".join(cells) + f" | {_fmt(mean_rank[i], 1)} |")
    m = len(c.paired.of(metric))
    out += [
        "",
        f"**Bold**: the most invariant row of each column. <sup>b,c</sup>: significantly more invariant than "
        f"rows b and c on that transform ({_test_name(c.paired.test)} on the per-image values, Holm–Bonferroni "
        f"across the {m} tests of this table, α = {c.paired.alpha:g}). Family columns: the mean over the "
        "family's transforms that every row measured (not tested). Mean rank: over the transforms "
        "(1 = most invariant).",
        "",
    ]
    out += [
        "Ranks (1 = most invariant, ties share the mean rank):",
        "",
        "| | model | " + " | ".join(names) + " |",
        "|---|---|" + "---:|" * len(names),
    ]
    for i, lab in enumerate(c.labels):
        out.append(
            f"| {letter(i)} | {lab} | "
            + " | ".join(_fmt(v, 1 if v % 1 else 0) if math.isfinite(v) else "–" for v in ranks[i])
            + " |"
        )
    out.append("")
    return out


def _measures_block(c: Any, digits: int) -> list[str]:
    """A rows x transforms table of each measure of :data:`MEASURES` that some row has (no tests)."""
    t = c.table
    out: list[str] = []
    for name, vals in t.measures.items():
        heading = MEASURES[name][1]
        out += [f"## {heading[0].upper() + heading[1:]}", ""]
        out.append("| | model | " + " | ".join(n for n, _ in t.columns) + " |")
        out.append("|---|---|" + "---:|" * len(t.columns))
        for i, lab in enumerate(c.labels):
            out.append(f"| {letter(i)} | {lab} | " + " | ".join(_fmt(v, digits) for v in vals[i]) + " |")
        out += ["", "Not tested for significance (these measures have no per-image values); – = not measured.", ""]
    return out


def _paired_block(c: Any) -> list[str]:
    p = c.paired
    out = [
        "## Paired significance",
        "",
        f"Entry (row, column) = on how many transforms the row is significantly more invariant than the column "
        f"({_test_name(p.test)}, Holm–Bonferroni across each metric's table, α = {p.alpha:g}), out of the "
        "transforms on which the two were tested.",
        "",
    ]
    for metric in METRICS:
        wins, tested = p.matrix(metric, c.labels), p.tested(metric, c.labels)
        out += [
            f"**{metric}**",
            "",
            "| more invariant than → | " + " | ".join(letter(j) for j in range(len(c.labels))) + " |",
            "|---|" + "---:|" * len(c.labels),
        ]
        for i, lab in enumerate(c.labels):
            cells = [
                "–" if i == j or not tested[i, j] else f"{wins[i, j]}/{tested[i, j]}" for j in range(len(c.labels))
            ]
            out.append(f"| {letter(i)} {lab} | " + " | ".join(cells) + " |")
        tests = p.of(metric)
        other = "wilcoxon" if p.test == "t" else "t"
        alpha = p.alpha
        agree = sum(
            (getattr(t, f"p_{p.test}_holm") <= alpha) == (getattr(t, f"p_{other}_holm") <= alpha) for t in tests
        )
        dropped = [t.dropped for t in tests]
        out += [
            "",
            f"{len(tests)} tests; the {_test_name(other)} (Holm) reaches the same verdict on {agree} of them"
            + (
                f"; images unreadable in one of the two runs were dropped: up to {max(dropped)} per test"
                if dropped and max(dropped)
                else ""
            )
            + ".",
            "",
        ]
    skipped = [t for t in p.tests if t.reason is not None and t.metric == METRICS[0]]
    if skipped:
        out.append(
            "Not tested: "
            + "; ".join(f"{t.a} vs {t.b} on {t.transform} ({t.reason})" for t in skipped[:10])
            + (f"; and {len(skipped) - 10} more" if len(skipped) > 10 else "")
            + "."
        )
        out.append("")
    return out


def _ci(r: dict[str, Any], key: str, digits: int) -> str:
    v = r.get(key)
    if v is None:
        return "–"
    ci = r.get(f"{key}_ci")
    star = "*" if Transfer.marked(r, key) else ""
    return f"{v:+.{digits}f}{star}" + ("" if ci is None else f" [{ci[0]:+.{digits}f}, {ci[1]:+.{digits}f}]")


def _p(v: Any) -> str:
    return "–" if v is None else (f"{v:.3f}" if v >= 0.001 else f"{v:.1e}")


def _transfer_block(c: Any, digits: int) -> list[str]:
    tr = c.transfer
    if tr is None:
        return []
    tasks = list(tr.scores.tasks)
    out = [
        "## Which invariance predicts transfer",
        "",
        f"Rank correlation across the rows between invariance (standardised cosine, or the negated Mahalanobis "
        f"distance: higher = more invariant) and each task's probe score (oriented higher = better): a positive "
        f"value means the more invariant models transfer better. Spearman ρ and Kendall τ-b with "
        f"{100 * tr.level:g}% bootstrap intervals over the models ({tr.n_boot} resamples, seed {tr.seed}); * the "
        f"interval excludes 0 (shown from {MIN_MODELS_MARK} models on: with fewer, the resamples repeat too few "
        f"models); p: Kendall's test (scipy; exact for small samples without ties), not corrected for the "
        f"{len(c.table.column_names) * len(tasks)} (column, task) pairs.",
        "",
        "Probe scores (↑ higher is better, ↓ lower):",
        "",
        "| row | "
        + " | ".join(f"{k} ({'↑' if tr.scores.higher_is_better.get(k, True) else '↓'})" for k in tasks)
        + " |",
        "|---|" + "---:|" * len(tasks),
    ]
    for lab in c.labels:
        out.append(f"| {lab} | " + " | ".join(_fmt(tr.scores.tasks[k].get(lab), digits) for k in tasks) + " |")
    out.append("")
    for task in tasks:
        recs = {(r["metric"], r["column"]): r for r in tr.records if r["task"] == task}
        out += [
            f"**{task}**",
            "",
            "| invariance to | n | ρ (cosine) | τ (cosine) | p | ρ (−distance) | τ (−distance) | p |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for col in c.table.column_names:
            rc, rd = recs[("cosine", col)], recs[("distance", col)]
            name = col if col not in c.table.families else f"*{col}* (mean)"
            out.append(
                f"| {name} | {rc['n']} | {_ci(rc, 'spearman', 2)} | {_ci(rc, 'kendall', 2)} | "
                f"{_p(rc['kendall_p'])} | {_ci(rd, 'spearman', 2)} | {_ci(rd, 'kendall', 2)} | "
                f"{_p(rd['kendall_p'])} |"
            )
        notes = sorted({r["note"] for r in recs.values() if r.get("note")})
        out += [""] + [f"Note: {n}." for n in notes] + ([""] if notes else [])
    return out


def markdown(c: Any, *, digits: int = 3, pictures: dict[str, str] | None = None) -> str:
    """The comparison report (see :meth:`Comparison.to_markdown`)."""
    out = _header(c)
    for metric in METRICS:
        out += _metric_block(c, metric, digits)
    out += _measures_block(c, digits)
    out += _paired_block(c)
    out += _transfer_block(c, digits)
    if pictures:
        out += ["## Pictures", ""]
        for kind, f in pictures.items():
            out += [f"{_PICTURES.get(kind, kind)}:", "", f"![{kind}]({f})", ""]
    return "\n".join(out).rstrip() + "\n"


def long_rows(c: Any, kind: str = "table") -> list[dict[str, Any]]:
    """See :meth:`Comparison.to_rows`."""
    if kind not in ROW_KINDS:
        raise ValueError(f"kind must be one of {ROW_KINDS}, got {kind!r}")
    if kind == "tests":
        return [t.to_dict() for t in c.paired.tests]
    if kind == "transfer":
        return _transfer_rows(c)
    return _metric_rows(c) + _measure_rows(c)


def _transfer_rows(c: Any) -> list[dict[str, Any]]:
    """One flat row per transfer-correlation record (CIs as ``*_ci_lo`` / ``*_ci_hi``, labels ';'-joined)."""
    if c.transfer is None:
        return []
    out = []
    for r in c.transfer.records:
        d = {k: v for k, v in r.items() if k not in ("spearman_ci", "kendall_ci", "labels")}
        for k in ("spearman", "kendall"):
            ci = r.get(f"{k}_ci") or [None, None]
            d[f"{k}_ci_lo"], d[f"{k}_ci_hi"] = ci
        d["labels"] = ";".join(r["labels"])
        out.append(d)
    return out


def _cell(r: Any, col: str, kind: str, family: str, metric: str, v: float, rank: float | None) -> dict[str, Any]:
    """One long-format row: row ``r``'s value of ``metric`` in column ``col`` (NaN -> None)."""
    return {
        "label": r.label,
        "model": r.model,
        "layer": r.layer,
        "column": col,
        "kind": kind,
        "family": family,
        "metric": metric,
        "value": float(v) if np.isfinite(v) else None,
        "rank": rank,
        "best": False,
        "more_invariant_than": "",
    }


def _metric_rows(c: Any) -> list[dict[str, Any]]:
    """Every row x column x invariance metric, with its rank, best mark and the rows it significantly beats."""
    t = c.table
    n_tr = len(t.columns)
    fam_of = dict(t.columns)
    rows = []
    for metric in METRICS:
        vals, ranks, best = t.all_values(metric), t.ranks(metric), t.best(metric)
        for j, col in enumerate(t.column_names):
            beats = c.paired.beats(metric, col) if j < n_tr else {}
            kind, family = ("transform", fam_of[col]) if j < n_tr else ("family", col)
            for i, r in enumerate(c.rows):
                rk = ranks[i, j]
                row = _cell(r, col, kind, family, metric, vals[i, j], float(rk) if np.isfinite(rk) else None)
                row["best"] = i in best[j]
                row["more_invariant_than"] = ";".join(beats.get(r.label, []))
                rows.append(row)
    return rows


def _measure_rows(c: Any) -> list[dict[str, Any]]:
    """Every row x transform of the per-transform measures without per-image values (no rank or best)."""
    t = c.table
    return [
        _cell(r, col, "transform", fam, name, vals[i, j], None)
        for name, vals in t.measures.items()
        for j, (col, fam) in enumerate(t.columns)
        for i, r in enumerate(c.rows)
    ]


def csv_text(rows: list[dict[str, Any]]) -> str:
    """CSV of dict rows (the keys of the first row as the header; None written empty)."""
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if v is None else v for k, v in r.items()})
    return buf.getvalue()
