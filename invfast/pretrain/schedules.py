"""The optimiser of the pretraining :class:`~invfast.pretrain.Trainer` and its learning-rate multipliers
(picklable, for ``LambdaLR``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["OPTIMIZERS", "build_optimizer", "CosineSchedule", "ConstantSchedule"]

#: TrainConfig.optimizer values: SGD with momentum (MoCo-v2's), Adam (Speicher et al.'s for every model)
OPTIMIZERS = ("sgd", "adam")


def build_optimizer(params: Iterable[torch.nn.Parameter], cfg: Any) -> torch.optim.Optimizer:
    """The optimiser a :class:`~invfast.pretrain.TrainConfig` asks for, at its base learning rate and with
    its weight decay (an L2 term in the gradient for both)."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.base_lr(), weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=cfg.base_lr(), momentum=cfg.sgd_momentum, weight_decay=cfg.weight_decay)


class CosineSchedule:
    """LR multiplier ``½(1 + cos(π·step/total))`` (picklable, for LambdaLR)."""

    def __init__(self, total: int) -> None:
        self.total = total

    def __call__(self, step: int) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * min(step, self.total) / self.total))


class ConstantSchedule:
    def __call__(self, step: int) -> float:
        return 1.0
