"""A small vision transformer for CIFAR-size images (Dosovitskiy et al. 2020), the ViT of Speicher
et al.'s architecture comparison, and the transformer pieces :class:`~invfast.models.PromptViT` adds
its invariance prompt to.

Tokens: ``[CLS, patches + position]``, pre-norm blocks, features = the final-norm CLS token
[B, dim]. ``ViT(img_size=32, patch=8, dim=384, depth=7, heads=8)`` is the configuration Speicher
et al. use (App. B.1); the defaults are a small one that trains on a CPU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from invfast.models._checks import CheckedStateDict, check_images


class EncoderBlock(nn.Module):
    """Pre-norm transformer block: x + MHSA(LN(x)), x + MLP(LN(x))."""

    def __init__(self, dim: int, heads: int, mlp_ratio: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim ({dim}) must be divisible by heads ({heads})")
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(CheckedStateDict, nn.Module):
    """Vision transformer: patch embedding, CLS token, learned positions, ``depth`` pre-norm blocks.

    Args:
        img_size: input side (px); inputs must have exactly this size (position embeddings are fixed).
        patch: patch side (px); img_size must be a multiple.
        dim, depth, heads, mlp_ratio: transformer width, blocks, attention heads, MLP expansion.
        in_channels: image channels.

    ``forward(x)``: x [B, C, img_size, img_size] -> CLS features [B, dim].
    """

    def __init__(
        self,
        img_size: int = 32,
        patch: int = 4,
        dim: int = 64,
        depth: int = 4,
        heads: int = 4,
        mlp_ratio: float = 2.0,
        in_channels: int = 3,
    ):
        super().__init__()
        if img_size % patch:
            raise ValueError(f"img_size ({img_size}) must be a multiple of patch ({patch})")
        self.img_size, self.patch, self.in_channels = img_size, patch, in_channels
        self.feature_dim = dim
        n_patches = (img_size // patch) ** 2
        self.patch_embed = nn.Conv2d(in_channels, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n_patches + 1, dim))
        self.blocks = nn.ModuleList([EncoderBlock(dim, heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)

    def init_weights(self) -> None:
        """Truncated-normal (std 0.02) positions, CLS token and linear weights, zero biases (as timm)."""
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def tokens(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C, img_size, img_size] -> [CLS, patches] + positions [B, 1 + patches, dim]."""
        check_images(x, self.in_channels, self.img_size, self.img_size, f"build the model with img_size={x.shape[-1]}")
        if x.shape[-1] != x.shape[-2]:
            raise ValueError(f"x must be square {self.img_size}x{self.img_size}, got {tuple(x.shape[-2:])}")
        tok = self.patch_embed(x).flatten(2).transpose(1, 2)
        return torch.cat([self.cls_token.expand(x.shape[0], -1, -1), tok], 1) + self.pos_embed

    def encode(self, tokens: torch.Tensor) -> torch.Tensor:
        """Tokens [B, T, dim] through the blocks -> the final-norm CLS token [B, dim]."""
        for blk in self.blocks:
            tokens = blk(tokens)
        return self.norm(tokens[:, 0])

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode(self.tokens(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_features(x)


def vit(**kw) -> ViT:
    """A :class:`ViT`, initialised (``init_weights``)."""
    m = ViT(**kw)
    m.init_weights()
    return m
