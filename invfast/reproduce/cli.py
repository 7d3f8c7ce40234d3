"""``invfast reproduce``: the papers' findings (ids E1-E5, S1-S8, C1-C7 of docs/findings.md), end to end, on built-in
synthetic data, each with a verdict computed from the numbers.

    invfast reproduce --quick --out report/          # E1-E3, S8, C1, C3: 3 seeds, about 46 min on 2 idle cores
    invfast reproduce --quick --paper speicher --out sp/   # all of Speicher et al. (S1-S8)
    invfast reproduce --quick --paper ericsson --out er/   # E1-E5; --paper chavhan: C1-C7
    invfast reproduce --quick --findings S2,S3 --out r/    # chosen findings (and only the stages they need)
    invfast reproduce --list-findings                # every finding id, its source, whether it is tested
    invfast reproduce --preset gpu --out report/     # one GPU (the default where CUDA exists; not yet run on one)
    invfast reproduce --full --out report/           # larger data and models; hours on a CPU, see docs/reproduce.md
    invfast reproduce --preset tiny --paper all --out /tmp/t   # a smoke test of every stage
    invfast reproduce --quick --set pretrain.epochs=20 --out report/   # any config field overridden

By default (E1-E3, S8, C1, C3): pretrains Default, Spatial and Appearance MoCo-v2 models (small
ResNet, 32-px Transforms-2D data), measures their invariance to the 18 test transforms (Table 1 with
significance marks), probes them, a random-init model and the fusions Spa+App and Def+Spa+App on object
identity, position, rotation and colour (mean ± std over folds), trains supervised models under nested
transformation sets (same, different, superset and their subsets) and probes them on a target, trains
an amortised (Hyper-ResNet AI-MoCo) model, moves its descriptor i and learns i per task, and records
every model's learning curve. Speicher et al.'s other experiments (S1-S7: factors, equivariance,
irrelevant features, relevance, class and category transfer, OOD) train supervised models per setting.
Writes ``report.md``, ``results.json`` and ``figures/``; the verdict on each finding is computed from
the numbers, and models that did not learn are named with the findings that rest on them.

Every stage is cached (``<cache>/stages/*.json``, pretraining checkpoints, measurement state), so a
rerun after an interruption continues where it stopped and recomputes nothing finished. An existing
folder made with a different configuration is refused with the differing fields listed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from invfast.reproduce.pipeline import reproduce
from invfast.reproduce.presets import PRESETS, QUICK_MEASURED, QUICK_MINUTES, parse_override, preset

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    _add_preset_options(parser)
    parser.add_argument("--out", help="output folder: report.md, results.json, figures/ (required to run)")
    _add_finding_options(parser)
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="where checkpoints, features and stage results go (default <out>/cache); keep it to resume",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one config field (repeatable), e.g. --set pretrain.epochs=20 (--print-config lists them)",
    )
    parser.add_argument("--seed", type=int, default=None, help="master seed (default 0; recorded in the report)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: the preset's; part of the configuration, as float sums depend on it)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="stages run in this many processes at once, each with --threads threads (default: the preset's; "
        "the numbers do not depend on it)",
    )
    parser.add_argument(
        "--rejudge",
        metavar="FOLDER",
        default=None,
        help="recompute every verdict of a finished run from FOLDER/results.json without running a stage; "
        "writes FOLDER/verdicts.json and prints each finding's verdict",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--print-config", action="store_true", help="print the configuration and exit")


def _add_preset_options(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="preset",
        action="store_const",
        const="quick",
        help=f"the quick configuration (default without CUDA; 3 seeds, about {QUICK_MINUTES['default']:.0f} minutes on "
        "2 idle CPU cores)",
    )
    mode.add_argument(
        "--full",
        dest="preset",
        action="store_const",
        const="full",
        help="larger data and models (hours on a CPU; see docs/reproduce.md)",
    )
    mode.add_argument(
        "--preset", dest="preset", choices=sorted(PRESETS), help="a named configuration (tiny: smoke test)"
    )
    parser.set_defaults(preset=None)


def _add_finding_options(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--findings",
        default=None,
        metavar="IDS",
        help="the findings to test, comma-separated ids such as S2,S3 (docs/findings.md; default: E1,E2,E3,S8,C1,C3)",
    )
    which.add_argument(
        "--paper",
        default=None,
        choices=["ericsson", "speicher", "chavhan", "all"],
        help=(
            f"every tested finding of one paper, or of all (--quick on 2 CPU cores, measured {QUICK_MEASURED}: about "
            f"{QUICK_MINUTES['ericsson']:.0f}, {QUICK_MINUTES['speicher']:.0f} and {QUICK_MINUTES['chavhan']:.0f} "
            f"minutes per paper (Ericsson's and Chavhan's from the stage times of the run for all), "
            f"{QUICK_MINUTES['all']:.0f} for all)"
        ),
    )
    parser.add_argument(
        "--list-findings", action="store_true", help="list every finding id, its source and whether it is tested"
    )


def run(args: argparse.Namespace) -> int:
    import torch

    from invfast.reproduce.findings import listing, select

    if args.list_findings:
        print("\n".join(listing()))
        return 0
    if args.rejudge is not None:
        from invfast.reproduce.document import rejudge

        out = rejudge(args.rejudge)
        for f in out["findings"]:
            print(f"finding {f['id']}: {f.get('label', f['status'])}")
        print(f"verdicts: {os.path.join(args.rejudge, 'verdicts.json')} ({len(out['changed'])} changed)")
        return 0
    overrides = dict(parse_override(s) for s in args.overrides)
    if args.seed is not None:
        overrides["run.seed"] = args.seed
    if args.threads is not None:
        overrides["run.threads"] = args.threads
    if args.workers is not None:
        overrides["run.workers"] = args.workers
    overrides["run.findings"] = select(args.findings, args.paper)
    name = args.preset or ("gpu" if torch.cuda.is_available() else "quick")
    cfg = preset(name, overrides)  # a bad value is a ValueError naming the field: exit 2 (invfast.cli)
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    if not args.out:
        raise ValueError("--out is required: the folder for report.md, results.json and figures/")
    try:  # one run at a time per output and cache folder (a second one is refused): reproduce() holds them
        reproduce(cfg, args.out, cache_dir=args.cache_dir, progress=not args.no_progress, log=print)
    except KeyboardInterrupt:
        print(
            "invfast reproduce: interrupted; rerun the same command to continue (finished stages are kept)",
            file=sys.stderr,
        )
        return 130
    return 0
