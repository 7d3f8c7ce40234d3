"""Models by name, the one place invfast builds and loads an encoder.

- ``create(name, **kw)``: an architecture of :data:`ARCHITECTURES` (``"resnet50"``: ImageNet stem,
  ``"resnet50-cifar"``: CIFAR stem, ``"hyper-resnet18"``, ``"prompt-vit"``, ...) or a user's factory
  ``"package.module:callable"`` (imported and called with ``**kw``);
- ``load_checkpoint(model_or_name, checkpoint)``: weights from a file or a state dict, in invfast's
  layout or torchvision's, bare or wrapped the way MoCo (``module.encoder_q.``), solo-learn
  (``backbone.``) and ``invfast pretrain`` (``{"encoder": ...}``) save them (see
  :mod:`invfast.models.checkpoints`).
"""
from __future__ import annotations

import importlib
import os
from typing import Any, Callable, Mapping

import torch
from torch import nn

from invfast.models.checkpoints import convert_state_dict, read_state_dict
from invfast.models.hyper_resnet import HyperResNet
from invfast.models.prompt_vit import PromptViT
from invfast.models.resnet import ResNet

_FACTORIES: dict[str, Callable[..., nn.Module]] = {
    "resnet18-cifar": lambda **kw: ResNet(18, stem="cifar", **kw),
    "resnet18": lambda **kw: ResNet(18, stem="imagenet", **kw),
    "resnet34-cifar": lambda **kw: ResNet(34, stem="cifar", **kw),
    "resnet34": lambda **kw: ResNet(34, stem="imagenet", **kw),
    "resnet50-cifar": lambda **kw: ResNet(50, stem="cifar", **kw),
    "resnet50": lambda **kw: ResNet(50, stem="imagenet", **kw),
    "hyper-resnet18-cifar": lambda **kw: HyperResNet(18, stem="cifar", **kw),
    "hyper-resnet18": lambda **kw: HyperResNet(18, stem="imagenet", **kw),
    "hyper-resnet50": lambda **kw: HyperResNet(50, stem="imagenet", **kw),
    "prompt-vit": lambda **kw: PromptViT(**kw),
}

#: names accepted by :func:`create` (besides ``"module:factory"`` specs)
ARCHITECTURES: tuple[str, ...] = tuple(_FACTORIES)


def is_factory_spec(name: str) -> bool:
    """True for a ``"package.module:callable"`` spec (a user's model factory)."""
    return isinstance(name, str) and ":" in name


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
        raise ValueError(f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)} "
                         "or give 'package.module:callable'")
    return _FACTORIES[name]


def create(name: str, **kw: Any) -> nn.Module:
    """Build architecture ``name`` (one of :data:`ARCHITECTURES`, or ``"package.module:callable"``);
    ``kw`` go to the constructor (e.g. ``width=16``, ``inv_dim=5``). The model's ``.arch`` is ``name``."""
    model = factory(name)(**kw)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model factory {name!r} returned {type(model).__name__}, not a torch.nn.Module")
    try:
        model.arch = name
    except (AttributeError, TypeError):  # a module that forbids new attributes keeps its own
        pass
    return model


def load_checkpoint(model: nn.Module | str, checkpoint: str | os.PathLike | Mapping[str, Any], *,
                    strict: bool = True, **kw: Any) -> nn.Module:
    """Weights from ``checkpoint`` loaded into ``model``; returns the model.

    Args:
        model: a module, or a name for :func:`create` (then ``kw`` go to it; a ResNet's ``width`` is
            read from the checkpoint when not given).
        checkpoint: a path to a ``torch.save`` file, or an already loaded dict. Accepted: a state dict;
            one wrapped under 'encoder', 'state_dict', 'model' or 'backbone'; key prefixes such as
            'module.', 'module.encoder_q.', 'backbone.'; torchvision's ResNet names (converted).
            Heads the encoder lacks (``fc``, projection heads) are dropped with a warning.
        strict: every weight of the model must be in the checkpoint.

    Raises:
        FileNotFoundError: no such file.
        ValueError: unreadable file, or a checkpoint that does not match the model (naming the
            missing, unexpected and mis-shaped keys).
    """
    source = os.fspath(checkpoint) if isinstance(checkpoint, (str, os.PathLike)) else "(state dict)"
    raw = read_state_dict(checkpoint)
    if isinstance(model, str):
        name = model
        if "width" not in kw and name in _FACTORIES and name.startswith("resnet"):
            sd, _ = convert_state_dict(raw)
            w = sd.get("stem.conv.weight")
            if isinstance(w, torch.Tensor) and w.dim() == 4:
                kw["width"] = int(w.shape[0])
        model = create(name, **kw)
    elif kw:
        raise TypeError(f"keyword arguments {sorted(kw)} are only used when model is a name")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module or a model name, got {type(model).__name__}")
    sd, notes = convert_state_dict(raw, model)
    own = nn.Module.state_dict(model)
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    shapes = sorted(f"{k} (checkpoint {tuple(sd[k].shape)}, model {tuple(own[k].shape)})"
                    for k in set(own) & set(sd) if tuple(own[k].shape) != tuple(sd[k].shape))
    if shapes or unexpected or (strict and missing):

        def show(ks: list[str]) -> str:
            return ", ".join(ks[:5]) + (f" (+{len(ks) - 5} more)" if len(ks) > 5 else "")

        parts = [f"missing {show(missing)}" if missing else "", f"unexpected {show(unexpected)}" if unexpected else "",
                 f"wrong shape {show(shapes)}" if shapes else ""]
        arch = getattr(model, "arch", type(model).__name__)
        raise ValueError(f"checkpoint {source!r} does not match the model {arch!r}: "
                         + "; ".join(p for p in parts if p) + ". Pass the architecture (and width) it was trained with.")
    if notes:
        import warnings
        warnings.warn(f"checkpoint {source!r}: " + "; ".join(notes), UserWarning, stacklevel=2)
    nn.Module.load_state_dict(model, sd, strict=strict)
    return model


__all__ = ["ARCHITECTURES", "create", "factory", "is_factory_spec", "load_checkpoint"]
