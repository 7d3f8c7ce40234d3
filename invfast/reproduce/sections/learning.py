"""Do the models learn? The pretraining runs' learning curves (loss, and the held-out identity probe's
kNN and linear accuracy per epoch, from the initialisation on), which pretrained models end below
:data:`LEARNED_RATIO` x Random's identity accuracy, which supervised models (Speicher's experiments)
classify their own held-out data less than that much better than their initialisation, and the
findings that rest on them.

A contrastive loss can fall while the features get no better for the tasks; the held-out probe
(:class:`invfast.pretrain.HeldoutProbe`) and the final identity probe say whether they do.
"""

from __future__ import annotations

import math
import os
import statistics
from typing import Any

from invfast.io import save_figure
from invfast.reproduce.sections.base import ReportView, Section, figure
from invfast.reproduce.stages.context import AMORTISED, LABELS, POLICIES, VIT

__all__ = ["LEARNED_RATIO", "under_trained", "plot_learning", "curve_table", "SECTION"]

#: a pretrained model counts as learned when its identity accuracy reaches this multiple of Random's
LEARNED_RATIO = 1.2


def ratio_and_se(model: dict[str, Any], base: dict[str, Any]) -> tuple[float, float]:
    """``model["mean"] / base["mean"]`` of two k-fold probe scores and its standard error: each mean's SE is
    its fold scores' standard deviation (ddof 1) over sqrt(k), propagated to the ratio to first order."""

    def mean_se(d: dict[str, Any]) -> tuple[float, float]:
        f = d.get("fold_scores") or []
        se = statistics.stdev(f) / math.sqrt(len(f)) if len(f) > 1 else float("nan")
        return d["mean"], se

    (a, sa), (b, sb) = mean_se(model), mean_se(base)
    r = a / max(b, 1e-12)
    return r, r * math.hypot(sa / max(a, 1e-12), sb / max(b, 1e-12))


