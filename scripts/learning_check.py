"""Do the `--quick` models learn on seeds nobody looked at? (issue 41)

Runs the pretraining of the Default, Spatial and Appearance MoCo-v2 models and of the amortised model at the
`--quick` budget for each master seed of `--seeds` (default 100-109: never used to choose a setting), probes
object identity (5-fold, the run's probe) and prints, per model, the ratio to Random's identity accuracy on
every seed with its standard error, the minimum and the median, and how many seeds reach 1.2x.

    python scripts/learning_check.py --out /tmp/learning --seeds 100-109 > docs/learning-check.md
    python scripts/learning_check.py --out /tmp/learning --set pretrain_epochs=40      # another budget
    python scripts/learning_check.py --out /tmp/ai --models amortised --set amortised_epochs=16

``--models amortised`` runs only the amortised model's stages (finding C3: about a tenth of the time).

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

from invfast.reproduce.sections.learning import ratio_and_se

MODELS = ("default", "spatial", "appearance", "amortised")


def seed_range(text: str) -> tuple[int, int]:
    """'100-109' -> (100, 10): the first seed and how many."""
    lo, _, hi = text.partition("-")
    first, last = int(lo), int(hi or lo)
    if last < first:
        raise argparse.ArgumentTypeError(f"--seeds {text!r}: the last seed is before the first")
    return first, last - first + 1


def table(doc: dict, models: tuple[str, ...] = MODELS) -> list[str]:
    """Markdown: per model, the ratio ± SE per seed, then min, median, seeds >= 1.2 and seeds clearly below the
    line (ratio + 2 SE < 1.2: the probe's noise cannot explain the miss)."""
    seeds = sorted(doc["per_seed"], key=int)
    rows: dict[str, list[tuple[float, float]]] = {m: [] for m in models}
    for s in seeds:
        st = doc["per_seed"][s]["stages"]
        for m in rows:
            if m == "amortised":
                ai = st["pretrain-amortised"]["identity"]
                rows[m].append(ratio_and_se(ai["trained"], ai["init"]))
            else:
                idn = st["probes"]["identity"]["scores"]
                rows[m].append(ratio_and_se(idn[m.capitalize()], idn["Random"]))
    L = [
        "| model | " + " | ".join(f"seed {s}" for s in seeds) + " | min | median | seeds ≥ 1.2× | clearly below |",
        "|---|" + "---:|" * (len(seeds) + 4),
    ]
    for m, vals in rows.items():
        r = [v[0] for v in vals]
        cells = [f"{v:.2f} ± {e:.2f}" for v, e in vals]
        ok = sum(v >= 1.2 for v in r)
        below = sum(v + 2 * e < 1.2 for v, e in vals)
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
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument(
        "--models",
        choices=("all", "amortised"),
        default="all",
        help="all four models (findings E2, C3) or the amortised model alone (C3)",
    )
    args = ap.parse_args(argv)
    from invfast.cli import main as invfast

    first, n = args.seeds
    findings = "E2,C3" if args.models == "all" else "C3"
    cmd = ["reproduce", "--quick", "--findings", findings, "--seed", str(first), "--set", f"seeds={n}"]
    cmd += [x for o in args.overrides for x in ("--set", o)]
    rc = invfast([*cmd, "--out", args.out, "--no-progress"])
    if rc:
        return rc
    with open(os.path.join(args.out, "results.json"), encoding="utf-8") as f:
        doc = json.load(f)
    print(f"`invfast reproduce {' '.join(cmd[1:])}` (config as in `{args.out}/config.json`)\n")
    print("\n".join(table(doc, MODELS if args.models == "all" else ("amortised",))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
