"""Do the `--quick` models learn on seeds nobody looked at? (issue 41)

Runs the pretraining of the Default, Spatial and Appearance MoCo-v2 models and of the amortised model at the
`--quick` budget for each master seed of `--seeds` (default 100-109: never used to choose a setting), probes
object identity (5-fold, the run's probe) and prints, per model, the ratio to Random's identity accuracy on
every seed with its standard error, the minimum and the median, and how many seeds reach 1.2x.

    python scripts/learning_check.py --out /tmp/learning --seeds 100-109 > docs/learning-check.md
    python scripts/learning_check.py --out /tmp/learning --set pretrain.epochs=40      # another budget
    python scripts/learning_check.py --out /tmp/ai --models amortised --set chavhan.amortised_epochs=16

Only the stages the ratios need run (the pretraining runs, the features and probes; not the findings' other
stages). ``--models amortised`` runs only the amortised model's (about a tenth of the time), ``--models
policies`` only the three policy models' and Random's.

The ratio's standard error combines the two probes' fold-to-fold spread (std over the 5 folds / sqrt(5) for
each, propagated to the ratio): a ratio within about two of them of 1.2 is not told apart from the line.
The run resumes (it is an ordinary `invfast reproduce` folder, findings E2 and C3).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from invfast.reproduce.sections.learning import LEARNED_RATIO, clearly_below, under_trained

MODELS = ("default", "spatial", "appearance", "amortised")
#: per --models: the findings the run is recorded under, the stages it runs (with what they need), the rows shown
CHOICES = {
    "all": ("E2,C3", ("probes", "pretrain-amortised"), MODELS),
    "amortised": ("C3", ("pretrain-amortised",), ("amortised",)),
    "policies": ("E2", ("probes",), MODELS[:3]),
}


def seed_range(text: str) -> tuple[int, int]:
    """'100-109' -> (100, 10): the first seed and how many."""
    lo, _, hi = text.partition("-")
    first, last = int(lo), int(hi or lo)
    if last < first:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: the last seed is before the first")
    return first, last - first + 1


def table(doc: dict, models: tuple[str, ...] = MODELS) -> list[str]:
    """Markdown: per model, the ratio ± SE per seed (the report's, :func:`under_trained`), then min, median,
    seeds at or above the learning line and seeds clearly below it (:func:`clearly_below`)."""
    seeds = sorted(doc["per_seed"], key=int)
    learned = {s: under_trained(doc["per_seed"][s]["stages"]) for s in seeds}
    line = f"{LEARNED_RATIO:g}"
    L = [
        "| model | " + " | ".join(f"seed {s}" for s in seeds) + f" | min | median | seeds ≥ {line}× | clearly below |",
        "|---|" + "---:|" * (len(seeds) + 4),
    ]
    for m in models:
        vals = [(learned[s][m]["ratio"], learned[s][m]["se"]) for s in seeds]
        r = [v for v, _ in vals]
        cells = [f"{v:.2f} ± {e:.2f}" for v, e in vals]
        ok = sum(v >= LEARNED_RATIO for v in r)
        below = sum(clearly_below(v, e) for v, e in vals)
        L.append(
            f"| {m} | "
            + " | ".join(cells)
            + f" | {min(r):.2f} | {statistics.median(r):.2f} | {ok}/{len(r)} | {below}/{len(r)} |"
        )
    return L


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the reproduce folder (resumable)")
    ap.add_argument("--seeds", type=seed_range, default=(100, 10), help="first-last master seed, e.g. 100-109")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    ap.add_argument(
        "--models",
        choices=("all", "amortised", "policies"),
        default="all",
        help="all four models (findings E2, C3), the amortised model alone (C3) or the three policy models (E2)",
    )
    ap.add_argument("--preset", default="quick", help="the reproduce preset (default quick; tiny to try the script)")
    args = ap.parse_args(argv)
    from invfast.cli import main as invfast
    from invfast.reproduce import pipeline

    first, n = args.seeds
    findings, targets, shown = CHOICES[args.models]
    cmd = ["reproduce", "--preset", args.preset, "--findings", findings, "--seed", str(first)]
    cmd += ["--set", f"run.seeds={n}"]
    cmd += [x for o in args.overrides for x in ("--set", o)]
    # the findings' other stages (kernel probes, learned descriptors, ...) do not bear on the ratios
    pipeline.selected_plan = lambda stages, cfg: pipeline.plan(stages, cfg, list(targets))
    rc = invfast([*cmd, "--out", args.out, "--no-progress"])
    if rc:
        return rc
    with open(os.path.join(args.out, "results.json"), encoding="utf-8") as f:
        doc = json.load(f)
    print(
        f"`invfast reproduce {' '.join(cmd[1:])}`, stages {', '.join(targets)} and what they need (config as in "
        f"`{args.out}/config.json`)\n"
    )
    print("\n".join(table(doc, shown)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
