"""Checkpoint layouts: reading the ResNets people publish into invfast's ResNet, and back.

invfast names a ResNet's weights ``stem.conv``, ``stem.bn``, ``blocks.N.conv1``, ``blocks.N.bn_conv1``,
``blocks.N.downsample``, ``blocks.N.bn_downsample`` (blocks numbered through all stages).
torchvision names them ``conv1``, ``bn1``, ``layerS.I.conv1``, ``layerS.I.bn1``,
``layerS.I.downsample.0`` / ``.1`` (stages S = 1..4) and adds a classifier ``fc``. Published
checkpoints wrap either layout:

=================== ================================================ ===============================
source              keys                                             what is kept
=================== ================================================ ===============================
torchvision         ``conv1.weight``, ``layer1.0.bn1.weight``, ``fc``  all; ``fc`` only by a model with
                                                                     a head (``num_classes``)
MoCo v1/v2          ``state_dict``: ``module.encoder_q.conv1...``      the query encoder; ``fc`` MLP,
                                                                     key encoder, queue dropped
solo-learn          Lightning file, ``state_dict``: ``backbone.conv1``  the backbone (``classifier`` as
                    ...; CIFAR: a 3x3 ``conv1`` with padding 2         ``fc`` by a model with a head);
                                                                     projector, momentum backbone
                                                                     dropped
invfast pretrain    ``encoder``: ``stem.conv.weight...``               all
=================== ================================================ ===============================

:func:`read_checkpoint` reads a file with ``weights_only=True``; a PyTorch Lightning checkpoint's
``hyper_parameters`` may hold an ``argparse.Namespace`` (with ``pathlib`` paths), which is allowed for
that one load (:data:`HARMLESS_GLOBALS`), nothing else. :func:`convert_state_dict` finds the
encoder's prefix, strips it and renames torchvision keys; :func:`checkpoint_stem` tells the stem a
checkpoint was trained with where it can be known (solo-learn's CIFAR ResNets: ``'cifar-solo'``,
padding 2); :func:`to_torchvision_state_dict` exports an invfast ResNet under torchvision's names.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from invfast.io import load_verified

#: wrapper keys under which checkpoints keep their state dict, tried in this order
WRAPPER_KEYS = ("encoder", "state_dict", "model", "backbone", "network")
#: prefixes naming a second copy of the encoder (momentum/target/key networks): never preferred
_SHADOW = ("encoder_k", "momentum", "target", "teacher", "key_encoder", "ema")
_TV_BLOCK = re.compile(r"^layer(\d)\.(\d+)\.(conv|bn)(\d)\.(.+)$")
_TV_DOWN = re.compile(r"^layer(\d)\.(\d+)\.downsample\.([01])\.(.+)$")
_IV_BLOCK = re.compile(r"^blocks\.(\d+)\.(bn_)?(conv\d|downsample)\.(.+)$")
_BN_FIELDS = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")


#: the only classes besides tensors and plain containers a checkpoint may hold: PyTorch Lightning's
#: ``hyper_parameters`` (solo-learn's argparse arguments, with pathlib paths among them). Building them
#: runs no code of the file (a Namespace is an attribute bag, a path a tuple of strings; a Windows path
#: is read as a pure path, which also works on POSIX). Allowed only around the one load
#: (``torch.serialization.safe_globals``), never process-wide.
HARMLESS_GLOBALS: list[Any] = [
    argparse.Namespace,
    pathlib.PosixPath,
    pathlib.PurePosixPath,
    pathlib.PureWindowsPath,
    (pathlib.PureWindowsPath, "pathlib.WindowsPath"),
]
#: top-level keys of a PyTorch Lightning checkpoint
LIGHTNING_KEYS = ("pytorch-lightning_version", "hyper_parameters", "hparams_name")
#: state-dict prefixes besides ``backbone.`` that solo-learn's methods save
_SOLO_SIBLINGS = ("momentum_backbone.", "projector.", "classifier.", "momentum_projector.", "predictor.")


def read_checkpoint(
    checkpoint: str | os.PathLike | Mapping[str, Any],
) -> tuple[dict[str, torch.Tensor], Mapping[str, Any]]:
    """``(state dict, top level)`` of a checkpoint file or object: the flat ``{name: tensor}`` dict with
    wrappers unwrapped, and the outermost mapping (where Lightning keeps ``hyper_parameters``, invfast
    ``config``); a bare state dict is its own top level.

    Files are read with ``weights_only=True`` (:func:`invfast.io.load_verified`), allowing
    :data:`HARMLESS_GLOBALS` for this load only; a pickle that would run code is refused, never executed."""
    obj: Any = checkpoint
    where = "the checkpoint"
    if isinstance(checkpoint, (str, os.PathLike)):
        path = where = os.fspath(checkpoint)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"checkpoint {path!r} does not exist")
        # weights_only; files invfast wrote carry a SHA-256 that is checked, others (torchvision, MoCo, ...) none
        with torch.serialization.safe_globals(HARMLESS_GLOBALS):
            obj = load_verified(
                path,
                what="checkpoint",
                require_checksum=False,
                fix="pass a state dict of tensors saved with torch.save",
            )
    top: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}
    for _ in range(3):  # e.g. {"model": {"state_dict": {...}}}
        if not isinstance(obj, Mapping):
            break
        inner = next((obj[k] for k in WRAPPER_KEYS if isinstance(obj.get(k), Mapping)), None)
        if inner is None:
            break
        obj = inner
    if not isinstance(obj, Mapping):
        raise ValueError(f"{where!r} holds no state dict (got {type(obj).__name__})")
    sd = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not sd:
        raise ValueError(f"{where!r} holds no state dict of tensors")
    return sd, top


def read_state_dict(checkpoint: str | os.PathLike | Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The flat ``{name: tensor}`` dict inside a checkpoint file or object (wrappers unwrapped)."""
    return read_checkpoint(checkpoint)[0]


