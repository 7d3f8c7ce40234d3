"""``invfast measure``: how invariant a model is to each transform, written to an output folder.

    invfast measure --model resnet18-cifar --checkpoint ckpt.pt --data synthetic:n=1000 --out report/
    invfast measure --model resnet50 --data folder:/data/imagenet/val --transforms spatial --images 1000 \
        --crop 224 --out report/
    torchrun --nproc-per-node 4 -m invfast measure ...        # NCCL on CUDA, gloo on CPU; or --world-size 4 (local gloo)
    invfast measure --model resnet50 --data folder:/data/coil100 --real-world --out coil/

The folder gets ``result.json`` (every number, per-image values included), ``table.md`` (the
Table-1 layout, also printed), and ``curves.png`` / ``radar.png`` / ``heatmap.png``. Partial state
lives in ``<out>/state/`` while the run is going (per-pair scores too); rerunning the same command
resumes. A folder holding a finished report is never overwritten unless ``--overwrite`` is given, and
even then the old report (only invfast's own files) is replaced only once the new one is complete.
One run at a time holds the folder (``<out>/.invfast.lock``).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shutil
import sys
from typing import Any

import torch

RESULT_FILE = "result.json"
STATE_DIR = "state"
DEFAULT_IMAGES = 1000
STAGE_DIR = "report"  # inside STATE_DIR: the finished report before it replaces the old one
PAIRS_DIR = "pairs"
REPORT_FILES = ("table.md", "radar.png", "heatmap.png", "curves.png", "depth.png")  # besides RESULT_FILE and PAIRS_DIR


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    parser.add_argument("--model", required=True,
                        help="invfast model name (e.g. resnet18-cifar, resnet50) or 'module:factory' returning an nn.Module")
    parser.add_argument("--invariance", help="descriptor for amortised models (hyper-*, prompt-vit), e.g. 1,0")
    parser.add_argument("--checkpoint", help="weights: a state dict, invfast pretrain's model.pt/checkpoint.pt, or a dict with 'state_dict'")
    parser.add_argument("--data", required=True, help="folder:PATH | PATH | synthetic[:objects=10,n=1000,size=32,seed=0,...]")
    parser.add_argument("--transforms", default="all", help="all | spatial | appearance | comma-separated names (default all)")
    parser.add_argument("--images", type=int, default=None,
                        help=f"first N images of the data (default {DEFAULT_IMAGES}, or all when fewer; 0 = all); "
                             "more than the data holds is an error")
    parser.add_argument("--grid-size", type=int, default=256, help="parameters per transform, k of grid(k) (default 256)")
    parser.add_argument("--batch-size", type=int, default=32, help="images per batch (default 32)")
    parser.add_argument("--forward-batch", type=int, default=256, help="images x parameters per model call (default 256)")
    parser.add_argument("--resize", type=int, default=256, help="folder images: shorter side resized to this, centre-cropped square")
    parser.add_argument("--crop", type=int, default=None, help="centre crop after the transform, before the model (e.g. 224)")
    parser.add_argument("--no-normalize", action="store_true", help="do not apply ImageNet mean/std normalisation")
    parser.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda if available)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                        help="model precision (autocast on GPU; default float32)")
    parser.add_argument("--channels-last", choices=("auto", "on", "off"), default="auto",
                        help="model input memory format (auto: channels_last on CUDA)")
    parser.add_argument("--workers", type=int, default=None,
                        help="image-folder decoding worker processes, decoding ahead of the measurement "
                             "(default min(8, usable CPUs); 0: decode in the measuring process)")
    parser.add_argument("--layers", default=None,
                        help="measure these layers from one forward pass per view: 'all' (every ResNet stage "
                             "layer1..layer4), or comma-separated names (torchvision-style layer1..layer4, stem, any "
                             "model.named_modules() path, 'output'); default: what the model returns")
    parser.add_argument("--protocol", choices=("invfast", "ericsson"), default="invfast",
                        help="invfast (default) or ericsson: the original evaluation code's protocol "
                             "(see the protocol table in docs/measure.md)")
    parser.add_argument("--stats", help="a saved FeatureStats file to use as reference statistics")
    parser.add_argument("--real-world", action="store_true",
                        help="real-world mode: one subfolder per object/scene, all pairs of views within each")
    parser.add_argument("--name", help="model label in the tables (default: --model)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--pair-scores", action="store_true", help="also write every per-pair score to <out>/pairs/*.npy")
    parser.add_argument("--strict", action="store_true", help="stop at the first unreadable image file")
    parser.add_argument("--overwrite", action="store_true", help="replace a finished report in --out (once the new one is complete)")
    parser.add_argument("--hash-images", action="store_true",
                        help="recognise the images of a resumed run by their content (SHA-256) instead of size + mtime")
    parser.add_argument("--world-size", type=int, default=1, help="shard over N local processes (gloo) when not under torchrun")
    parser.add_argument("--save-every", type=float, default=60.0, help="seconds between partial-state saves (default 60)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def build_model(spec: str, checkpoint: str | None, invariance: str | None = None) -> Any:
    """An invfast model name, or 'module:attr' where attr is an nn.Module class/factory (called without arguments)."""
    if ":" in spec:
        mod_name, _, attr = spec.partition(":")
        try:
            obj = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot import model factory {spec!r} ({e})") from e
        model = obj() if callable(obj) and not isinstance(obj, torch.nn.Module) else obj
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"{spec!r} did not give an nn.Module (got {type(model).__name__})")
        if checkpoint:
            from invfast.measure import load_checkpoint

            load_checkpoint(model, checkpoint)
        return model
    from invfast.measure import load_model

    desc = None
    if invariance:
        try:
            desc = [float(v) for v in invariance.split(",")]
        except ValueError:
            raise ValueError(f"--invariance must be comma-separated numbers like 1,0, got {invariance!r}") from None
    return load_model(spec, checkpoint, invariance=desc)


def _check_out(args: argparse.Namespace) -> None:
    out = args.out
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out!r} exists and is not a folder")
    done = os.path.join(out, RESULT_FILE)
    if os.path.exists(done) and not args.overwrite:
        raise ValueError(f"--out {out!r} already holds a finished report ({RESULT_FILE}); choose a new folder, or pass "
                         "--overwrite to replace it once the new run is complete")
    if os.path.isdir(out) and not os.path.exists(done) and not os.path.isdir(os.path.join(out, STATE_DIR)):
        foreign = [f for f in os.listdir(out) if not f.startswith(".")]
        if foreign:
            raise ValueError(f"--out {out!r} holds other files ({', '.join(sorted(foreign)[:3])}...) and no invfast run; "
                             "choose an empty or new folder")


def _measure(args: argparse.Namespace) -> int:
    from invfast.devices import resolve_device
    from invfast.measure import measure_invariance, measure_real_world
    from invfast.measure.state import StateMismatchError, barrier, current_shard
    from invfast.stats import FeatureStats

    shard = current_shard()
    device = resolve_device(args.device or "auto")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model = build_model(args.model, args.checkpoint, args.invariance)
    stats = FeatureStats.load(args.stats) if args.stats else None
    state_dir = os.path.join(args.out, STATE_DIR)
    cfg = config_from_args(args, device, state_dir)
    for attempt in (0, 1):
        try:
            if args.real_world:
                name = os.path.basename(os.path.normpath(str(args.data).replace("folder:", "")))
                result = measure_real_world(model, args.data, cfg, name=name, stats=stats)
            else:
                result = measure_invariance(model, args.data, args.transforms, cfg, stats=stats)
            break
        except StateMismatchError:
            # the partial state of an earlier, different run in this folder: --overwrite discards it
            if attempt or not args.overwrite:
                raise
            barrier(shard)
            if shard.rank == 0:
                shutil.rmtree(state_dir, ignore_errors=True)
            barrier(shard)
    if shard.rank == 0:
        _write(result, args)
    barrier(shard)
    if shard.rank == 0:
        shutil.rmtree(state_dir, ignore_errors=True)
    return 0


def config_from_args(args: argparse.Namespace, device: torch.device, state_dir: str) -> Any:
    """The :class:`MeasureConfig` of ``invfast measure``'s arguments (the one the Python API builds)."""
    from invfast.measure.config import MeasureConfig

    return MeasureConfig(
        grid_size=args.grid_size, batch_size=args.batch_size, forward_batch=args.forward_batch,
        n_images=_n_images(args), device=str(device), dtype=args.dtype, crop=args.crop,
        normalize=not args.no_normalize, protocol=args.protocol, state_path=os.path.join(state_dir, "state.pt"),
        pair_scores_dir=os.path.join(state_dir, PAIRS_DIR) if args.pair_scores and not args.real_world else None,
        save_every=args.save_every, strict=args.strict, resize=args.resize, progress=not args.no_progress,
        fingerprint_content=args.hash_images, workers=args.workers, name=args.name or args.model, layers=args.layers,
        channels_last={"auto": None, "on": True, "off": False}[args.channels_last])


