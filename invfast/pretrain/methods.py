"""Contrastive methods as thin modules over a shared base: MoCo-v2, SimCLR and their amortised
(invariance-descriptor-conditioned) variants AI-MoCo and AI-SimCLR (Chavhan et al.).

A method owns the online network (encoder + projection head(s)), for MoCo the momentum key
network and the queue(s), and the augmentation policy (or one policy per descriptor). One
training step is::

    d = method.sample_descriptor(step_generator)          # always 0 for non-amortised methods
    v1, v2 = method.make_views(images, d, aug_generator)  # only the two views this step uses
    loss = method.training_loss(v1, v2, d, online=ddp_wrapped_online_or_None)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from invfast.pretrain import distributed as D
from invfast.pretrain.descriptors import describe, descriptor_policies, descriptor_set
from invfast.pretrain.heads import ProjectionHead
from invfast.pretrain.key_queue import KeyQueue
from invfast.pretrain.losses import contrastive_rows, infonce, nt_xent
from invfast.pretrain.momentum import momentum_update
from invfast.runtime.launch import current_rank

Augment = Callable[..., tuple[torch.Tensor, torch.Tensor]]


class PretrainNetwork(nn.Module):
    """What a method trains: an ``encoder`` and a head; ``forward(x, d)`` gives the head's outputs,
    ``features(x, d)`` the pooled encoder features [B, feature_dim] under descriptor ``d``."""

    encoder: nn.Module

    def features(self, x: torch.Tensor, d: int = 0) -> torch.Tensor:
        raise NotImplementedError


class OnlineNetwork(PretrainNetwork):
    """Encoder followed by one projection head per descriptor.

    ``forward(x [B, C, H, W], d: int) -> [B, proj_dim]``. With ``descriptors`` [n, K] the encoder is
    called as ``encoder(x, descriptors[d])`` (a Hyper-ResNet), otherwise as ``encoder(x)``.
    """

    descriptors: torch.Tensor  # [n, K], a buffer registered only when conditioned

    def __init__(self, encoder: nn.Module, heads: nn.ModuleList, descriptors: torch.Tensor | None) -> None:
        super().__init__()
        self.encoder = encoder
        self.heads = heads
        self.conditioned = descriptors is not None
        if descriptors is not None:
            self.register_buffer("descriptors", descriptors.float().clone())

    def features(self, x: torch.Tensor, d: int = 0) -> torch.Tensor:
        """Pooled encoder features [B, feature_dim] under descriptor ``d``."""
        if self.conditioned:
            return self.encoder(x, self.descriptors[d])
        return self.encoder(x)

    def forward(self, x: torch.Tensor, d: int = 0) -> torch.Tensor:  # noqa: D102
        return self.heads[d](self.features(x, d))


def _feature_dim(encoder: nn.Module) -> int:
    dim = getattr(encoder, "feature_dim", None)
    if not isinstance(dim, int) or dim < 1:
        raise TypeError(
            f"the encoder ({type(encoder).__name__}) must expose an int attribute .feature_dim "
            "(the size of the pooled features its forward returns)"
        )
    return dim


class PretrainMethod(nn.Module):
    """What the :class:`~invfast.pretrain.Trainer` drives: an online network (encoder + heads) whose
    parameters it optimises, and one training step in two halves::

        inputs = method.make_views(batch, d, aug_generator)     # augmentation (timed apart)
        loss = method.training_loss(*inputs, d, online=..., generator=shuffle_generator)

    ``batch`` is what the source's ``get`` returns: images uint8 [B, 3, H, W], or (images, labels)
    for a method with ``uses_labels`` (:class:`~invfast.pretrain.Supervised`). Subclasses set
    ``self.augments`` (one policy per descriptor), ``self.descriptor_names`` and ``self.online``
    (a :class:`PretrainNetwork`: ``forward(x, d)`` and ``features(x, d)``).
    """

    method_name = "method"
    #: True when the method trains on (images, labels) batches (a labelled source)
    uses_labels = False
    online: PretrainNetwork
    augments: list[Callable[..., Any]]
    descriptor_names: list[str]

    @property
    def encoder(self) -> nn.Module:
        return self.online.encoder

    @property
    def feature_dim(self) -> int:
        return _feature_dim(self.online.encoder)

    @property
    def n_descriptors(self) -> int:
        return len(self.augments)

    @property
    def amortised(self) -> bool:
        return bool(getattr(self.online, "conditioned", False))

    def sample_descriptor(self, generator: torch.Generator) -> int:
        """Index of the descriptor for this batch (uniform; 0 when not amortised)."""
        if self.n_descriptors == 1:
            return 0
        return int(torch.randint(self.n_descriptors, (1,), generator=generator, device=generator.device))

    def make_views(self, images: torch.Tensor, d: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The inputs of :meth:`training_loss` for one batch under descriptor ``d``."""
        raise NotImplementedError

    def features(self, x: torch.Tensor, d: int = 0) -> torch.Tensor:
        """Encoder features [B, feature_dim] (descriptor ``d`` for amortised methods)."""
        return self.online.features(x, d)

    def training_loss(
        self,
        v1: torch.Tensor,
        v2: torch.Tensor,
        d: int = 0,
        online: nn.Module | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """The loss of one step on the inputs :meth:`make_views` returned (this rank's share of the batch).

        ``online`` is the network to call for gradients (a DDP wrapper of ``self.online`` in
        multi-process runs); state updates of the method (queue, key network) happen here too.
        ``generator``: a CPU generator in the same state on every rank for this step (MoCo uses it
        to shuffle the key batch across processes).
        """
        raise NotImplementedError

    def config(self) -> dict:
        """The method's hyper-parameters (recorded in checkpoints)."""
        return {"method": self.method_name, "n_descriptors": self.n_descriptors}


class ContrastiveMethod(PretrainMethod):
    """Shared base of the contrastive methods: the online network, the augmentation policies and
    descriptor sampling.

    Args:
        encoder: ``nn.Module`` mapping images to pooled features [B, feature_dim] (``encoder(x, i)``
            with a descriptor ``i [K]`` for amortised methods); needs ``.feature_dim``.
        augment: for non-amortised methods, ``augment(images, generator=g) -> (v1, v2)``; for
            amortised ones, a sequence with one such policy per descriptor.
        descriptors: None, or the binary descriptors [n, K] of an amortised method.
        tau: temperature of the loss. proj_hidden / proj_dim: projection head sizes
            (hidden defaults to the encoder's feature_dim, as in MoCo-v2). head_norm: 'none' (MoCo-v2's head)
            or 'bn' (batch-normalised, MoCo v3's; :class:`~invfast.pretrain.heads.ProjectionHead`).
    """

    method_name = "contrastive"

    def __init__(
        self,
        encoder: nn.Module,
        augment: Augment | Sequence[Augment],
        *,
        descriptors: torch.Tensor | None = None,
        descriptor_names: Sequence[str] | None = None,
        tau: float = 0.2,
        proj_hidden: int | None = None,
        proj_dim: int = 128,
        head_norm: str = "none",
    ) -> None:
        super().__init__()
        if not (tau > 0):
            raise ValueError(f"tau must be > 0, got {tau}")
        fdim = _feature_dim(encoder)
        n = 1 if descriptors is None else int(descriptors.shape[0])
        if descriptors is None:
            if not callable(augment):
                raise TypeError("augment must be a callable augment(images, generator=g) -> (view1, view2)")
            augments = [augment]
        else:
            if not isinstance(augment, Iterable):
                raise TypeError(
                    f"an amortised method needs a sequence of {n} augmentation policies (one per "
                    f"descriptor), got {type(augment).__name__}"
                )
            augments = list(augment)
            if len(augments) != n or not all(callable(a) for a in augments):
                raise ValueError(
                    f"an amortised method needs one callable augmentation policy per descriptor: "
                    f"{n} descriptors, got {len(augments)} policies"
                )
        self.augments = augments
        self.descriptor_names = list(descriptor_names) if descriptor_names is not None else [str(i) for i in range(n)]
        heads = nn.ModuleList(ProjectionHead(fdim, proj_hidden, proj_dim, head_norm) for _ in range(n))
        self.online = OnlineNetwork(encoder, heads, descriptors)
        self.tau = float(tau)
        self.proj_dim = proj_dim
        self.head_norm = head_norm

    def make_views(self, images: torch.Tensor, d: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The two augmented views [B, 3, S, S] of ``images`` under descriptor ``d``'s policy."""
        v1, v2 = self.augments[d](images, generator=generator)
        return v1, v2

    def config(self) -> dict:
        """The method's hyper-parameters (recorded in checkpoints)."""
        out = {
            "method": self.method_name,
            "tau": self.tau,
            "proj_dim": self.proj_dim,
            "n_descriptors": self.n_descriptors,
        }
        if self.head_norm != "none":  # checkpoints of before the option hold no entry: their heads are plain
            out["head_norm"] = self.head_norm
        return out


class MoCoV2(ContrastiveMethod):
    """MoCo-v2: query from view 1 through the online network, key from view 2 through its momentum
    copy, InfoNCE against a queue of past keys (one queue per descriptor for AI-MoCo).

    Defaults are MoCo-v2's: τ 0.2, key momentum 0.999, 2-layer MLP head to 128-d, queue 65 536
    (callers scale it to the data with :func:`invfast.pretrain.key_queue.default_queue_size`). In a
    multi-process run the keys of all ranks are gathered before they are enqueued, so every rank
    holds the same queue, and with ``shuffle_bn`` (default) the key batch is shuffled across
    processes before the key network (MoCo's shuffled BN). A single process needs no shuffle
    (BatchNorm sees the whole batch, as in the shuffle-free variant).
    """

    method_name = "mocov2"

    def __init__(
        self,
        encoder: nn.Module,
        augment: Augment | Sequence[Augment],
        *,
        queue_size: int = 65536,
        key_momentum: float = 0.999,
        tau: float = 0.2,
        proj_hidden: int | None = None,
        proj_dim: int = 128,
        head_norm: str = "none",
        descriptors: torch.Tensor | None = None,
        descriptor_names: Sequence[str] | None = None,
        queue_seed: int = 0,
        shuffle_bn: bool = True,
    ) -> None:
        super().__init__(
            encoder,
            augment,
            descriptors=descriptors,
            descriptor_names=descriptor_names,
            tau=tau,
            proj_hidden=proj_hidden,
            proj_dim=proj_dim,
            head_norm=head_norm,
        )
        self.shuffle_bn = bool(shuffle_bn)
        if not 0.0 <= key_momentum <= 1.0:
            raise ValueError(f"key_momentum must be in [0, 1], got {key_momentum}")
        self.key_momentum = float(key_momentum)
        self.key = copy.deepcopy(self.online)
        for p in self.key.parameters():
            p.requires_grad_(False)
        g = torch.Generator().manual_seed(int(queue_seed))
        self.queue = KeyQueue(int(queue_size), proj_dim, self.n_descriptors, generator=g)

    def training_loss(self, v1, v2, d=0, online=None, generator=None):  # noqa: D102 (documented on the base)
        online = self.online if online is None else online
        q = online(v1, d)
        with torch.no_grad():
            momentum_update(self.key, self.online, self.key_momentum)
            if self.shuffle_bn and current_rank().world_size > 1:
                k, keys = self._shuffled_keys(v2, d, generator)
            else:
                k = F.normalize(self.key(v2, d), dim=1)
                keys = D.all_gather_nograd(k)
        loss = infonce(q, k, self.queue.get(d).clone(), self.tau)
        self.queue.enqueue(keys, d)
        return loss

    def _shuffled_keys(
        self, v2: torch.Tensor, d: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """MoCo's shuffled BN: the key network sees a random mix of all ranks' images, so BatchNorm
        statistics cannot leak which key belongs to which query. Returns (this rank's keys, all keys)."""
        dist = current_rank()
        all_v = D.all_gather_nograd(v2)
        n = all_v.shape[0]
        if generator is not None:
            perm = torch.randperm(n, generator=generator, device=generator.device).to(v2.device)
        else:
            perm = torch.randperm(n, device="cpu").to(v2.device)
            torch.distributed.broadcast(perm, src=0)
        b = v2.shape[0]
        mine = perm[dist.rank * b : (dist.rank + 1) * b]
        k_shuf = F.normalize(self.key(all_v[mine], d), dim=1)
        gathered = D.all_gather_nograd(k_shuf)  # row j is the key of image perm[j]
        keys = torch.empty_like(gathered)
        keys[perm] = gathered
        return keys[dist.rank * b : (dist.rank + 1) * b], keys

    def config(self) -> dict:  # noqa: D102
        return {
            **super().config(),
            "queue_size": self.queue.size,
            "key_momentum": self.key_momentum,
            "shuffle_bn": self.shuffle_bn,
        }


class SimCLR(ContrastiveMethod):
    """SimCLR: both views through the online network (one forward of the concatenated batch) and
    NT-Xent with in-batch negatives; in multi-process runs the negatives are the global batch
    (projections gathered with gradient). Default τ 0.2, 2-layer MLP head to 128-d."""

    method_name = "simclr"

    def training_loss(self, v1, v2, d=0, online=None, generator=None):  # noqa: D102
        online = self.online if online is None else online
        b = v1.shape[0]
        z = online(torch.cat([v1, v2], dim=0), d)
        z1, z2 = z[:b], z[b:]
        dist = current_rank()
        if dist.world_size == 1:
            return nt_xent(z1, z2, self.tau)
        z1_all, z2_all = D.all_gather_grad(z1), D.all_gather_grad(z2)
        total = z1_all.shape[0]
        cand = torch.cat([z1_all, z2_all], dim=0)
        own = torch.arange(b, device=z.device) + dist.rank * b
        self_index = torch.cat([own, own + total])
        positive = torch.cat([own + total, own])
        return contrastive_rows(torch.cat([z1, z2], dim=0), cand, positive, self_index, self.tau)


def _policies_for(set_name: str, size: int) -> tuple[list[Augment], torch.Tensor, list[str]]:
    desc = descriptor_set(set_name)
    return descriptor_policies(set_name, size), desc, [describe(set_name, row) for row in desc]


def _resolve_descriptors(
    descriptors: str | torch.Tensor, augments: Sequence[Augment] | None, size: int, names: Sequence[str] | None
) -> tuple[list[Augment], torch.Tensor, list[str]]:
    """(policies, descriptors [n, K], names) of an amortised method's constructor arguments."""
    if isinstance(descriptors, str):
        if augments is None:
            return _policies_for(descriptors, size)
        desc = descriptor_set(descriptors)
        return list(augments), desc, [describe(descriptors, r) for r in desc]
    desc = torch.as_tensor(descriptors, dtype=torch.float32)
    if desc.dim() != 2:
        raise ValueError(f"descriptors must be a set name or a [n, K] tensor, got shape {tuple(desc.shape)}")
    if augments is None:
        raise ValueError("explicit descriptor tensors need explicit augments (one policy per row)")
    return list(augments), desc, list(names) if names is not None else [str(r.tolist()) for r in desc]


class AmortisedMoCo(MoCoV2):
    """AI-MoCo (Chavhan et al.): a descriptor-conditioned encoder ``encoder(x, i)`` (Hyper-ResNet)
    trained with MoCo-v2, one descriptor sampled per batch, with that descriptor's augmentation
    policy, projection head and queue (so the negatives share the descriptor).

    ``descriptors``: 'groups' (K = 2: default, spatial, appearance), 'individual' (K = 5, 26
    descriptors) or an explicit [n, K] tensor with ``augments`` (one policy per row). Without
    ``augments`` the policies come from :mod:`invfast.transforms` at image size ``size``.
    """

    method_name = "ai-moco"

    def __init__(
        self,
        encoder: nn.Module,
        augments: Sequence[Augment] | None = None,
        *,
        descriptors: str | torch.Tensor = "groups",
        size: int = 224,
        descriptor_names: Sequence[str] | None = None,
        **kw,
    ) -> None:
        augs, desc, names = _resolve_descriptors(descriptors, augments, size, descriptor_names)
        super().__init__(encoder, augs, descriptors=desc, descriptor_names=names, **kw)


class AmortisedSimCLR(SimCLR):
    """AI-SimCLR: like :class:`AmortisedMoCo` with SimCLR's in-batch negatives (a head per descriptor)."""

    method_name = "ai-simclr"

    def __init__(
        self,
        encoder: nn.Module,
        augments: Sequence[Augment] | None = None,
        *,
        descriptors: str | torch.Tensor = "groups",
        size: int = 224,
        descriptor_names: Sequence[str] | None = None,
        **kw,
    ) -> None:
        augs, desc, names = _resolve_descriptors(descriptors, augments, size, descriptor_names)
        super().__init__(encoder, augs, descriptors=desc, descriptor_names=names, **kw)


METHODS = {"mocov2": MoCoV2, "simclr": SimCLR, "ai-moco": AmortisedMoCo, "ai-simclr": AmortisedSimCLR}