def under_trained(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per model of one seed: ``{ratio, learned}`` (pretrained models also ``se``, :func:`ratio_and_se`).
    A policy model's ratio is its identity probe accuracy over Random's (a transformer's, C7: over the untrained
    ViT's); an amortised model's its identity probe accuracy (at i = [1, 1]) over its initialisation's; a
    supervised model's its nearest-class-mean accuracy on held-out images of its own task over its
    initialisation's (:func:`invfast.reproduce.stages.supervised.learned_check`)."""
    out: dict[str, dict[str, Any]] = {}
    if "probes" in results:
        idn = results["probes"]["identity"]["scores"]
        for p in POLICIES:
            ratio, se = ratio_and_se(idn[LABELS[p]], idn["Random"])
            out[p] = {"ratio": ratio, "se": se, "learned": ratio >= LEARNED_RATIO}
        for key, m in results.get("probes-3xdefault", {}).get("models", {}).items():  # E3's extra Defaults
            ratio, se = ratio_and_se(m["identity"], idn["Random"])
            out[key] = {"ratio": ratio, "se": se, "learned": ratio >= LEARNED_RATIO}
    vit = results.get(f"{VIT}downstream", {}).get("identity")
    for key, idn_vit in vit["models"].items() if vit else ():
        ratio, se = ratio_and_se(idn_vit, vit["random"])
        out[key] = {"ratio": ratio, "se": se, "learned": ratio >= LEARNED_RATIO}
    for key in AMORTISED:
        idn_ai = results.get(f"pretrain-{key}", {}).get("identity")
        if idn_ai:
            ratio, se = ratio_and_se(idn_ai["trained"], idn_ai["init"])
            out[key] = {"ratio": ratio, "se": se, "learned": ratio >= LEARNED_RATIO}
    for name, r in results.items():
        if name.startswith("transfer-train-") and "ratio" in r:
            out[f"transfer-{r['source']}"] = _supervised_row(r)
        models = r.get("models") if isinstance(r, dict) else None
        for key, m in models.items() if isinstance(models, dict) else ():
            if isinstance(m, dict) and "ratio" in m:  # a training stage's model (a probe stage names its models)
                out[key] = _supervised_row(m)
    return out


def _supervised_row(m: dict[str, Any]) -> dict[str, Any]:
    """A supervised model's learning row; with a training criterion also how its training ended (``stopped``:
    'criterion' or 'cap'), its epochs and its own-data accuracy."""
    row = {"ratio": m["ratio"], "learned": m["learned"]}
    if m.get("stopped") in ("criterion", "cap"):
        row.update(stopped=m["stopped"], epochs_trained=m["epochs_trained"], own=m["ncm_trained"], level=m["level"])
    return row


def criterion_summary(rows: list[dict[str, Any]]) -> str:
    """'k of n reached own-data accuracy L (after a–b epochs); m ended at their epoch cap below it (own-data
    c–d)' over the rows of models trained to a criterion; '' when none was."""
    rows = [r for r in rows if "stopped" in r]
    if not rows:
        return ""
    hit = [r for r in rows if r["own"] >= r["level"]]  # also a model that got there in its last allowed epoch
    cap = [r for r in rows if r["own"] < r["level"]]
    text = f"{len(hit)} of {len(rows)} reached own-data accuracy {rows[0]['level']:g}"
    if hit:
        text += f" (after {min(r['epochs_trained'] for r in hit)}–{max(r['epochs_trained'] for r in hit)} epochs)"
    if cap:
        own = [r["own"] for r in cap]
        text += f"; {len(cap)} ended at their epoch cap below it (own-data {min(own):.2f}–{max(own):.2f})"
    return text


def plot_learning(pretraining: dict[str, Any], path: str) -> None:
    """Held-out identity accuracy (linear solid, kNN dashed) and the training loss per epoch, per model; the
    transformers of C7 ('vit-' keys) in a row of their own."""
    families = [f for f in ("", VIT) if any(k.startswith(VIT) == bool(f) for k in pretraining)]
    fig = figure(7.2, 2.8 * len(families))
    colours = {"default": "C1", "spatial": "C2", "appearance": "C3", "amortised": "C4"}
    for row, family in enumerate(families):
        runs = {k: v for k, v in pretraining.items() if k.startswith(VIT) == bool(family)}
        ax_acc = fig.add_subplot(len(families), 2, 2 * row + 1)
        ax_loss = fig.add_subplot(len(families), 2, 2 * row + 2)
        _plot_runs(runs, ax_acc, ax_loss, colours, family)
    save_figure(fig, path, dpi=90)


def _plot_runs(runs: dict[str, Any], ax_acc: Any, ax_loss: Any, colours: dict[str, str], family: str) -> None:
    for key, run in runs.items():
        curve = run.get("curve") or {}
        c = colours.get(key[len(family) :], "0.5")
        if curve.get("probe"):
            ep = [r["epoch"] for r in curve["probe"]]
            ax_acc.plot(ep, [r["linear"] for r in curve["probe"]], "-o", color=c, ms=3, label=key)
            ax_acc.plot(ep, [r["knn"] for r in curve["probe"]], "--", color=c, lw=1)
        if curve.get("loss"):
            ax_loss.plot(
                [r["epoch"] for r in curve["loss"]],
                [r["loss"] for r in curve["loss"]],
                "-",
                color=c,
                lw=1,
                marker="o" if len(curve["loss"]) < 3 else None,
                ms=3,
                label=key,
            )
    ax_acc.set_xlabel("epoch", fontsize=8)
    ax_acc.set_ylabel("held-out identity accuracy\n(linear solid, kNN dashed)", fontsize=8)
    ax_loss.set_xlabel("epoch", fontsize=8)
    ax_loss.set_ylabel("training loss", fontsize=8)
    if family:
        ax_acc.set_title("transformers (C7)", fontsize=8)
    for ax in (ax_acc, ax_loss):
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7)


def curve_table(curves: dict[str, dict[str, Any]]) -> list[str]:
    """Markdown rows: held-out identity accuracy (linear / kNN) per probed epoch (rows) and model (columns);
    a model not probed at an epoch shows '–'."""
    at = {k: {round(r["epoch"], 2): r for r in c["probe"]} for k, c in curves.items()}
    epochs = sorted({e for rows in at.values() for e in rows})
    L = ["| epoch | " + " | ".join(f"{k} linear / kNN" for k in at) + " |", "|---:|" + "---|" * len(at)]
    for e in epochs:
        cells = [f"{rows[e]['linear']:.3f} / {rows[e]['knn']:.3f}" if e in rows else "–" for rows in at.values()]
        L.append(f"| {e:g} | " + " | ".join(cells) + " |")
    return L


def _content(view: ReportView) -> dict[str, Any]:
    return {"learned": {str(r.seed): under_trained(r.results) for r in view.runs}}


def _figures(view: ReportView) -> dict[str, str]:
    if not view.doc["pretraining"] or not any(
        (run.get("curve") or {}).get("probe") for run in view.doc["pretraining"].values()
    ):
        return {}
    plot_learning(view.doc["pretraining"], os.path.join(view.out, "figures", "learning.png"))
    return {"learning": "figures/learning.png"}


def _markdown(view: ReportView) -> list[str]:
    doc, cfg = view.doc, view.cfg
    L = ["## Do the models learn?\n"]
    if "learning" in doc["figures"]:
        L.append(
            f"Identity of the object, probed on {min(cfg.pretrain.curve_images, cfg.data.n_probe)} held-out "
            "probe images every "
            f"{cfg.pretrain.curve_every} epochs from the initialisation on (half fitted, half scored; chance "
            f"{1 / cfg.data.objects:.2f}), and the training loss (seed {view.first.seed}). MoCo's key queue starts as "
            "random unit vectors, so its loss first rises while the queue fills with real keys. The first table "
            "gives, for every seed, the loss at its peak and at the end, the held-out probes and the features' "
            "effective rank at the start and the end, and the mean pairwise cosine of the head's outputs at the end "
            "on the same images (about 0: spread; 1: every image mapped one way, InfoNCE's logits all equal, its "
            "loss at ln(1 + K) with no gradient out: a collapsed head, which the encoder's effective rank need not "
            "show); the second, seed "
            f"{view.first.seed}'s probes epoch by epoch:\n"
        )
        L.append(f"![learning curves]({doc['figures']['learning']})\n")
        L.extend(_end_states(view))
        curves = {
            k: run["curve"]
            for k, run in doc["pretraining"].items()
            if (run.get("curve") or {}).get("probe") and run["curve"].get("loss")
        }
        L.extend(["", *curve_table(curves)])
    L += _ratio_lines(view)
    return L


def _end_states(view: ReportView) -> list[str]:
    """Per seed and pretrained model: loss, held-out probes and effective rank at the start and the end, and
    the head's output cosine at the end (a collapse shows on the seed where it happens, not only the first)."""
    L = [
        "| seed | model | loss peak → last | held-out linear, init → end | held-out kNN, init → end | "
        "feature effective rank, init → end | head output cosine, end |\n|---:|---|---|---|---|---|---:|"
    ]
    for r in view.runs:
        for key, run in r.results.items():
            if not key.startswith("pretrain-"):
                continue
            c = run.get("curve") or {}
            if not (c.get("probe") and c.get("loss")):
                continue
            pr, loss, head = c["probe"], c["loss"], run.get("head")
            L.append(
                f"| {r.seed} | {key[len('pretrain-') :]} | {max(x['loss'] for x in loss):.2f} → "
                f"{loss[-1]['loss']:.2f} | {pr[0]['linear']:.3f} → {pr[-1]['linear']:.3f} | "
                f"{pr[0]['knn']:.3f} → {pr[-1]['knn']:.3f} | "
                f"{pr[0]['effective_rank']:.1f} → {pr[-1]['effective_rank']:.1f} | "
                + ("–" if head is None else f"{head['cos']:.3f}")
                + " |"
            )
    return L


def clearly_below(ratio: float, se: float | None) -> bool:
    """Below the learning line by more than two standard errors: the probe's noise cannot explain the miss."""
    return se is not None and math.isfinite(se) and ratio + 2 * se < LEARNED_RATIO


def _ratio_cell(v: dict[str, Any]) -> str:
    """'1.36 ± 0.14', '1.16 ± 0.06 ✗' (below the line), '0.97 ± 0.05 ✗✗' (below it by more than 2 SE)."""
    se = v.get("se")
    text = f"{v['ratio']:.2f}" + (f" ± {se:.2f}" if se is not None and math.isfinite(se) else "")
    if v["learned"]:
        return text
    return text + (" ✗✗" if clearly_below(v["ratio"], se) else " ✗")


def _ratio_lines(view: ReportView) -> list[str]:
    seeds = [str(r.seed) for r in view.runs]
    learned = view.doc["learned"]
    models = list(dict.fromkeys(m for s in seeds for m in learned[s]))
    pretrained = [m for m in models if m in (*POLICIES, *AMORTISED) or m.startswith(VIT)]
    supervised = [m for m in models if m not in pretrained]
    L = []
    if pretrained:
        L.append(
            "\nIdentity accuracy over Random's (5-fold probe; the transformers 'vit-': over the untrained ViT's; "
            "the amortised models: at i = [1, 1], over their initialisation's) ± its standard error (the two "
            f"probes' fold-to-fold spreads), per seed; below {LEARNED_RATIO}× a model counts as under-trained (✗), "
            "and as clearly under-trained (✗✗) where even "
            f"two standard errors above its ratio stay below {LEARNED_RATIO}× (the probe's noise cannot explain the "
            "miss; how often each model clears the line on seeds nobody chose: docs/learning-check.md):\n"
        )
        L.append("| model | " + " | ".join(f"seed {s}" for s in seeds) + " |\n|---|" + "---:|" * len(seeds))
        for m in pretrained:
            cells = [_ratio_cell(learned[s][m]) if m in learned[s] else "–" for s in seeds]
            L.append(f"| {m} | " + " | ".join(cells) + " |")
    if supervised:
        worst = {
            s: min((learned[s][m]["ratio"] for m in supervised if m in learned[s]), default=float("nan")) for s in seeds
        }
        L.append(
            f"\n{len(supervised)} supervised models (Speicher's experiments): nearest-class-mean accuracy of their "
            f"features on held-out images of their own task over their initialisation's, lowest per seed: "
            + ", ".join(f"seed {s} {worst[s]:.2f}" for s in seeds)
            + " (every model's ratio is in `results.json`, `learned`).\n"
        )
        for s in seeds:
            text = criterion_summary([learned[s][m] for m in supervised if m in learned[s]])
            if text:
                L.append(f"- Trained to a criterion (S1, S8), seed {s}: {text}.")
    weak = sorted({m for s in seeds for m, v in learned[s].items() if not v["learned"]})
    if not weak:
        L.append("\nEvery model learned on every seed.\n")
        return L
    from invfast.reproduce.findings import resting_on

    rests = sorted({f for m in weak for f in resting_on(m)})
    L.append(f"\n**Under-trained on some seed: {', '.join(weak)}.** Findings that rest on them: {', '.join(rests)}.\n")
    return L


SECTION = Section("learning", _markdown, content=_content, figures=_figures)
