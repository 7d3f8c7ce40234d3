"""The optimiser of the pretraining :class:`~invfast.pretrain.Trainer` and its learning-rate multipliers
(picklable, for ``LambdaLR``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

__all__ = ["OPTIMIZERS", "build_optimizer", "CosineSchedule", "ConstantSchedule", "lr_multiplier"]

#: TrainConfig.optimizer values: SGD with momentum (MoCo-v2's), Adam (Speicher et al.'s for every model)
OPTIMIZERS = ("sgd", "adam")


def build_optimizer(params: Iterable[torch.nn.Parameter], cfg: Any) -> torch.optim.Optimizer:
    """The optimiser a :class:`~invfast.pretrain.TrainConfig` asks for, at its base learning rate and with
    its weight decay (an L2 term in the gradient for both)."""
    if cfg.optimizer == "adam":
        return torch.optim.Adam(params, lr=cfg.base_lr(), weight_decay=cfg.weight_decay)
    return torch.optim.SGD(params, lr=cfg.base_lr(), momentum=cfg.sgd_momentum, weight_decay=cfg.weight_decay)


class CosineSchedule:
    """LR multiplier ``½(1 + cos(π·s/S))`` after a linear warm-up (picklable, for LambdaLR).

    The first ``warmup`` steps ramp linearly, ``(step + 1) / warmup``, to the base rate; the cosine then decays
    over the remaining ``S = total - warmup`` steps, ``s = step - warmup`` (MoCo v3's and SimCLR's schedule;
    ``warmup = 0`` is MoCo-v2's plain cosine)."""

    def __init__(self, total: int, warmup: int = 0) -> None:
        if not 0 <= warmup < total:
            raise ValueError(f"the warm-up ({warmup} steps) must be shorter than the run ({total} steps)")
        self.total, self.warmup = total, warmup

    def __call__(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        span = self.total - self.warmup
        return 0.5 * (1.0 + math.cos(math.pi * min(step - self.warmup, span) / span))


class ConstantSchedule:
    """LR multiplier 1 after a linear warm-up of ``warmup`` steps (picklable, for LambdaLR)."""

    def __init__(self, warmup: int = 0) -> None:
        if warmup < 0:
            raise ValueError(f"the warm-up must be >= 0 steps, got {warmup}")
        self.warmup = warmup

    def __call__(self, step: int) -> float:
        return (step + 1) / self.warmup if step < self.warmup else 1.0


def lr_multiplier(schedule: str, total: int, warmup: int = 0) -> CosineSchedule | ConstantSchedule:
    """The LR multiplier of a :class:`~invfast.pretrain.TrainConfig` ``schedule`` ('cosine' or 'constant')
    over ``total`` steps with a ``warmup``-step linear ramp (shorter than the run, for either schedule)."""
    if not 0 <= warmup < total:
        raise ValueError(f"the warm-up ({warmup} steps) must be shorter than the run ({total} steps)")
    return CosineSchedule(total, warmup) if schedule == "cosine" else ConstantSchedule(warmup)
