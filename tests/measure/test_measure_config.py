"""MeasureConfig: validated once, the resume fingerprint derived from every field that changes the numbers,
and measure_invariance's small signature."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from measure_helpers import HFlip, small_net

from invfast.measure import MeasureConfig, measure_invariance, measure_real_world
from invfast.measure.config import fingerprint
from invfast.measure.state import StateMismatchError


def test_signatures_are_small():
    for fn in (measure_invariance, measure_real_world):
        named = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD and p.name != "config"
        ]
        assert len(named) <= 8, [p.name for p in named]


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(grid_size=0), "grid_size must be an integer >= 1"),
        (dict(grid_size=2.5), "grid_size must be an integer"),
        (dict(batch_size=True), "batch_size must be an integer"),
        (dict(n_images=-3), "n_images must be an integer >= 1"),
        (dict(workers=-1), "workers must be an integer >= 0"),
        (dict(eps=-1.0), "eps must be a finite number >= 0, got -1.0"),
        (dict(save_every=float("nan")), "save_every must be a finite number >= 0, got nan"),
        (dict(dtype="float64"), "dtype must be one of"),
        (dict(shrinkage="huge"), "shrinkage must be"),
        (dict(protocol="nope"), "protocol must be one of"),
        (dict(device="gpu7"), "is not a device name"),
        (dict(grid_side=0), "grid_side must be an integer >= 1"),
        (dict(grid_side=32, protocol="ericsson"), "protocol='ericsson' follows the published grids"),
    ],
)
def test_bad_values_raise_one_clear_error(bad, match):
    with pytest.raises(ValueError, match=match):
        MeasureConfig(**bad)


def test_types_and_unknown_options():
    with pytest.raises(TypeError, match="normalize must be True or False"):
        MeasureConfig(normalize=1)
    with pytest.raises(TypeError, match=r"unknown measurement option\(s\) \['grid'\]"):
        MeasureConfig().replace(grid=3)
    with pytest.raises(TypeError, match="unknown measurement option"):
        measure_invariance(small_net(dim=4), torch.rand(4, 3, 8, 8), [HFlip()], gridsize=3)
    with pytest.raises(TypeError, match="config must be an invfast.measure.MeasureConfig"):
        measure_invariance(small_net(dim=4), torch.rand(4, 3, 8, 8), [HFlip()], {"grid_size": 3})


def test_dtype_and_paths_are_normalised():
    c = MeasureConfig(dtype=torch.bfloat16, state_path=__import__("pathlib").Path("a/b"))
    assert c.dtype == "bfloat16" and c.torch_dtype is torch.bfloat16 and c.state_path == "a/b"
    assert MeasureConfig(dtype=torch.float32).dtype is None and MeasureConfig(dtype="float32").torch_dtype is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.grid_size = 3  # type: ignore[misc]


def test_fingerprint_takes_every_field_not_declared_scheduling():
    cfg = MeasureConfig()
    fields = {f.name for f in dataclasses.fields(MeasureConfig)}
    free = set(MeasureConfig.scheduling_fields())
    assert free == {f.name for f in dataclasses.fields(MeasureConfig) if f.metadata.get("numbers") is False}
    assert free == {  # the fields a resumed measurement may change (0.3's list, unchanged)
        "batch_size", "forward_batch", "device", "checkpoint", "state_path", "save_every", "progress", "name",
        "feature_cache_mb", "workers", "pair_block", "equivariance_mb", "overlap", "split_forward",
    }  # fmt: skip
    assert cfg.numbers() == {k: getattr(cfg, k) for k in sorted(fields - free)}
    assert all(f.metadata.get("why") for f in dataclasses.fields(MeasureConfig) if f.name in free)
    fp = fingerprint(cfg, torch.device("cpu"))
    assert set(fp["config"]) == fields - free
    assert fp["device"] == "cpu" and fp["invfast"]
    for f in dataclasses.fields(MeasureConfig):  # changing any fingerprinted field changes the fingerprint
        if f.name in free:
            continue
        other = {
            "grid_size": 7,
            "grid_side": 32,
            "n_images": 5,
            "dtype": "bfloat16",
            "channels_last": True,
            "crop": 3,
            "normalize": False,
            "shrinkage": "ledoit-wolf",
            "eps": 1e-3,
            "pair_scores_dir": "x",
            "strict": True,
            "resize": 99,
            "fingerprint_content": True,
            "protocol": "ericsson",
            "protocol_seed": 4,
            "layers": "layer1",
            "units": "elements",
            "equivariance": True,
        }[f.name]
        assert fingerprint(cfg.replace(**{f.name: other}), torch.device("cpu")) != fp, f.name


def test_resume_refuses_a_changed_numeric_option_and_accepts_a_free_one(tmp_path):
    x = torch.rand(12, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    state = tmp_path / "state.pt"

    killer, calls, orig = small_net(seed=2, dim=4), [0], None
    orig = killer.forward

    def forward(v):
        calls[0] += 1
        if calls[0] > 4:  # 3 calls of statistics, 1 of hflip scores, then the kill
            raise KeyboardInterrupt
        return orig(v)

    killer.forward = forward
    # one model call per chunk (split_forward off: the killing forward counts calls), so the kill comes after a
    # known amount of work
    cfg = MeasureConfig(
        grid_size=3, batch_size=4, forward_batch=8, state_path=str(state), save_every=0, split_forward=False
    )
    with pytest.raises(KeyboardInterrupt):
        measure_invariance(killer, x, [HFlip()], cfg)
    with pytest.raises(StateMismatchError, match=r"config\.eps"):
        measure_invariance(small_net(seed=2, dim=4), x, [HFlip()], cfg, eps=1e-3)
    resumed = measure_invariance(small_net(seed=2, dim=4), x, [HFlip()], cfg, batch_size=6)  # free: resumes
    full = measure_invariance(small_net(seed=2, dim=4), x, [HFlip()], cfg.replace(state_path=None))
    assert resumed.meta["resumed"] and not full.meta["resumed"]
    assert resumed["hflip"].mean_cosine == pytest.approx(full["hflip"].mean_cosine, rel=1e-9)
    # the rate counts only what this call computed
    assert resumed.meta["pairs_computed"] < full.meta["pairs_computed"] == full["hflip"].n_pairs
    assert resumed.meta["config"]["batch_size"] == 6


def test_every_field_in_exactly_one_group():
    groups = MeasureConfig.groups()
    grouped = [k for names in groups.values() for k in names]
    assert sorted(grouped) == sorted(MeasureConfig.field_names()) and len(grouped) == len(set(grouped))
    assert sorted(groups) == ["execution", "loading", "output", "statistics"]
