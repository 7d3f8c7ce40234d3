"""The report's opening (title, verdict, finding table), its *Setup* section and *Findings in detail*:
the verdict paragraph is computed from the findings' statuses and numbers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from invfast.evidence import OVER_SEED_VERDICTS
from invfast.reproduce.finding import NOT_RUN
from invfast.reproduce.provenance import describe, stale_line
from invfast.reproduce.rules.speicher import TRAINED_LEVEL
from invfast.reproduce.sections.base import ReportView, Section

__all__ = ["verdict", "under_trained_note", "HEADER", "SETUP", "DETAILS"]


def verdict(findings: Sequence[dict[str, Any]]) -> str:
    """One paragraph, computed from the findings' over-seed verdicts and their numbers."""
    tested = [f for f in findings if f["status"] != NOT_RUN]
    by = {s: [f["id"] for f in tested if f["status"] == s] for s in OVER_SEED_VERDICTS}

    def ids(xs: list[str]) -> str:
        return ", ".join(xs) if xs else "none"

    counts = "; ".join(f"{s}: {len(by[s])} ({ids(by[s])})" for s in OVER_SEED_VERDICTS if by[s])
    parts = [f"Of the {len(tested)} findings of the papers tested in this run — {counts}."]
    for f in findings:
        parts.append(f"{f['id']} ({f.get('label', f['status'])}): {f['summary']}.")
    return " ".join(parts)


def _header(view: ReportView) -> list[str]:
    doc = view.doc
    v = doc["environment"]["versions"]
    L = [
        f"# invfast reproduce — `{view.cfg.run.preset}` report\n",
        f"Generated {doc['generated_at']} by `invfast reproduce` ({v['invfast']}, commit {v['git_commit']}). The "
        f"stages took {doc['stages_elapsed_s'] / 60:.1f} min in total (each timed when it ran; this invocation "
        f"{doc['total_elapsed_s'] / 60:.1f} min, see *Time*). Every number below is in `results.json`.\n",
        "## Verdict\n",
        doc["verdict"] + "\n",
        f"Findings tested: {', '.join(f['id'] for f in doc['findings'])} (`--findings` / `--paper` choose; "
        "`invfast reproduce --list-findings` lists every one).\n",
        "| id | finding (source) | verdict rule | verdict |\n|---|---|---|---|",
    ]
    for f in doc["findings"]:
        L.append(f"| {f['id']} | {f['claim']} ({f['source']}) | {f['rule']} | **{f.get('label', f['status'])}** |")
    L.append(
        "\nEach verdict is computed per seed from 95 % bootstrap intervals over the test images, a minimum effect "
        "and a control, then combined over seeds (*Over seeds*; the rules: docs/findings.md).\n"
    )
    weak = under_trained_note(doc)
    if weak:
        L.append(f"**{weak}** (see *Do the models learn?*)\n")
    stale = stale_line(doc["timings"], describe(v["invfast"], v["git_commit"]))
    if stale:
        L.append(stale + "\n")
    return L


def under_trained_note(doc: dict[str, Any]) -> str:
    """One sentence naming the pretrained models that did not learn on some seed and the findings that
    rest on them ('' when every model learned)."""
    from invfast.reproduce.findings import resting_on
    from invfast.reproduce.sections.learning import LEARNED_RATIO

    learned = doc.get("learned") or {}
    weak: dict[str, list[str]] = {}
    for seed, models in learned.items():
        for m, v in models.items():
            if not v["learned"]:
                weak.setdefault(m, []).append(seed)
    if not weak:
        return ""
    ids = sorted({f for m in weak for f in resting_on(m)})
    rest = f". Findings {', '.join(ids)} rest on {'these models' if len(weak) > 1 else 'this model'}."
    head = (
        f"Under-trained (below {LEARNED_RATIO}× Random's identity accuracy, or their initialisation's on their "
        "own task): "
    )
    if len(weak) > 6:
        return head + f"{len(weak)} models on some seed (listed in *Do the models learn?*)" + rest
    return head + "; ".join(f"{m} on seed{'s' if len(s) > 1 else ''} {', '.join(s)}" for m, s in weak.items()) + rest


