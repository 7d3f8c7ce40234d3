"""The report's opening (title, verdict, finding table), its *Setup* section and *Findings in detail*:
the verdict paragraph is computed from the findings' statuses and numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from invfast.reproduce.sections.base import NOT, NOT_RUN, PARTLY, REPRODUCED, ReportView, Section

__all__ = ["verdict", "under_trained_note", "HEADER", "SETUP", "DETAILS"]


def verdict(findings: Sequence[dict[str, Any]]) -> str:
    """One paragraph, computed from the finding statuses and their numbers."""
    tested = [f for f in findings if f["status"] != NOT_RUN]
    by = {s: [f["id"] for f in tested if f["status"] == s] for s in (REPRODUCED, PARTLY, NOT)}

    def ids(xs: list[int]) -> str:
        return ", ".join(f"finding {i}" for i in xs) if xs else "none"

    parts = [
        f"Of the {len(tested)} findings of the papers tested in this run, {len(by[REPRODUCED])} reproduced "
        f"({ids(by[REPRODUCED])}), {len(by[PARTLY])} partly ({ids(by[PARTLY])}) and {len(by[NOT])} did not "
        f"({ids(by[NOT])})."
    ]
    for f in findings:
        parts.append(f"finding {f['id']} ({f['status']}): {f['summary']}.")
    return " ".join(parts)


def _header(view: ReportView) -> list[str]:
    doc = view.doc
    v = doc["environment"]["versions"]
    L = [
        f"# invfast reproduce — `{view.cfg.preset}` report\n",
        f"Generated {doc['generated_at']} by `invfast reproduce` ({v['invfast']}, commit {v['git_commit']}). The "
        f"stages took {doc['stages_elapsed_s'] / 60:.1f} min in total (each timed when it ran; this invocation "
        f"{doc['total_elapsed_s'] / 60:.1f} min, see *Time*). Every number below is in `results.json`.\n",
        "## Verdict\n",
        doc["verdict"] + "\n",
        "| finding (source) | status |\n|---|---|",
    ]
    for f in doc["findings"]:
        L.append(f"| {f['id']}. {f['claim']} ({f['source']}) | **{f['status']}** |")
    L.append(
        "\nA probe comparison counts as *reproduced* when the paired difference over the CV folds is positive "
        "with a one-sided paired t at the 95% level, *direction only* when it is positive but not significant.\n"
    )
    weak = under_trained_note(doc)
    if weak:
        L.append(f"**{weak}** (see *Do the models learn?*)\n")
    return L


def under_trained_note(doc: dict[str, Any]) -> str:
    """One sentence naming the pretrained models that did not learn on some seed and the findings that
    rest on them ('' when every model learned)."""
    from invfast.reproduce.sections.learning import DEPENDS_ON, LEARNED_RATIO

    learned = doc.get("learned") or {}
    weak: dict[str, list[str]] = {}
    for seed, models in learned.items():
        for m, v in models.items():
            if not v["learned"]:
                weak.setdefault(m, []).append(seed)
    if not weak:
        return ""
    ids = [str(fid) for fid, ms in DEPENDS_ON.items() if set(ms) & set(weak)]
    return (
        "Under-trained (identity below "
        + f"{LEARNED_RATIO}× Random's): "
        + "; ".join(f"{m} on seed{'s' if len(s) > 1 else ''} {', '.join(s)}" for m, s in weak.items())
        + f". Findings {', '.join(ids)} rest on {'these models' if len(weak) > 1 else 'this model'}."
    )


def _setup(view: ReportView) -> list[str]:
    cfg, doc = view.cfg, view.doc
    grid = "the published 45-value" if cfg.n_penalties == 45 else f"a {cfg.n_penalties}-value subset of the published"
    return [
        "## Setup\n",
        f"- Data: Transforms-2D, {cfg.objects} built-in objects under {', '.join(cfg.data_transforms)}, "
        f"{cfg.size}×{cfg.size} px, backgrounds `{cfg.backgrounds}`; {cfg.n_pretrain} pretraining, {cfg.n_probe} "
        f"probe and {cfg.n_measure} measurement images (train / val / test splits), and {cfg.n_probe} rotation-probe "
        "images in which only the rotation varies.",
        f"- Models: `{cfg.arch}` width {cfg.width} ({doc['features']['dims']['Default']}-d features); MoCo-v2 with the "
        f"Default / Spatial / Appearance policies, {cfg.pretrain_epochs} epochs, batch {cfg.batch_size}, lr {cfg.lr}, "
        f"key momentum {cfg.key_momentum}; Random = the same architecture at its seeded initialisation.",
        f"- Invariance: the {len(doc['invariance']['families'])} test transforms, grid size {cfg.grid_size}, "
        "standardised cosine and Mahalanobis distance, identity parameters excluded.",
        f"- Probes: {cfg.folds}-fold CV over {grid} penalty range (shifted for fusions; at most "
        f"{cfg.logistic_max_iter} L-BFGS iterations per value); logistic regression for identity, ridge for the "
        "regressions.",
        f"- Seeds: master seed {cfg.seed}; stage seeds in `results.json` (`seeds`).\n",
    ]


def _setup_content(view: ReportView) -> dict[str, Any]:
    r = view.first.results
    return {"data": r["data"], "features": r["features"]}


def _details(view: ReportView) -> list[str]:
    L = ["## Findings in detail\n"]
    for f in view.doc["findings"]:
        L.append(f"- **finding {f['id']} ({f['source']}) — {f['status']}.** {f['claim']}. {f['summary']}.")
    L.append("")
    return L


HEADER = Section("verdict", _header)
SETUP = Section("setup", _setup, content=_setup_content)
DETAILS = Section("details", _details)
