"""The sections of :class:`~invfast.reproduce.config.ReproduceConfig`, one frozen config each: where a run runs
(:class:`RunSettings`), its data, MoCo-v2 pretraining, the invariance measurement, the probes, Speicher et al.'s
and Chavhan et al.'s experiments and C7's transformers. A field is ``section.field`` (``pretrain.epochs``) in
``--set``, the presets, ``config.json`` and every error.

Sizes are numbers of images; epochs are passes over the training images; images are ``data.size`` x
``data.size`` pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

from invfast.config_base import Config, declare

__all__ = [
    "RunSettings",
    "DataSettings",
    "PretrainSettings",
    "MeasurementSettings",
    "ProbeSettings",
    "SpeicherSettings",
    "ChavhanSettings",
    "VitSettings",
    "DEFAULT_FINDINGS",
    "CATEGORIES",
    "MAX_LR",
]

#: the findings a run tests unless told otherwise (``--findings`` / ``--paper``): those of the earlier
#: releases, within the quick preset's 15 minutes
DEFAULT_FINDINGS = ("E1", "E2", "E3", "S8", "C1", "C3")
#: Speicher et al.'s transformation categories of "Invariance makes a difference" §4.3 (colour jitter as
#: hue, brightness and contrast together)
CATEGORIES = ("translate", "rotate", "scale", "hflip", "vflip", "hue+brightness+contrast", "blur", "sharpen")
#: the largest learning rate a run accepts: SGD and Adam diverge far below it, and a larger value is a typo
MAX_LR = 10.0


@dataclass(frozen=True)
class RunSettings(Config):
    """Which run: the preset, the seeds, the findings, where and how parallel (``run.*``)."""

    value_prefix = "config field run."

    preset: str = "quick"
    # seeds of every stage derive from seed
    seed: int = 0
    # a finding counts as reproduced only when it holds for every one of ``seeds`` master seeds
    # (seed, seed + 1, ...); tables and figures show the first
    seeds: int = declare(3, at_least=1, at_most=100)
    # torch CPU threads while running: float sums depend on how work is split, so a fixed count
    # makes the same machine give identical numbers (recorded with the config)
    threads: int = declare(2, at_least=1, at_most=1_024)
    # stages run in this many processes at once (each with ``threads`` torch threads), stages of all seeds
    # in an order that respects their needs (CPU only)
    workers: int = declare(
        1, at_least=1, at_most=256, scheduling="each stage's numbers do not depend on how many run at once"
    )
    # where models train and run: 'cpu' or 'cuda' (the gpu preset)
    device: str = "cpu"
    # which findings (ids of docs/findings.md) run: their stages and report sections (see invfast.reproduce.findings)
    findings: tuple[str, ...] = declare(
        DEFAULT_FINDINGS, scheduling="a stage's numbers do not depend on which others run"
    )


@dataclass(frozen=True)
class DataSettings(Config):
    """The main data: Transforms-2D objects under transformations of both families (``data.*``)."""

    value_prefix = "config field data."

    size: int = declare(32, at_least=16, at_most=1_024)
    objects: int = declare(10, at_least=1, at_most=100_000)
    # 'silhouettes': distinct built-in shapes all drawn in one colour, so only the outline tells them
    # apart (with their own colours a colour histogram identified the objects: docs/reproduce.md);
    # 'shared-palette': the built-in objects recoloured onto one shared colour pair (shape and texture
    # tell them apart); 'builtin': the built-in objects with their own colours and textures
    object_style: str = declare("silhouettes", choices=("silhouettes", "shared-palette", "builtin"))
    # 'builtin' style: only shapes without rotational symmetry (heart, crescent, arrow, ell, blob, tee),
    # so their rotation can be read off the image at all (silhouettes: the rotation set uses those)
    asymmetric_objects: bool = declare(True, flag=True)
    # the Transforms-2D types the main data varies under
    transforms: tuple[str, ...] = ("translate", "rotate", "scale", "hue")
    # the main data's backgrounds: 'uniform-random' (fresh uniform pixel noise behind every image),
    # 'procedural:N' (N built-in procedural textures), 'builtin:N' (N of the built-in photo crops and
    # textures) or 'builtin' (all 867). MoCo learns what two views of an image share and other images
    # lack: with hundreds of backgrounds that is the background alone, and even with 8 shared textures
    # no policy learned the object's identity at this scale. Noise keeps nothing a crop or a colour
    # change leaves alike, so the object is what the views share (docs/reproduce.md).
    backgrounds: str = "uniform-random"
    # each pretraining view composites the object over its own fresh noise background, so a pair of views
    # shares the object and nothing else (without a crop, as in Appearance, the shared noise identifies the
    # image: docs/reproduce.md, What the models tell images apart by); probe and measurement images keep theirs
    fresh_backgrounds: bool = declare(True, flag=True, before=False)
    n_pretrain: int = declare(2048, at_least=1, at_most=10_000_000)
    # probe images per task: 3 000 keep the identity probe's noise below the 1.2x learning line on seeds
    # nobody tuned on (1 000 did not: docs/reproduce.md, The probe's own noise)
    n_probe: int = declare(3000, at_least=1, at_most=10_000_000)
    n_measure: int = declare(96, at_least=1, at_most=10_000_000)


@dataclass(frozen=True)
class PretrainSettings(Config):
    """The models and their MoCo-v2 pretraining, one run per policy (``pretrain.*``)."""

    value_prefix = "config field pretrain."

    arch: str = "resnet18-cifar"
    width: int = declare(16, at_least=1, at_most=1_024)
    epochs: int = declare(20, at_least=1, at_most=100_000)
    # batch 64 (640 steps in 20 epochs): the settings of the background experiment in docs/reproduce.md
    batch_size: int = declare(64, at_least=1, at_most=65_536)
    lr: float = declare(0.03, above=0, at_most=MAX_LR)
    key_momentum: float = declare(0.99, number=True, at_most=1.0)
    proj_dim: int = 64
    # the contrastive models' projection heads: 'none' (MoCo-v2's MLP) or 'bn' (batch-normalised, MoCo v3's;
    # invfast.pretrain.heads.ProjectionHead)
    head_norm: str = declare("none", choices=("none", "bn"), before="none")
    # linear learning-rate warm-up of every pretraining run (policies and amortised), as a fraction of the
    # run's steps, before the cosine decay; 0: none (MoCo-v2's schedule)
    warmup: float = declare(0.0, before=0.0)
    # MoCo key queue; 0: invfast.pretrain.default_queue_size (an eighth of data.n_pretrain, at least a batch)
    queue_size: int = 0
    # learning curves: every curve_every epochs (and before the first step) each pretraining run probes
    # object identity (kNN and linear) on the first curve_images probe images (0: no curves)
    curve_every: int = declare(2, at_least=0)
    curve_images: int = declare(400, at_least=1)


@dataclass(frozen=True)
class MeasurementSettings(Config):
    """The invariance measurement of every model (``measurement.*``)."""

    value_prefix = "config field measurement."

    # the test transforms measured ('all', a family or names; invfast.measure.selection)
    transforms: str = "all"
    grid_size: int = declare(6, at_least=1, at_most=1_024)
    # the grids given in pixels for 224-px images (translation, blur σ, deform σ) scaled by size / 224
    scale_grids: bool = declare(True, flag=True, before=False)
    # E4 / E5: each pretraining snapshot measured on this many measurement images at grid min(grid_size, this)
    snapshot_images: int = declare(96, at_least=1)
    snapshot_grid: int = declare(4, at_least=1, at_most=1_024)


@dataclass(frozen=True)
class ProbeSettings(Config):
    """The probes (Ericsson et al. 2021, App. E: 45 penalties; logistic L-BFGS iterations per penalty value)
    (``probe.*``)."""

    value_prefix = "config field probe."

    folds: int = declare(5, at_least=2)
    n_penalties: int = declare(23, at_least=1, at_most=10_000)
    logistic_max_iter: int = declare(60, at_least=1, at_most=1_000_000)
    # E2's kernel-ridge probes (BMVC Tab. 4) fit on the first kernel_n images of each probe set (0: all);
    # SPEC 5.2 asks for at least 1 000
    kernel_n: int = declare(0, before=0)


@dataclass(frozen=True)
class SpeicherSettings(Config):
    """Speicher et al.'s supervised experiments, S1-S8 (``speicher.*``): models trained on transfer_n_source
    images for transfer_epochs epochs, probed on transfer_n_target images."""

    value_prefix = "config field speicher."

    # same-vs-different transfer: supervised pretraining on a source, linear probe on the target
    transfer_objects: int = declare(10, at_least=1)
    transfer_transforms: int = declare(3, at_least=1)
    transfer_n_source: int = declare(1200, at_least=1)
    transfer_n_target: int = declare(500, at_least=1)
    transfer_epochs: int = declare(5, at_least=1, at_most=100_000)
    # S1 / S8 (and the transfer models they reuse): train each model until its own-data accuracy reaches the rules'
    # 0.9 (checked after every epoch), at most criterion_epochs epochs (a smaller S1 source proportionally more);
    # 0: transfer_epochs epochs whatever they reach, as before 0.6
    criterion_epochs: int = declare(30, at_least=0, at_most=100_000, before=0)
    # S8: nested transformation sets of these sizes, the first k of (the target's types, then the disjoint
    # set's); S1: the factor values
    nested_sizes: tuple[int, ...] = (1, 2, 3, 6)
    s1_sizes: tuple[float, ...] = (0.25, 0.5, 1.0)
    s1_archs: tuple[str, ...] = ("resnet18-cifar", "resnet34-cifar", "vgg11-cifar", "vit")
    # S5: objects per group (O1 from the source objects, O2 from the target objects)
    s5_objects: int = declare(5, at_least=1)
    # S3 / S4: base images ('builtin': the shipped photographs cut into classes; 'folder:PATH': an
    # ImageFolder such as CIFAR-10's), images per training set, correlation and availability sweeps
    base_images: str = "builtin"
    irrelevant_n: int = declare(1000, at_least=1)
    alphas: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 0.85, 0.9, 0.95, 1.0)
    betas: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    # S6 / S7: one model per transformation category (types joined by '+'), on category_objects objects
    categories: tuple[str, ...] = CATEGORIES
    category_objects: int = declare(10, at_least=1)
    category_n: int = declare(1000, at_least=1)
    # S3 / S7: pairs of views per sensitivity (S3 and S7 need >= 2 000, rules.speicher.MIN_PAIRS)
    sensitivity_n: int = declare(2000, at_least=1)
    # S7 alone: pairs per category and OOD level (0: sensitivity_n); S7 forwards every model over
    # 2 x pairs x categories x levels x 2 kinds of views, so quick keeps it small
    category_sensitivity_n: int = declare(0, before=0)


@dataclass(frozen=True)
class ChavhanSettings(Config):
    """Chavhan et al.'s amortised model, C1-C6 (``chavhan.*``)."""

    value_prefix = "config field chavhan."

    amortised_epochs: int = declare(10, at_least=1, at_most=100_000)
    # C6 times cost_epochs whole epochs of each model, the models taking turns epoch by epoch (0: cost_steps
    # steps once, as before 0.6: no per-epoch times, so C6 is not testable)
    cost_steps: int = declare(10, at_least=1)
    cost_epochs: int = declare(5, at_least=0, at_most=1_000, before=0)
    # C4: few-shot identity episodes and few-shot regression splits per model, drawn from the first fewshot_n images
    # of each task's probe set (0: all); the amortised model learns its i once per episode, so they set C4's cost
    fewshot_episodes: int = declare(300, at_least=1)
    fewshot_splits: int = declare(30, at_least=1)
    fewshot_n: int = declare(0, before=0)
    interp_points: int = declare(5, at_least=1)
    ip_epochs: int = declare(10, at_least=1, at_most=100_000)
    # C3: restarts of the learned i per task, each also scored with i fixed at (0.5, 0.5) (1: one fit, as before 0.6)
    ip_restarts: int = declare(5, at_least=1, at_most=1_000, before=1)
    ip_n: int = declare(600, at_least=10)


@dataclass(frozen=True)
class VitSettings(Config):
    """C7's transformers (Chavhan et al. Tab. 3) (``vit.*``): plain ViTs for the three policies and a Prompt-ViT
    for the amortised model, all of one shape (patch-px patches, dim wide, depth pre-norm blocks of heads heads,
    MLP ratio 2), each trained epochs epochs with Adam at lr (MoCo's SGD at lr 0.03 left them at chance:
    docs/reproduce.md)."""

    value_prefix = "config field vit."

    patch: int = declare(8, at_least=1, at_most=1_024, before=8)
    dim: int = declare(64, at_least=1, at_most=4_096, before=64)
    depth: int = declare(4, at_least=1, at_most=64, before=4)
    heads: int = declare(4, at_least=1, at_most=64, before=4)
    epochs: int = declare(30, at_least=1, at_most=100_000, before=30)
    lr: float = declare(3e-3, above=0, at_most=MAX_LR, before=0.003)
    # the Prompt-ViT starts from the trained Default ViT (its prompt network from its initialisation), as Chavhan
    # et al. warm-start theirs from a pretrained ViT; from scratch it learned to ignore its prompt
    warm_start: bool = declare(True, flag=True, before=False)
