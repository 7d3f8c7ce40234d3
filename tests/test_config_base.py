"""One config base for every job (invfast.config_base): frozen, validated when made, each field flagged once as
changing the numbers or only scheduling the work; the resume identities use those flags."""

from __future__ import annotations

import dataclasses

import pytest

from invfast.config_base import Config, declare, scheduling
from invfast.measure import MeasureConfig
from invfast.pretrain.config import TrainConfig
from invfast.reproduce import ReproduceConfig, preset

JOBS = (MeasureConfig, TrainConfig, ReproduceConfig)


@dataclasses.dataclass(frozen=True)
class _Job(Config):
    epochs: int = 10
    progress: bool = scheduling("display only", True)

    def validate(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {self.epochs}")


def test_the_base_flags_validates_and_replaces():
    assert _Job().numbers() == {"epochs": 10} and _Job.scheduling_fields() == ("progress",)
    with pytest.raises(ValueError, match="epochs must be >= 1, got 0"):
        _Job(epochs=0)
    with pytest.raises(ValueError, match="epochs must be >= 1, got -2"):
        _Job().replace(epochs=-2)
    with pytest.raises(TypeError, match=r"unknown field\(s\) \['epoch'\]; _Job has \['epochs', 'progress'\]"):
        _Job().replace(epoch=3)
    assert _Job().replace(progress=False) == _Job(progress=False)


@pytest.mark.parametrize("cls", JOBS)
def test_every_job_config_is_frozen_and_explains_its_scheduling_fields(cls):
    assert issubclass(cls, Config) and cls.__dataclass_params__.frozen
    free = cls.scheduling_fields()
    assert free and set(free) < set(cls.field_names())
    # ReproduceConfig's fields live in its sections (each a frozen Config): section.field
    sections = cls.sections() if cls is ReproduceConfig else {"": cls}
    declared = {(f"{s}." if s else "") + f.name: f for s, c in sections.items() for f in dataclasses.fields(c)}
    assert set(declared) == set(cls.field_names()) and all(declared[n].metadata.get("why") for n in free)
    for s, c in sections.items():
        assert c.__dataclass_params__.frozen
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(getattr(cls(), s) if s else cls(), dataclasses.fields(c)[0].name, None)


def test_the_resume_identities_are_unchanged():
    """The fields a resumed pretraining run / reproduce folder may change: 0.3's lists, now flags."""
    assert TrainConfig.scheduling_fields() == (
        "checkpoint_every", "log_every", "progress", "invariance_every", "invariance_images",
        "invariance_transforms", "probe_every", "device", "channels_last",
    )  # fmt: skip
    assert ReproduceConfig.scheduling_fields() == ("run.workers", "run.findings")
    claim = preset("tiny").claim_dict()
    assert "run.workers" not in claim and "run.findings" not in claim and claim["run.seed"] == 0


def test_job_configs_are_validated_when_made():
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got 0"):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="grid_size must be an integer >= 1"):
        MeasureConfig(grid_size=0)
    with pytest.raises(ValueError, match="seeds"):
        ReproduceConfig().with_values({"run.seeds": 0})


@dataclasses.dataclass(frozen=True)
class _Declared(Config):
    epochs: int = declare(10, at_least=1, at_most=1000, group="training")
    workers: int | None = declare(None, at_least=0, optional=True, scheduling="processes", group="execution")
    rate: float = declare(0.5, number=True, before=0.0, group="training")
    fast: bool | None = declare(None, flag=True, optional=True)
    name: str = "job"


@pytest.mark.parametrize(
    "changes, error, words",
    [
        (dict(epochs=0), ValueError, r"epochs must be an integer in \[1, 1000\], got 0"),
        (dict(epochs=2.0), ValueError, r"epochs must be an integer in \[1, 1000\], got 2.0"),
        (dict(epochs=True), ValueError, r"epochs must be an integer in \[1, 1000\], got True"),
        (dict(epochs=1001), ValueError, r"epochs must be an integer in \[1, 1000\], got 1001"),
        (dict(workers=-1), ValueError, r"workers must be an integer >= 0 \(or None\), got -1"),
        (dict(rate=float("nan")), ValueError, "rate must be a finite number >= 0, got nan"),
        (dict(rate=-0.1), ValueError, "rate must be a finite number >= 0, got -0.1"),
        (dict(rate=float("inf")), ValueError, "rate must be a finite number >= 0, got inf"),
        (dict(rate="1"), ValueError, "rate must be a finite number >= 0, got '1'"),
        (dict(fast=1), TypeError, r"fast must be True or False \(or None\), got 1"),
    ],
)
def test_a_declared_field_refuses_what_it_does_not_accept(changes, error, words):
    with pytest.raises(error, match=words):
        _Declared(**changes)


def test_declarations_give_the_resume_identity_the_added_fields_and_the_groups():
    ok = _Declared(epochs=1000, workers=0, rate=2, fast=False)
    assert ok.rate == 2 and _Declared(workers=None).workers is None
    assert _Declared.scheduling_fields() == ("workers",)
    assert _Declared.added_fields() == {"rate": 0.0}
    assert _Declared.groups() == {"training": ("epochs", "rate"), "execution": ("workers",)}
    # the job configurations keep no list of field names beside the fields
    assert ReproduceConfig.added_fields()["measurement.scale_grids"] is False and TrainConfig.added_fields() == {
        "warmup_steps": 0
    }
    import invfast.pretrain.config as PC
    import invfast.reproduce.config as RC

    assert not {"ADDED_FIELDS", "_POSITIVE", "_MAXIMA"} & (set(vars(RC)) | set(vars(PC)))
