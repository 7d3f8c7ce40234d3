"""``invfast compare``: models and layers side by side, from saved ``invfast measure`` results.

    invfast compare runs/rn18 runs/rn50 runs/vit --out cmp/
    invfast compare base=runs/a tuned=runs/b --out cmp/                 # LABEL=RUN renames a row
    invfast compare runs/* --out cmp/ --probes rn18:pets=pets_rn18.json rn50:pets=pets_rn50.json ...
    invfast compare runs/* --out cmp/ --probes scores.json              # {"tasks": {TASK: {MODEL: score}}}

Each RUN is an ``invfast measure`` output folder (or its result.json). The runs must have measured the
same transforms with the same grids and protocol on the same images (their recorded image identity);
otherwise the command stops naming the difference (``--allow-mismatch`` compares anyway and records it).
A run measured at several layers gives one row per layer, ``model [layer]``.

The folder gets ``report.md`` (Table 1 per metric with the best row in bold, paired significance marks,
ranks, the significance matrices and, with ``--probes``, which invariance predicts transfer),
``results.json`` (every number), ``table.csv`` (long format) and ``radar.png``, ``heatmap.png``,
``significance.png``, ``correlation.png``. ``--probes MODEL:TASK=FILE`` takes the JSON written by
``invfast probe --json`` for MODEL (a row label, or a model with one row) on a task you name; the
score is the best cross-validated one (accuracy, or R² for regression).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument(
        "runs",
        nargs="+",
        metavar="RUN",
        help="invfast measure output folders or result.json files; LABEL=RUN sets the row label",
    )
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--probes",
        nargs="+",
        metavar="SPEC",
        default=None,
        help="downstream scores: MODEL:TASK=probe.json (invfast probe --json), or a JSON "
        '{"tasks": {TASK: {MODEL: score}}, "higher_is_better": {TASK: bool}}',
    )
    parser.add_argument(
        "--allow-mismatch",
        action="store_true",
        help="compare runs that differ in transforms, grid, protocol or images (recorded in the report)",
    )
    parser.add_argument(
        "--layers",
        choices=("all", "last"),
        default="all",
        help="per-layer runs: one row per layer (all, default) or the deepest only (last)",
    )
    parser.add_argument(
        "--test",
        choices=("t", "wilcoxon"),
        default="t",
        help="primary paired test for the marks: paired t (default) or Wilcoxon signed-rank",
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level after Holm-Bonferroni (0.05)")
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of the models (2000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (0)")
    parser.add_argument("--digits", type=int, default=3, help="decimals in the report tables (3)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a finished comparison in --out (once the new one is complete)"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG pictures")


def _run_arg(spec: str) -> tuple[str | None, str]:
    """RUN or LABEL=RUN (an existing path wins over the LABEL= reading)."""
    if os.path.exists(spec) or "=" not in spec:
        return None, spec
    label, _, path = spec.partition("=")
    if not label or not path:
        raise ValueError(f"run {spec!r}: expected a folder, a result.json or LABEL=PATH")
    return label, path


def run(args: argparse.Namespace) -> int:
    from invfast.comparison.core import compare
    from invfast.comparison.inputs import load_result
    from invfast.comparison.output import check_out, write_comparison

    if not 0 <= args.digits <= 12:
        raise ValueError(f"--digits must be between 0 and 12, got {args.digits}")
    check_out(args.out, args.overwrite)  # before the work: a refused folder is told at once
    parsed = [_run_arg(s) for s in args.runs]
    labels = [lab for lab, _ in parsed if lab is not None]
    if len(set(labels)) != len(labels):
        twice = sorted(lab for lab in labels if labels.count(lab) > 1)[0]
        raise ValueError(f"the same LABEL= was given twice: {twice!r}")
    results = {}
    for label, path in parsed:
        res = load_result(path)
        key = label if label is not None else res.model
        if key in results:
            raise ValueError(
                f"two runs are both labelled {key!r} ({path!r} and an earlier one); name them with LABEL=RUN"
            )
        results[key] = (res, path)
    cmp = compare(
        {k: r for k, (r, _) in results.items()},
        probes=args.probes,
        layers=args.layers,
        allow_mismatch=args.allow_mismatch,
        test=args.test,
        alpha=args.alpha,
        n_boot=args.bootstrap,
        seed=args.seed,
    )
    sources = {k: os.path.abspath(p) for k, (_, p) in results.items()}
    cmp.rows = [dataclasses.replace(r, source=sources.get(r.model)) for r in cmp.rows]
    written = write_comparison(cmp, args.out, overwrite=args.overwrite, plots=not args.no_plots, digits=args.digits)
    text = cmp.to_markdown(digits=args.digits)
    print(text.split("\n## Paired significance")[0].rstrip())
    if cmp.mismatch["differences"]:
        print(
            f"invfast compare: compared despite {len(cmp.mismatch['differences'])} difference(s) between the runs "
            "(--allow-mismatch); they are listed in report.md",
            file=sys.stderr,
        )
    print(
        f"wrote {os.path.join(os.path.normpath(args.out), '')} ({len(cmp.rows)} rows; {', '.join(written)})",
        file=sys.stderr,
    )
    return 0
