"""Models by name, the one place invfast builds and loads an encoder.

- ``create(name, **kw)``: an architecture of :data:`ARCHITECTURES` (``"resnet50"``: ImageNet stem,
  ``"resnet50-cifar"``: CIFAR stem, ``"resnet18-cifar-solo"``: solo-learn's CIFAR stem,
  ``"hyper-resnet18"``, ``"prompt-vit"``, ``"vgg11-cifar"``, ``"vit"``, ...) or a user's factory
  ``"package.module:callable"`` (imported and called with ``**kw``); :func:`list_models` lists the
  names (timm-style pattern filter);
- ``load_checkpoint(model_or_name, checkpoint)``: weights from a file or a state dict, in invfast's
  layout or torchvision's, bare or wrapped the way MoCo (``module.encoder_q.``), solo-learn
  (``backbone.`` in a Lightning file) and ``invfast pretrain`` (``{"encoder": ...}``) save them (see
  :mod:`invfast.models.checkpoints`). A checkpoint whose stem geometry is known (solo-learn's CIFAR
  ResNets: padding 2) is never loaded into another stem.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from invfast.models.checkpoints import checkpoint_stem, convert_state_dict, read_checkpoint
from invfast.models.hyper_resnet import HyperResNet
from invfast.models.library import LibraryModel, build_library_model, is_library_spec, wrap_library_model
from invfast.models.prompt_vit import PromptViT
from invfast.models.resnet import STEM_CONV, ResNet
from invfast.models.vgg import VGG
from invfast.models.vit import vit

_FACTORIES: dict[str, Callable[..., nn.Module]] = {
    "resnet18-cifar": lambda **kw: ResNet(18, stem="cifar", **kw),
    "resnet18": lambda **kw: ResNet(18, stem="imagenet", **kw),
    "resnet34-cifar": lambda **kw: ResNet(34, stem="cifar", **kw),
    "resnet34": lambda **kw: ResNet(34, stem="imagenet", **kw),
    "resnet50-cifar": lambda **kw: ResNet(50, stem="cifar", **kw),
    "resnet50": lambda **kw: ResNet(50, stem="imagenet", **kw),
    "resnet18-cifar-solo": lambda **kw: ResNet(18, stem="cifar-solo", **kw),
    "resnet34-cifar-solo": lambda **kw: ResNet(34, stem="cifar-solo", **kw),
    "resnet50-cifar-solo": lambda **kw: ResNet(50, stem="cifar-solo", **kw),
    "hyper-resnet18-cifar": lambda **kw: HyperResNet(18, stem="cifar", **kw),
    "hyper-resnet18": lambda **kw: HyperResNet(18, stem="imagenet", **kw),
    "hyper-resnet50": lambda **kw: HyperResNet(50, stem="imagenet", **kw),
    "prompt-vit": lambda **kw: PromptViT(**kw),
    "vgg11-cifar": lambda **kw: VGG(**kw),
    "vit": lambda **kw: vit(**kw),
}

#: names accepted by :func:`create` (besides ``"module:factory"`` specs)
ARCHITECTURES: tuple[str, ...] = tuple(_FACTORIES)


def list_models(pattern: str | None = None) -> list[str]:
    """The architecture names :func:`create` builds, sorted (as ``torchvision.models.list_models()`` /
    ``timm.list_models()``); ``pattern``: a shell-style filter (``fnmatch``), e.g. ``"resnet*-cifar*"``."""
    if pattern is not None and not isinstance(pattern, str):
        raise TypeError(f"pattern must be a string such as 'resnet*' or None, got {type(pattern).__name__}")
    return sorted(n for n in ARCHITECTURES if pattern is None or fnmatch.fnmatchcase(n, pattern))


def resnet_name(depth: int, stem: str) -> str:
    """The registry name of a ResNet of ``depth`` with ``stem``: 'resnet18', 'resnet18-cifar',
    'resnet18-cifar-solo'."""
    return f"resnet{depth}" if stem == "imagenet" else f"resnet{depth}-{stem}"


def is_factory_spec(name: str) -> bool:
    """True for a ``"package.module:callable"`` spec (a user's model factory; not a library's
    ``"timm:NAME"``-style spec, :mod:`invfast.models.library`)."""
    return isinstance(name, str) and ":" in name and not is_library_spec(name)


def factory(name: str) -> Callable[..., nn.Module]:
    """The callable that builds ``name``: a registered architecture or an imported ``module:callable``."""
    if not isinstance(name, str):
        raise TypeError(f"model name must be a string, got {type(name).__name__}")
    if is_factory_spec(name):
        mod, _, attr = name.partition(":")
        if not mod or not attr:
            raise ValueError(f"model factory {name!r} must be 'package.module:callable'")
        try:
            fn = importlib.import_module(mod)
            for part in attr.split("."):
                fn = getattr(fn, part)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"cannot load model factory {name!r}: {type(e).__name__}: {e}") from e
        if not callable(fn):
            raise TypeError(f"model factory {name!r} is not callable ({type(fn).__name__})")
        return fn
    if name not in _FACTORIES:
        raise ValueError(
            f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)} or give 'package.module:callable'"
        )
    return _FACTORIES[name]


def create(name: str, **kw: Any) -> nn.Module:
    """Build architecture ``name`` (one of :data:`ARCHITECTURES`, ``"package.module:callable"``, or another
    library's model, ``"timm:NAME"`` / ``"torchvision:NAME"`` / ``"hf:NAME"`` / ``"open_clip:NAME"``: a
    :class:`~invfast.models.library.LibraryModel`, its head removed); ``kw`` go to the constructor (e.g.
    ``width=16``, ``inv_dim=5``, timm's ``pretrained=True``). The model's ``.arch`` is ``name``."""
    if is_library_spec(name):
        return create_library_model(name, **kw)
    model = factory(name)(**kw)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model factory {name!r} returned {type(model).__name__}, not a torch.nn.Module")
    try:
        setattr(model, "arch", name)  # noqa: B010  (an attribute the module class may not declare)
    except (AttributeError, TypeError):  # a module that forbids new attributes keeps its own
        pass
    return model


def create_library_model(
    spec: str, checkpoint: str | os.PathLike | Mapping[str, Any] | None = None, **kw: Any
) -> LibraryModel:
    """The model of another library ``spec`` (``"timm:NAME"``, ``"torchvision:NAME"``, ``"hf:NAME"``,
    ``"open_clip:NAME"``) as a :class:`~invfast.models.library.LibraryModel`; ``kw`` go to the library's
    constructor; ``checkpoint`` (a state dict or a file of one, wrapped or prefixed as :func:`load_checkpoint`
    accepts) is loaded into the library's module before its head is removed, strictly, under the library's own
    names.

    Raises:
        ValueError: an unknown name or argument, or a checkpoint that does not match.
        ImportError: the library is not installed (one line naming the package to install).
    """
    model, input, call = build_library_model(spec, **kw)
    if checkpoint is not None:
        load_checkpoint(model, checkpoint)
    return wrap_library_model(spec, model, input, call)


def load_checkpoint(
    model: nn.Module | str, checkpoint: str | os.PathLike | Mapping[str, Any], *, strict: bool = True, **kw: Any
) -> nn.Module:
    """Weights from ``checkpoint`` loaded into ``model``; returns the model.

    Args:
        model: a module, or a name for :func:`create` (then ``kw`` go to it; a ResNet's ``width`` is
            read from the checkpoint when not given).
        checkpoint: a path to a ``torch.save`` file (read with ``weights_only=True``; a PyTorch Lightning
            checkpoint's ``argparse.Namespace`` hyper-parameters are allowed), or an already loaded dict.
            Accepted: a state dict; one wrapped under 'encoder', 'state_dict', 'model' or 'backbone';
            key prefixes such as 'module.', 'module.encoder_q.', 'backbone.'; torchvision's ResNet names
            (converted). Heads the model lacks (``fc`` without ``num_classes``, projection heads) are
            dropped with a warning; a model with a head takes torchvision's ``fc`` (solo-learn's ``classifier``).
        strict: every weight of the model must be in the checkpoint.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unreadable file, a checkpoint that does not match the model (naming the missing,
            unexpected and mis-shaped keys), or one whose stem geometry differs from the model's
            (a solo-learn CIFAR ResNet, padding 2, into a stem of padding 1: use ``resnetN-cifar-solo``).
    """
    source = os.fspath(checkpoint) if isinstance(checkpoint, (str, os.PathLike)) else "(state dict)"
    raw, top = read_checkpoint(checkpoint)
    return load_read(model, raw, top, source, strict=strict, **kw)


def load_read(
    model: nn.Module | str,
    raw: Mapping[str, torch.Tensor],
    top: Mapping[str, Any],
    source: str,
    *,
    strict: bool = True,
    **kw: Any,
) -> nn.Module:
    """:func:`load_checkpoint` on a checkpoint already read by :func:`~invfast.models.checkpoints.read_checkpoint`."""
    if isinstance(model, str) and is_library_spec(model):
        return create_library_model(model, dict(raw), **kw)
    if isinstance(model, str):
        model = _created_for(model, raw, kw)
    elif kw:
        raise TypeError(f"keyword arguments {sorted(kw)} are only used when model is a name")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module or a model name, got {type(model).__name__}")
    wrapper, model = (model, model.model) if isinstance(model, LibraryModel) else (None, model)
    _check_stem(model, raw, top, source)
    sd, notes = convert_state_dict(raw, model)
    if wrapper is not None:
        notes += _drop_removed_head(wrapper, sd)
    own = nn.Module.state_dict(model)
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    shapes = sorted(
        f"{k} (checkpoint {tuple(sd[k].shape)}, model {tuple(own[k].shape)})"
        for k in set(own) & set(sd)
        if tuple(own[k].shape) != tuple(sd[k].shape)
    )
    if shapes or unexpected or (strict and missing):

        def show(ks: list[str]) -> str:
            return ", ".join(ks[:5]) + (f" (+{len(ks) - 5} more)" if len(ks) > 5 else "")

        parts = [
            f"missing {show(missing)}" if missing else "",
            f"unexpected {show(unexpected)}" if unexpected else "",
            f"wrong shape {show(shapes)}" if shapes else "",
        ]
        arch = getattr(wrapper if wrapper is not None else model, "arch", type(model).__name__)
        fix = "Pass the architecture (and width) it was trained with."
        if missing and set(missing) <= {"fc.weight", "fc.bias"} and not (shapes or unexpected):
            fix = "The checkpoint has no classifier head: build the model without num_classes, or pass strict=False."
        wrong = {k for k in set(own) & set(sd) if tuple(own[k].shape) != tuple(sd[k].shape)}
        if wrong and wrong <= {"fc.weight", "fc.bias"} and not (missing or unexpected) and sd["fc.bias"].dim() == 1:
            n = sd["fc.bias"].shape[0]
            fix = f"The checkpoint's classifier has {n} classes: pass num_classes={n}."
        raise ValueError(
            f"checkpoint {source!r} does not match the model {arch!r}: " + "; ".join(p for p in parts if p) + ". " + fix
        )
    if notes:
        import warnings

        warnings.warn(f"checkpoint {source!r}: " + "; ".join(notes), UserWarning, stacklevel=3)
    nn.Module.load_state_dict(model, sd, strict=strict)
    return model if wrapper is None else wrapper


def _created_for(name: str, raw: Mapping[str, torch.Tensor], kw: dict[str, Any]) -> nn.Module:
    """Architecture ``name`` built for the checkpoint ``raw`` (a ResNet's width read from it when not given)."""
    if "width" not in kw and name in _FACTORIES and name.startswith("resnet"):
        sd, _ = convert_state_dict(raw)
        w = sd.get("stem.conv.weight")
        if isinstance(w, torch.Tensor) and w.dim() == 4:
            kw = {**kw, "width": int(w.shape[0])}
    return create(name, **kw)


def _drop_removed_head(model: LibraryModel, sd: dict[str, torch.Tensor]) -> list[str]:
    """Remove from ``sd`` the weights of the head ``model`` removed (they have no place); the note saying so."""
    dropped = sorted(k for k in sd if model.head and k.startswith(model.head + "."))
    for k in dropped:
        del sd[k]
    return [f"dropped the removed head's {len(dropped)} tensor(s): {', '.join(dropped)}"] if dropped else []


def _check_stem(model: nn.Module, raw: Mapping[str, torch.Tensor], top: Mapping[str, Any], source: str) -> None:
    """ValueError when the checkpoint's stem geometry is known and differs from the model's stem."""
    have = getattr(model, "stem_kind", None)
    if have not in STEM_CONV:
        return
    want, how = checkpoint_stem(raw, top)
    if want is None or want == have:
        return
    depth = getattr(model, "depth", 18)
    fix = (
        f"load it as {resnet_name(depth, want)!r} (stem={want!r}; models.resnet{depth}(weights=...) picks it from "
        "the checkpoint)"
        if isinstance(model, ResNet)
        else f"build the model with stem={want!r}"
    )

    def geometry(stem: str) -> str:
        k, s, p = STEM_CONV[stem]
        return f"{k}x{k} conv, stride {s}, padding {p}"

    raise ValueError(
        f"checkpoint {source!r} is {how}, but the model's stem is {have!r} ({geometry(have)}, not "
        f"{geometry(want)}), which would give other features: {fix}"
    )


__all__ = [
    "ARCHITECTURES",
    "create",
    "create_library_model",
    "factory",
    "is_factory_spec",
    "list_models",
    "load_checkpoint",
    "resnet_name",
]
