"""Absurd `--set` values are refused when the configuration is made, before a stage runs (issue 63)."""

import math

import pytest

from invfast.reproduce.presets import PRESETS, preset


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("pretrain.width", 100_000, r"config field pretrain.width must be an integer in \[1, 1024\], got 100000"),
        ("vit.dim", 100_000, r"config field vit.dim must be an integer in \[1, 4096\]"),
        ("vit.depth", 1000, r"config field vit.depth must be an integer in \[1, 64\]"),
        ("measurement.grid_size", 100_000, r"config field measurement.grid_size must be an integer in \[1, 1024\]"),
        ("pretrain.epochs", 10**9, r"config field pretrain.epochs must be an integer in \[1, 100000\]"),
        ("pretrain.batch_size", 10**7, r"config field pretrain.batch_size must be an integer in \[1, 65536\]"),
        ("pretrain.lr", math.inf, r"config field pretrain.lr must be a finite number in \(0, 10\], got inf"),
        ("pretrain.lr", 1e308, r"config field pretrain.lr must be a finite number in \(0, 10\], got 1e\+308"),
        ("pretrain.lr", 0.0, r"config field pretrain.lr must be a finite number in \(0, 10\], got 0.0"),
        ("vit.lr", math.nan, r"config field vit.lr must be a finite number in \(0, 10\], got nan"),
        ("vit.lr", True, r"config field vit.lr must be a finite number in \(0, 10\], got True"),
        (
            "pretrain.key_momentum",
            1.5,
            r"config field pretrain.key_momentum must be a finite number in \[0, 1\], got 1.5",
        ),
        ("data.size", 8, r"config field data.size must be an integer in \[16, 1024\], got 8"),
        ("probe.folds", 1, r"config field probe.folds must be an integer >= 2, got 1"),
        ("chavhan.cost_epochs", 1001, r"config field chavhan.cost_epochs must be an integer in \[0, 1000\], got 1001"),
        ("chavhan.ip_n", 9, r"config field chavhan.ip_n must be an integer >= 10, got 9"),
        ("pretrain.head_norm", "layer", r"config field pretrain.head_norm must be one of none, bn, got 'layer'"),
        (
            "data.object_style",
            "shaded",
            r"config field data.object_style must be one of silhouettes, shared-palette, builtin",
        ),
        ("probe.kernel_n", 1, r"probe.kernel_n must be 0 \(all probe images\)"),
        (
            "chavhan.fewshot_n",
            59,
            r"chavhan.fewshot_n must be 0 \(all probe images\) or an int in \[60, data.n_probe\] = \[60, 60\]",
        ),
        (
            "chavhan.fewshot_n",
            61,
            r"chavhan.fewshot_n must be 0 \(all probe images\) or an int in \[60, data.n_probe\]",
        ),
        ("chavhan.fewshot_n", 60.0, r"chavhan.fewshot_n must be 0 \(all probe images\)"),
        ("data.fresh_backgrounds", "yes", "config field data.fresh_backgrounds must be True or False, got 'yes'"),
        ("measurement.scale_grids", 1, "config field measurement.scale_grids must be True or False, got 1"),
    ],
)
def test_absurd_values_are_refused_in_one_line(field, value, message):
    with pytest.raises((ValueError, TypeError), match=message) as err:
        preset("tiny", {field: value})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_within_the_bounds(name):
    preset(name)


@pytest.mark.parametrize("field", ["policies", "amortised"])
def test_a_removed_field_is_refused_naming_what_replaces_it(field):
    from invfast.reproduce.config import REMOVED_FIELDS, ReproduceConfig
    from invfast.reproduce.presets import parse_override

    with pytest.raises(ValueError) as err:
        parse_override(f"{field}=x")
    assert str(err.value) == f"--set: config field {field!r} was removed; {REMOVED_FIELDS[field].instead}"
    with pytest.raises(ValueError, match=f"config field '{field}' was removed; ") as err:
        preset("tiny", {field: ("default",)})
    assert "\n" not in str(err.value)
    assert field not in ReproduceConfig.field_names()


def test_a_folder_that_recorded_a_removed_field_at_its_only_value_resumes(tmp_path):
    """A folder made while `policies` existed recorded it at the one value it accepted: it resumes; a config
    that recorded another value (impossible then, but a hand-edited file) is refused, naming the field."""
    import json

    from invfast.reproduce.config import ReproduceConfig
    from invfast.reproduce.folders import CONFIG_FILE, FORMAT, ConfigMismatchError, claim_folder

    conf = preset("tiny").claim_dict()
    args = (ReproduceConfig.added_fields(), ReproduceConfig.removed_at())
    for value, resumes in ((["default", "spatial", "appearance"], True), (["default", "spatial"], False)):
        folder = tmp_path / str(len(value))
        folder.mkdir()
        (folder / CONFIG_FILE).write_text(json.dumps({"format": FORMAT, "config": {**conf, "policies": value}}))
        if resumes:
            claim_folder(str(folder), conf, "cache folder", *args)
        else:
            with pytest.raises(ConfigMismatchError, match=r"policies: folder has \['default', 'spatial'\]"):
                claim_folder(str(folder), conf, "cache folder", *args)
