"""The configuration of a pretraining run (:class:`TrainConfig`); the fields a resumed run may change are
those declared with :func:`~invfast.config_base.scheduling`."""

from __future__ import annotations

from dataclasses import dataclass

from invfast.config_base import Config, declare, scheduling
from invfast.pretrain import invariance as inv
from invfast.pretrain.schedules import OPTIMIZERS


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

    batch_size: int = declare(256, at_least=1, option="global batch size (over all processes)")
    epochs: int = 200
    steps: int | None = declare(
        None, at_least=1, optional=True, option="train this many steps instead (not with --epochs)"
    )
    lr: float | None = declare(None, above=0, optional=True, option="SGD learning rate (default 0.03*batch/256)")
    weight_decay: float = declare(1e-4, number=True, option="SGD weight decay")
    sgd_momentum: float = declare(0.9, number=True, at_most=1.0, option="SGD momentum")
    optimizer: str = declare("sgd", choices=OPTIMIZERS)
    schedule: str = declare(
        "cosine",
        choices=("cosine", "constant"),
        option="learning rate after the warm-up: cosine decay to 0 over the run, or constant",
    )
    # added after checkpoints were saved: a checkpoint without it resumes at 0 (its numbers of before)
    warmup_steps: int = declare(
        0,
        at_least=0,
        before=0,
        option="linear learning-rate warm-up over the first N steps, then the schedule (default 0: none)",
    )
    seed: int = 0
    size: int = 224
    checkpoint_every: int = declare(
        500,
        at_least=0,
        scheduling="how often the state is saved",
        option="steps between checkpoints (0: only at the end)",
    )
    log_every: int = declare(
        10, at_least=0, scheduling="how often the loss is logged", option="steps between two logged losses (0: none)"
    )
    progress: bool = scheduling("display only", True)
    invariance_every: int = declare(
        0,
        at_least=0,
        scheduling="a measurement beside training: it reads the weights only",
        option="measure the encoder's invariance on held-out images every N steps (0: never)",
    )
    invariance_images: int = declare(
        256, at_least=2, scheduling="the images of that measurement", option="held-out images of that measurement"
    )
    invariance_transforms: tuple[str, ...] = scheduling("the transforms of that measurement", inv.DEFAULT_TRANSFORMS)
    probe_every: int = declare(0, at_least=0, scheduling="a probe beside training: it reads the weights only")
    device: str = scheduling("where it runs; a resumed run may move", "auto")
    amp: bool = declare(False, flag=True, option="bfloat16 autocast for the forward passes (GPU)")
    channels_last: bool | None = declare(
        None, flag=True, optional=True, scheduling="memory layout: only the order of float sums changes"
    )

    def base_lr(self) -> float:
        return 0.03 * self.batch_size / 256 if self.lr is None else float(self.lr)

    def validate(self) -> None:
        if self.epochs < 1 and self.steps is None:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")
