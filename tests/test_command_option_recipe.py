"""CONTRIBUTING's recipe "a command option", followed: a config field declared with ``option`` is an option of the
commands that take its config — typed, bounded, defaulted and described by that one declaration, checked with an
error naming the option, and passed into the config — with no argparse line and no check of its own. A subclass
of TrainConfig stands for the class with the new option; the real commands are checked to take every option their
config declares."""

from __future__ import annotations

import argparse
import dataclasses
import math

import pytest
import torch

from invfast.config_base import Config, declare
from invfast.measure import MeasureConfig
from invfast.pretrain.config import TrainConfig
from invfast.runtime.options import add_config_options, config_options, option_name

# the one line the recipe asks for (and three of other kinds)
_NEW = [
    ("queue_refresh", int, declare(4, at_least=1, at_most=64, option="steps between two queue refreshes")),
    ("label_noise", float, declare(0.0, number=True, at_most=0.5, option="fraction of labels flipped")),
    ("sampler", str, declare("uniform", choices=("uniform", "balanced"), option="how images are drawn")),
    ("freeze_bn", bool, declare(False, flag=True, option="keep the batch-norm statistics fixed")),
]
WithNewOptions = dataclasses.make_dataclass("WithNewOptions", _NEW, bases=(TrainConfig,), frozen=True)


def _parser(config: type[Config]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="invfast test", exit_on_error=False)
    add_config_options(parser, config)
    return parser


def test_the_declaration_makes_a_described_option():
    text = _parser(WithNewOptions).format_help()
    assert "--queue-refresh QUEUE_REFRESH" in text and "steps between two queue refreshes (default 4)" in text
    assert "--sampler {uniform,balanced}" in text and "--freeze-bn" in text
    assert option_name("queue_refresh") == "--queue-refresh"


def test_given_values_reach_the_config_and_the_defaults_are_the_configs():
    given = config_options(_parser(WithNewOptions).parse_args([]), WithNewOptions)
    assert WithNewOptions(**given) == WithNewOptions()
    args = _parser(WithNewOptions).parse_args(
        ["--queue-refresh", "8", "--label-noise", "0.25", "--sampler", "balanced", "--freeze-bn"]
    )
    cfg = WithNewOptions(**config_options(args, WithNewOptions))
    assert (cfg.queue_refresh, cfg.label_noise, cfg.sampler, cfg.freeze_bn) == (8, 0.25, "balanced", True)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--queue-refresh", "0"], "--queue-refresh must be an integer in [1, 64], got 0"),
        (["--queue-refresh", "65"], "--queue-refresh must be an integer in [1, 64], got 65"),
        (["--label-noise", "nan"], "--label-noise must be a finite number in [0, 0.5], got nan"),
        (["--label-noise", "0.75"], "--label-noise must be a finite number in [0, 0.5], got 0.75"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_option(argv, message):
    args = _parser(WithNewOptions).parse_args(argv)
    with pytest.raises(ValueError) as e:
        config_options(args, WithNewOptions)
    assert str(e.value) == message


def test_a_value_of_the_wrong_kind_is_refused_by_the_parser():
    for argv in (["--queue-refresh", "four"], ["--sampler", "random"]):
        with pytest.raises(argparse.ArgumentError):
            _parser(WithNewOptions).parse_args(argv)


def test_a_flag_option_must_default_to_false():
    with pytest.raises(TypeError, match="a flag that is a command option must default to False"):
        declare(True, flag=True, option="on unless told")


def _changed(f: dataclasses.Field) -> str:
    """A value of the option other than the field's default, within its declaration, as typed on a command line."""
    meta = f.metadata
    if "choices" in meta:
        return next(str(c) for c in meta["choices"] if c != f.default)
    accepts = meta.get("accepts", {})
    lo, hi = accepts.get("at_least"), accepts.get("at_most")
    if accepts.get("kind") == "integer":
        return str((lo or 0) + 2 if f.default is None else f.default + 1)
    if accepts.get("kind") == "number":
        base = 1.0 if f.default in (None, 0) else f.default
        return repr(base / 2 if hi is not None and base * 2 > hi else base * 2)
    return "layer1"  # the one free-text option (MeasureConfig.layers)


def _measure_config(argv: list[str]) -> Config:
    from invfast.measure.cli import add_arguments
    from invfast.measure.options import config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--model", "m", "--data", "d", "--out", "o", *argv])
    return config_from_args(args, torch.device("cpu"), "state")


def _pretrain_config(argv: list[str]) -> Config:
    from invfast.pretrain.cli import _train_config, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return _train_config(parser.parse_args(["--data", "d", "--out", "o", *argv]), 32, torch.device("cpu"))


@pytest.mark.parametrize("config, build", [(MeasureConfig, _measure_config), (TrainConfig, _pretrain_config)])
def test_each_command_takes_every_option_its_config_declares(config, build):
    options = config.options()
    assert len(options) >= 10
    default = build([])
    for f in options:
        flag = f.metadata.get("accepts", {}).get("kind") == "flag"
        argv = [option_name(f.name)] if flag else [option_name(f.name), _changed(f)]
        got = getattr(build(argv), f.name)
        assert got != getattr(default, f.name), f"{argv} did not reach {config.__name__}.{f.name}"
        if not flag and f.name != "layers":
            assert math.isclose(got, float(argv[1])) if isinstance(got, float) else str(got) == argv[1]
