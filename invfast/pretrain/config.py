"""The configuration of a pretraining run (:class:`TrainConfig`); the fields a resumed run may change are
those declared with :func:`~invfast.config_base.scheduling`."""

from __future__ import annotations

from dataclasses import dataclass

from invfast.config_base import Config, scheduling
from invfast.pretrain import invariance as inv
from invfast.pretrain.schedules import OPTIMIZERS

#: TrainConfig fields added after checkpoints were saved, at the value that gives the numbers of before they
#: existed: a checkpoint without one resumes under that value (and only under it)
ADDED_FIELDS = {"warmup_steps": 0}


@dataclass(frozen=True)
class TrainConfig(Config):
    """Optimisation and bookkeeping of a pretraining run (MoCo-v2 defaults). Frozen; validated when made.

    batch_size is the GLOBAL batch (split evenly over processes). lr None means 0.03·batch_size/256
    (MoCo-v2's linear scaling). schedule 'cosine' decays the LR per step to 0 over the run, 'constant'
    keeps it; both after ``warmup_steps`` steps of linear ramp from ``lr / warmup_steps`` (0: none, as
    MoCo-v2); optimizer 'sgd' (with ``sgd_momentum``) or 'adam'.
    steps overrides epochs when set. size is the
    side of the views the policies produce (used to preprocess the held-out batch). amp runs the
    forward passes under bfloat16 autocast (for GPUs; parameters and optimiser stay float32).
    device is 'auto' (CUDA when available, GPU ``LOCAL_RANK``; else the CPU), 'cpu', 'cuda' or 'cuda:N';
    the Trainer's ``device=`` argument overrides it. probe_every: steps between runs of the Trainer's
    ``probe`` (a :class:`~invfast.pretrain.HeldoutProbe`; also before the first step and at the end),
    0 never. channels_last stores the networks' 4-D weights and the views channels-last (NHWC) while
    training; None means on the CPU, where oneDNN's convolutions run a ResNet-18-CIFAR MoCo step
    faster that way (``benchmarks/bench_pretrain.py``, docs/performance.md), and off elsewhere (not measured).
    Only the order of float sums changes; saved weights are written contiguous.
    """

    batch_size: int = 256
    epochs: int = 200
    steps: int | None = None
    lr: float | None = None
    weight_decay: float = 1e-4
    sgd_momentum: float = 0.9
    optimizer: str = "sgd"
    schedule: str = "cosine"
    warmup_steps: int = 0
    seed: int = 0
    size: int = 224
    checkpoint_every: int = scheduling("how often the state is saved", 500)
    log_every: int = scheduling("how often the loss is logged", 10)
    progress: bool = scheduling("display only", True)
    invariance_every: int = scheduling("a measurement beside training: it reads the weights only", 0)
    invariance_images: int = scheduling("the images of that measurement", 256)
    invariance_transforms: tuple[str, ...] = scheduling("the transforms of that measurement", inv.DEFAULT_TRANSFORMS)
    probe_every: int = scheduling("a probe beside training: it reads the weights only", 0)
    device: str = scheduling("where it runs; a resumed run may move", "auto")
    amp: bool = False
    channels_last: bool | None = scheduling("memory layout: only the order of float sums changes", None)

    def base_lr(self) -> float:
        return 0.03 * self.batch_size / 256 if self.lr is None else float(self.lr)

    def validate(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.epochs < 1 and self.steps is None:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(f"schedule must be 'cosine' or 'constant', got {self.schedule!r}")
        for name in ("warmup_steps", "checkpoint_every", "log_every", "invariance_every", "probe_every"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.channels_last not in (None, True, False):
            raise ValueError(f"channels_last must be None, True or False, got {self.channels_last!r}")
        if self.base_lr() <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
