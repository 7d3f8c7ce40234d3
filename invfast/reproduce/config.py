"""Configuration of ``invfast reproduce``: :class:`ReproduceConfig`, made of the sections of
:mod:`invfast.reproduce.config_sections` (its presets are in :mod:`invfast.reproduce.presets`; the on-disk format
and the folder claim in :mod:`invfast.reproduce.folders`).

A field is named ``section.field`` (``pretrain.epochs``) wherever a user meets it: ``--set``, the presets,
``config.json`` and the errors. The flat names of 0.4 (``pretrain_epochs``) are refused naming the new
one (:data:`FLAT_NAMES`), and a folder that recorded them resumes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from invfast.config_base import Config
from invfast.reproduce.config_sections import (
    ChavhanSettings,
    DataSettings,
    MeasurementSettings,
    PretrainSettings,
    ProbeSettings,
    RunSettings,
    SpeicherSettings,
    VitSettings,
)

__all__ = [
    "ReproduceConfig",
    "FLAT_NAMES",
    "Removed",
    "REMOVED_FIELDS",
    "background_count",
]


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

#: every field's flat name of before the sections (format ``invfast.reproduce/3``), to its name now: a flat name is
#: refused naming its section's, and a folder that recorded the flat names resumes
FLAT_NAMES: dict[str, str] = {
    "preset": "run.preset",
    "seed": "run.seed",
    "seeds": "run.seeds",
    "threads": "run.threads",
    "workers": "run.workers",
    "device": "run.device",
    "findings": "run.findings",
    "size": "data.size",
    "objects": "data.objects",
    "object_style": "data.object_style",
    "asymmetric_objects": "data.asymmetric_objects",
    "data_transforms": "data.transforms",
    "backgrounds": "data.backgrounds",
    "fresh_backgrounds": "data.fresh_backgrounds",
    "n_pretrain": "data.n_pretrain",
    "n_probe": "data.n_probe",
    "n_measure": "data.n_measure",
    "arch": "pretrain.arch",
    "width": "pretrain.width",
    "pretrain_epochs": "pretrain.epochs",
    "batch_size": "pretrain.batch_size",
    "lr": "pretrain.lr",
    "key_momentum": "pretrain.key_momentum",
    "proj_dim": "pretrain.proj_dim",
    "head_norm": "pretrain.head_norm",
    "warmup": "pretrain.warmup",
    "queue_size": "pretrain.queue_size",
    "curve_every": "pretrain.curve_every",
    "curve_images": "pretrain.curve_images",
    "test_transforms": "measurement.transforms",
    "grid_size": "measurement.grid_size",
    "scale_grids": "measurement.scale_grids",
    "snapshot_images": "measurement.snapshot_images",
    "snapshot_grid": "measurement.snapshot_grid",
    "folds": "probe.folds",
    "n_penalties": "probe.n_penalties",
    "logistic_max_iter": "probe.logistic_max_iter",
    "kernel_probe_n": "probe.kernel_n",
    "transfer_objects": "speicher.transfer_objects",
    "transfer_transforms": "speicher.transfer_transforms",
    "transfer_n_source": "speicher.transfer_n_source",
    "transfer_n_target": "speicher.transfer_n_target",
    "transfer_epochs": "speicher.transfer_epochs",
    "criterion_epochs": "speicher.criterion_epochs",
    "nested_sizes": "speicher.nested_sizes",
    "s1_sizes": "speicher.s1_sizes",
    "s1_archs": "speicher.s1_archs",
    "s5_objects": "speicher.s5_objects",
    "base_images": "speicher.base_images",
    "irrelevant_n": "speicher.irrelevant_n",
    "alphas": "speicher.alphas",
    "betas": "speicher.betas",
    "categories": "speicher.categories",
    "category_objects": "speicher.category_objects",
    "category_n": "speicher.category_n",
    "sensitivity_n": "speicher.sensitivity_n",
    "category_sensitivity_n": "speicher.category_sensitivity_n",
    "amortised_epochs": "chavhan.amortised_epochs",
    "cost_steps": "chavhan.cost_steps",
    "cost_epochs": "chavhan.cost_epochs",
    "fewshot_episodes": "chavhan.fewshot_episodes",
    "fewshot_splits": "chavhan.fewshot_splits",
    "fewshot_n": "chavhan.fewshot_n",
    "interp_points": "chavhan.interp_points",
    "ip_epochs": "chavhan.ip_epochs",
    "ip_restarts": "chavhan.ip_restarts",
    "ip_n": "chavhan.ip_n",
    "vit_patch": "vit.patch",
    "vit_dim": "vit.dim",
    "vit_depth": "vit.depth",
    "vit_heads": "vit.heads",
    "vit_epochs": "vit.epochs",
    "vit_lr": "vit.lr",
    "vit_warm_start": "vit.warm_start",
}


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass(frozen=True)
class ReproduceConfig(Config):
    """Everything that determines the numbers of a reproduce run (recorded in ``config.json``): one frozen
    section per concern (:mod:`invfast.reproduce.config_sections`), each field checked by its declaration when
    its section is made; :meth:`validate` checks what spans fields. A folder resumes under other values of the
    fields declared with :func:`~invfast.config_base.scheduling` (``run.workers``, ``run.findings``).

    Fields are read ``cfg.pretrain.epochs`` and named ``"pretrain.epochs"`` (:meth:`flat`, :meth:`with_values`).
    """

    value_prefix = "config field "
    field_word = "config field"

    run: RunSettings = dataclasses.field(default_factory=RunSettings)
    data: DataSettings = dataclasses.field(default_factory=DataSettings)
    pretrain: PretrainSettings = dataclasses.field(default_factory=PretrainSettings)
    measurement: MeasurementSettings = dataclasses.field(default_factory=MeasurementSettings)
    probe: ProbeSettings = dataclasses.field(default_factory=ProbeSettings)
    speicher: SpeicherSettings = dataclasses.field(default_factory=SpeicherSettings)
    chavhan: ChavhanSettings = dataclasses.field(default_factory=ChavhanSettings)
    vit: VitSettings = dataclasses.field(default_factory=VitSettings)

    # -- the sections and the dotted names

    @classmethod
    def sections(cls) -> dict[str, type[Config]]:
        """Each section's name and config class, in order."""
        return {f.name: f.default_factory for f in dataclasses.fields(cls)}  # type: ignore[misc]

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Every field as ``section.field``, in declaration order."""
        return tuple(f"{s}.{n}" for s, c in cls.sections().items() for n in c.field_names())

    @classmethod
    def scheduling_fields(cls) -> tuple[str, ...]:
        return tuple(f"{s}.{n}" for s, c in cls.sections().items() for n in c.scheduling_fields())

    @classmethod
    def added_fields(cls) -> dict[str, Any]:
        return {f"{s}.{n}": v for s, c in cls.sections().items() for n, v in c.added_fields().items()}

    @classmethod
    def groups(cls) -> dict[str, tuple[str, ...]]:
        """The fields of each section, as ``section.field``."""
        return {s: tuple(f"{s}.{n}" for n in c.field_names()) for s, c in cls.sections().items()}

    @classmethod
    def declaration(cls, name: str) -> dataclasses.Field:
        """The declaration of the field ``name`` (``'pretrain.epochs'``); ValueError (one line) for a flat name
        of before the sections, a removed or an unknown field."""
        section, _, rest = name.partition(".")
        sections = cls.sections()
        if section in sections and rest:
            fields = {f.name: f for f in dataclasses.fields(sections[section])}  # type: ignore[arg-type]
            if rest in fields:
                return fields[rest]
        if name in REMOVED_FIELDS:
            raise ValueError(REMOVED_FIELDS[name].message(name))
        if name in FLAT_NAMES:
            raise ValueError(f"config field {name!r} is now {FLAT_NAMES[name]!r} (fields are named section.field)")
        raise ValueError(
            f"unknown config field {name!r}; fields are section.field with sections {', '.join(sections)} "
            "(invfast reproduce --print-config lists them)"
        )

    def flat(self) -> dict[str, Any]:
        """Every field's value by ``section.field``."""
        return {f"{s}.{n}": getattr(getattr(self, s), n) for s, c in self.sections().items() for n in c.field_names()}

    def numbers(self) -> dict[str, Any]:
        skip = set(self.scheduling_fields())
        return {k: v for k, v in self.flat().items() if k not in skip}

    def get(self, name: str) -> Any:
        """The value of the field ``name`` (``'pretrain.epochs'``)."""
        self.declaration(name)
        section, _, rest = name.partition(".")
        return getattr(getattr(self, section), rest)

    def with_values(self, values: Mapping[str, Any]) -> ReproduceConfig:
        """A copy with ``values`` (by ``section.field``) applied, validated again; a flat, removed or unknown
        name raises one ValueError naming it."""
        changes: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            self.declaration(name)
            section, _, rest = name.partition(".")
            changes.setdefault(section, {})[rest] = value
        return dataclasses.replace(
            self, **{s: dataclasses.replace(getattr(self, s), **kw) for s, kw in changes.items()}
        )

    def replace(self, **changes: Any) -> ReproduceConfig:
        """A copy with whole sections replaced (``replace(run=...)``); fields: :meth:`with_values`."""
        unknown = sorted(set(changes) - set(self.sections()))
        if unknown:
            raise TypeError(f"unknown section(s) {unknown}; ReproduceConfig has {list(self.sections())}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every field, by section (JSON-able: tuples as lists)."""
        return {
            s: {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(getattr(self, s)).items()}
            for s in self.sections()
        }

    @staticmethod
    def removed_at() -> dict[str, Any]:
        """The removed fields that had one value, at it: a folder that recorded one of them there resumes."""
        return {k: r.only for k, r in REMOVED_FIELDS.items() if r.only is not None}

    def claim_dict(self) -> dict[str, Any]:
        """Every field that changes the numbers by ``section.field`` (tuples as lists), less those added since
        folders were made at their value of before: what a folder's ``config.json`` must match to resume."""
        from invfast.io import without_added_defaults

        numbers = {k: list(v) if isinstance(v, tuple) else v for k, v in self.numbers().items()}
        return without_added_defaults(numbers, self.added_fields())

    # -- what spans fields

    def validate(self) -> None:
        """Raise ValueError naming a field whose value cannot work with the others (the first one, by section)."""
        for name, kind in self.sections().items():
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"config section {name} must be a {kind.__name__}, got {getattr(self, name)!r}")
        self._validate_run()
        self._validate_sizes()
        self._validate_measurements()
        self._validate_training()
        self._validate_data()
        self._validate_findings()
        from invfast.models import ARCHITECTURES
        from invfast.reproduce.validation import validate_speicher

        validate_speicher(self, ARCHITECTURES)

    def _validate_run(self) -> None:
        """The seed range, the device, and workers (CPU processes) only on the CPU."""
        run = self.run
        if not _is_int(run.seed) or not 0 <= run.seed <= 2**31 - 1 - run.seeds:
            raise ValueError(
                f"config field run.seed must be an int in [0, {2**31 - 1 - run.seeds}] (seeds seed..seed+"
                f"{run.seeds - 1} are used), got {run.seed!r}"
            )
        if run.device not in ("cpu", "cuda") and not str(run.device).startswith("cuda:"):
            raise ValueError(f"config field run.device must be 'cpu', 'cuda' or 'cuda:N', got {run.device!r}")
        if run.workers > 1 and run.device != "cpu":
            raise ValueError(
                f"run.workers > 1 runs stages in parallel CPU processes; run.device {run.device!r} needs "
                "run.workers=1 (--workers 1)"
            )

    def _validate_sizes(self) -> None:
        """Sizes that must fit each other: images per fold and class, batches, grids."""
        d, p, m, s, v = self.data, self.pretrain, self.measurement, self.speicher, self.vit
        folds = self.probe.folds
        if min(m.grid_size, m.snapshot_grid) < 2:
            raise ValueError(
                "measurement.grid_size and measurement.snapshot_grid must be >= 2 (a grid of 1 holds only the "
                f"identity parameter), got {m.grid_size}, {m.snapshot_grid}"
            )
        if d.n_probe < folds * d.objects:
            raise ValueError(
                f"data.n_probe ({d.n_probe}) must hold at least probe.folds x data.objects = "
                f"{folds * d.objects} images (stratified folds need every class in every fold)"
            )
        if s.transfer_n_target < folds * s.transfer_objects:
            raise ValueError(
                f"speicher.transfer_n_target ({s.transfer_n_target}) must be >= probe.folds x "
                f"speicher.transfer_objects = {folds * s.transfer_objects}"
            )
        if s.transfer_objects < 3:
            raise ValueError(
                "speicher.transfer_objects must be >= 3 (S1's subset of the target objects needs two and is "
                f"smaller), got {s.transfer_objects}"
            )
        if 2 * s.transfer_objects > 61:
            raise ValueError(
                "speicher.transfer_objects must be <= 30 (two disjoint sets from 61 built-in objects), "
                f"got {s.transfer_objects}"
            )
        if 2 * s.transfer_transforms > 18:
            raise ValueError(
                "speicher.transfer_transforms must be <= 9 (two disjoint sets of the 18 types), "
                f"got {s.transfer_transforms}"
            )
        if d.size % v.patch or v.dim % v.heads:
            raise ValueError(
                f"vit.patch ({v.patch}) must divide data.size ({d.size}) and vit.heads ({v.heads}) must "
                f"divide vit.dim ({v.dim})"
            )
        if d.n_pretrain < 2 * p.batch_size:
            raise ValueError(
                f"data.n_pretrain ({d.n_pretrain}) must be >= 2 x pretrain.batch_size ({p.batch_size}) "
                "(a MoCo queue needs two batches)"
            )
        if s.transfer_n_source < p.batch_size:
            raise ValueError(
                f"speicher.transfer_n_source ({s.transfer_n_source}) must be >= pretrain.batch_size ({p.batch_size})"
            )

    def _validate_measurements(self) -> None:
        """The sizes of the measurements some findings add: E2's kernel-probe images, C4's few-shot images."""
        n_probe, folds = self.data.n_probe, self.probe.folds
        kn = self.probe.kernel_n
        if not _is_int(kn) or not (kn == 0 or folds * 2 <= kn <= n_probe):
            raise ValueError(
                f"probe.kernel_n must be 0 (all probe images) or an int in [2 x probe.folds, data.n_probe] = "
                f"[{folds * 2}, {n_probe}], got {kn!r}"
            )
        fn = self.chavhan.fewshot_n
        if not _is_int(fn) or not (fn == 0 or 60 <= fn <= n_probe):
            raise ValueError(
                f"chavhan.fewshot_n must be 0 (all probe images) or an int in [60, data.n_probe] = [60, {n_probe}] "
                f"(a 0.05 train fraction needs 3 images), got {fn!r}"
            )

    def _validate_training(self) -> None:
        """Learning curves, the MoCo queue and the warm-up."""
        p, d = self.pretrain, self.data
        if p.curve_every and min(p.curve_images, d.n_probe) < 4 * d.objects:
            raise ValueError(
                f"pretrain.curve_images ({p.curve_images}, at most data.n_probe = {d.n_probe}) must hold at least "
                f"4 x data.objects = {4 * d.objects} images (each class is fitted and scored)"
            )
        if not _is_int(p.queue_size) or p.queue_size < 0 or p.queue_size % p.batch_size:
            raise ValueError(
                "config field pretrain.queue_size must be 0 (the default size) or a positive multiple of "
                f"pretrain.batch_size ({p.batch_size}), got {p.queue_size!r}"
            )
        if not isinstance(p.warmup, (int, float)) or isinstance(p.warmup, bool) or not 0 <= p.warmup < 1:
            raise ValueError(
                "config field pretrain.warmup must be a fraction of each pretraining run's steps in [0, 1), "
                f"got {p.warmup!r}"
            )

    def _validate_data(self) -> None:
        """Backgrounds, objects, Transforms-2D types and the architecture."""
        d = self.data
        background_count(d.backgrounds)
        if d.fresh_backgrounds and d.backgrounds != "uniform-random":
            raise ValueError(
                "data.fresh_backgrounds draws each view's background as uniform noise, which the probe and "
                f"measurement images share only with data.backgrounds='uniform-random', got {d.backgrounds!r} "
                "(with a bank of backgrounds, set data.fresh_backgrounds=false)"
            )
        if d.object_style == "silhouettes" and d.objects > 18:
            raise ValueError(
                f"data.object_style 'silhouettes' has 18 distinct shapes, got data.objects={d.objects}; "
                "use fewer objects or data.object_style=builtin"
            )
        from invfast.synthetic import TRANSFORMATION_TYPES as TRANSFORMATIONS

        bad = [t for t in d.transforms if t not in TRANSFORMATIONS]
        if bad:
            raise ValueError(f"data.transforms {bad} are not Transforms-2D types ({', '.join(TRANSFORMATIONS)})")
        needed = {"translate", "rotate", "hue"}
        if not needed <= set(d.transforms):
            raise ValueError(
                f"data.transforms must include {sorted(needed)}: the probe tasks regress position, "
                "rotation and colour, which only vary under these types"
            )
        from invfast.models import ARCHITECTURES

        arch = self.pretrain.arch
        if arch not in ARCHITECTURES or arch.startswith(("hyper-", "prompt")):
            raise ValueError(f"pretrain.arch must be a plain ResNet name from {ARCHITECTURES}, got {arch!r}")

    def _validate_findings(self) -> None:
        """The selection's shape (its ids are checked by :mod:`invfast.reproduce.findings` when a run starts)."""
        f = self.run.findings
        if isinstance(f, str) or not isinstance(f, tuple) or not f:
            raise ValueError(f"run.findings must be a non-empty tuple of finding ids such as ('S2', 'S3'), got {f!r}")
        from invfast.reproduce.validation import validate_test_transforms

        validate_test_transforms(self)

    # -- derived values

    def moco_queue_size(self) -> int:
        """The MoCo key queue of the pretraining runs: ``pretrain.queue_size``, or the library default for the data."""
        from invfast.pretrain import default_queue_size

        return self.pretrain.queue_size or default_queue_size(self.data.n_pretrain, self.pretrain.batch_size)

    def main_backgrounds(self) -> Any:
        """The main data's ``backgrounds`` argument of :class:`invfast.synthetic.Transforms2D`."""
        spec = self.data.backgrounds
        n = background_count(spec)
        if n is None:
            return spec if spec == "uniform-random" else None
        from invfast.synthetic import builtin_backgrounds

        procedural = spec.startswith("procedural:")
        return builtin_backgrounds(n, self.data.size, procedural_fraction=1.0 if procedural else 0.25)


def background_count(spec: str) -> int | None:
    """Number of built-in backgrounds named by a ``data.backgrounds`` value ('builtin:N' and
    'procedural:N' -> N; None for 'builtin' (all) and 'uniform-random'); ValueError for anything else."""
    if spec in ("builtin", "uniform-random"):
        return None
    head, _, count = str(spec).partition(":")
    if head in ("builtin", "procedural") and count.isdigit() and 1 <= int(count) <= 867:
        return int(count)
    raise ValueError(
        "data.backgrounds must be 'procedural:N', 'builtin:N' (1 <= N <= 867), 'builtin' or 'uniform-random', "
        f"got {spec!r}"
    )
