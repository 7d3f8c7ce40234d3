"""A user's module for the registry tests: importing it registers a test transform, as a user's model
module would for ``invfast measure --model registry_helpers:tiny_net --transforms gamma-cli``."""

from __future__ import annotations

import torch

import invfast.transforms as T

GAMMA_GRID = (0.5, 0.8, 1.0, 1.5, 2.2)


@T.register("gamma-cli", grid=GAMMA_GRID, family="appearance", identity=1.0)
def gamma_cli(images: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
    """x ** gamma per channel: [B, 3, H, W] float, params [P] -> [B, P, 3, H, W]."""
    return images.unsqueeze(1) ** params.view(1, -1, 1, 1, 1)


def tiny_net(seed: int = 0, dim: int = 6) -> torch.nn.Module:
    """A fixed random conv net with mean + max pooling: images [B, 3, H, W] -> features [B, 2 dim]."""
    g = torch.Generator().manual_seed(seed)
    conv = torch.nn.Conv2d(3, dim, 3, padding=1)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(conv.weight.shape, generator=g) * 0.5)
        conv.bias.copy_(torch.randn(conv.bias.shape, generator=g) * 0.1)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = conv

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = torch.tanh(self.conv(x)).flatten(2)
            return torch.cat([h.mean(-1), h.amax(-1)], dim=1)

    return Net()
