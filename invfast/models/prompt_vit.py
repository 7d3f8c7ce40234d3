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

from invfast.models._checks import check_descriptor
from invfast.models.vit import ViT


class PromptViT(ViT):
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
        if n_projectors < 1:
            raise ValueError(f"n_projectors must be >= 1, got {n_projectors}")
        super().__init__(img_size, patch, dim, depth, heads, mlp_ratio, in_channels)
        self.inv_dim = inv_dim
        self.arch = f"prompt-vit-{img_size}px-p{patch}-d{dim}x{depth}"
        p = n_projectors
        self.prompt_w1 = nn.Parameter(torch.empty(p, dim, inv_dim))
        self.prompt_b1 = nn.Parameter(torch.zeros(p, dim))
        self.prompt_w2 = nn.Parameter(torch.empty(p, dim, dim))
        self.prompt_b2 = nn.Parameter(torch.zeros(p, dim))
        nn.init.normal_(self.prompt_w1, 0.0, math.sqrt(2.0 / inv_dim))
        nn.init.normal_(self.prompt_w2, 0.0, math.sqrt(1.0 / dim))
        self.init_weights()

    def prompt(self, i: torch.Tensor) -> torch.Tensor:
        """l_prompt: i [U, K] -> prompt tokens [U, dim] (mean over the projectors)."""
        i = i.to(self.prompt_w1.dtype)
        h = F.relu(torch.einsum("pdk,uk->upd", self.prompt_w1, i) + self.prompt_b1)
        return (torch.einsum("ped,upd->upe", self.prompt_w2, h) + self.prompt_b2).mean(1)

    def forward_features(self, x: torch.Tensor, i, clamp: bool = False) -> torch.Tensor:  # type: ignore[override]
        """x [B, C, img_size, img_size], i [K] or [B, K] -> CLS features [B, dim]."""
        b = x.shape[0]
        tok = self.tokens(x)
        i = check_descriptor(i, self.inv_dim, batch=b, clamp=clamp).to(x.device)
        prompt = self.prompt(i.reshape(-1, self.inv_dim)).unsqueeze(1).expand(b, -1, -1)
        return self.encode(torch.cat([tok, prompt], 1))

    def forward(self, x: torch.Tensor, i, clamp: bool = False) -> torch.Tensor:  # type: ignore[override]
        return self.forward_features(x, i, clamp=clamp)
