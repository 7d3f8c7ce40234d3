"""VGG-11 for CIFAR-size images (Simonyan & Zisserman 2014, in the CIFAR layout Speicher et al. use:
3x3 convolutions with BatchNorm and ReLU, five 2x2 max-pools, no fully connected stack).

``forward(x)`` / ``forward_features(x)``: x [B, C, H, W] (H, W from 32 to 64 px, multiples of 32
give whole pools) -> globally average-pooled features [B, 8 * width]. ``width=64`` is the standard
VGG-11 (64-128-256-256-512-512-512-512 channels).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from invfast.models._checks import CheckedStateDict, check_images
from invfast.models.convolution import Conv2d

#: VGG-11's configuration 'A' in units of ``width``: channel multipliers, 'M' = 2x2 max-pool
VGG11 = (1, "M", 2, "M", 4, 4, "M", 8, 8, "M", 8, 8, "M")


class VGG(CheckedStateDict, nn.Module):
    """VGG-11 (configuration 'A') with BatchNorm, for 32-64 px inputs.

    Args:
        width: channels of the first convolution (64 in the standard net); later ones are multiples.
        in_channels: image channels.
    """

    def __init__(self, width: int = 64, in_channels: int = 3):
        super().__init__()
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise ValueError(f"width must be a positive int, got {width!r}")
        self.in_channels = in_channels
        layers: list[nn.Module] = []
        c = in_channels
        for item in VGG11:
            if item == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                out = int(item) * width
                layers += [Conv2d(c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
                c = out
        self.features = nn.Sequential(*layers)
        self.feature_dim = c

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, H, W] float -> pooled features [B, feature_dim]."""
        check_images(x, self.in_channels, 32, 64, "VGG-11 pools five times: give 32-64 px images")
        return F.adaptive_avg_pool2d(self.features(x), 1).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_features(x)
