"""``invfast pretrain``: contrastive pretraining from the command line (torchrun-compatible).

    invfast pretrain --method mocov2 --policy spatial --data synthetic:n=5000,transforms=all \\
        --arch resnet18-cifar --epochs 50 --out runs/spatial [--resume]
    torchrun --nproc-per-node 4 -m invfast pretrain ...      # DDP, global --batch-size
    invfast pretrain ... --nproc 2                           # the same, spawned locally
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch

from invfast.pretrain.config import TrainConfig
from invfast.pretrain.invariance import DEFAULT_TRANSFORMS
from invfast.runtime.options import add_config_options, check_seed, config_options

METHOD_NAMES = ("mocov2", "simclr", "ai-moco", "ai-simclr")
POLICY_NAMES = ("default", "spatial", "appearance", "solarize-default")
DEFAULT_EPOCHS = 200


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", default="mocov2", help=f"one of {', '.join(METHOD_NAMES)} (default mocov2)")
    p.add_argument(
        "--policy",
        default=None,
        help=f"augmentation policy of mocov2/simclr: {', '.join(POLICY_NAMES)} (default 'default')",
    )
    p.add_argument(
        "--descriptors",
        default=None,
        help="amortised methods only: 'groups' (K=2: default/spatial/appearance, the default) or "
        "'individual' (K=5, 26)",
    )
    p.add_argument(
        "--data",
        required=True,
        help="synthetic:objects=61,transforms=all,n=5000,size=32,seed=0 | folder:PATH | npy:FILE.npy",
    )
    p.add_argument(
        "--arch",
        default="resnet18-cifar",
        help="encoder architecture from invfast.models (amortised methods use its hyper- variant), "
        "or 'module:factory' returning an encoder (called with k=K for amortised methods)",
    )
    p.add_argument(
        "--width",
        type=int,
        default=None,
        help="ResNet channels after the stem (architecture default 64; smaller is faster on CPU)",
    )
    p.add_argument(
        "--size",
        type=int,
        default=None,
        help="side of the augmented views (default: the synthetic/array image size, 224 for folders)",
    )
    p.add_argument(
        "--load-size",
        type=int,
        default=None,
        help="folder images are resized to this on load (default round(size*256/224))",
    )
    p.add_argument("--epochs", type=int, default=None, help=f"passes over the data (default {DEFAULT_EPOCHS})")
    add_config_options(p, TrainConfig)
    p.add_argument("--tau", type=float, default=0.2, help="temperature")
    p.add_argument(
        "--queue-size",
        type=int,
        default=None,
        help="MoCo queue length (default 65536 scaled down to the data set, a multiple of the batch)",
    )
    p.add_argument("--key-momentum", type=float, default=0.999, help="MoCo key-encoder momentum")
    p.add_argument("--proj-dim", type=int, default=128)
    p.add_argument("--proj-hidden", type=int, default=None, help="MLP head hidden size (default: feature dim)")
    p.add_argument(
        "--head-norm",
        choices=("none", "bn"),
        default="none",
        help="the projection head: none (MoCo-v2's MLP, default) or bn (batch-normalised hidden and output "
        "layers, MoCo v3's: outputs centred per batch, so they cannot collapse to one direction)",
    )
    p.add_argument(
        "--aug-backend",
        default="auto",
        choices=("auto", "torch", "dali"),
        help="augmentation pipeline: DALI on GPU when installed (auto), else torch",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="output folder (checkpoint.pt, metrics.jsonl/csv, model.pt)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt")
    p.add_argument(
        "--invariance-transforms",
        default=",".join(DEFAULT_TRANSFORMS),
        help="comma-separated: rot90, hflip, grayscale, brightness or invfast.transforms test transforms",
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument(
        "--workers", type=int, default=2, help="DataLoader worker processes decoding folder images (0: none)"
    )
    p.add_argument("--nproc", type=int, default=1, help="spawn this many local DDP processes (not under torchrun)")
    p.add_argument("--no-progress", action="store_true")


def _encoder(arch: str, amortised: bool, k: int, width: int | None = None) -> torch.nn.Module:
    from invfast import models
    from invfast.models.registry import is_factory_spec

    kw = {} if width is None else {"width": width}
    if is_factory_spec(arch):  # a user's own encoder factory, 'package.module:callable' (the models registry)
        return models.create(arch, k=k, **kw) if amortised else models.create(arch, **kw)
    names = tuple(models.ARCHITECTURES)
    if amortised:
        name = arch if arch.startswith("hyper-") else f"hyper-{arch}"
        if name not in names:
            raise ValueError(
                f"amortised methods need a descriptor-conditioned encoder; no architecture {name!r}; "
                f"known: {', '.join(n for n in names if n.startswith('hyper-'))}"
            )
        return models.create(name, inv_dim=k, **kw)
    if arch not in names:
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(names)}")
    return models.create(arch, **kw)


def check_args(args: argparse.Namespace) -> None:
    """Refuse settings that make no sense together or cannot train, before any work (ValueError)."""
    import math

    from invfast.runtime.devices import resolve_device

    if args.epochs is not None and args.steps is not None:
        raise ValueError(f"--steps {args.steps} and --epochs {args.epochs} both set the length of the run; give one")
    config_options(args, TrainConfig)
    for k in ("epochs", "nproc"):
        v = getattr(args, k, None)
        if v is not None and v < 1:
            raise ValueError(f"--{k.replace('_', '-')} must be >= 1, got {v}")
    check_seed(args.seed)
    for k, low in (
        ("workers", 0),
        ("proj_dim", 1),
        ("proj_hidden", 1),
        ("queue_size", 1),
        ("size", 8),
        ("load_size", 1),
        ("width", 1),
    ):
        v = getattr(args, k, None)
        if v is not None and v < low:
            raise ValueError(f"--{k.replace('_', '-')} must be >= {low}, got {v}")
    if args.steps is not None and args.warmup_steps >= args.steps:
        raise ValueError(f"--warmup-steps {args.warmup_steps} must be shorter than the run (--steps {args.steps})")
    if not (math.isfinite(args.key_momentum) and 0.0 <= args.key_momentum <= 1.0):
        raise ValueError(f"--key-momentum must be a finite number in [0.0, 1.0], got {args.key_momentum}")
    if not (math.isfinite(args.tau) and args.tau > 0):
        raise ValueError(f"--tau must be a finite number > 0, got {args.tau}")
    if args.descriptors is not None and not args.method.startswith("ai-"):
        raise ValueError(
            f"--descriptors is for the amortised methods (ai-moco, ai-simclr); {args.method} trains one "
            "policy: pick it with --policy"
        )
    resolve_device(args.device)


def build(args: argparse.Namespace, device: torch.device, world_size: int) -> tuple[Any, Any]:
    """(method, trainer) from parsed arguments; raises ValueError/FileNotFoundError on bad input."""
    from invfast.pretrain.trainer import Trainer

    amortised, policy_name = _check_method(args)
    check_args(args)
    source, heldout, size = _training_data(args)
    aug_backend = _aug_backend(args.aug_backend, device)
    descriptors = args.descriptors or "groups"
    method = _pretrain_method(args, amortised, descriptors, policy_name, size, aug_backend, source)
    cfg = _train_config(args, size, device)
    meta = {
        "arch": args.arch,
        "width": args.width,
        "policy": None if amortised else policy_name,
        "descriptors": descriptors if amortised else None,
        "aug_backend": aug_backend,
    }
    return method, Trainer(method, source, cfg, out=args.out, heldout=heldout, meta=meta, device=device)


def _check_method(args: argparse.Namespace) -> tuple[bool, str]:
    """(amortised, policy name) of --method and --policy; refuses unknown names or a policy for an amortised
    method (ValueError)."""
    if args.method not in METHOD_NAMES:
        raise ValueError(f"unknown method {args.method!r}; choose one of {', '.join(METHOD_NAMES)}")
    amortised = args.method.startswith("ai-")
    if amortised and args.policy is not None:
        raise ValueError("amortised methods use one policy per descriptor; drop --policy and pick --descriptors")
    policy_name = args.policy or "default"
    if policy_name not in POLICY_NAMES:
        raise ValueError(f"unknown policy {policy_name!r}; choose one of {', '.join(POLICY_NAMES)}")
    return amortised, policy_name


def _training_data(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(training source, held-out images, view side in px) of --data; refuses a batch larger than the data."""
    from invfast.data import heldout_source
    from invfast.pretrain import data as D

    probe = (
        D.open_training_source(args.data, load_size=1, workers=args.workers)
        if not args.data.startswith("folder:")
        else None
    )
    size = args.size
    if size is None:
        size = int(probe.get(torch.tensor([0])).shape[-1]) if probe is not None else 224
    load_size = args.load_size or round(size * 256 / 224)
    source = (
        probe if probe is not None else D.open_training_source(args.data, load_size=load_size, workers=args.workers)
    )
    if args.batch_size > len(source):
        raise ValueError(f"--batch-size {args.batch_size} is larger than the data set ({len(source)} images)")
    heldout = heldout_source(args.data, source)
    return source, heldout, size