def is_solo_learn_cifar(sd: Mapping[str, Any], top: Mapping[str, Any] | None = None) -> bool:
    """Whether a checkpoint is one of solo-learn's CIFAR ResNets: torchvision's names under ``backbone.``
    with a 3x3 ``conv1`` (solo-learn builds it with stride 1, padding 2 and drops the max-pool), in a
    PyTorch Lightning checkpoint (``top`` has its keys) or beside solo-learn's other parts
    (``momentum_backbone.``, ``projector.``, ``classifier.``)."""
    layout, prefix = detect_layout(sd)
    w = sd.get("backbone.conv1.weight")
    if layout != "torchvision" or prefix != "backbone." or not isinstance(w, torch.Tensor) or w.dim() != 4:
        return False
    if tuple(w.shape[-2:]) != (3, 3):
        return False
    return any(k in (top or {}) for k in LIGHTNING_KEYS) or any(k.startswith(_SOLO_SIBLINGS) for k in sd)


def checkpoint_stem(sd: Mapping[str, Any], top: Mapping[str, Any] | None = None) -> tuple[str | None, str]:
    """``(stem, how it is known)`` of a ResNet checkpoint where its geometry is known beyond the weights'
    shapes: ``'cifar-solo'`` for solo-learn's CIFAR ResNets, the stem of the architecture an invfast
    checkpoint names in its ``config`` ('arch'); ``(None, '')`` otherwise."""
    if is_solo_learn_cifar(sd, top):
        return "cifar-solo", "a solo-learn CIFAR ResNet (3x3 conv1, stride 1, padding 2, no max-pool)"
    config = (top or {}).get("config")
    arch = config.get("arch") if isinstance(config, Mapping) else None
    if isinstance(arch, str) and re.fullmatch(r"(hyper-)?resnet\d+(-cifar(-solo)?)?", arch):
        stem = "cifar-solo" if arch.endswith("-cifar-solo") else "cifar" if arch.endswith("-cifar") else "imagenet"
        return stem, f"saved from {arch!r}"
    return None, ""


def weights_stem(sd: Mapping[str, Any]) -> str | None:
    """The stem a ResNet state dict's first conv fits: 'imagenet' (7x7), 'cifar' (3x3: padding 1 by the
    common convention; solo-learn's padding 2 is told by :func:`checkpoint_stem`), or None."""
    layout, prefix = detect_layout(sd)
    name = {"torchvision": "conv1.weight", "invfast": "stem.conv.weight"}.get(layout)
    w = sd.get(prefix + name) if name else None
    if not isinstance(w, torch.Tensor) or w.dim() != 4:
        return None
    return {7: "imagenet", 3: "cifar"}.get(int(w.shape[-1]))


def _pick_prefix(counts: dict[str, int]) -> str:
    """The prefix covering most keys; among equals, not a momentum/key copy, then the shortest."""
    return min(counts, key=lambda p: (-counts[p], any(s in p for s in _SHADOW), len(p), p))