def _remove_report(out: str) -> None:
    """Delete the files of an earlier report in ``out`` that invfast wrote (nothing else)."""
    for f in (RESULT_FILE, *REPORT_FILES):  # result.json first: the folder no longer claims a finished report
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(out, f))
    pairs = os.path.join(out, PAIRS_DIR)
    if os.path.isdir(pairs):
        for f in os.listdir(pairs):
            if f.endswith((".distance.npy", ".cosine.npy")):
                os.remove(os.path.join(pairs, f))
        with contextlib.suppress(OSError):
            os.rmdir(pairs)  # left in place when it holds anything else


def _write(result: Any, args: argparse.Namespace) -> None:
    """Write the report into ``state/report/``, then replace the old report's files with it (the old
    report stays whole until the new one is complete; result.json goes last)."""
    from invfast import report

    out = args.out
    stage = os.path.join(out, STATE_DIR, STAGE_DIR)
    shutil.rmtree(stage, ignore_errors=True)
    os.makedirs(stage)
    staged_pairs = os.path.join(out, STATE_DIR, PAIRS_DIR)
    rows = _rows(result)
    for r in rows:
        for tr in r.transforms.values():  # the per-pair files will live in <out>/pairs/
            if tr.pair_scores:
                tr.pair_scores = {m: os.path.abspath(os.path.join(out, PAIRS_DIR, os.path.basename(p)))
                                  for m, p in tr.pair_scores.items()}
    table = report.to_markdown(rows)
    with open(os.path.join(stage, "table.md"), "w") as f:
        f.write(table)
    if not args.no_plots:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            report.plot_radar(rows, path=os.path.join(stage, "radar.png"))
            report.plot_heatmap(rows, path=os.path.join(stage, "heatmap.png"))
            if not args.real_world:
                report.plot_curves(rows, path=os.path.join(stage, "curves.png"))
            if len(rows) > 1:
                report.plot_depth(result, path=os.path.join(stage, "depth.png"))
    result.to_json(os.path.join(stage, RESULT_FILE))
    _remove_report(out)
    if os.path.isdir(staged_pairs):
        os.replace(staged_pairs, os.path.join(out, PAIRS_DIR))
    for f in REPORT_FILES:
        if os.path.exists(os.path.join(stage, f)):
            os.replace(os.path.join(stage, f), os.path.join(out, f))
    os.replace(os.path.join(stage, RESULT_FILE), os.path.join(out, RESULT_FILE))  # last: marks a finished report
    print(table)
    err = result.errors
    if err["count"]:
        first = ", ".join(os.path.basename(p) for p, _ in err["examples"][:3])
        print(f"{err['count']} file(s) could not be read and were skipped (first: {first}); see {RESULT_FILE} 'errors'",
              file=sys.stderr)
    pps = result.meta.get("pairs_per_s")
    rate = f", {pps:.0f} image-parameter pairs/s" if pps else ""
    if result.meta.get("resumed"):
        rate = f", resumed: {result.meta.get('pairs_computed', 0)} pairs computed in this run{rate}"
    print(f"wrote {out}/ ({result.n_images} images, {result.meta.get('elapsed_s', 0):.1f} s{rate})", file=sys.stderr)