def _aug_backend(name: str, device: torch.device) -> str:
    """The augmentation pipeline of --aug-backend: 'auto' is DALI on a CUDA device where installed, else torch."""
    if name != "auto":
        return name
    import importlib.util

    from invfast.backend import backend_info

    has_dali = backend_info()["dali"] and importlib.util.find_spec("invfast.transforms.dali") is not None
    return "dali" if device.type == "cuda" and has_dali else "torch"


def _pretrain_method(
    args: argparse.Namespace,
    amortised: bool,
    descriptors: str,
    policy_name: str,
    size: int,
    aug_backend: str,
    source: Any,
) -> Any:
    """The method of --method, its encoder seeded by --seed (the same initial weights on every rank) and its
    augmentation policies at ``size`` px."""
    from invfast import transforms as T
    from invfast.pretrain.descriptors import descriptor_set
    from invfast.pretrain.key_queue import default_queue_size
    from invfast.pretrain.methods import AmortisedMoCo, AmortisedSimCLR, MoCoV2, PretrainMethod, SimCLR

    desc = descriptor_set(descriptors) if amortised else None
    torch.manual_seed(args.seed)  # identical initial weights on every rank
    if args.width is not None and args.width < 1:
        raise ValueError(f"--width must be >= 1, got {args.width}")
    encoder = _encoder(args.arch, amortised, 0 if desc is None else desc.shape[1], args.width)
    common = dict(tau=args.tau, proj_dim=args.proj_dim, proj_hidden=args.proj_hidden, head_norm=args.head_norm)
    moco = dict(
        key_momentum=args.key_momentum,
        queue_seed=args.seed,
        queue_size=args.queue_size or default_queue_size(len(source), args.batch_size),
    )
    method: PretrainMethod
    if desc is not None:  # amortised
        augs = [T.policy_from_descriptor(r, size=size, backend=aug_backend) for r in desc]
        cls = AmortisedMoCo if args.method == "ai-moco" else AmortisedSimCLR
        method = cls(encoder, augs, descriptors=descriptors, **common, **(moco if cls is AmortisedMoCo else {}))
    else:
        aug = T.policy(policy_name, size=size, backend=aug_backend)
        method = MoCoV2(encoder, aug, **common, **moco) if args.method == "mocov2" else SimCLR(encoder, aug, **common)
    return method


