"""`invfast generate`: write a Transforms-2D dataset to disk and/or a preview grid."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transforms", default="", help="comma-separated transformation types, e.g. rotate,hue,blur "
                   "(any of: translate rotate scale shear vflip hflip hue brightness grayscale posterize invert "
                   "sharpen blur noise pixelate elastic erasing contrast)")
    p.add_argument("--objects", type=int, default=30, help="number of object classes (default 30)")
    p.add_argument("--object-dir", default=None, help="SI-score style folder <dir>/<category>/*.png (RGBA) "
                   "instead of the built-in objects")
    p.add_argument("--background-dir", default=None, help="folder of background images instead of the built-in ones")
    p.add_argument("--random-backgrounds", action="store_true", help="uniform-random background per sample")
    p.add_argument("--n", type=int, default=None, help="number of samples (default 50000 train / 10000 val, test)")
    p.add_argument("--size", type=int, default=32, help="image side in pixels (default 32)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split", default="train", help="split name, keys an independent random stream")
    p.add_argument("--order", default="canonical",
                   help="order of the transformation types: canonical (default, one fixed order), random (a "
                   "random order per sample, reproducible by index) or a comma-separated list of the --transforms "
                   "names, applied in that order to every sample; see docs/synthetic.md")
    p.add_argument("--out", default=None, help="output folder (sharded .npy + manifest.json)")
    p.add_argument("--overwrite", action="store_true", help="replace a folder that holds a different invfast dataset (never a folder with other files)")
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--shard-size", type=int, default=10_000)
    p.add_argument("--preview", default=None, metavar="PNG", help="write a preview grid (rows = transformation types)")
    p.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from invfast.synthetic.recipe import canonical
    from invfast.synthetic.inputs import RANDOM_BACKGROUNDS
    from invfast.synthetic.transforms2d import Transforms2D

    if args.out is None and args.preview is None:
        print("invfast generate: nothing to do; give --out DIR and/or --preview grid.png", file=sys.stderr)
        return 2
    try:
        transforms = canonical(args.transforms)
        objects = args.object_dir if args.object_dir else args.objects
        if args.random_backgrounds and args.background_dir:
            raise ValueError("give at most one of --background-dir and --random-backgrounds")
        backgrounds = RANDOM_BACKGROUNDS if args.random_backgrounds else args.background_dir
        ds = Transforms2D(objects, transforms, size=args.size, n=args.n, seed=args.seed, split=args.split,
                          backgrounds=backgrounds, n_classes=args.objects if args.object_dir else None,
                          order=args.order)
        if args.out:
            # a preview written into --out is this command's own file: it may be replaced there
            own = ([Path(args.preview).name] if args.preview and
                   Path(args.preview).resolve().parent == Path(args.out).resolve() else [])
            path = ds.materialize(args.out, batch_size=args.batch_size, shard_size=args.shard_size,
                                  overwrite=args.overwrite, progress=not args.no_progress, own_files=own)
            print(f"{ds!r} -> {path} (fingerprint {ds.fingerprint()[:12]})")
        if args.preview:
            from invfast.synthetic.preview import preview_grid

            preview_grid(transforms or (), objects=ds.objects, size=args.size, seed=args.seed,
                         backgrounds=ds.backgrounds).save(args.preview)
            print(f"preview written to {args.preview}")
    except (ValueError, TypeError, FileExistsError, IndexError) as exc:
        print(f"invfast generate: error: {exc}", file=sys.stderr)
        return 2
    return 0
