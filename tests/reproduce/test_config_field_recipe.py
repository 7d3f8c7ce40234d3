"""CONTRIBUTING's recipe "a config field", followed: one declaration in its section of the job's config
(``ProbeSettings`` here), and the checks, ``--set probe.shrink=...``, the resume identity of old folders and the
groups follow from it with no other line. Subclasses stand for the section and the config with the new field."""

from __future__ import annotations

import dataclasses
import json

import pytest

from invfast.config_base import declare
from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.config_sections import ProbeSettings
from invfast.reproduce.folders import ConfigMismatchError, claim_folder
from invfast.reproduce.presets import parse_override

# the one line the recipe asks for
_NEW = ("shrink", float, declare(0.5, number=True, at_most=1.0, before=0.0))
ProbeWithShrink = dataclasses.make_dataclass("ProbeWithShrink", [_NEW], bases=(ProbeSettings,), frozen=True)
WithNewField = dataclasses.make_dataclass(
    "WithNewField",
    [("probe", ProbeWithShrink, dataclasses.field(default_factory=ProbeWithShrink))],
    bases=(ReproduceConfig,),
    frozen=True,
)


def test_the_declaration_checks_the_value():
    assert WithNewField().probe.shrink == 0.5
    assert WithNewField().with_values({"probe.shrink": 1.0}).probe.shrink == 1.0
    with pytest.raises(ValueError, match=r"^config field probe.shrink must be a finite number in \[0, 1\], got 2.0$"):
        WithNewField().with_values({"probe.shrink": 2.0})
    with pytest.raises(ValueError, match=r"^config field probe.shrink must be a finite number in \[0, 1\], got nan$"):
        WithNewField().with_values({"probe.shrink": float("nan")})


def test_set_reads_it_as_its_type():
    assert parse_override("probe.shrink=0.25", WithNewField) == ("probe.shrink", 0.25)
    with pytest.raises(ValueError, match="^--set probe.shrink: cannot read 'lots' as float$"):
        parse_override("probe.shrink=lots", WithNewField)
    with pytest.raises(ValueError, match="unknown config field 'probe.shrink'"):  # the config without it
        parse_override("probe.shrink=0.25")


def test_a_folder_made_before_the_field_resumes_only_at_its_value_of_before(tmp_path):
    assert WithNewField.added_fields()["probe.shrink"] == 0.0
    assert "probe.shrink" in WithNewField.groups()["probe"]
    old = ReproduceConfig().claim_dict()
    assert "probe.shrink" not in old
    claim_folder(str(tmp_path), old, "cache folder", ReproduceConfig.added_fields())  # made before the field
    assert "probe.shrink" not in json.loads((tmp_path / "config.json").read_text())["config"]
    resumes = WithNewField().with_values({"probe.shrink": 0.0})
    claim_folder(str(tmp_path), resumes.claim_dict(), "cache folder", WithNewField.added_fields())
    with pytest.raises(ConfigMismatchError, match="probe.shrink"):
        claim_folder(str(tmp_path), WithNewField().claim_dict(), "cache folder", WithNewField.added_fields())
