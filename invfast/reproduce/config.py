"""Configuration of ``invfast reproduce``: :class:`ReproduceConfig` (its presets are in
:mod:`invfast.reproduce.presets`; the on-disk format and the folder claim in :mod:`invfast.reproduce.folders`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from invfast.config_base import Config, declare

__all__ = [
    "ReproduceConfig",
    "DEFAULT_FINDINGS",
    "Removed",
    "REMOVED_FIELDS",
]


#: the findings a run tests unless told otherwise (``--findings`` / ``--paper``): those of the earlier
#: releases, within the quick preset's 15 minutes
DEFAULT_FINDINGS = ("E1", "E2", "E3", "S8", "C1", "C3")
#: Speicher et al.'s transformation categories of "Invariance makes a difference" §4.3 (colour jitter as
#: hue, brightness and contrast together)
CATEGORIES = ("translate", "rotate", "scale", "hflip", "vflip", "hue+brightness+contrast", "blur", "sharpen")


@dataclass(frozen=True)
class Removed:
    """A config field that no longer exists: what replaces it (``instead``, said to a ``--set`` of it), and
    ``only``, the one value it could hold (None: it had several): a folder that recorded it at that value
    resumes (its numbers are those of today's configuration without it); at any other value it cannot."""

    instead: str
    only: Any = None

    def message(self, name: str) -> str:
        """The one line that refuses a value given for the removed field ``name``."""
        return f"config field {name!r} was removed; {self.instead}"


#: removed fields, by name
REMOVED_FIELDS = {
    "amortised": Removed("the amortised model runs when a C finding is selected: --findings C1,C3 or --paper chavhan"),
    "policies": Removed(
        "the findings compare exactly Default, Spatial and Appearance, the only value it accepted",
        ["default", "spatial", "appearance"],
    ),
}


#: the largest learning rate a run accepts: SGD and Adam diverge far below it, and a larger value is a typo
MAX_LR = 10.0


@dataclass(frozen=True)
class ReproduceConfig(Config):
    """Everything that determines the numbers of a reproduce run (recorded in ``config.json``). Frozen;
    validated when made. A folder resumes under other values of the fields declared with
    :func:`~invfast.config_base.scheduling` (``workers``, ``findings``).

    Sizes are numbers of images; epochs are passes over the pretraining images; images are
    ``size`` x ``size`` pixels. Seeds of every stage derive from ``seed``.
    """

    value_prefix = "config field "

    preset: str = "quick"
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
    size: int = declare(32, at_least=16, at_most=1_024)
    # main data: Transforms-2D objects under transformations of both families
    objects: int = declare(10, at_least=1, at_most=100_000)
    # 'silhouettes': distinct built-in shapes all drawn in one colour, so only the outline tells them
    # apart (with their own colours a colour histogram identified the objects: docs/reproduce.md);
    # 'shared-palette': the built-in objects recoloured onto one shared colour pair (shape and texture
    # tell them apart); 'builtin': the built-in objects with their own colours and textures
    object_style: str = declare("silhouettes", choices=("silhouettes", "shared-palette", "builtin"))
    # 'builtin' style: only shapes without rotational symmetry (heart, crescent, arrow, ell, blob, tee),
    # so their rotation can be read off the image at all (silhouettes: the rotation set uses those)
    asymmetric_objects: bool = declare(True, flag=True)
    data_transforms: tuple[str, ...] = ("translate", "rotate", "scale", "hue")
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
    # E2's kernel-ridge probes (BMVC Tab. 4) fit on the first kernel_probe_n images of each probe set (0: all);
    # SPEC 5.2 asks for at least 1 000
    kernel_probe_n: int = declare(0, before=0)
    n_measure: int = declare(96, at_least=1, at_most=10_000_000)
    # models and MoCo-v2 pretraining
    arch: str = "resnet18-cifar"
    width: int = declare(16, at_least=1, at_most=1_024)
    pretrain_epochs: int = declare(20, at_least=1, at_most=100_000)
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
    # MoCo key queue; 0: invfast.pretrain.default_queue_size (an eighth of n_pretrain, at least a batch)
    queue_size: int = 0
    # learning curves: every curve_every epochs (and before the first step) each pretraining run probes
    # object identity (kNN and linear) on the first curve_images probe images (0: no curves)
    curve_every: int = declare(2, at_least=0)
    curve_images: int = declare(400, at_least=1)
    # invariance measurement
    test_transforms: str = "all"
    grid_size: int = declare(6, at_least=1, at_most=1_024)
    # the grids given in pixels for 224-px images (translation, blur σ, deform σ) scaled by size / 224
    scale_grids: bool = declare(True, flag=True, before=False)
    # probes (Ericsson et al. 2021, App. E: 45 penalties; logistic L-BFGS iterations per penalty value)
    folds: int = declare(5, at_least=2)
    n_penalties: int = declare(23, at_least=1, at_most=10_000)
    logistic_max_iter: int = declare(60, at_least=1, at_most=1_000_000)
    # same-vs-different transfer (Speicher): supervised pretraining on a source, linear probe on the target
    transfer_objects: int = declare(10, at_least=1)
    transfer_transforms: int = declare(3, at_least=1)
    transfer_n_source: int = declare(1200, at_least=1)
    transfer_n_target: int = declare(500, at_least=1)
    transfer_epochs: int = declare(5, at_least=1, at_most=100_000)
    # S1 / S8 (and the transfer models they reuse): train each model until its own-data accuracy reaches the rules'
    # 0.9 (checked after every epoch), at most criterion_epochs epochs (a smaller S1 source proportionally more);
    # 0: transfer_epochs epochs whatever they reach, as before 0.6
    criterion_epochs: int = declare(30, at_least=0, at_most=100_000, before=0)
    # amortised model (C1, C2, C3, C6); C6 times cost_epochs whole epochs of each model, the models taking turns
    # epoch by epoch (0: cost_steps steps once, as before 0.6: no per-epoch times, so C6 is not testable)
    amortised_epochs: int = declare(10, at_least=1, at_most=100_000)
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
    # C7 (Chavhan et al. Tab. 3): the transformers, plain ViTs for the three policies and a Prompt-ViT for the
    # amortised model, all of one shape (vit_patch-px patches, vit_dim wide, vit_depth pre-norm blocks of
    # vit_heads heads, MLP ratio 2), each trained vit_epochs epochs with Adam at vit_lr (MoCo's SGD at lr 0.03
    # left them at chance: docs/reproduce.md)
    vit_patch: int = declare(8, at_least=1, at_most=1_024, before=8)
    vit_dim: int = declare(64, at_least=1, at_most=4_096, before=64)
    vit_depth: int = declare(4, at_least=1, at_most=64, before=4)
    vit_heads: int = declare(4, at_least=1, at_most=64, before=4)
    vit_epochs: int = declare(30, at_least=1, at_most=100_000, before=30)
    vit_lr: float = declare(3e-3, above=0, at_most=MAX_LR, before=0.003)
    # C7's Prompt-ViT starts from the trained Default ViT (its prompt network from its initialisation), as Chavhan
    # et al. warm-start theirs from a pretrained ViT; from scratch it learned to ignore its prompt
    vit_warm_start: bool = declare(True, flag=True, before=False)
    # which findings (ids of docs/findings.md) run: their stages and report sections (see invfast.reproduce.findings)
    findings: tuple[str, ...] = declare(
        DEFAULT_FINDINGS, scheduling="a stage's numbers do not depend on which others run"
    )
    # Speicher et al.'s supervised experiments: models trained on transfer_n_source images for
    # transfer_epochs epochs, probed on transfer_n_target images. S8: nested transformation sets of these
    # sizes, the first k of (the target's types, then the disjoint set's); S1: the factor values
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
    # E4 / E5: each pretraining snapshot measured on this many measurement images at grid min(grid_size, this)
    snapshot_images: int = declare(96, at_least=1)
    snapshot_grid: int = declare(4, at_least=1, at_most=1_024)

    def validate(self) -> None:
        """Raise ValueError naming a field whose value cannot work (the first one, in field groups)."""
        self._validate_counts()
        self._validate_device()
        self._validate_sizes()
        self._validate_measurements()
        self._validate_training()
        self._validate_data()
        self._validate_findings()
        from invfast.models import ARCHITECTURES
        from invfast.reproduce.validation import validate_speicher

        validate_speicher(self, ARCHITECTURES)

    def _validate_counts(self) -> None:
        """The seed range (every count is checked by its declaration)."""
        if (
            not isinstance(self.seed, int)
            or isinstance(self.seed, bool)
            or not 0 <= self.seed <= 2**31 - 1 - self.seeds
        ):
            raise ValueError(
                f"config field seed must be an int in [0, {2**31 - 1 - self.seeds}] (seeds seed..seed+"
                f"{self.seeds - 1} are used), got {self.seed!r}"
            )

    def _validate_device(self) -> None:
        """The device, and workers (CPU processes) only on the CPU."""
        if self.device not in ("cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        if self.workers > 1 and self.device != "cpu":
            raise ValueError(
                f"workers > 1 runs stages in parallel CPU processes; device {self.device!r} needs workers=1"
            )

    def _validate_sizes(self) -> None:
        """Sizes that must fit each other: images per fold and class, batches, grids."""
        if min(self.grid_size, self.snapshot_grid) < 2:
            raise ValueError(
                f"grid_size and snapshot_grid must be >= 2 (a grid of 1 holds only the identity parameter), got "
                f"{self.grid_size}, {self.snapshot_grid}"
            )
        if self.n_probe < self.folds * self.objects:
            raise ValueError(
                f"n_probe ({self.n_probe}) must hold at least folds x objects = "
                f"{self.folds * self.objects} images (stratified folds need every class in every fold)"
            )
        if self.transfer_n_target < self.folds * self.transfer_objects:
            raise ValueError(
                f"transfer_n_target ({self.transfer_n_target}) must be >= folds x transfer_objects = "
                f"{self.folds * self.transfer_objects}"
            )
        if self.transfer_objects < 3:
            raise ValueError(
                f"transfer_objects must be >= 3 (S1's subset of the target objects needs two and is smaller), "
                f"got {self.transfer_objects}"
            )
        if 2 * self.transfer_objects > 61:
            raise ValueError(
                f"transfer_objects must be <= 30 (two disjoint sets from 61 built-in objects), "
                f"got {self.transfer_objects}"
            )
        if 2 * self.transfer_transforms > 18:
            raise ValueError(
                f"transfer_transforms must be <= 9 (two disjoint sets of the 18 types), got {self.transfer_transforms}"
            )
        if self.size % self.vit_patch or self.vit_dim % self.vit_heads:
            raise ValueError(
                f"vit_patch ({self.vit_patch}) must divide size ({self.size}) and vit_heads ({self.vit_heads}) must "
                f"divide vit_dim ({self.vit_dim})"
            )
        if self.n_pretrain < 2 * self.batch_size:
            raise ValueError(
                f"n_pretrain ({self.n_pretrain}) must be >= 2 x batch_size ({self.batch_size}) "
                "(a MoCo queue needs two batches)"
            )
        if self.transfer_n_source < self.batch_size:
            raise ValueError(f"transfer_n_source ({self.transfer_n_source}) must be >= batch_size ({self.batch_size})")

    def _validate_measurements(self) -> None:
        """The sizes of the measurements some findings add: E2's kernel-probe images, C4's few-shot images."""
        if (
            not isinstance(self.kernel_probe_n, int)
            or isinstance(self.kernel_probe_n, bool)
            or not (self.kernel_probe_n == 0 or self.folds * 2 <= self.kernel_probe_n <= self.n_probe)
        ):
            raise ValueError(
                f"kernel_probe_n must be 0 (all probe images) or an int in [2 x folds, n_probe] = "
                f"[{self.folds * 2}, {self.n_probe}], got {self.kernel_probe_n!r}"
            )
        fn = self.fewshot_n
        if not isinstance(fn, int) or isinstance(fn, bool) or not (fn == 0 or 60 <= fn <= self.n_probe):
            raise ValueError(
                f"fewshot_n must be 0 (all probe images) or an int in [60, n_probe] = [60, {self.n_probe}] (a 0.05 "
                f"train fraction needs 3 images), got {fn!r}"
            )

    def _validate_training(self) -> None:
        """Learning curves, the MoCo queue and the warm-up."""
        if self.curve_every and min(self.curve_images, self.n_probe) < 4 * self.objects:
            raise ValueError(
                f"curve_images ({self.curve_images}, at most n_probe = {self.n_probe}) must hold at least "
                f"4 x objects = {4 * self.objects} images (each class is fitted and scored)"
            )
        if (
            not isinstance(self.queue_size, int)
            or isinstance(self.queue_size, bool)
            or self.queue_size < 0
            or self.queue_size % self.batch_size
        ):
            raise ValueError(
                f"config field queue_size must be 0 (the default size) or a positive multiple of batch_size "
                f"({self.batch_size}), got {self.queue_size!r}"
            )
        if not isinstance(self.warmup, (int, float)) or isinstance(self.warmup, bool) or not 0 <= self.warmup < 1:
            raise ValueError(
                f"config field warmup must be a fraction of each pretraining run's steps in [0, 1), got {self.warmup!r}"
            )

    def _validate_data(self) -> None:
        """Backgrounds, objects, Transforms-2D types and the architecture."""
        background_count(self.backgrounds)
        if self.fresh_backgrounds and self.backgrounds != "uniform-random":
            raise ValueError(
                "fresh_backgrounds draws each view's background as uniform noise, which the probe and "
                f"measurement images share only with backgrounds='uniform-random', got {self.backgrounds!r} "
                "(with a bank of backgrounds, set fresh_backgrounds=false)"
            )
        if self.object_style == "silhouettes" and self.objects > 18:
            raise ValueError(
                f"object_style 'silhouettes' has 18 distinct shapes, got objects={self.objects}; "
                "use fewer objects or object_style=builtin"
            )
        from invfast.synthetic import TRANSFORMATION_TYPES as TRANSFORMATIONS

        bad = [t for t in self.data_transforms if t not in TRANSFORMATIONS]
        if bad:
            raise ValueError(f"data_transforms {bad} are not Transforms-2D types ({', '.join(TRANSFORMATIONS)})")
        needed = {"translate", "rotate", "hue"}
        if not needed <= set(self.data_transforms):
            raise ValueError(
                f"data_transforms must include {sorted(needed)}: the probe tasks regress position, "
                "rotation and colour, which only vary under these types"
            )
        from invfast.models import ARCHITECTURES

        if self.arch not in ARCHITECTURES or self.arch.startswith(("hyper-", "prompt")):
            raise ValueError(f"arch must be a plain ResNet name from {ARCHITECTURES}, got {self.arch!r}")

    def _validate_findings(self) -> None:
        """The selection's shape (its ids are checked by :mod:`invfast.reproduce.findings` when a run starts)."""
        if isinstance(self.findings, str) or not isinstance(self.findings, tuple) or not self.findings:
            raise ValueError(
                f"findings must be a non-empty tuple of finding ids such as ('S2', 'S3'), got {self.findings!r}"
            )
        from invfast.reproduce.validation import validate_test_transforms

        validate_test_transforms(self)

    def moco_queue_size(self) -> int:
        """The MoCo key queue of the pretraining runs: ``queue_size``, or the library default for the data."""
        from invfast.pretrain import default_queue_size

        return self.queue_size or default_queue_size(self.n_pretrain, self.batch_size)

    def main_backgrounds(self) -> Any:
        """The main data's ``backgrounds`` argument of :class:`invfast.synthetic.Transforms2D`."""
        n = background_count(self.backgrounds)
        if n is None:
            return self.backgrounds if self.backgrounds == "uniform-random" else None
        from invfast.synthetic import builtin_backgrounds

        procedural = self.backgrounds.startswith("procedural:")
        return builtin_backgrounds(n, self.size, procedural_fraction=1.0 if procedural else 0.25)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @staticmethod
    def removed_at() -> dict[str, Any]:
        """The removed fields that had one value, at it: a folder that recorded one of them there resumes."""
        return {k: r.only for k, r in REMOVED_FIELDS.items() if r.only is not None}

    def claim_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` without the scheduling fields: what a folder's ``config.json`` must match to resume."""
        from invfast.io import without_added_defaults

        skip = self.scheduling_fields()
        return without_added_defaults({k: v for k, v in self.to_dict().items() if k not in skip}, self.added_fields())


def background_count(spec: str) -> int | None:
    """Number of built-in backgrounds named by a ``backgrounds`` value ('builtin:N' and
    'procedural:N' -> N; None for 'builtin' (all) and 'uniform-random'); ValueError for anything else."""
    if spec in ("builtin", "uniform-random"):
        return None
    head, _, count = str(spec).partition(":")
    if head in ("builtin", "procedural") and count.isdigit() and 1 <= int(count) <= 867:
        return int(count)
    raise ValueError(
        f"backgrounds must be 'procedural:N', 'builtin:N' (1 <= N <= 867), 'builtin' or 'uniform-random', got {spec!r}"
    )
