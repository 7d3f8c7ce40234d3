"""ResNet-18/34/50 with ImageNet (7x7/2 conv + max-pool, the default, as in torchvision) or CIFAR
stems (3x3 conv, stride 1, no max-pool: padding 1 with ``stem="cifar"``, padding 2 with
``stem="cifar-solo"``, solo-learn's CIFAR ResNets).

``forward_features(x)`` returns globally average-pooled features [B, feature_dim] (the module
``avgpool``). Without a head (``num_classes=0``, the default) ``forward(x)`` returns them too; with
``num_classes=N`` the model has torchvision's classifier ``fc`` and ``forward(x)`` returns its logits [B, N].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from invfast.models._checks import CheckedStateDict, check_images
from invfast.models.convolution import Conv2d

__all__ = [
    "STEMS",
    "STEM_CONV",
    "LAYOUTS",
    "STEM_SIZES",
    "ConvSpec",
    "block_convs",
    "stage_plan",
    "Stem",
    "ResidualBlock",
    "stem_hint",
    "GlobalAvgPool",
    "ResNet",
]

STEMS = ("cifar", "cifar-solo", "imagenet")
#: stem -> (kernel, stride, padding) of its conv; the ImageNet stem alone has the 3x3/2 max-pool
STEM_CONV = {"cifar": (3, 1, 1), "cifar-solo": (3, 1, 2), "imagenet": (7, 2, 3)}
#: depth -> (block type, blocks per stage)
LAYOUTS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)), 50: ("bottleneck", (3, 4, 6, 3))}
#: spatial size range (px) each stem accepts; None = no upper bound
STEM_SIZES = {"cifar": (8, 64), "cifar-solo": (8, 64), "imagenet": (32, None)}


@dataclass(frozen=True)
class ConvSpec:
    """One convolution of a residual block: weight [out_ch, in_ch, k, k]."""

    name: str
    out_ch: int
    in_ch: int
    k: int
    stride: int
    padding: int

    @property
    def numel(self) -> int:
        return self.out_ch * self.in_ch * self.k * self.k


def block_convs(kind: str, in_ch: int, planes: int, stride: int) -> list[ConvSpec]:
    """The convolutions of one BasicBlock/Bottleneck (stride on the 3x3 conv), downsample last."""
    if kind == "basic":
        out = planes
        convs = [ConvSpec("conv1", planes, in_ch, 3, stride, 1), ConvSpec("conv2", planes, planes, 3, 1, 1)]
    else:
        out = planes * 4
        convs = [
            ConvSpec("conv1", planes, in_ch, 1, 1, 0),
            ConvSpec("conv2", planes, planes, 3, stride, 1),
            ConvSpec("conv3", out, planes, 1, 1, 0),
        ]
    if stride != 1 or in_ch != out:
        convs.append(ConvSpec("downsample", out, in_ch, 1, stride, 0))
    return convs


def stage_plan(depth: int, width: int) -> list[tuple[str, int, int, int]]:
    """(kind, in_ch, planes, stride) of every residual block, in order."""
    if depth not in LAYOUTS:
        raise ValueError(f"depth must be one of {sorted(LAYOUTS)}, got {depth}")
    kind, counts = LAYOUTS[depth]
    expansion = 1 if kind == "basic" else 4
    plan, in_ch = [], width
    for s, n in enumerate(counts):
        planes = width * 2**s
        for j in range(n):
            plan.append((kind, in_ch, planes, 2 if (j == 0 and s > 0) else 1))
            in_ch = planes * expansion
    return plan


class Stem(nn.Module):
    """CIFAR: conv3x3(s1, p1)-BN-ReLU; CIFAR as solo-learn: conv3x3(s1, p2)-BN-ReLU (the output is 2 px
    larger than the input); ImageNet: conv7x7(s2, p3)-BN-ReLU-maxpool3x3(s2)."""

    def __init__(self, stem: str, in_channels: int, width: int):
        super().__init__()
        if stem not in STEMS:
            raise ValueError(f"stem must be one of {STEMS}, got {stem!r}")
        self.kind = stem
        k, s, p = STEM_CONV[stem]
        self.conv = Conv2d(in_channels, width, k, s, p, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.pool = nn.MaxPool2d(3, 2, 1) if stem == "imagenet" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.conv(x)))
        return self.pool(x) if self.pool is not None else x


class ResidualBlock(nn.Module):
    """BasicBlock or Bottleneck with ordinary conv weights; BN after every conv."""

    def __init__(self, kind: str, in_ch: int, planes: int, stride: int):
        super().__init__()
        self.specs = block_convs(kind, in_ch, planes, stride)
        for c in self.specs:
            setattr(self, c.name, Conv2d(c.in_ch, c.out_ch, c.k, c.stride, c.padding, bias=False))
            setattr(self, "bn_" + c.name, nn.BatchNorm2d(c.out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        main = [c for c in self.specs if c.name != "downsample"]
        y = x
        for j, c in enumerate(main):
            y = getattr(self, "bn_" + c.name)(getattr(self, c.name)(y))
            if j < len(main) - 1:
                y = F.relu(y)
        short = x
        if self.specs[-1].name == "downsample":
            short = self.get_submodule("bn_downsample")(self.get_submodule("downsample")(x))
        return F.relu(y + short)


def stem_hint(stem: str) -> str:
    return (
        "use stem='imagenet' for large images"
        if stem.startswith("cifar")
        else "use stem='cifar' for small (CIFAR-size) images"
    )


class GlobalAvgPool(nn.Module):
    """Global average pooling and flattening, [B, C, H, W] -> [B, C] (torchvision's ``avgpool`` + flatten)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean((2, 3))


class ResNet(CheckedStateDict, nn.Module):
    """ResNet feature extractor, with torchvision's classifier head on request.

    Args:
        depth: 18, 34 or 50.
        stem: 'imagenet' (default, as torchvision: 7x7/2 conv + max-pool; inputs >= 32 px, 224 px
            intended), 'cifar' (3x3 conv, padding 1, no max-pool; 8..64 px inputs, 32 px intended) or
            'cifar-solo' (solo-learn's CIFAR stem: the same with padding 2).
        width: channels after the stem (64 in the standard nets; smaller for tests).
        in_channels: image channels.
        num_classes: 0 (default): no head, ``forward`` returns the pooled features [B, feature_dim];
            N > 0: a classifier ``fc = Linear(feature_dim, N)`` and ``forward`` returns logits [B, N].

    Named modules for the per-layer measurement: ``stem``, ``blocks.i`` (``layer1`` .. ``layer4`` name
    the ends of the stages), ``avgpool`` (the pooled features) and ``fc`` (the logits, with a head).
    """

    def __init__(
        self, depth: int = 18, stem: str = "imagenet", width: int = 64, in_channels: int = 3, num_classes: int = 0
    ):
        super().__init__()
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
            raise ValueError(f"num_classes must be an int >= 0 (0: no classifier head), got {num_classes!r}")
        self.depth, self.stem_kind, self.width, self.in_channels = depth, stem, width, in_channels
        self.num_classes = num_classes
        self.arch = f"resnet{depth}-{stem}"
        self.stem = Stem(stem, in_channels, width)
        plan = stage_plan(depth, width)
        self.blocks = nn.Sequential(*[ResidualBlock(*p) for p in plan])
        self.avgpool = GlobalAvgPool()
        last = plan[-1]
        self.feature_dim = last[2] * (1 if last[0] == "basic" else 4)
        self.fc = nn.Linear(self.feature_dim, num_classes) if num_classes else None
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, H, W] float -> pooled features [B, feature_dim]."""
        lo, hi = STEM_SIZES[self.stem_kind]
        check_images(x, self.in_channels, lo, hi, stem_hint(self.stem_kind))
        return self.avgpool(self.blocks(self.stem(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, H, W] float -> logits [B, num_classes] with a head, else pooled features [B, feature_dim]."""
        f = self.forward_features(x)
        return self.fc(f) if self.fc is not None else f