def _prefixes(keys: list[str], suffixes: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for suffix in suffixes:
        for k in keys:
            if k.endswith(suffix) and (len(k) == len(suffix) or k[-len(suffix) - 1] == "."):
                p = k[: len(k) - len(suffix)]
                counts[p] = counts.get(p, 0) + 1
    return counts


def detect_layout(sd: Mapping[str, Any]) -> tuple[str, str]:
    """``(layout, prefix)`` of a ResNet state dict: layout 'torchvision' or 'invfast' (or 'unknown'),
    prefix the text before the encoder's own names (``'module.encoder_q.'``, ``'backbone.'``, ``''``)."""
    keys = list(sd)
    tv = _prefixes(keys, ["layer1.0.conv1.weight"])
    iv = _prefixes(keys, ["stem.conv.weight"])
    if tv and not iv:
        return "torchvision", _pick_prefix(tv)
    if iv:
        return "invfast", _pick_prefix(iv)
    return "unknown", ""


def _tv_stage_counts(keys: list[str]) -> list[int]:
    n = [0, 0, 0, 0]
    for k in keys:
        m = _TV_BLOCK.match(k) or _TV_DOWN.match(k)
        if m:
            s, i = int(m.group(1)) - 1, int(m.group(2))
            if 0 <= s < 4:
                n[s] = max(n[s], i + 1)
    return n


def torchvision_to_invfast(sd: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Rename a bare torchvision ResNet state dict to invfast's names; returns (state dict, dropped keys)."""
    counts = _tv_stage_counts(list(sd))
    offset = [sum(counts[:s]) for s in range(4)]
    out: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    for k, v in sd.items():
        if k.startswith("conv1."):
            out["stem.conv." + k[6:]] = v
        elif k.startswith("bn1."):
            out["stem.bn." + k[4:]] = v
        elif (m := _TV_BLOCK.match(k)) is not None:
            s, i, kind, j, rest = int(m.group(1)) - 1, int(m.group(2)), m.group(3), m.group(4), m.group(5)
            out[f"blocks.{offset[s] + i}.{'bn_' if kind == 'bn' else ''}conv{j}.{rest}"] = v
        elif (m := _TV_DOWN.match(k)) is not None:
            s, i, part, rest = int(m.group(1)) - 1, int(m.group(2)), m.group(3), m.group(4)
            out[f"blocks.{offset[s] + i}.{'bn_' if part == '1' else ''}downsample.{rest}"] = v
        elif k in ("fc.weight", "fc.bias"):  # the classifier keeps its name (a model without a head drops it)
            out[k] = v
        else:
            dropped.append(k)
    return out, dropped


def invfast_to_torchvision(sd: Mapping[str, torch.Tensor], stage_blocks: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """Rename an invfast ResNet state dict to torchvision's names (``fc`` kept as it is, where there is one).

    ``stage_blocks``: residual blocks per stage, e.g. (2, 2, 2, 2) for ResNet-18."""
    where = [(s, i) for s, n in enumerate(stage_blocks) for i in range(n)]
    out: dict[str, torch.Tensor] = {}
    for k, v in sd.items():
        if k.startswith("stem.conv."):
            out["conv1." + k[10:]] = v
        elif k.startswith("stem.bn."):
            out["bn1." + k[8:]] = v
        elif (m := _IV_BLOCK.match(k)) is not None:
            b, bn, name, rest = int(m.group(1)), m.group(2), m.group(3), m.group(4)
            if b >= len(where):
                raise ValueError(f"{k!r}: block {b} but the architecture has {len(where)} blocks")
            s, i = where[b]
            if name == "downsample":
                out[f"layer{s + 1}.{i}.downsample.{1 if bn else 0}.{rest}"] = v
            else:
                out[f"layer{s + 1}.{i}.{'bn' if bn else 'conv'}{name[4:]}.{rest}"] = v
        elif k in ("fc.weight", "fc.bias"):
            out[k] = v
        else:
            raise ValueError(f"{k!r} is not a weight of an invfast ResNet")
    return out


def to_torchvision_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """An invfast :class:`~invfast.models.ResNet`'s weights under torchvision's names (``conv1``,
    ``layer1.0.bn1``, ``layer2.0.downsample.0``, ..., ``fc``), in torchvision's order.

    A model with a head (``num_classes=N``, width 64, ImageNet stem) gives exactly the state dict of
    ``torchvision.models.resnetN(num_classes=N)``: ``load_state_dict(sd, strict=True)`` works. Without a
    head there is no ``fc``: load with ``strict=False``. (CIFAR stems have a 3x3 ``conv1``, which
    torchvision's constructors do not build.)"""
    from invfast.models.resnet import LAYOUTS, ResNet

    if not isinstance(model, ResNet):
        raise TypeError(f"to_torchvision_state_dict takes an invfast ResNet, got {type(model).__name__}")
    return invfast_to_torchvision(model.state_dict(), LAYOUTS[model.depth][1])


def torchvision_resnet_keys(
    depth: int, width: int = 64, stem: str = "imagenet", fc: int | None = 1000, in_channels: int = 3
) -> Iterator[tuple[str, tuple[int, ...]]]:
    """``(name, shape)`` of every tensor of torchvision's ``resnet{depth}`` state dict, in its order,
    derived from the architecture (``fc``: classes of the classifier head, ``None`` for none;
    ``stem='cifar'`` / ``'cifar-solo'``: the 3x3 ``conv1`` of CIFAR variants such as solo-learn's)."""
    from invfast.models.resnet import block_convs, stage_plan

    def bn(name: str, c: int) -> Iterator[tuple[str, tuple[int, ...]]]:
        for f in _BN_FIELDS:
            yield f"{name}.{f}", (() if f == "num_batches_tracked" else (c,))

    k = 3 if stem.startswith("cifar") else 7
    yield "conv1.weight", (width, in_channels, k, k)
    yield from bn("bn1", width)
    plan = stage_plan(depth, width)
    counts = [0, 0, 0, 0]
    stage = 0
    last = width
    for b, (kind, in_ch, planes, stride) in enumerate(plan):
        if b > 0 and stride == 2:
            stage += 1
        i = counts[stage]
        counts[stage] += 1
        for c in block_convs(kind, in_ch, planes, stride):
            shape = (c.out_ch, c.in_ch, c.k, c.k)
            if c.name == "downsample":
                yield f"layer{stage + 1}.{i}.downsample.0.weight", shape
                yield from bn(f"layer{stage + 1}.{i}.downsample.1", c.out_ch)
            else:
                j = c.name[4:]
                yield f"layer{stage + 1}.{i}.conv{j}.weight", shape
                yield from bn(f"layer{stage + 1}.{i}.bn{j}", c.out_ch)
            last = c.out_ch
    if fc is not None:
        yield "fc.weight", (fc, last)
        yield "fc.bias", (fc,)


def convert_state_dict(
    sd: Mapping[str, torch.Tensor], model: nn.Module | None = None
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """A checkpoint's state dict in ``model``'s names; returns ``(state dict, notes)``.

    Torchvision-layout ResNets (bare, MoCo's ``module.encoder_q.``, solo-learn's ``backbone.``) are
    found by their ``layer1.0.conv1.weight`` and renamed when ``model`` is an invfast ResNet (or not given);
    invfast-layout ones by ``stem.conv.weight``. Into any other model the names are kept.
    Otherwise, with ``model``, the prefix under which the checkpoint holds most of the model's keys is
    stripped. Keys under the chosen prefix the encoder has no place for (``fc`` of a model without a
    head, projection heads) are dropped and named in ``notes``; keys outside it (key encoder, queue,
    optimizer) are ignored, except solo-learn's ``classifier``, which a model with a head takes as ``fc``.
    """
    keys = list(sd)
    layout, prefix = detect_layout(sd)
    if model is not None and layout != "unknown" and "stem.conv.weight" not in nn.Module.state_dict(model):
        layout = "unknown"  # not an invfast ResNet (a torchvision one, say): the checkpoint's names are kept
    if layout == "unknown" and model is not None:
        own = list(nn.Module.state_dict(model))
        counts = _prefixes(keys, own)
        if counts:
            prefix = _pick_prefix(counts)
    sub = {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}
    notes: list[str] = []
    if layout == "torchvision":
        sub, dropped = torchvision_to_invfast(sub)
        if dropped:
            notes.append(
                f"dropped {len(dropped)} tensor(s) the encoder has no place for (heads): "
                + ", ".join(dropped[:6])
                + (" ..." if len(dropped) > 6 else "")
            )
    if model is not None and layout != "unknown":
        own_keys = set(nn.Module.state_dict(model))
        if (
            "fc.weight" in own_keys
            and "fc.weight" not in sub
            and prefix == "backbone."
            and isinstance(sd.get("classifier.weight"), torch.Tensor)
        ):  # solo-learn's linear classifier
            sub.update({"fc." + f: sd["classifier." + f] for f in ("weight", "bias") if "classifier." + f in sd})
            notes.append("solo-learn's 'classifier' read as the head 'fc'")
        if any(k.startswith(("stem.", "blocks.")) for k in own_keys):  # an invfast ResNet: drop what it lacks
            extra = sorted(k for k in sub if k not in own_keys and not k.startswith(("stem.", "blocks.")))
            for k in extra:
                del sub[k]
            if extra:
                notes.append(
                    f"dropped {len(extra)} tensor(s) the encoder has no place for (heads): "
                    + ", ".join(extra[:6])
                    + (" ..." if len(extra) > 6 else "")
                )
    if notes and prefix:
        notes.append(f"the encoder was read under prefix {prefix!r}")
    return sub, notes


__all__ = [
    "HARMLESS_GLOBALS",
    "WRAPPER_KEYS",
    "checkpoint_stem",
    "convert_state_dict",
    "detect_layout",
    "invfast_to_torchvision",
    "is_solo_learn_cifar",
    "read_checkpoint",
    "read_state_dict",
    "to_torchvision_state_dict",
    "torchvision_resnet_keys",
    "torchvision_to_invfast",
    "weights_stem",
]
