"""Learning-rate multipliers of the pretraining :class:`~invfast.pretrain.Trainer` (picklable, for ``LambdaLR``)."""

from __future__ import annotations

import math

__all__ = ["CosineSchedule", "ConstantSchedule"]


class CosineSchedule:
    """LR multiplier ``½(1 + cos(π·step/total))`` (picklable, for LambdaLR)."""

    def __init__(self, total: int) -> None:
        self.total = total

    def __call__(self, step: int) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * min(step, self.total) / self.total))


class ConstantSchedule:
    def __call__(self, step: int) -> float:
        return 1.0
