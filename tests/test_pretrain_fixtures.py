"""Small stand-ins shared by the pretraining tests: a tiny conv encoder (optionally conditioned on
an invariance descriptor, like a Hyper-ResNet), simple torch augmentations and structured images.
No tests here; the test_pretrain_* modules import from it."""

from __future__ import annotations

import torch
import torch.nn as nn


class TinyEncoder(nn.Module):
    """conv-relu-conv-relu-avgpool -> [B, dim]; with ``k`` > 0, ``forward(x, i [k])`` scales the
    channels by ``1 + W i`` (a minimal descriptor-conditioned encoder)."""

    def __init__(self, dim: int = 16, k: int = 0, bn: bool = False) -> None:
        super().__init__()
        layers = [nn.Conv2d(3, 8, 3, 2, 1)]
        if bn:
            layers.append(nn.BatchNorm2d(8))
        layers += [nn.ReLU(), nn.Conv2d(8, dim, 3, 2, 1), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.feature_dim = dim
        self.cond = nn.Linear(k, dim, bias=False) if k else None

    def forward(self, x: torch.Tensor, i: torch.Tensor | None = None) -> torch.Tensor:
        h = self.body(x).mean((2, 3))
        if self.cond is not None:
            if i is None:
                raise ValueError("this encoder needs a descriptor i")
            h = h * (1 + self.cond(i.to(h.dtype)))
        return h


def _norm(x: torch.Tensor) -> torch.Tensor:
    return (x - 0.45) / 0.25


class RandomAug:
    """Random horizontal flip, brightness in [0.6, 1.4] and a ±2 px roll, per image, from ``generator``."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None):
        self.calls += 1
        x = images.float() / 255 if images.dtype == torch.uint8 else images.float()

        def view() -> torch.Tensor:
            b = x.shape[0]
            flip = torch.rand(b, 1, 1, 1, generator=generator, device=x.device) < 0.5
            y = torch.where(flip, x.flip(3), x)
            y = y * (0.6 + 0.8 * torch.rand(b, 1, 1, 1, generator=generator, device=x.device))
            s = int(torch.randint(-2, 3, (1,), generator=generator, device=x.device))
            return _norm(torch.roll(y, s, dims=3))

        return view(), view()


class FixedAug:
    """Deterministic views: (image, flipped image with brightness 0.8) — for multi-process comparisons.
    The views take torch's default dtype (float64 in the multi-process tests)."""

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None):
        x = images.to(torch.get_default_dtype()) / 255
        return _norm(x), _norm(x.flip(3) * 0.8)


def blob_images(n: int = 64, size: int = 16, seed: int = 0) -> torch.Tensor:
    """uint8 [n, 3, size, size]: a coloured square at a random position on a dark noisy background."""
    g = torch.Generator().manual_seed(seed)
    img = torch.rand(n, 3, size, size, generator=g) * 0.2
    colours = torch.rand(n, 3, generator=g)
    for j in range(n):
        s = int(torch.randint(3, size // 2, (1,), generator=g))
        r, c = (int(v) for v in torch.randint(0, size - s, (2,), generator=g))
        img[j, :, r : r + s, c : c + s] = colours[j].view(3, 1, 1)
    return (img * 255).round().to(torch.uint8)
