"""Supervised pretraining through the same :class:`~invfast.pretrain.Trainer` as the contrastive
methods (checkpoints, exact resume, metrics): cross-entropy on labelled images.

Speicher et al. pretrain on the source task with labels before probing the target; the
``reproduce`` transfer stage trains that way. A labelled source returns ``(images, labels)`` from
``get``; :class:`Supervised` is the method that consumes it::

    method = Supervised(encoder, num_classes=10)                 # no augmentation beyond the data's
    Trainer(method, LabelledSource(images, labels), TrainConfig(batch_size=64, epochs=5, lr=0.05,
            weight_decay=5e-4, size=32), out="runs/sup").fit(resume=True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from invfast.data import ArraySource
from invfast.pretrain.methods import PretrainMethod, PretrainNetwork, _feature_dim

__all__ = ["LabelledSource", "Supervised"]


class LabelledSource:
    """Images with one class label each, held in memory.

    Args:
        images: uint8 (0..255) or float (0..1) RGB images ``[N, 3, H, W]`` or ``[N, H, W, 3]``.
        labels: integer class labels ``[N]`` in ``0 .. num_classes - 1``.
        spec: a name recorded in checkpoints (a resumed run must use the same).

    ``get(indices)`` returns ``(images uint8 [B, 3, H, W], labels int64 [B])``.
    """

    def __init__(self, images: Any, labels: Any, spec: str = "labelled-array") -> None:
        self.images = ArraySource(images, spec=spec)
        y = torch.as_tensor(np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels)
        if y.dim() != 1 or y.shape[0] != len(self.images):
            raise ValueError(f"labels must be one per image ([{len(self.images)}]), got shape {tuple(y.shape)}")
        if y.is_floating_point() or y.dtype == torch.bool:
            raise TypeError(f"labels must be integers (class indices), got {y.dtype}")
        y = y.long().cpu()
        if int(y.min()) < 0:
            raise ValueError(f"labels must be >= 0 (class indices), got {int(y.min())}")
        self.labels = y
        self.num_classes = int(y.max()) + 1
        self.spec = spec

    def __len__(self) -> int:
        return len(self.images)

    def get(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long).cpu()
        return self.images.get(idx), self.labels[idx]


class Classifier(PretrainNetwork):
    """Encoder followed by a linear classification head: ``forward(x, d=0) -> logits [B, classes]``."""

    def __init__(self, encoder: nn.Module, num_classes: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(_feature_dim(encoder), num_classes)

    def features(self, x: torch.Tensor, d: int = 0) -> torch.Tensor:
        return self.encoder(x)

    def forward(self, x: torch.Tensor, d: int = 0) -> torch.Tensor:  # noqa: D102
        return self.head(self.encoder(x))


def _identity_input(images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    from invfast.pretrain.invariance import to_input

    return to_input(images, images.shape[-1])


class Supervised(PretrainMethod):
    """Supervised pretraining: a linear head on the encoder, mean cross-entropy over the batch.

    Args:
        encoder: ``nn.Module`` mapping images to pooled features [B, feature_dim]; needs ``.feature_dim``.
        num_classes: number of classes of the labelled source.
        augment: None (the images as they are, ImageNet-normalised: no augmentation beyond the
            data's own transformations), or a policy with ``view(images, generator) -> [B, 3, S, S]``
            (e.g. ``invfast.transforms.policy('spatial', size=32)``) drawn once per step.
        label_smoothing: as ``torch.nn.functional.cross_entropy``.
    """

    method_name = "supervised"
    uses_labels = True

    def __init__(self, encoder: nn.Module, num_classes: int, augment: Any = None, label_smoothing: float = 0.0) -> None:
        super().__init__()
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ValueError(f"num_classes must be an int >= 2, got {num_classes!r}")
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        if augment is not None and not callable(getattr(augment, "view", None)):
            raise TypeError(
                "augment must be None or a policy with .view(images, generator) -> one view "
                "(e.g. invfast.transforms.policy('spatial', size=32))"
            )
        self.online = Classifier(encoder, num_classes)
        self.num_classes = num_classes
        self.label_smoothing = float(label_smoothing)
        self._augment = augment
        view: Callable[..., torch.Tensor] = _identity_input if augment is None else augment.view
        self.augments = [view]
        self.descriptor_names = ["supervised"]

    def make_views(self, batch: Any, d: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(input [B, 3, S, S], labels [B]) of a labelled batch ``(images uint8, labels)``."""
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise TypeError("Supervised trains on (images, labels) batches: use a LabelledSource")
        images, labels = batch
        return self.augments[0](images, generator=generator), labels.to(images.device)

    def training_loss(
        self,
        x: torch.Tensor,
        labels: torch.Tensor,
        d: int = 0,
        online: nn.Module | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Mean cross-entropy of the logits of ``x [B, 3, S, S]`` against ``labels [B]``."""
        online = self.online if online is None else online
        return F.cross_entropy(online(x, d), labels, label_smoothing=self.label_smoothing)

    @torch.no_grad()
    def accuracy(self, source: LabelledSource, batch: int = 256) -> float:
        """Accuracy of the classifier on every image of ``source``, un-augmented and in eval mode."""
        was = self.training
        self.eval()
        dev = next(self.parameters()).device
        hits = 0
        try:
            for s in range(0, len(source), batch):
                images, labels = source.get(torch.arange(s, min(len(source), s + batch)))
                logits = self.online(_identity_input(images.to(dev)))
                hits += int((logits.argmax(1).cpu() == labels).sum())
        finally:
            self.train(was)
        return hits / len(source)

    def config(self) -> dict:  # noqa: D102
        return {
            **super().config(),
            "num_classes": self.num_classes,
            "label_smoothing": self.label_smoothing,
            "augment": None if self._augment is None else repr(self._augment),
        }
