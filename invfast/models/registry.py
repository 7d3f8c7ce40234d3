"""Models by name: ``create(name, **kw)`` and ``ARCHITECTURES``."""
from __future__ import annotations

from typing import Callable

from torch import nn

from invfast.models.hyper_resnet import HyperResNet
from invfast.models.prompt_vit import PromptViT
from invfast.models.resnet import ResNet

_FACTORIES: dict[str, Callable[..., nn.Module]] = {
    "resnet18-cifar": lambda **kw: ResNet(18, stem="cifar", **kw),
    "resnet18": lambda **kw: ResNet(18, stem="imagenet", **kw),
    "resnet50-cifar": lambda **kw: ResNet(50, stem="cifar", **kw),
    "resnet50": lambda **kw: ResNet(50, stem="imagenet", **kw),
    "hyper-resnet18-cifar": lambda **kw: HyperResNet(18, stem="cifar", **kw),
    "hyper-resnet18": lambda **kw: HyperResNet(18, stem="imagenet", **kw),
    "hyper-resnet50": lambda **kw: HyperResNet(50, stem="imagenet", **kw),
    "prompt-vit": lambda **kw: PromptViT(**kw),
}

#: names accepted by :func:`create`
ARCHITECTURES: tuple[str, ...] = tuple(_FACTORIES)


def create(name: str, **kw) -> nn.Module:
    """Build architecture ``name`` (one of ARCHITECTURES); ``kw`` go to the constructor
    (e.g. ``width=16``, ``inv_dim=5``). The model's ``.arch`` is set to ``name``."""
    if name not in _FACTORIES:
        raise ValueError(f"unknown architecture {name!r}; choose one of {', '.join(ARCHITECTURES)}")
    model = _FACTORIES[name](**kw)
    model.arch = name
    return model