def _rows(result: Any) -> list[Any]:
    """The rows of the report: the result, or one per measured layer labelled ``model [layer]``."""
    if not result.layers:
        return [result]
    import copy

    rows = []
    for name, r in result.layers.items():
        row = copy.copy(r)
        row.model = f"{result.model} [{name}]"
        rows.append(row)
    return rows


def _spawned(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(max(1, torch.get_num_threads() // world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        _measure(args)
    finally:
        dist.destroy_process_group()


def _n_images(args: argparse.Namespace) -> int | None:
    """The number of images to measure (None = all): --images, or the default capped by the data."""
    return (args.images or None) if args.images is not None else DEFAULT_IMAGES


def _check_args(args: argparse.Namespace) -> None:
    from invfast.devices import resolve_device

    for k in ("images", "grid_size", "batch_size", "forward_batch", "world_size", "workers"):
        v = getattr(args, k)
        low = 0 if k in ("images", "workers") else 1
        if v is not None and v < low:
            raise ValueError(f"--{k.replace('_', '-')} must be >= {low}, got {v}")
    if not args.save_every >= 0:
        raise ValueError(f"--save-every must be a number of seconds >= 0, got {args.save_every}")
    resolve_device(args.device or "auto")  # an unusable device is refused before any work
    if args.images and not args.real_world:
        from invfast.data.sources import as_source

        n = len(as_source(args.data, resize=args.resize, strict=False))
        if args.images > n:
            raise ValueError(f"--images {args.images} is more than the data holds ({n} images); use --images {n} "
                             "or fewer (0 = all)")


def run(args: argparse.Namespace) -> int:
    import torch.distributed as dist

    from invfast.io import output_lock

    _check_args(args)
    env = os.environ  # torchrun sets LOCAL_RANK too, so a torchrun of one process still joins a group
    under_torchrun = "RANK" in env and "WORLD_SIZE" in env and (int(env["WORLD_SIZE"]) > 1 or "LOCAL_RANK" in env)
    if under_torchrun:
        if args.world_size > 1:
            raise ValueError("--world-size is for local processes; under torchrun use --nproc-per-node")
        if not dist.is_initialized():
            from invfast.devices import resolve_device

            # NCCL (not run in this project's CI: no GPU) all-gathers the float64 sums as CUDA tensors
            device = resolve_device(args.device or "auto")  # GPU $LOCAL_RANK under torchrun
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        _check_out(args)  # every rank reads the same folder and reaches the same verdict
        if dist.get_rank() != 0:
            return _measure(args)
        with output_lock(args.out, "invfast measure"):
            return _measure(args)
    _check_out(args)
    with output_lock(args.out, "invfast measure"):
        if args.world_size > 1:
            from invfast.launch import spawn_local

            return spawn_local(_spawned, args.world_size, args, "invfast measure")
        return _measure(args)
