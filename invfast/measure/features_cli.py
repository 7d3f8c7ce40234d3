"""``invfast features``: a frozen model's pooled features on a data source, to a ``.npy`` file (resumable).

    invfast features --model timm:vit_small_patch16_224 --model-arg pretrained=True --data folder:photos/ \\
        --out feats.npy
    invfast features --model resnet18-cifar --checkpoint run/model.pt --data synthetic:n=2000 --out f.npy
    invfast probe --features feats.npy --targets feats.labels.npy --task classification

Writes ``F.npy`` (float32 [N, D], one row per readable image in the data's order), ``F.json`` (the model, the
data, the images skipped as unreadable, the time) and, for a folder of class subfolders, ``F.labels.npy`` (each
image's subfolder as an int64 label; the names in ``F.json``). Interrupted, the same command continues from
``F.npy.partial.npy``; ``--overwrite`` replaces earlier files of this name (and a partial export of another model).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch

from invfast.measure.options import add_model_options


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = __doc__.split("\n\n", 1)[1]
    add_model_options(p)
    p.add_argument("--data", required=True, help="folder:PATH | PATH | npy:FILE.npy | synthetic:KEY=VALUE,...")
    p.add_argument("--out", required=True, metavar="F.npy", help="the features file to write")
    p.add_argument("--images", type=int, default=0, help="first N images of the data (default 0 = all)")
    p.add_argument("--layer", default=None, help="a module path whose pooled activation to export (default output)")
    p.add_argument("--resize", type=int, default=None, help="folder images: shorter side (default 256 or the model's)")
    p.add_argument("--crop", type=int, default=None, help="centre crop before the model (default none or the model's)")
    p.add_argument("--no-normalize", action="store_true", help="no ImageNet mean/std normalisation")
    p.add_argument("--batch-size", type=int, default=64, help="images per batch (default 64)")
    p.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda if available)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32", help="model precision")
    p.add_argument(
        "--workers", type=int, default=None, help="image-folder decoding processes (default min(8, usable CPUs))"
    )
    p.add_argument("--save-every", type=float, default=30.0, help="seconds between partial saves (default 30)")
    p.add_argument("--overwrite", action="store_true", help="replace existing features of this name")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _check(args: argparse.Namespace) -> Any:
    """The export's paths, once the options and the output file are known to be usable."""
    from invfast.io import require_regular
    from invfast.measure.export import ExportPaths
    from invfast.runtime.options import check_seed
    from invfast.runtime.write_paths import check_output_file, refuse_input_as_output

    check_seed(args.seed)
    for k in ("images", "batch_size", "workers"):
        v = getattr(args, k)
        low = 1 if k == "batch_size" else 0
        if v is not None and v < low:
            raise ValueError(f"--{k.replace('_', '-')} must be >= {low}, got {v}")
    if not args.save_every >= 0:
        raise ValueError(f"--save-every must be a number of seconds >= 0, got {args.save_every}")
    if not str(args.out).endswith(".npy"):
        raise ValueError(f"--out must name a .npy file, got {args.out!r}")
    check_output_file(args.out, "--out", "features.npy")
    paths = ExportPaths(os.fspath(args.out))
    data = str(args.data)
    inputs = {"--data": [data[len("npy:") :]] if data.startswith("npy:") else [], "--checkpoint": [args.checkpoint]}
    for p in paths.written():
        refuse_input_as_output(p, "--out", inputs)
    present = [p for p in paths.written() if os.path.lexists(p)]
    if present and not args.overwrite:
        raise ValueError(f"{present[0]!r} exists; add --overwrite to replace it, or choose another --out")
    for p in present:
        require_regular(p, "an earlier features file")
    if args.overwrite:
        for p in (paths.partial, paths.record):
            if os.path.lexists(p):
                require_regular(p, "a partial export")
                os.remove(p)
    return paths


def run(args: argparse.Namespace) -> int:
    from invfast.data.sources import as_source
    from invfast.measure.cli import build_model, default_input
    from invfast.measure.engine import default_workers
    from invfast.measure.export import export_features
    from invfast.measure.extractor import FeatureExtractor, model_checksum, setup_model
    from invfast.models.library import model_args
    from invfast.runtime.devices import resolve_device
    from invfast.runtime.progress import bar

    paths = _check(args)
    device = resolve_device(args.device or "auto")
    model = build_model(args.model, args.checkpoint, args.invariance, seed=args.seed, kwargs=model_args(args.model_arg))
    default_input(args, model)
    workers = default_workers() if args.workers is None else args.workers
    source = as_source(args.data, n=args.images or None, resize=args.resize, workers=workers)
    dtype = None if args.dtype == "float32" else getattr(torch, args.dtype)
    model, channels_last = setup_model(model, None, device, dtype, None)
    layers = [args.layer] if args.layer else None
    extractor = FeatureExtractor(model, device, dtype, channels_last, args.crop, not args.no_normalize, 256, layers)
    key = {
        "model": args.model,
        "model_args": model_args(args.model_arg),
        "checkpoint": os.path.abspath(args.checkpoint) if args.checkpoint else None,
        "init_seed": None if args.checkpoint else args.seed,
        "weights": model_checksum(model),
        "invariance": args.invariance,
        "layer": args.layer or "output",
        "data": source.describe(),
        "resize": args.resize,
        "crop": args.crop,
        "normalize": not args.no_normalize,
        "dtype": args.dtype,
    }
    progress = bar(total=len(source), desc="features", unit="image", disable=args.no_progress)
    seen = [0]

    def step(done: int, total: int) -> None:
        progress.update(done - seen[0])
        seen[0] = done

    with torch.no_grad():
        try:
            meta = export_features(
                extractor, source, paths, key, batch_size=args.batch_size, save_every=args.save_every, progress=step
            )
        finally:
            progress.close()
            extractor.close()
    skipped = (
        f", {len(meta['skipped'])} unreadable image(s) skipped (named in {paths.sidecar})" if meta["skipped"] else ""
    )
    labels = f"; labels {paths.labels} ({len(meta['classes'])} classes)" if "labels" in meta else ""
    print(f"wrote {paths.features}: {meta['n_images']} x {meta['dim']} features{skipped}{labels}")
    return 0
