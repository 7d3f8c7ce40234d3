"""``invfast measure``: how invariant a model is to each transform, written to an output folder.

    invfast measure --model resnet18-cifar --checkpoint ckpt.pt --data synthetic:n=1000 --out report/
    invfast measure --model resnet50 --data folder:/data/imagenet/val --transforms spatial --images 1000 \\
        --crop 224 --out report/
    torchrun --nproc-per-node 4 -m invfast measure ...   # NCCL on CUDA, gloo on CPU; or --world-size 4 (local gloo)
    invfast measure --model resnet50 --data folder:/data/coil100 --real-world --out coil/

The folder gets ``result.json`` (every number, per-image values included), ``table.md`` (the
Table-1 layout, also printed), ``curves.png`` / ``radar.png`` / ``heatmap.png`` (``depth.png`` with
``--layers``) and, with ``--pair-scores``, ``pairs/``. Partial state lives in ``<out>/state/`` while the
run is going; rerunning the same command resumes. The folder is marked as an invfast run by
``.invfast-run.json`` (the files invfast wrote); a folder holding anything else is refused, links inside
it are never followed, a finished report is replaced only with ``--overwrite`` and only once the new
one is complete (only invfast's own files). One run at a time holds the folder (``.invfast.lock``).
Without ``--checkpoint`` the model is a random initialisation seeded with ``--seed`` (recorded).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import torch

from invfast.measure.config import MeasureConfig
from invfast.measure.host_memory import limit_arenas
from invfast.measure.options import (
    DEFAULT_GRID,
    DEFAULT_IMAGES,
    PAIRS_DIR,
    QUICK_GRID,
    QUICK_IMAGES,
    add_model_options,
    check_args,
    config_from_args,
)
from invfast.runtime.options import add_config_options

RESULT_FILE = "result.json"
STATE_DIR = "state"


def _data_help() -> str:
    from invfast.data.synthetic import synthetic_help

    return "folder:PATH | PATH | npy:FILE.npy | " + synthetic_help()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    add_model_options(parser)
    parser.add_argument("--data", required=True, help=_data_help())
    parser.add_argument(
        "--transforms", default="all", help="all | spatial | appearance | comma-separated names (default all)"
    )
    parser.add_argument(
        "--images",
        type=int,
        default=None,
        help=f"first N images of the data (default {DEFAULT_IMAGES}, {QUICK_IMAGES} with --quick, or "
        "all when fewer; all with --real-world; 0 = all); more than the data holds is an error, except under "
        "--protocol ericsson, which draws N images with replacement",
    )
    parser.add_argument(
        "--grid-size",
        type=int,
        default=None,
        help=f"parameters per transform, k of grid(k) (default {DEFAULT_GRID}; {QUICK_GRID} with --quick)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a first look in minutes: grid size {QUICK_GRID}, at most {QUICK_IMAGES} images and, under "
        "--protocol invfast, Ledoit-Wolf shrinkage (fewer images than most models' features: the plain "
        "covariance would make every cosine 0; --protocol ericsson keeps the original's) unless "
        "--grid-size/--images/--shrinkage say otherwise (the same report layout)",
    )
    add_config_options(parser, MeasureConfig)
    parser.add_argument(
        "--resize",
        type=int,
        default=None,
        help="folder images: shorter side resized to this, centre-cropped square (default 256; a library model's "
        "own, e.g. 248 for a timm ViT at crop_pct 0.9)",
    )
    parser.add_argument("--no-normalize", action="store_true", help="do not apply ImageNet mean/std normalisation")
    parser.add_argument("--device", default=None, help="cpu | cuda | cuda:N (default: cuda if available)")
    parser.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="model precision (autocast on GPU; default float32)",
    )
    parser.add_argument(
        "--channels-last",
        choices=("auto", "on", "off"),
        default="auto",
        help="model input memory format (auto: channels_last on CUDA)",
    )
    parser.add_argument(
        "--protocol",
        choices=("invfast", "ericsson"),
        default="invfast",
        help="invfast (default) or ericsson: the original evaluation code's protocol "
        "(see the protocol table in docs/measure.md)",
    )
    parser.add_argument("--stats", help="a saved FeatureStats file to use as reference statistics")
    parser.add_argument(
        "--shrinkage",
        default=None,
        help="covariance shrinkage of the reference statistics: trace (λ = eps·tr(Σ)/D), ledoit-wolf, "
        "none, or a number λ (default: the protocol's, trace for invfast, 0 for ericsson)",
    )
    parser.add_argument(
        "--real-world",
        action="store_true",
        help="real-world mode: one subfolder per object/scene, all pairs of views within each",
    )
    parser.add_argument("--name", help="model label in the tables (default: --model)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--pair-scores", action="store_true", help="also write every per-pair score to <out>/pairs/*.npy"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a finished report in --out (once the new one is complete)"
    )
    parser.add_argument(
        "--hash-images",
        action="store_true",
        help="recognise the images of a resumed run by their content (SHA-256) instead of size + mtime",
    )
    parser.add_argument(
        "--world-size", type=int, default=1, help="shard over N local processes (gloo) when not under torchrun"
    )
    parser.add_argument(
        "--rank-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with several ranks: how long one waits for the others at a collective before it stops with one line "
        "(default 1800; a rank that dies ends the others at once)",
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def build_model(
    spec: str, checkpoint: str | None, invariance: str | None = None, seed: int = 0, kwargs: dict | None = None
) -> Any:
    """An invfast model name, another library's model (``timm:NAME``, ...: :mod:`invfast.models.library`), or
    'module:attr' where attr is an nn.Module class/factory (called with ``kwargs``). Without a checkpoint the
    weights are a random initialisation seeded with ``seed`` (the same model every run, so a run can resume;
    a library's own pretrained weights asked for in ``kwargs`` excepted), and a one-line warning says so."""
    kwargs = dict(kwargs or {})
    from invfast.models.library import is_library_spec
    from invfast.models.registry import create_library_model

    if invariance and is_library_spec(spec):
        raise ValueError(f"model {spec!r} takes no invariance descriptor; drop --invariance")
    if invariance and ":" in spec:
        raise ValueError(
            f"--invariance is for invfast's amortised models (hyper-*, prompt-vit); {spec!r} is your own "
            "factory: pass its descriptor as a --model-arg"
        )
    if checkpoint is None and not _library_pretrained(spec, kwargs):
        import warnings

        torch.manual_seed(seed)
        warnings.warn(
            f"no --checkpoint: {spec} is measured with random weights (initialised with --seed {seed})", stacklevel=2
        )
    if is_library_spec(spec):
        return create_library_model(spec, checkpoint, **kwargs)
    if ":" in spec:
        from invfast.models.registry import factory

        try:
            obj: Any = factory(spec)  # 'module:attr', imported as every model spec is
        except TypeError as e:  # not callable: the user's spec, not a bug
            raise ValueError(f"{spec!r} did not give an nn.Module ({e})") from e
        if isinstance(obj, torch.nn.Module) and kwargs:
            raise ValueError(f"{spec!r} is a module, not a factory: it takes no --model-arg")
        model = obj(**kwargs) if not isinstance(obj, torch.nn.Module) else obj
        if not isinstance(model, torch.nn.Module):
            raise ValueError(f"{spec!r} did not give an nn.Module (got {type(model).__name__})")
        if checkpoint:
            from invfast.models import load_checkpoint

            load_checkpoint(model, checkpoint)
        return model
    from invfast.measure import load_model

    desc = None
    if invariance:
        try:
            desc = [float(v) for v in invariance.split(",")]
        except ValueError:
            raise ValueError(f"--invariance must be comma-separated numbers like 1,0, got {invariance!r}") from None
    return load_model(spec, checkpoint, invariance=desc, **kwargs)


def _library_pretrained(spec: str, kwargs: dict) -> bool:
    """Whether ``kwargs`` ask a library for its own trained weights (timm/open_clip ``pretrained``,
    torchvision ``weights``; a Hugging Face name is always its saved weights)."""
    lib = spec.partition(":")[0]
    return lib == "hf" or bool(kwargs.get("pretrained")) or kwargs.get("weights") not in (None, False)


def default_input(args: argparse.Namespace, model: Any) -> None:
    """A library model on folder images: ``--resize`` / ``--crop`` default to its eval transform's (said in one
    line); otherwise ``--resize`` defaults to 256 and ``--crop`` to none."""
    from invfast.models.library import LibraryModel

    data = str(args.data)
    folder = data.startswith("folder:") or os.path.isdir(data)
    spec = getattr(model, "input", None) if isinstance(model, LibraryModel) else None
    if spec is not None and folder and (args.resize is None or args.crop is None):
        args.resize = spec.resize if args.resize is None else args.resize
        args.crop = spec.size if args.crop is None else args.crop
        print(
            f"{args.model}: images resized to {args.resize} px and centre-cropped to {args.crop} px, the model's "
            "eval transform (--resize / --crop override)",
            file=sys.stderr,
        )
    if args.resize is None:
        args.resize = 256


def _first_images(args: argparse.Namespace) -> tuple[torch.Tensor | None, int]:
    """Up to 8 of the first readable images of ``--data`` (None when none of them can be read) and how many
    images the run will read."""
    from invfast.data.sources import as_source
    from invfast.measure.options import _n_images

    source = as_source(args.data, resize=args.resize, strict=False, n=_n_images(args))
    images, ok = source.load(list(range(min(8, len(source)))))
    ok = torch.as_tensor(ok)
    return (images[ok] if bool(ok.any()) else None), len(source)


def _extractor(args: argparse.Namespace, model: Any, device: torch.device, **kwargs: Any) -> Any:
    from invfast.measure.extractor import FeatureExtractor, setup_model

    net, _ = setup_model(model, None, device, None, False)
    return FeatureExtractor(net, device, None, False, args.crop, not args.no_normalize, args.forward_batch, **kwargs)


def _announce_estimate(
    args: argparse.Namespace, model: Any, device: torch.device, images: torch.Tensor, n_images: int
) -> None:
    """One line before a long CPU measurement of ``n_images``: its estimated time from the model timed on the first
    ``images`` repeated to the run's batch size, and that of ``--quick`` (:mod:`invfast.measure.estimate`)."""
    from invfast.measure.estimate import estimate_line, seconds_per_image, views_per_image
    from invfast.measure.options import _grid_size

    extract = _extractor(args, model, device)
    try:
        per_image = seconds_per_image(extract, images, args.forward_batch)
    finally:
        extract.close()
    views = views_per_image(args.transforms, _grid_size(args), args.protocol, args.grid_side)
    quick = views_per_image(args.transforms, QUICK_GRID, args.protocol, args.grid_side)
    line = estimate_line(n_images, views, per_image, quick, QUICK_IMAGES)
    if line is not None:
        print(line, file=sys.stderr)


def _check_unit_memory(args: argparse.Namespace, model: Any, device: torch.device, images: torch.Tensor) -> None:
    """Before a ``--units elements`` run: its per-unit moments (from one image's activations per layer) against
    the memory free on the device, refused when larger, announced when large (:func:`moments_line`); processes
    on one host share its memory."""
    from invfast.measure.estimate import free_memory_bytes, moments_line, unit_moment_bytes, views_per_transform
    from invfast.measure.options import _grid_size
    from invfast.runtime.launch import current_rank

    extract = _extractor(args, model, device, layers=args.layers, units="elements")
    try:
        with torch.no_grad():
            _, units = extract.features_and_units(images[:1])
    finally:
        extract.close()
    per_layer = [int(u.shape[1]) for u in units.values()]
    views = views_per_transform(args.transforms, _grid_size(args), args.protocol, args.grid_side)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", current_rank().world_size)) if device.type == "cpu" else 1
    line = moments_line(
        local * unit_moment_bytes(views, per_layer), free_memory_bytes(device), str(device), per_layer, views
    )
    if line is not None:
        print(line, file=sys.stderr)


def _before_the_run(args: argparse.Namespace, model: Any, device: torch.device) -> None:
    """On rank 0 only (its error reaches every rank): a ``--units elements`` run's memory checked, a long CPU
    run's time estimated, from the first images of ``--data``."""
    timed = device.type == "cpu" and not args.quick
    if args.real_world or not (timed or args.units == "elements"):
        return
    first, n_images = _first_images(args)
    if first is not None and args.units == "elements":
        _check_unit_memory(args, model, device, first)
    if first is not None and timed:
        _announce_estimate(args, model, device, first, n_images)


def _folder(args: argparse.Namespace) -> Any:
    """The output folder (:class:`invfast.runtime.run_folder.RunFolder`): checked before any work on every rank."""
    from invfast.data.sources import folder_of
    from invfast.runtime.run_folder import RunFolder, refuse_inside

    folder = RunFolder(args.out, "measure", overwrite=args.overwrite, done_file=RESULT_FILE)
    data = folder_of(str(args.data))
    if data is not None:
        refuse_inside(args.out, data)
    folder.check()
    return folder


def _state_files(args: argparse.Namespace, model: Any, world: int) -> list[str]:
    """The files a run writes under ``state/`` (recorded in the folder's marker before they are written)."""
    from invfast.measure.finished import finished_file
    from invfast.measure.layers import OUTPUT, resolve_layers
    from invfast.measure.scoring import pair_file
    from invfast.measure.selection import resolve_transforms

    states = [os.path.join(STATE_DIR, name) for name in ["state.pt", *(f"state.pt.rank{r}" for r in range(world))]]
    if args.real_world:
        return states
    transforms = resolve_transforms(args.transforms)
    files = states + [finished_file(st, i) for st in states for i in range(len(transforms))]
    if args.pair_scores:
        layers = list(resolve_layers(model, args.layers))
        for t in transforms:
            for ly in layers:
                files += [
                    pair_file(os.path.join(STATE_DIR, PAIRS_DIR), t.name, ly, m, layers != [OUTPUT])
                    for m in ("distance", "cosine")
                ]
    return files


def _measure(args: argparse.Namespace) -> int:
    from invfast.measure import measure_invariance, measure_real_world
    from invfast.measure.state import StateMismatchError, barrier, from_first_rank
    from invfast.runtime.devices import resolve_device
    from invfast.runtime.launch import current_rank
    from invfast.stats import FeatureStats

    shard = current_rank()
    device = resolve_device(args.device or "auto")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    from invfast.models.library import model_args

    model = build_model(args.model, args.checkpoint, args.invariance, seed=args.seed, kwargs=model_args(args.model_arg))
    default_input(args, model)
    stats = FeatureStats.load(args.stats) if args.stats else None
    folder = _folder(args) if shard.rank == 0 else None
    from_first_rank(lambda: _before_the_run(args, model, device), shard, "checking the run on rank 0")
    state_files = _state_files(args, model, shard.world_size)
    if folder is not None:
        folder.own(*state_files)
    state_dir = os.path.join(args.out, STATE_DIR) if folder is None else folder.inside(STATE_DIR)
    if folder is not None:
        folder.inside(STATE_DIR, PAIRS_DIR)  # refuses a link where the per-pair files go
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
            if folder is not None:  # every state file an earlier run recorded, whatever its world size
                saved = [f for f in folder.owned() if f.startswith(os.path.join(STATE_DIR, "state.pt"))]
                folder.remove([*state_files, *saved])
                folder.own(*state_files)
            barrier(shard)
    if shard.rank == 0:
        if args.checkpoint is None:
            result.meta["init_seed"] = args.seed  # random weights: the seed that made them
        _write(result, args, folder)
    barrier(shard)
    return 0


def _write(result: Any, args: argparse.Namespace, folder: Any) -> None:
    """Write the whole report into the folder's staging area, then swap it in: the old report (only the
    files invfast wrote) stays whole until the new one is complete; the state files go with it."""
    from invfast import report

    stage = folder.staging()
    rows = _rows(result)
    staged_pairs = os.path.join(args.out, STATE_DIR, PAIRS_DIR)
    for r in rows:
        for tr in r.transforms.values():  # the per-pair files will live in <out>/pairs/
            if tr.pair_scores:
                tr.pair_scores = {
                    m: os.path.abspath(os.path.join(args.out, PAIRS_DIR, os.path.basename(p)))
                    for m, p in tr.pair_scores.items()
                }
    table = report.to_markdown(rows, metrics=("distance", "cosine") + (("equivariance",) if args.equivariance else ()))
    from invfast.io import atomic_write_text

    atomic_write_text(os.path.join(stage, "table.md"), table)
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
    if os.path.isdir(staged_pairs):
        os.makedirs(os.path.join(stage, PAIRS_DIR))
        for f in sorted(os.listdir(staged_pairs)):
            if f.endswith((".distance.npy", ".cosine.npy")) and os.path.join(STATE_DIR, PAIRS_DIR, f) in folder.owned():
                os.replace(os.path.join(staged_pairs, f), os.path.join(stage, PAIRS_DIR, f))
    result.write_json(os.path.join(stage, RESULT_FILE))
    folder.commit(stage)  # also deletes the run's state files: the marker lists them
    print(table)
    err = result.errors
    if err["count"]:
        first = ", ".join(os.path.basename(p) for p, _ in err["examples"][:3])
        print(
            f"{err['count']} file(s) could not be read and were skipped (first: {first}); see {RESULT_FILE} 'errors'",
            file=sys.stderr,
        )
    pps = result.meta.get("pairs_per_s")
    rate = f", {pps:.0f} image-parameter pairs/s" if pps else ""
    if result.meta.get("resumed"):
        rate = f", resumed: {result.meta.get('pairs_computed', 0)} pairs computed in this run{rate}"
    out = os.path.join(os.path.normpath(args.out), "")  # one trailing separator, whatever --out ended with
    print(f"wrote {out} ({result.n_images} images, {result.meta.get('elapsed_s', 0):.1f} s{rate})", file=sys.stderr)


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


def _rank_timeout(args: argparse.Namespace) -> float:
    from invfast.runtime.launch import RANK_TIMEOUT_S

    return RANK_TIMEOUT_S if args.rank_timeout is None else args.rank_timeout


def _as_rank(args: argparse.Namespace) -> int:
    """One rank of a group whose environment torchrun (or :func:`invfast.runtime.launch.spawn_local`) set: join the
    group (:func:`invfast.runtime.launch.group_backend`, with the rank timeout), then measure this rank's share."""
    import torch.distributed as dist

    if not dist.is_initialized():
        from invfast.runtime.devices import resolve_device
        from invfast.runtime.launch import group_backend, join_group

        # NCCL (not run in this project's CI: no GPU) all-gathers the float64 sums as CUDA tensors
        device = resolve_device(args.device or "auto")  # GPU $LOCAL_RANK
        if device.type == "cuda":
            torch.cuda.set_device(device)
        join_group(group_backend(device), _rank_timeout(args))
    return _measure(args)


def _local_rank(args: argparse.Namespace) -> int:
    """One of ``--world-size`` local processes: the machine's threads shared between them, then :func:`_as_rank`."""
    limit_arenas()  # a spawned process does not pass through run()
    torch.set_num_threads(max(1, torch.get_num_threads() // args.world_size))
    return _as_rank(args)


def run(args: argparse.Namespace) -> int:
    check_args(args)
    limit_arenas()  # this process is the command's: its heaps stay few (invfast/measure/host_memory.py)
    from invfast.runtime.launch import under_torchrun

    if under_torchrun():  # a torchrun of one process joins a group too
        if args.world_size > 1:
            raise ValueError("--world-size is for local processes; under torchrun use --nproc-per-node")
        folder = _folder(args)  # every rank reads the same folder and reaches the same verdict
        if int(os.environ.get("RANK", "0")) != 0:
            return _as_rank(args)
        with folder.lock():
            return _as_rank(args)
    with _folder(args).lock():
        if args.world_size > 1:
            from invfast.runtime.launch import spawn_local

            return spawn_local(_local_rank, args.world_size, args, "invfast measure")
        return _measure(args)
