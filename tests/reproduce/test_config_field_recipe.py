"""CONTRIBUTING's recipe "a config field", followed: one declaration in the job's config class, and the checks,
``--set``, the resume identity of old folders and the groups follow from it with no other line. A subclass of
ReproduceConfig stands for the class with the new field."""

from __future__ import annotations

import dataclasses
import json

import pytest

from invfast.config_base import declare
from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.folders import ConfigMismatchError, claim_folder
from invfast.reproduce.presets import parse_override

# the one line the recipe asks for
_NEW = ("probe_shrink", float, declare(0.5, number=True, at_most=1.0, before=0.0, group="probe"))
WithNewField = dataclasses.make_dataclass("WithNewField", [_NEW], bases=(ReproduceConfig,), frozen=True)


def test_the_declaration_checks_the_value():
    assert WithNewField().probe_shrink == 0.5 and WithNewField(probe_shrink=1.0).probe_shrink == 1.0
    with pytest.raises(ValueError, match=r"^config field probe_shrink must be a finite number in \[0, 1\], got 2.0$"):
        WithNewField(probe_shrink=2.0)
    with pytest.raises(ValueError, match=r"^config field probe_shrink must be a finite number in \[0, 1\], got nan$"):
        WithNewField(probe_shrink=float("nan"))


def test_set_reads_it_as_its_type():
    fields = {f.name: f for f in dataclasses.fields(WithNewField)}
    assert parse_override(fields, "probe_shrink=0.25", WithNewField) == ("probe_shrink", 0.25)
    with pytest.raises(ValueError, match="^--set probe_shrink: cannot read 'lots' as float$"):
        parse_override(fields, "probe_shrink=lots", WithNewField)
    with pytest.raises(ValueError, match="unknown config field 'probe_shrink'"):  # the class without it
        parse_override({f.name: f for f in dataclasses.fields(ReproduceConfig)}, "probe_shrink=0.25")


def test_a_folder_made_before_the_field_resumes_only_at_its_value_of_before(tmp_path):
    assert WithNewField.added_fields()["probe_shrink"] == 0.0
    assert "probe_shrink" in WithNewField.groups()["probe"]
    old = ReproduceConfig().claim_dict()
    assert "probe_shrink" not in old
    claim_folder(str(tmp_path), old, "cache folder", ReproduceConfig.added_fields())  # made before the field
    assert "probe_shrink" not in json.loads((tmp_path / "config.json").read_text())["config"]
    resumes = WithNewField(probe_shrink=0.0)
    claim_folder(str(tmp_path), resumes.claim_dict(), "cache folder", WithNewField.added_fields())
    with pytest.raises(ConfigMismatchError, match="probe_shrink"):
        claim_folder(str(tmp_path), WithNewField().claim_dict(), "cache folder", WithNewField.added_fields())
