"""The report of ``invfast reproduce`` assembled from its sections: ``results.json``, ``report.md`` and
``figures/`` in the output folder. What each part says and how each finding is decided lives in
:mod:`invfast.reproduce.sections` (one module per section); this module only puts them together:

1. the results document starts with the configuration, the machine and the seeds, and each section
   adds its entries (``Section.content``, from the first seed's stage results);
2. every finding the configuration selects (``cfg.run.findings``, records of
   :data:`invfast.reproduce.findings.FINDINGS`) is decided on every seed, the statuses are combined over
   seeds and the statistics behind them aggregated (``over_seeds``); every seed's findings, statistics and
   stage results go under ``per_seed``;
3. the sections whose stages ran write their figures, then their markdown, in order.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from invfast.io import atomic_write_text
from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.finding import Finding
from invfast.reproduce.findings import by_id
from invfast.reproduce.folders import FORMAT
from invfast.reproduce.sections import SECTIONS, ReportView, SeedRun
from invfast.reproduce.sections.environment import environment
from invfast.reproduce.sections.over_seeds import aggregate_statistics, combine_over_seeds
from invfast.reproduce.sections.summary import verdict
from invfast.reproduce.stages.context import LABELS, stage_seed

__all__ = ["findings_of", "seed_statistics", "write_report", "rejudge"]


def findings_of(results: dict[str, Any], findings: Sequence[Finding]) -> list[dict[str, Any]]:
    """``findings`` decided on one seed's stage results (``{stage name: result}``), each after the learning
    precondition of the models its verdict rests on."""
    from invfast.reproduce.sections.learning import under_trained

    learned = under_trained(results)
    return [f.evaluate(results, learned) for f in findings]


def seed_statistics(
    results: dict[str, Any], findings: Sequence[Finding], decided: Sequence[dict[str, Any]]
) -> dict[str, float]:
    """The numbers behind the findings for one seed, flat ``{name: value}`` (aggregated over seeds)."""
    out: dict[str, float] = {}
    for spec, f in zip(findings, decided):
        if spec.statistics is not None and f["status"] != "not run":
            out.update(spec.statistics(results, f))
    return {k: float(v) for k, v in out.items()}


def _seeds(cfg: ReproduceConfig, results: dict[str, Any]) -> dict[str, int]:
    """The master seed and the stage seeds of one seed's run."""
    out = {
        "master": cfg.run.seed,
        **{f"init/{k}": stage_seed(cfg.run.seed, f"init/{k}") for k in [*LABELS, "transfer", "amortised"]},
    }
    for name, r in results.items():
        if isinstance(r, dict) and "seed" in r and name.startswith(("pretrain-", "transfer-train-")):
            out[name.replace("pretrain-", "pretrain/").replace("transfer-train-", "transfer/")] = r["seed"]
    return out


def write_report(
    out: str,
    cfg: ReproduceConfig,
    runs: Sequence[SeedRun],
    *,
    timings: dict[str, dict[str, Any]],
    total_elapsed_s: float,
) -> dict[str, Any]:
    """Decide the findings, write ``results.json``, ``report.md`` and ``figures/*.png``; return the document.

    ``runs`` holds one :class:`SeedRun` per master seed, the first (``cfg.run.seed``) being the one the
    tables and figures show; the findings' statuses are combined over all of them."""
    view = ReportView(cfg=cfg, runs=list(runs), out=out)
    first = view.first.results
    doc: dict[str, Any] = {
        "format": FORMAT,
        "config": cfg.to_dict(),
        "generated_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "environment": environment(),
        "seeds": _seeds(cfg, first),
        "pretraining": {k[len("pretrain-") :]: v for k, v in first.items() if k.startswith("pretrain-")},
        "findings_selected": list(cfg.run.findings),
    }
    view.doc = doc
    sections = [s for s in SECTIONS if s.shown(view)]
    selected = [by_id(fid) for fid in cfg.run.findings]
    per_seed = [findings_of(r.results, selected) for r in view.runs]
    seed_list = [int(r.seed) for r in view.runs]
    stats = [seed_statistics(r.results, selected, f) for r, f in zip(view.runs, per_seed)]
    doc["findings"] = combine_over_seeds(per_seed, seed_list)
    for section in sections:
        if section.content is not None:
            doc.update(section.content(view))
    doc["verdict"] = verdict(doc["findings"])
    doc["over_seeds"] = {
        "seeds": seed_list,
        "statistics": aggregate_statistics(stats),
        "findings": {
            str(sd): [{"id": f["id"], "status": f["status"], "summary": f["summary"]} for f in fs]
            for sd, fs in zip(seed_list, per_seed)
        },
    }
    doc["per_seed"] = {
        str(r.seed): {"findings": fs, "statistics": st, "stages": r.results}
        for r, fs, st in zip(view.runs, per_seed, stats)
    }
    doc["timings"] = timings
    doc["stages_elapsed_s"] = float(sum(t["elapsed_s"] for t in timings.values()))
    doc["total_elapsed_s"] = total_elapsed_s
    doc["figures"] = {}
    for section in sections:
        if section.figures is not None:
            doc["figures"].update(section.figures(view))
    lines: list[str] = []
    for section in sections:
        lines.extend(section.markdown(view))
    atomic_write_text(os.path.join(out, "results.json"), json.dumps(doc, indent=1, allow_nan=False))
    atomic_write_text(os.path.join(out, "report.md"), "\n".join(lines))
    return doc


def rejudge(folder: str) -> dict[str, Any]:
    """Every verdict of a finished run recomputed from its ``results.json`` (each seed's stage results are kept
    there), without running a stage: writes ``verdicts.json`` in ``folder`` (the findings with their per-seed and
    over-seed verdicts, and what changed against the verdicts the report holds) and returns it. ValueError naming
    the problem for a folder without a readable ``results.json`` of this format."""
    path = os.path.join(folder, "results.json")
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{folder} has no results.json: --rejudge needs a finished invfast reproduce folder") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("per_seed"), dict) or not doc["per_seed"]:
        raise ValueError(f"{path} holds no per-seed stage results (not an invfast reproduce results file)")
    ids = doc.get("findings_selected") or [f["id"] for f in doc.get("findings", [])]
    selected = [by_id(fid) for fid in ids]
    seeds = [int(s) for s in doc["per_seed"]]
    per_seed = [findings_of(doc["per_seed"][str(s)]["stages"], selected) for s in seeds]
    findings = combine_over_seeds(per_seed, seeds)
    before = {f["id"]: f.get("label", f["status"]) for f in doc.get("findings", [])}
    out = {
        "format": FORMAT,
        "source": "results.json",
        "report_format": doc.get("format"),
        "seeds": seeds,
        "findings": findings,
        "changed": {
            f["id"]: {"before": before.get(f["id"]), "now": f.get("label", f["status"])}
            for f in findings
            if before.get(f["id"]) != f.get("label", f["status"])
        },
    }
    atomic_write_text(os.path.join(folder, "verdicts.json"), json.dumps(out, indent=1, allow_nan=False))
    return out