def _setup(view: ReportView) -> list[str]:
    cfg, doc = view.cfg, view.doc
    data, pre, sp = cfg.data, cfg.pretrain, cfg.speicher
    grid = (
        "the published 45-value"
        if cfg.probe.n_penalties == 45
        else f"a {cfg.probe.n_penalties}-value subset of the published"
    )
    L = ["## Setup\n"]
    if "features" in doc:
        L += [
            f"- Data: Transforms-2D, {data.objects} built-in objects under {', '.join(data.transforms)}, "
            f"{data.size}×{data.size} px, backgrounds `{data.backgrounds}`; {data.n_pretrain} pretraining, "
            f"{data.n_probe} "
            f"probe and {data.n_measure} measurement images (train / val / test splits), and {data.n_probe} "
            "rotation-probe images in which only the rotation varies.",
            f"- Models: `{pre.arch}` width {pre.width} ({doc['features']['dims']['Default']}-d features); MoCo-v2 with "
            f"the Default / Spatial / Appearance policies, {pre.epochs} epochs, batch {pre.batch_size}, lr "
            f"{pre.lr}, key momentum {pre.key_momentum}; Random = the same architecture at its seeded initialisation.",
        ]
    if "invariance" in doc:
        L.append(
            f"- Invariance: the {len(doc['invariance']['families'])} test transforms, grid size "
            f"{cfg.measurement.grid_size}, "
            "standardised cosine and Mahalanobis distance, identity parameters excluded; "
            + (
                "the grids given in pixels for 224-px images (translation, blur σ, deform σ) scaled by "
                f"{data.size}/224."
                if cfg.measurement.scale_grids
                else f"the grids as given for 224-px images, unscaled at {data.size} px (a run before 0.5)."
            )
        )
    if any(f["paper"] == "speicher" for f in doc["findings"]):
        budget = (
            f"trained epoch by epoch to {TRAINED_LEVEL:g} nearest-class-mean accuracy on held-out images of their own "
            f"task, at most {sp.criterion_epochs} epochs (the learning section says where the cap ended training),"
            if sp.criterion_epochs
            else f"{sp.transfer_epochs} epoch(s)"
        )
        L.append(
            f"- Supervised models (Speicher et al.): `{pre.arch}` width {pre.width} unless the architecture is the "
            f"factor, cross-entropy, SGD lr 0.05, weight decay 5e-4, cosine decay, {budget} on "
            f"{sp.transfer_n_source} images ({sp.irrelevant_n} for S3/S4, {sp.category_n} for S6/S7), each "
            f"architecture from one seeded initialisation; probed on {sp.transfer_n_target} held-out images."
        )
    L += _scale_lines(cfg, {f["paper"] for f in doc["findings"]})
    L += [
        f"- Probes: {cfg.probe.folds}-fold CV over {grid} penalty range (shifted for fusions; at most "
        f"{cfg.probe.logistic_max_iter} L-BFGS iterations per value); logistic regression for classification, "
        "ridge for "
        "the regressions.",
        f"- Seeds: master seed {cfg.run.seed}; stage seeds in `results.json` (`seeds`).\n",
    ]
    return L


#: each paper's scale (SPEC §5.2: said once per paper), from the papers' own sections and tables
PAPER_SCALE = {
    "ericsson": "Ericsson et al.: ResNet-50, MoCo-v2 for 200 epochs on ImageNet at 224 px; invariance on 1 000 "
    "ImageNet validation images at grids of 256 values; probes on CIFAR-10, Caltech-101, Flowers, 300W, CelebA and "
    "Leeds Sports Pose (§2, §4, Tab. 1, App. B)",
    "speicher": "Speicher et al.: ResNet-18 (also VGG-11, DenseNet-121, ResNet-50, a 7-layer ViT), Transforms-2D at "
    "32 px from 61 objects on 867 nature backgrounds, 50 000 training images, 50 epochs of Adam, models near 100 % "
    "on their own data; sensitivities over 10 000 pairs; 10 runs (§3.3, §3.4, App. B)",
    "chavhan": "Chavhan et al.: Hyper-ResNet-50, 300 epochs (batch 1 024) on ImageNet-100, K = 2 and 5 (26 "
    "descriptors); Prompt-ViT: ViT-B on ImageNet-1k warm-started from MoCo-v3; downstream on 7 recognition and 3 "
    "regression datasets, few-shot over 2 000 episodes (§4.1, §4.2, App. A.1.2)",
}


def _scale_lines(cfg: Any, papers: set[str]) -> list[str]:
    """One line per paper of the run: its scale against this run's (SPEC §5.2)."""
    data, pre, sp, ch = cfg.data, cfg.pretrain, cfg.speicher, cfg.chavhan
    here = {
        "ericsson": f"`{pre.arch}` width {pre.width}, {pre.epochs} epochs on {data.n_pretrain} Transforms-2D "
        f"images at {data.size} px; {data.n_measure} measurement images at grid {cfg.measurement.grid_size}; probes on "
        f"{data.n_probe} Transforms-2D images (identity, position, rotation, colour)",
        "speicher": f"`{pre.arch}` width {pre.width} (S1 also {', '.join(a for a in sp.s1_archs if a != pre.arch)}), "
        f"{sp.transfer_objects} objects, {sp.transfer_n_source} training images per model, trained to "
        f"{TRAINED_LEVEL:g} on their own data (at most {sp.criterion_epochs} epochs); sensitivities over "
        f"{sp.sensitivity_n} pairs (S7: {sp.category_sensitivity_n or sp.sensitivity_n}); {cfg.run.seeds} seeds",
        "chavhan": f"Hyper-ResNet of `{pre.arch}` width {pre.width}, {ch.amortised_epochs} epochs (batch "
        f"{pre.batch_size}) on {data.n_pretrain} images at {data.size} px, K = 2 and 5; Prompt-ViT: {cfg.vit.depth} "
        f"blocks of width {cfg.vit.dim}"
        + (", warm-started from the Default ViT" if cfg.vit.warm_start else "")
        + f"; few-shot over {ch.fewshot_episodes} episodes",
    }
    return [
        f"- Scale against the paper — {PAPER_SCALE[p]}. Here: {here[p]}."
        for p in ("ericsson", "speicher", "chavhan")
        if p in papers
    ]


def _setup_content(view: ReportView) -> dict[str, Any]:
    r = view.first.results
    return {k: r[k] for k in ("data", "features") if k in r}


def _details(view: ReportView) -> list[str]:
    L = ["## Findings in detail\n"]
    for f in view.doc["findings"]:
        L.append(
            f"- **{f['id']} ({f['source']}) — {f.get('label', f['status'])}.** {f['claim']}. Rule: {f['rule']}. "
            f"{f['summary']}."
        )
    L.append("")
    return L


HEADER = Section("verdict", _header)
SETUP = Section("setup", _setup, content=_setup_content)
DETAILS = Section("details", _details)
