"""Absurd `--set` values are refused when the configuration is made, before a stage runs (issue 63)."""

import math

import pytest

from invfast.reproduce.presets import PRESETS, preset


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("width", 100_000, "config field width must be at most 1024, got 100000"),
        ("vit_dim", 100_000, "config field vit_dim must be at most 4096"),
        ("vit_depth", 1000, "config field vit_depth must be at most 64"),
        ("grid_size", 100_000, "config field grid_size must be at most 1024"),
        ("pretrain_epochs", 10**9, "config field pretrain_epochs must be at most 100000"),
        ("batch_size", 10**7, "config field batch_size must be at most 65536"),
        ("lr", math.inf, r"config field lr must be a number in \(0, 10\], got inf"),
        ("lr", 1e308, r"config field lr must be a number in \(0, 10\], got 1e\+308"),
        ("lr", 0.0, r"config field lr must be a number in \(0, 10\], got 0.0"),
        ("vit_lr", math.nan, r"config field vit_lr must be a number in \(0, 10\], got nan"),
        ("vit_lr", True, r"config field vit_lr must be a number in \(0, 10\], got True"),
        ("kernel_probe_n", 1, r"kernel_probe_n must be 0 \(all probe images\)"),
        ("fewshot_n", 59, r"fewshot_n must be 0 \(all probe images\) or an int in \[60, n_probe\] = \[60, 60\]"),
        ("fewshot_n", 61, r"fewshot_n must be 0 \(all probe images\) or an int in \[60, n_probe\]"),
        ("fewshot_n", 60.0, r"fewshot_n must be 0 \(all probe images\)"),
        ("fresh_backgrounds", "yes", "fresh_backgrounds must be true or false"),
    ],
)
def test_absurd_values_are_refused_in_one_line(field, value, message):
    with pytest.raises(ValueError, match=message) as err:
        preset("tiny", **{field: value})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_within_the_bounds(name):
    preset(name)
