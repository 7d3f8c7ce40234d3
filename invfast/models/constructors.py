"""torchvision's constructors for invfast's ResNets: ``resnet18/34/50(weights=None, num_classes=0)``.

>>> from invfast import models
>>> m = models.resnet50()                                         # ImageNet stem, pooled features [B, 2048]
>>> m = models.resnet50(weights="r50.pth", num_classes=1000)      # torchvision's file, logits [B, 1000]
>>> m = models.resnet18(weights="solo-learn-cifar.ckpt")          # the stem follows the checkpoint

``weights`` is None or a checkpoint (a path, or a dict already loaded) in any layout
:func:`~invfast.models.load_checkpoint` reads; nothing is downloaded. With ``stem`` unset the stem is the
checkpoint's: solo-learn's CIFAR ResNets (3x3 conv1, padding 2) build ``stem='cifar-solo'``, other 3x3
``conv1`` weights ``'cifar'``, 7x7 ones ``'imagenet'``; without weights it is ``'imagenet'``, as torchvision.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from invfast.models.checkpoints import checkpoint_stem, read_checkpoint, weights_stem
from invfast.models.registry import load_read, resnet_name
from invfast.models.resnet import STEMS, ResNet

__all__ = ["resnet18", "resnet34", "resnet50"]


def _resnet(
    depth: int, weights: Any, num_classes: int, stem: str | None, pretrained: Any, strict: bool, kw: dict[str, Any]
) -> ResNet:
    if pretrained is True:
        raise ValueError(
            "pretrained=True: invfast downloads no weights; pass weights='path/to/checkpoint.pth' "
            "(torchvision, MoCo, solo-learn or invfast layout)"
        )
    if pretrained not in (None, False):
        raise TypeError(
            f"pretrained is torchvision's old switch (True/False), got {pretrained!r}; pass "
            "weights='path/to/checkpoint.pth' instead"
        )
    if weights is None:
        return ResNet(depth, stem="imagenet" if stem is None else stem, num_classes=num_classes, **kw)
    if isinstance(weights, str) and weights in STEMS:
        raise TypeError(
            f"resnet{depth}({weights!r}): the first argument is weights (a checkpoint); pass the stem "
            f"by name: resnet{depth}(stem={weights!r})"
        )
    if not isinstance(weights, (str, os.PathLike, Mapping)):
        raise TypeError(
            f"weights must be None, a checkpoint path or a loaded state dict, got "
            f"{type(weights).__name__}; invfast downloads no weights: pass the path of a checkpoint file"
        )
    if isinstance(weights, (str, os.PathLike)) and not os.path.exists(weights):
        raise FileNotFoundError(
            f"weights={os.fspath(weights)!r}: no such checkpoint file; invfast downloads no "
            "weights (names such as 'DEFAULT' or 'IMAGENET1K_V2' are not files): pass the path "
            "of a checkpoint you have"
        )
    source = os.fspath(weights) if isinstance(weights, (str, os.PathLike)) else "(state dict)"
    raw, top = read_checkpoint(weights)
    if stem is None:
        stem = checkpoint_stem(raw, top)[0] or weights_stem(raw) or "imagenet"
    elif stem not in STEMS:
        raise ValueError(f"stem must be one of {STEMS} (or None: the checkpoint's), got {stem!r}")
    model = load_read(resnet_name(depth, stem), raw, top, source, strict=strict, num_classes=num_classes, **kw)
    assert isinstance(model, ResNet)
    return model


def resnet18(
    weights: Any = None,
    num_classes: int = 0,
    *,
    stem: str | None = None,
    pretrained: Any = None,
    progress: bool = True,
    strict: bool = True,
    **kw: Any,
) -> ResNet:
    """ResNet-18 (BasicBlock [2, 2, 2, 2]); feature_dim 512 at width 64.

    Args:
        weights: None, or a checkpoint (path or loaded dict) to load (see the module docstring).
        num_classes: 0: no head, ``forward`` returns pooled features [B, 512]; N: torchvision's ``fc``,
            ``forward`` returns logits [B, N] (loaded from the checkpoint's ``fc`` with ``weights``).
        stem: 'imagenet', 'cifar' (3x3, padding 1, no max-pool; as ``create("resnet18-cifar")``) or
            'cifar-solo' (solo-learn's, padding 2); None: the checkpoint's, else 'imagenet'.
        pretrained: torchvision's old switch; only False/None (invfast downloads nothing).
        progress: accepted for torchvision's signature; nothing is downloaded.
        strict: every weight of the model must be in the checkpoint.
        kw: ``width``, ``in_channels`` (see :class:`~invfast.models.ResNet`).
    """
    return _resnet(18, weights, num_classes, stem, pretrained, strict, kw)


def resnet34(
    weights: Any = None,
    num_classes: int = 0,
    *,
    stem: str | None = None,
    pretrained: Any = None,
    progress: bool = True,
    strict: bool = True,
    **kw: Any,
) -> ResNet:
    """ResNet-34 (BasicBlock [3, 4, 6, 3]); feature_dim 512 at width 64. Arguments as :func:`resnet18`."""
    return _resnet(34, weights, num_classes, stem, pretrained, strict, kw)


def resnet50(
    weights: Any = None,
    num_classes: int = 0,
    *,
    stem: str | None = None,
    pretrained: Any = None,
    progress: bool = True,
    strict: bool = True,
    **kw: Any,
) -> ResNet:
    """ResNet-50 (Bottleneck [3, 4, 6, 3]); feature_dim 2048 at width 64. Arguments as :func:`resnet18`."""
    return _resnet(50, weights, num_classes, stem, pretrained, strict, kw)
