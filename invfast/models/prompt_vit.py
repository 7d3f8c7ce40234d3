"""Prompt-ViT (Chavhan et al. 2023): a small ViT whose invariance prompt token
``l_prompt(i)`` is appended after the image tokens.

``l_prompt`` is the average of ``n_projectors`` two-layer MLPs ``Linear(K -> dim) . ReLU .
Linear(dim -> dim)`` (the paper averages 256 for ViT-B), evaluated as batched matrix products.
Tokens: ``[CLS, patches + pos, prompt]``; features are the final-norm CLS token.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from invfast.models._checks import CheckedStateDict, check_descriptor, check_images


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


class PromptViT(CheckedStateDict, nn.Module):
    """Vision transformer with an invariance prompt token.

    Args:
        img_size: input side (px); inputs must have exactly this size (position embeddings are fixed).
        patch: patch side (px); img_size must be a multiple.
        dim, depth, heads, mlp_ratio: transformer width, blocks, attention heads, MLP expansion.
        inv_dim: K, descriptor length.
        n_projectors: number of averaged prompt MLPs.
        in_channels: image channels.

    ``forward(x, i)``: x [B, C, img_size, img_size], i [K] or [B, K] in [0, 1] -> [B, dim].
    """

    def __init__(
        self,
        img_size: int = 32,
        patch: int = 4,
        dim: int = 192,
        depth: int = 6,
        heads: int = 3,
        mlp_ratio: float = 4.0,
        inv_dim: int = 2,
        n_projectors: int = 8,
        in_channels: int = 3,
    ):
        super().__init__()
        if img_size % patch:
            raise ValueError(f"img_size ({img_size}) must be a multiple of patch ({patch})")
        if n_projectors < 1:
            raise ValueError(f"n_projectors must be >= 1, got {n_projectors}")
        self.img_size, self.patch, self.inv_dim, self.in_channels = img_size, patch, inv_dim, in_channels
        self.feature_dim = dim
        self.arch = f"prompt-vit-{img_size}px-p{patch}-d{dim}x{depth}"
        n_patches = (img_size // patch) ** 2
        self.patch_embed = nn.Conv2d(in_channels, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, n_patches + 1, dim))
        self.blocks = nn.ModuleList([EncoderBlock(dim, heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        p = n_projectors
        self.prompt_w1 = nn.Parameter(torch.empty(p, dim, inv_dim))
        self.prompt_b1 = nn.Parameter(torch.zeros(p, dim))
        self.prompt_w2 = nn.Parameter(torch.empty(p, dim, dim))
        self.prompt_b2 = nn.Parameter(torch.zeros(p, dim))
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.prompt_w1, 0.0, math.sqrt(2.0 / inv_dim))
        nn.init.normal_(self.prompt_w2, 0.0, math.sqrt(1.0 / dim))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def prompt(self, i: torch.Tensor) -> torch.Tensor:
        """l_prompt: i [U, K] -> prompt tokens [U, dim] (mean over the projectors)."""
        i = i.to(self.prompt_w1.dtype)
        h = F.relu(torch.einsum("pdk,uk->upd", self.prompt_w1, i) + self.prompt_b1)
        return (torch.einsum("ped,upd->upe", self.prompt_w2, h) + self.prompt_b2).mean(1)

    def forward_features(self, x: torch.Tensor, i, clamp: bool = False) -> torch.Tensor:
        """x [B, C, img_size, img_size], i [K] or [B, K] -> CLS features [B, dim]."""
        check_images(
            x,
            self.in_channels,
            self.img_size,
            self.img_size,
            f"build PromptViT(img_size={x.shape[-1]}) or resize the images",
        )
        if x.shape[-1] != x.shape[-2]:
            raise ValueError(f"x must be square {self.img_size}x{self.img_size}, got {tuple(x.shape[-2:])}")
        b = x.shape[0]
        i = check_descriptor(i, self.inv_dim, batch=b, clamp=clamp).to(x.device)
        tok = self.patch_embed(x).flatten(2).transpose(1, 2)
        tok = torch.cat([self.cls_token.expand(b, -1, -1), tok], 1) + self.pos_embed
        prompt = self.prompt(i.reshape(-1, self.inv_dim)).unsqueeze(1).expand(b, -1, -1)
        y = torch.cat([tok, prompt], 1)
        for blk in self.blocks:
            y = blk(y)
        return self.norm(y[:, 0])

    def forward(self, x: torch.Tensor, i, clamp: bool = False) -> torch.Tensor:
        return self.forward_features(x, i, clamp=clamp)
