"""Pretraining: MoCo-v2, SimCLR, amortised invariance learning (AI-MoCo, AI-SimCLR) and supervised.

- losses as pure functions: :func:`infonce` (queue negatives), :func:`nt_xent` (in-batch negatives);
- MoCo machinery: :class:`KeyQueue`, :func:`momentum_update`, :func:`default_queue_size`;
- methods: :class:`MoCoV2`, :class:`SimCLR`, :class:`AmortisedMoCo`, :class:`AmortisedSimCLR` (over
  :class:`ContrastiveMethod`), and :class:`Supervised` (cross-entropy on a :class:`LabelledSource`),
  each a :class:`PretrainMethod`;
- :class:`Trainer` / :class:`TrainConfig`: CPU, one GPU or DDP over torchrun processes, atomic
  checkpoints with exact resume, JSON/CSV metrics, periodic invariance measurement and a periodic
  :class:`HeldoutProbe` (kNN / linear accuracy on labelled held-out images);
- image sources: those of :mod:`invfast.data` (:class:`~invfast.data.ArraySource`, ...), shared with
  measurement.

See docs/pretrain.md and ``invfast pretrain --help``.
"""

from invfast.pretrain.config import TrainConfig
from invfast.pretrain.data import open_training_source
from invfast.pretrain.descriptors import descriptor_set
from invfast.pretrain.heads import ProjectionHead
from invfast.pretrain.heldout_probe import HeldoutProbe, knn_accuracy
from invfast.pretrain.key_queue import KeyQueue, default_queue_size
from invfast.pretrain.losses import infonce, nt_xent
from invfast.pretrain.methods import (
    METHODS,
    AmortisedMoCo,
    AmortisedSimCLR,
    ContrastiveMethod,
    MoCoV2,
    PretrainMethod,
    SimCLR,
)
from invfast.pretrain.momentum import momentum_update
from invfast.pretrain.supervised import LabelledSource, Supervised
from invfast.pretrain.trainer import Trainer

__all__ = [
    "METHODS",
    "AmortisedMoCo",
    "AmortisedSimCLR",
    "ContrastiveMethod",
    "HeldoutProbe",
    "KeyQueue",
    "LabelledSource",
    "MoCoV2",
    "PretrainMethod",
    "ProjectionHead",
    "SimCLR",
    "Supervised",
    "TrainConfig",
    "Trainer",
    "default_queue_size",
    "descriptor_set",
    "infonce",
    "knn_accuracy",
    "momentum_update",
    "nt_xent",
    "open_training_source",
]