def _train_config(args: argparse.Namespace, size: int, device: torch.device) -> Any:
    """The :class:`TrainConfig` of the parsed arguments (--epochs defaults to DEFAULT_EPOCHS)."""
    return TrainConfig(
        **config_options(args, TrainConfig),
        epochs=args.epochs or DEFAULT_EPOCHS,
        seed=args.seed,
        size=size,
        progress=not args.no_progress,
        invariance_transforms=tuple(t for t in args.invariance_transforms.split(",") if t),
        device=str(device),
    )


def _train(args: argparse.Namespace) -> int:
    from invfast.pretrain import distributed as Dist
    from invfast.runtime.devices import resolve_device

    resolve_device(args.device)  # one clear error for an unknown or unavailable device
    info, device = Dist.init_from_env(args.device)
    _, trainer = build(args, device, info.world_size)
    hist = trainer.fit(resume=args.resume)
    if info.is_main and hist:
        last = hist[-1]
        print(
            f"invfast pretrain: step {last['step']}/{trainer.total_steps}, loss {last['loss']:.4f}; "
            f"wrote {os.path.join(args.out, 'model.pt') if trainer.step == trainer.total_steps else args.out}"
        )
    return 0


def run(args: argparse.Namespace) -> int:
    from invfast.data.sources import folder_of
    from invfast.runtime.launch import under_torchrun
    from invfast.runtime.run_folder import RunFolder, refuse_inside

    check_args(args)
    data = folder_of(args.data)
    if data is not None:
        refuse_inside(args.out, data)
    torchrun = under_torchrun()
    if torchrun and int(os.environ.get("RANK", "0")) != 0:
        return _train(args)  # rank 0 holds the folder for the whole run
    with RunFolder(args.out, "pretrain", overwrite=True).lock():
        if args.nproc > 1 and not torchrun:
            from invfast.runtime.launch import spawn_local

            return spawn_local(_train, args.nproc, args, "invfast pretrain")
        return _train(args)
