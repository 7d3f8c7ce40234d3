"""`invfast generate`: write a Transforms-2D dataset to disk and/or a preview grid.

The options default to the ``synthetic:`` spec's defaults (:data:`invfast.data.synthetic.SYNTHETIC_DEFAULTS`),
so ``invfast generate --out DIR`` writes, byte for byte, the data set ``synthetic:`` names. Rerunning the
same command verifies the dataset and regenerates exactly any damaged file; the folder rules are in
:mod:`invfast.synthetic.writer`.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

#: generate's option for each key of a ``synthetic:`` spec
SPEC_OPTIONS = {
    "objects": "--objects",
    "transforms": "--transforms",
    "n": "--n",
    "size": "--size",
    "seed": "--seed",
    "split": "--split",
    "order": "--order",
}


class _Given(argparse.Action):
    """Store the value and remember that the option was given (``--objects`` means something else with
    ``--object-dir`` when it is not)."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: Any, option_string: str | None = None
    ) -> None:
        setattr(ns, self.dest, values)
        setattr(ns, f"{self.dest}_given", True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from invfast.data.synthetic import SYNTHETIC_DEFAULTS as D
    from invfast.synthetic.inputs import LIMITS
    from invfast.synthetic.recipe import TRANSFORMATION_TYPES

    p.add_argument(
        "--transforms",
        default=D["transforms"],
        help=f"transformation types sampled into every image: all, none, or names joined by ',' or '+', "
        f"e.g. rotate,hue,blur (default {D['transforms']}); any of: {' '.join(TRANSFORMATION_TYPES)}",
    )
    p.add_argument(
        "--objects",
        type=int,
        default=D["objects"],
        action=_Given,
        help=f"number of object classes, the first N built-in objects (default {D['objects']}; "
        f"{LIMITS['objects'][0]} to {LIMITS['objects'][1]}); with --object-dir the first N categories "
        "of the folder, all of them when not given",
    )
    p.add_argument(
        "--object-dir",
        default=None,
        help="SI-score style folder <dir>/<category>/*.png (RGBA) instead of the built-in objects",
    )
    p.add_argument("--background-dir", default=None, help="folder of background images instead of the built-in ones")
    p.add_argument("--random-backgrounds", action="store_true", help="uniform-random background per sample")
    p.add_argument("--n", type=int, default=D["n"], help=f"number of samples (default {D['n']})")
    p.add_argument(
        "--size",
        type=int,
        default=D["size"],
        help=f"image side in pixels (default {D['size']}; {LIMITS['size'][0]} to {LIMITS['size'][1]})",
    )
    p.add_argument("--seed", type=int, default=D["seed"], help=f"dataset seed (default {D['seed']})")
    p.add_argument(
        "--split", default=D["split"], help=f"split name, keys an independent random stream (default {D['split']})"
    )
    p.add_argument(
        "--order",
        default=D["order"],
        help=f"order of the transformation types (default {D['order']}): canonical (one fixed order), "
        "random (a random order per sample, reproducible by index) or a comma-separated list of the "
        "--transforms names, applied in that order to every sample; see docs/synthetic.md",
    )
    p.add_argument(
        "--out",
        default=None,
        help="output folder (sharded .npy + manifest.json); rerunning the same "
        "command verifies it and regenerates any damaged file exactly",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a folder that holds a different invfast "
        "dataset, once the new one is complete (files invfast did not write are never touched)",
    )
    p.add_argument("--batch-size", type=int, default=2048, help="samples generated at a time (default 2048)")
    p.add_argument("--shard-size", type=int, default=10_000, help="samples per images_NNNNN.npy file (default 10000)")
    p.add_argument("--preview", default=None, metavar="PNG", help="write a preview grid (rows = transformation types)")
    p.add_argument("--no-progress", action="store_true")


def _transforms(text: str) -> tuple[str, ...]:
    from invfast.synthetic.recipe import TRANSFORMATION_TYPES, canonical

    t = text.strip().lower()
    if t == "all":
        return TRANSFORMATION_TYPES
    if t in ("", "none"):
        return ()
    try:
        return canonical(t.replace("+", ","))
    except ValueError as e:
        raise ValueError(f"--transforms: {e}") from None


def dataset_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~invfast.synthetic.Transforms2D` that ``invfast generate``'s options name, every option
    checked first (one ValueError naming the option)."""
    from invfast.synthetic.inputs import RANDOM_BACKGROUNDS, as_order, check_int
    from invfast.synthetic.transforms2d import Transforms2D

    for key in ("objects", "n", "size", "seed"):
        check_int(SPEC_OPTIONS[key], getattr(args, key), key)
    transforms = _transforms(args.transforms)
    if not isinstance(args.split, str) or not args.split.strip():
        raise ValueError(f"--split must be a non-empty name, got {args.split!r}")
    try:
        as_order(args.order, transforms)
    except ValueError as e:
        raise ValueError(f"--order: {e}") from None
    if args.random_backgrounds and args.background_dir:
        raise ValueError("give at most one of --background-dir and --random-backgrounds")
    backgrounds = RANDOM_BACKGROUNDS if args.random_backgrounds else args.background_dir
    if args.object_dir:
        objects, n_classes = args.object_dir, (args.objects if getattr(args, "objects_given", False) else None)
    else:
        objects, n_classes = args.objects, None
    return Transforms2D(
        objects,
        transforms,
        size=args.size,
        n=args.n,
        seed=args.seed,
        split=args.split,
        backgrounds=backgrounds,
        n_classes=n_classes,
        order=args.order,
    )


def _preview_format(path: str, inside_out: bool) -> str:
    from PIL import Image

    ext = os.path.splitext(path)[1].lower()
    fmt = Image.registered_extensions().get(ext)
    if fmt is None or (inside_out and ext != ".png"):
        want = ".png (it is written into --out with the dataset)" if inside_out else "an image extension such as .png"
        raise ValueError(f"--preview must end in {want}, got {path!r}")
    return fmt


def run(args: argparse.Namespace) -> int:
    from invfast.io import atomic_write
    from invfast.synthetic.writer import transforms_text, write_dataset

    if args.out is None and args.preview is None:
        raise ValueError("nothing to do; give --out DIR and/or --preview grid.png")
    for name in ("batch_size", "shard_size"):
        v = getattr(args, name)
        if v < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {v}")
    ds = dataset_from_args(args)
    in_out = False
    if args.preview:
        if args.out:
            out = os.path.realpath(args.out)
            where = os.path.realpath(os.path.dirname(os.path.abspath(args.preview)))
            in_out = where == out
            if where.startswith(out.rstrip(os.sep) + os.sep):
                raise ValueError("--preview inside --out must be directly in it (e.g. --preview DIR/preview.png)")
        fmt = _preview_format(args.preview, in_out)

    def preview(path: str) -> None:
        from invfast.synthetic.preview import preview_grid

        img = preview_grid(
            ds.transforms or (), objects=ds.objects, size=args.size, seed=args.seed, backgrounds=ds.backgrounds
        )
        with atomic_write(path) as f:
            img.save(f, format=fmt)

    if args.out:
        extra = {os.path.basename(args.preview): preview} if in_out else {}
        written = write_dataset(
            ds,
            args.out,
            batch_size=args.batch_size,
            shard_size=args.shard_size,
            overwrite=args.overwrite,
            progress=not args.no_progress,
            extra=extra,
        )
        order = (
            ""
            if ds.order == "canonical"
            else ", order " + (ds.order if isinstance(ds.order, str) else ",".join(ds.order))
        )
        print(
            f"{written.describe()} ({ds.n} images of {ds.size} px, {ds.num_classes} objects, transforms "
            f"{transforms_text(ds.transforms)}, seed {ds.seed}, split {ds.split}{order}; fingerprint "
            f"{ds.fingerprint()[:12]})"
        )
    if args.preview and not in_out:
        preview(args.preview)
    if args.preview:
        print(f"preview written to {args.preview}")
    return 0
