"""The options of ``invfast measure``: their defaults, their checks, and the :class:`MeasureConfig` they make
(the one the Python API builds)."""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch

from invfast.runtime.options import check_seed, config_options

DEFAULT_IMAGES = 1000
DEFAULT_GRID = 256
QUICK_GRID, QUICK_IMAGES = 8, 100  # --quick: ~125 views per image over the 18 transforms
PAIRS_DIR = "pairs"


def add_model_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose a frozen model, as ``measure`` and ``features`` share them: ``--model``,
    ``--model-arg``, ``--invariance``, ``--checkpoint``, ``--seed``."""
    parser.add_argument(
        "--model",
        required=True,
        help="invfast model name (e.g. resnet18-cifar, resnet50), another library's model by name (timm:NAME, "
        "torchvision:NAME, hf:NAME, open_clip:NAME: head removed, its own input size and normalisation) or "
        "'module:factory' returning an nn.Module",
    )
    parser.add_argument(
        "--model-arg",
        action="append",
        metavar="KEY=VALUE",
        help="a keyword argument of the model's constructor (repeatable), e.g. pretrained=True for timm, "
        "weights=DEFAULT for torchvision, width=16 for invfast's",
    )
    parser.add_argument("--invariance", help="descriptor for amortised models (hyper-*, prompt-vit), e.g. 1,0")
    parser.add_argument(
        "--checkpoint",
        help="weights: a state dict, invfast pretrain's model.pt/checkpoint.pt, a file torchvision, timm or MoCo "
        "wrote, or a dict with 'state_dict'",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random initialisation when no --checkpoint is given (default 0; recorded)",
    )


def config_from_args(args: argparse.Namespace, device: torch.device, state_dir: str) -> Any:
    """The :class:`MeasureConfig` of ``invfast measure``'s arguments (the one the Python API builds)."""
    from invfast.measure.config import MeasureConfig

    return MeasureConfig(
        **config_options(args, MeasureConfig),
        grid_size=_grid_size(args),
        n_images=_n_images(args),
        device=str(device),
        dtype=args.dtype,
        normalize=not args.no_normalize,
        protocol=args.protocol,
        state_path=os.path.join(state_dir, "state.pt"),
        pair_scores_dir=os.path.join(state_dir, PAIRS_DIR) if args.pair_scores and not args.real_world else None,
        resize=256 if args.resize is None else args.resize,
        progress=not args.no_progress,
        fingerprint_content=args.hash_images,
        name=args.name or args.model,
        shrinkage=_shrinkage(args.shrinkage, quick=args.quick and args.protocol == "invfast"),
        channels_last={"auto": None, "on": True, "off": False}[args.channels_last],
    )


def _shrinkage(value: str | None, quick: bool = False) -> str | float | None:
    """--shrinkage: a name, or a number λ; not given, Ledoit-Wolf with ``quick`` (else the protocol's)."""
    if value is None and quick:
        return "ledoit-wolf"
    if value is None or value in ("trace", "ledoit-wolf", "none"):
        return value
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"--shrinkage must be trace, ledoit-wolf, none or a number >= 0, got {value!r}") from None


def _n_images(args: argparse.Namespace) -> int | None:
    """The number of images to measure (None = all): --images, or the default capped by the data; with
    --real-world every view unless --quick (the groups are the unit: the first 1 000 views of a folder of objects
    would silently drop the objects after them)."""
    if args.images is not None:
        return args.images or None
    if args.quick:
        return QUICK_IMAGES
    return None if args.real_world else DEFAULT_IMAGES


def _grid_size(args: argparse.Namespace) -> int:
    """--grid-size, or the default (the --quick one with --quick)."""
    if args.grid_size is not None:
        return args.grid_size
    return QUICK_GRID if args.quick else DEFAULT_GRID


def _check_real_world(args: argparse.Namespace) -> None:
    """Refuse the options that --real-world would ignore (it scores pairs of views within groups: no transform,
    no grid)."""
    if not args.real_world:
        return
    given = [o for o, v in (("--pair-scores", args.pair_scores), ("--grid-size", args.grid_size)) if v]
    given += ["--grid-side"] if args.grid_side is not None else []
    if given:
        raise ValueError(
            f"{', '.join(given)} concern{'s' if len(given) == 1 else ''} the transforms' grids, which --real-world "
            "does not use (it scores all pairs of views within each group): drop "
            f"{'it' if len(given) == 1 else 'them'}"
        )


def check_args(args: argparse.Namespace) -> None:
    """Refuse, with one ValueError naming the option, values that cannot work, before any work."""
    from invfast.measure.config import MeasureConfig
    from invfast.runtime.devices import resolve_device

    config_options(args, MeasureConfig)
    for k in ("images", "grid_size", "world_size"):
        v = getattr(args, k)
        low = 0 if k == "images" else 1
        if v is not None and v < low:
            raise ValueError(f"--{k.replace('_', '-')} must be >= {low}, got {v}")
    check_seed(args.seed)
    if args.rank_timeout is not None and not args.rank_timeout > 0:
        raise ValueError(f"--rank-timeout must be a number of seconds > 0, got {args.rank_timeout}")
    resolve_device(args.device or "auto")  # an unusable device is refused before any work
    _check_real_world(args)
    from invfast.measure.protocol import get_protocol

    if args.images and not args.real_world and not get_protocol(args.protocol).with_replacement:
        from invfast.data.sources import as_source

        n = len(as_source(args.data, resize=args.resize, strict=False))
        if args.images > n:
            raise ValueError(
                f"--images {args.images} is more than the data holds ({n} images); use --images {n} or fewer (0 = all)"
            )
