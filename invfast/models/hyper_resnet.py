"""Hyper-ResNet (Chavhan et al., SPEC §3): a ResNet whose residual-block convolutions are
generated from an invariance descriptor ``i in [0, 1]^K``.

Every residual block b has an embedding ``e_b = W_b i`` (R^K -> R^emb_dim, no bias); every conv
kernel l of that block has its own hypernetwork ``Linear(emb_dim -> hidden) . ReLU .
Linear(hidden -> out*in*kh*kw)``. The stem conv and all BatchNorms are ordinary parameters.

The per-kernel hypernetworks are stored packed: ``embed [n_blocks, emb_dim, K]``,
``hid_weight [L, hidden, emb_dim]``, ``hid_bias [L, hidden]`` and the output layers of all
kernels row-wise in ``out_weight [N, hidden]``, ``out_bias [N]`` (N = generated conv weights).
All kernels for a batch of descriptors come from one call of the compiled op
(:func:`invfast.ops.hyper.generate`). ``freeze_weights(i)`` caches the kernels of one descriptor so
that evaluation costs what a plain ResNet costs.

Per-sample descriptors ``i [B, K]`` (``per_sample`` picks the formulation; docs/models.md has the
measurements):

* ``"generate"`` (default): identical descriptors are generated once. One distinct descriptor runs
  the shared path; few distinct ones (at most half the batch) sort the batch by descriptor and run one
  plain convolution per group and layer; otherwise every sample gets its own kernels and each layer
  is one grouped convolution with the samples as groups.
* ``"affine"``: no kernels are generated. A generated kernel is affine in its hidden vector h
  (``W = W0 + sum_k h_k W_k`` with ``W0`` = the output bias, ``W_k`` = column k of the output layer),
  so ``conv(x_b, W_b) = conv(x_b, W0) + sum_k h_bk conv(x_b, W_k)``: one shared convolution with
  (H + 1) x out channels, then a per-sample contraction with h. H + 1 = 33 times the convolution
  work, but no B x N generated weights and no grouped convolution.

Under autocast (e.g. bf16 on CPU or CUDA) the hidden vectors and the generated kernels are computed
in the parameters' dtype (the output layer has to be read in full either way, and converting it
first would read it twice); the convolutions then run in the autocast dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from invfast.models._checks import CheckedStateDict, check_descriptor, check_images
from invfast.models.convolution import conv2d
from invfast.models.resnet import STEM_SIZES, ConvSpec, Stem, block_convs, stage_plan, stem_hint
from invfast.ops import hyper

PER_SAMPLE_MODES = ("generate", "affine")


@dataclass
class SegmentWeights:
    """Kernels for a batch sorted by descriptor: samples ``bounds[u]:bounds[u+1]`` use ``weights[u]`` [O, I, k, k]."""

    bounds: list[int]
    weights: list[torch.Tensor]


@dataclass
class AffineWeights:
    """A kernel as ``w0 + sum_k h[:, k] * wk[k]``: w0 [O, I, k, k], wk [H, O, I, k, k], h [B, H] per sample."""

    w0: torch.Tensor
    wk: torch.Tensor
    h: torch.Tensor


def conv_with(x: torch.Tensor, w, spec: ConvSpec) -> torch.Tensor:
    """Convolution of x [B, I, H, W] with a shared weight [O, I, k, k], per-sample weights
    [B, O, I, k, k] (one grouped conv), :class:`SegmentWeights` or :class:`AffineWeights` -> [B, O, H', W']."""
    if isinstance(w, SegmentWeights):
        return torch.cat(
            [
                conv2d(x[a:z], wu, stride=spec.stride, padding=spec.padding)
                for a, z, wu in zip(w.bounds, w.bounds[1:], w.weights)
            ]
        )
    if isinstance(w, AffineWeights):
        nh = w.wk.shape[0]
        full = torch.cat([w.w0[None], w.wk]).reshape((nh + 1) * spec.out_ch, spec.in_ch, spec.k, spec.k)
        y = conv2d(x, full, stride=spec.stride, padding=spec.padding)
        y = y.reshape(x.shape[0], nh + 1, spec.out_ch, y.shape[-2], y.shape[-1])
        return y[:, 0] + torch.einsum("bk,bkohw->bohw", w.h.to(y.dtype), y[:, 1:])
    if w.dim() == 4:
        return conv2d(x, w, stride=spec.stride, padding=spec.padding)
    b, c, h, wd = x.shape
    y = conv2d(
        x.reshape(1, b * c, h, wd),
        w.reshape(b * spec.out_ch, spec.in_ch, spec.k, spec.k),
        stride=spec.stride,
        padding=spec.padding,
        groups=b,
    )
    return y.reshape(b, spec.out_ch, y.shape[-2], y.shape[-1])


class HyperBlock(nn.Module):
    """Residual block whose conv weights are passed in; holds only its BatchNorms."""

    def __init__(self, kind: str, in_ch: int, planes: int, stride: int):
        super().__init__()
        self.specs = block_convs(kind, in_ch, planes, stride)
        self.bns = nn.ModuleDict({c.name: nn.BatchNorm2d(c.out_ch) for c in self.specs})

    def forward(self, x: torch.Tensor, weights: list) -> torch.Tensor:
        main = [(c, w) for c, w in zip(self.specs, weights) if c.name != "downsample"]
        y = x
        for j, (c, w) in enumerate(main):
            y = self.bns[c.name](conv_with(y, w, c))
            if j < len(main) - 1:
                y = F.relu(y)
        short = x
        if self.specs[-1].name == "downsample":
            short = self.bns["downsample"](conv_with(x, weights[-1], self.specs[-1]))
        return F.relu(y + short)


class HyperResNet(CheckedStateDict, nn.Module):
    """ResNet-18/34/50 with hypernetwork-generated residual convolutions.

    Args:
        depth: 18, 34 or 50.
        inv_dim: K, length of the invariance descriptor.
        emb_dim: block embedding size (16 in the paper).
        hidden: hypernetwork hidden size (32 in the paper).
        stem: 'cifar' or 'imagenet' (see :class:`invfast.models.ResNet`).
        width: channels after the stem (64 standard; smaller for tests).
        in_channels: image channels.
        per_sample: formulation for per-image descriptors, ``"generate"`` or ``"affine"`` (module
            docstring); an attribute that may be changed later.

    ``forward(x, i)`` / ``forward_features(x, i)``: x [B, C, H, W], i [K] (one descriptor for the
    batch) or [B, K] (one per image), entries in [0, 1] -> pooled features [B, feature_dim].
    """

    def __init__(
        self,
        depth: int = 50,
        inv_dim: int = 2,
        emb_dim: int = 16,
        hidden: int = 32,
        stem: str = "imagenet",
        width: int = 64,
        in_channels: int = 3,
        per_sample: str = "generate",
    ):
        super().__init__()
        if per_sample not in PER_SAMPLE_MODES:
            raise ValueError(f"per_sample must be one of {PER_SAMPLE_MODES}, got {per_sample!r}")
        self.per_sample = per_sample
        if inv_dim < 1 or emb_dim < 1 or hidden < 1:
            raise ValueError(f"inv_dim, emb_dim and hidden must be >= 1, got {inv_dim}, {emb_dim}, {hidden}")
        self.depth, self.inv_dim, self.emb_dim, self.hidden_dim = depth, inv_dim, emb_dim, hidden
        self.stem_kind, self.width, self.in_channels = stem, width, in_channels
        self.arch = f"hyper-resnet{depth}-{stem}"
        self.stem = Stem(stem, in_channels, width)
        plan = stage_plan(depth, width)
        blocks = [HyperBlock(*p) for p in plan]
        self.blocks = nn.ModuleList(blocks)
        last = plan[-1]
        self.feature_dim = last[2] * (1 if last[0] == "basic" else 4)

        self.specs: list[ConvSpec] = [c for blk in blocks for c in blk.specs]
        self.block_sizes: list[int] = [len(blk.specs) for blk in blocks]  # kernels per block, in order
        block_of = [b for b, blk in enumerate(blocks) for _ in blk.specs]
        self.offsets: list[int] = [0]
        for c in self.specs:
            self.offsets.append(self.offsets[-1] + c.numel)
        n_kernels, n_rows = len(self.specs), self.offsets[-1]
        self.block_of_kernel: torch.Tensor
        self.register_buffer("block_of_kernel", torch.tensor(block_of, dtype=torch.long), persistent=False)
        self.embed = nn.Parameter(torch.empty(len(self.blocks), emb_dim, inv_dim))
        self.hid_weight = nn.Parameter(torch.empty(n_kernels, hidden, emb_dim))
        self.hid_bias = nn.Parameter(torch.empty(n_kernels, hidden))
        self.out_weight = nn.Parameter(torch.empty(n_rows, hidden))
        self.out_bias = nn.Parameter(torch.empty(n_rows))
        self._frozen: torch.Tensor | None
        self.register_buffer("_frozen", None, persistent=False)
        self.frozen_descriptor: torch.Tensor | None = None
        self._frozen_versions: tuple[int, ...] = ()
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """He-variance generated kernels at init: half of the variance from the bias, half from i.

        embed ~ N(0, 1) (e_b entries O(1) for binary i), hidden layer He-normal with zero bias,
        out_weight ~ N(0, 1/(fan_in * hidden)) and out_bias ~ N(0, 1/fan_in) per kernel.
        """
        nn.init.normal_(self.embed, 0.0, 1.0)
        nn.init.normal_(self.hid_weight, 0.0, math.sqrt(2.0 / self.emb_dim))
        nn.init.zeros_(self.hid_bias)
        for c, a, b in zip(self.specs, self.offsets, self.offsets[1:]):
            fan_in = c.in_ch * c.k * c.k
            self.out_weight[a:b].normal_(0.0, math.sqrt(1.0 / (fan_in * self.hidden_dim)))
            self.out_bias[a:b].normal_(0.0, math.sqrt(1.0 / fan_in))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    @property
    def num_kernels(self) -> int:
        """Number of generated conv kernels (52 for ResNet-50)."""
        return len(self.specs)

    @property
    def num_generated(self) -> int:
        """Number of generated conv weights N (23.45M for ResNet-50 at width 64)."""
        return self.offsets[-1]

    def hidden_vectors(self, i: torch.Tensor) -> torch.Tensor:
        """i [U, K] -> hidden vectors of every kernel's hypernetwork [U, L, hidden]."""
        i = i.to(self.embed.dtype)
        e = torch.einsum("gek,uk->uge", self.embed, i)  # [U, blocks, emb]
        e = e[:, self.block_of_kernel]  # [U, L, emb]
        return F.relu(torch.einsum("lhe,ule->ulh", self.hid_weight, e) + self.hid_bias)

    def generate_flat(self, i: torch.Tensor) -> torch.Tensor:
        """i [U, K] -> every generated kernel, flat [U, N] (row u = all kernels for descriptor u).

        Runs in the parameters' dtype also under autocast (see the module docstring)."""
        with torch.autocast(i.device.type, enabled=False):
            hid = self.hidden_vectors(i).to(self.out_weight.dtype)
            return hyper.generate(hid, self.out_weight, self.out_bias, self.offsets)

    def generate_weights(self, i: torch.Tensor, clamp: bool = False) -> list[torch.Tensor]:
        """Conv weights for descriptor i [K] (list of [O, I, k, k]) or i [U, K] (list of [U, O, I, k, k])."""
        i = check_descriptor(i, self.inv_dim, clamp=clamp).to(self.out_weight.device)
        flat = self.generate_flat(i.reshape(-1, self.inv_dim))
        return self._split(flat if i.dim() == 2 else flat[0])

    def _split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        lead = flat.shape[:-1]
        return [
            flat[..., a:b].reshape(*lead, c.out_ch, c.in_ch, c.k, c.k)
            for c, a, b in zip(self.specs, self.offsets, self.offsets[1:])
        ]

    @torch.no_grad()
    def freeze_weights(self, i, clamp: bool = False) -> HyperResNet:
        """Generate and cache the kernels for one descriptor i [K]; ``forward(x)`` without i then uses them."""
        i = check_descriptor(i, self.inv_dim, clamp=clamp)
        if i.dim() != 1:
            raise ValueError(f"freeze_weights takes one descriptor [K={self.inv_dim}], got shape {tuple(i.shape)}")
        i = i.to(self.out_weight.device)
        self._frozen = self.generate_flat(i[None])[0].detach().clone()
        self.frozen_descriptor = i.detach().clone()
        self._frozen_versions = self._param_versions()
        return self

    def unfreeze(self) -> HyperResNet:
        """Drop the cached kernels (``forward`` then needs i again)."""
        self._frozen = None
        self.frozen_descriptor = None
        self._frozen_versions = ()
        return self

    def _param_versions(self) -> tuple[int, ...]:
        return tuple(p._version for p in (self.embed, self.hid_weight, self.hid_bias, self.out_weight, self.out_bias))

    def _frozen_serves(self, i: torch.Tensor) -> bool:
        """The cache holds the kernels of descriptor i [K] and no gradient is asked of them: the
        same descriptor, hypernetwork parameters unchanged since freezing (in-place version
        counters), and either autograd off or nothing that would need a gradient through them."""
        if self._frozen is None or self.frozen_descriptor is None or i.requires_grad:
            return False
        if torch.is_grad_enabled() and any(
            p.requires_grad for p in (self.embed, self.hid_weight, self.hid_bias, self.out_weight, self.out_bias)
        ):
            return False
        return self._param_versions() == self._frozen_versions and torch.equal(
            i.to(self.frozen_descriptor.dtype), self.frozen_descriptor
        )

    def _affine(self, i: torch.Tensor) -> list[AffineWeights]:
        """Per-kernel affine form for descriptors i [B, K] (nothing generated)."""
        with torch.autocast(i.device.type, enabled=False):
            hid = self.hidden_vectors(i).to(self.out_weight.dtype)  # [B, L, H]
        out = []
        for j, (c, a, b) in enumerate(zip(self.specs, self.offsets, self.offsets[1:])):
            w0 = self.out_bias[a:b].reshape(c.out_ch, c.in_ch, c.k, c.k)
            wk = self.out_weight[a:b].t().reshape(self.hidden_dim, c.out_ch, c.in_ch, c.k, c.k)
            out.append(AffineWeights(w0, wk, hid[:, j]))
        return out

    def _weights_for(self, i, batch: int, clamp: bool):
        """(per-kernel weights, batch order or None). A batch order means the batch was sorted by
        descriptor: forward_features runs on x[order] and puts the features back in input order."""
        if i is None:
            if self._frozen is None:
                raise ValueError("i (invariance descriptor) is required unless freeze_weights(i) was called")
            return self._split(self._frozen), None
        frozen = self._frozen
        i = check_descriptor(i, self.inv_dim, batch=batch, clamp=clamp).to(self.out_weight.device)
        if i.dim() == 1:
            if frozen is not None and self._frozen_serves(i):
                return self._split(frozen), None
            return self._split(self.generate_flat(i[None])[0]), None
        if self.per_sample == "affine":
            return self._affine(i), None
        if i.requires_grad:  # every row keeps its own gradient: generate per sample
            return self._split(self.generate_flat(i)), None
        uniq, inverse, counts = torch.unique(i, dim=0, return_inverse=True, return_counts=True)
        n_uniq = uniq.shape[0]
        if n_uniq == 1:
            if frozen is not None and self._frozen_serves(uniq[0]):
                return self._split(frozen), None
            return self._split(self.generate_flat(uniq)[0]), None
        if n_uniq == batch:  # all distinct: generate in sample order, one grouped conv per layer
            return self._split(self.generate_flat(i)), None
        flat = self.generate_flat(uniq)
        if 2 * n_uniq > batch:  # many distinct: per-sample kernels (repeats copied), grouped conv
            return self._split(flat[inverse]), None
        order = torch.argsort(inverse, stable=True)
        bounds = [0] + torch.cumsum(counts, 0).tolist()
        per_kernel = self._split(flat)  # [U, O, I, k, k] per kernel
        return [SegmentWeights(bounds, list(w.unbind(0))) for w in per_kernel], order

    def forward_features(self, x: torch.Tensor, i=None, clamp: bool = False) -> torch.Tensor:
        """x [B, C, H, W], i [K] or [B, K] in [0, 1] (None: frozen weights) -> [B, feature_dim].

        ``clamp=True`` clamps i into [0, 1] instead of raising.
        """
        lo, hi = STEM_SIZES[self.stem_kind]
        check_images(x, self.in_channels, lo, hi, stem_hint(self.stem_kind))
        weights, order = self._weights_for(i, x.shape[0], clamp)
        if order is not None:
            x = x[order]
        y = self.stem(x)
        k = 0
        for blk, n in zip(self.blocks, self.block_sizes):
            y = blk(y, weights[k : k + n])
            k += n
        feats = y.mean((2, 3))
        if order is not None:
            feats = torch.empty_like(feats).index_copy_(0, order, feats)
        return feats

    def forward(self, x: torch.Tensor, i=None, clamp: bool = False) -> torch.Tensor:
        return self.forward_features(x, i, clamp=clamp)
