"""The measurement's feature cache (invfast.measure.feature_cache): rows kept in one preallocated block per
name within a byte budget, and a measurement that reads them equal, bit for bit, to one that recomputes."""

from __future__ import annotations

import pytest
import torch
from measure_helpers import Brightness, Rot90, random_images, small_net

from invfast.measure import measure_invariance
from invfast.measure.feature_cache import FeatureCache


def test_rows_are_kept_in_one_block_per_name_and_read_back():
    c = FeatureCache(budget_bytes=10 * 4 * 4, rows=10)  # room for 10 rows of 4 float32
    a, b = torch.randn(4, 4), torch.randn(3, 4)
    assert c.put(0, "f", a) and c.put(4, "f", b)
    assert torch.equal(c.get(0, "f", 4), a) and torch.equal(c.get(4, "f", 3), b)
    assert c.get(4, "f", 2) is None and c.get(8, "f", 3) is None  # another row count, a batch never kept
    assert len(c.blocks) == 1 and c.blocks["f"].shape == (10, 4) and c.reserved_bytes == 160
    assert c.get(0, "f", 4).untyped_storage().data_ptr() == c.blocks["f"].untyped_storage().data_ptr()
    a.zero_()  # a copy is kept, not the caller's tensor
    assert c.get(0, "f", 4).abs().sum() > 0
    assert not c.put(7, "f", torch.randn(4, 4))  # 7 + 4 rows > 10: not kept
    assert not c.put(0, "z", torch.randn(4, 4))  # the budget is spent
    with pytest.raises(ValueError, match="rows of 'f' must be"):
        c.put(9, "f", torch.randn(1, 5))
    with pytest.raises(ValueError, match="kept already"):
        c.put(0, "f", torch.randn(4, 4))
    c.clear()
    assert c.get(0, "f", 4) is None and c.reserved_bytes == 0


def test_a_block_holds_at_most_the_runs_rows_and_what_the_budget_leaves():
    c = FeatureCache(budget_bytes=1 << 20, rows=6)
    assert c.put(0, "f", torch.randn(4, 2, dtype=torch.float64))
    assert c.blocks["f"].shape == (6, 2) and c.blocks["f"].dtype == torch.float64
    small = FeatureCache(budget_bytes=5 * 8, rows=100)
    assert not small.put(0, "f", torch.randn(8, 2))  # 5 rows of room, a batch of 8
    assert small.put(0, "g", torch.randn(4, 2)) and small.blocks["g"].shape == (5, 2)
    with pytest.raises(ValueError, match=">= 0"):
        FeatureCache(-1, 3)
    empty = FeatureCache(budget_bytes=64, rows=1000)
    assert not empty.put(0, "f", torch.empty(0, 2048)) and empty.reserved_bytes == 0  # a batch of unreadable images
    assert not empty.put(4, "f", torch.randn(4, 2048))  # 32 KiB of rows over a 64-byte budget: not kept


@pytest.mark.parametrize("layers", [None, ["0", "2"]])
def test_a_measurement_reading_the_cache_equals_one_that_recomputes(layers):
    x = random_images(11, size=8, seed=3)  # 3 batches of <= 4 images
    net = small_net(dim=6)
    calls: list[int] = []
    net.register_forward_pre_hook(lambda m, a: calls.append(a[0].shape[0]))
    kw = dict(grid_size=4, batch_size=4, forward_batch=64, split_forward=False, layers=layers)
    cached = measure_invariance(net, x, [Rot90(), Brightness()], **kw)
    n_cached, calls[:] = len(calls), []
    fresh = measure_invariance(net, x, [Rot90(), Brightness()], feature_cache_mb=0, **kw)
    assert len(calls) > n_cached  # the reference batches ran again for the second transform
    for ly in layers or [None]:
        for name in ("rot90", "brightness"):
            a = (cached if ly is None else cached.layers[ly])[name]
            b = (fresh if ly is None else fresh.layers[ly])[name]
            assert torch.equal(torch.as_tensor(a.per_image_cosine), torch.as_tensor(b.per_image_cosine))
            assert a.mean_cosine == b.mean_cosine and a.mean_distance == b.mean_distance


def test_the_cache_budget_reaches_the_cli():
    import argparse

    from invfast.measure import MeasureConfig
    from invfast.measure.cli import add_arguments
    from invfast.measure.options import config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--model", "m", "--data", "d", "--out", "o"]
    assert config_from_args(parser.parse_args(base), torch.device("cpu"), "s").feature_cache_mb == 512.0
    args = parser.parse_args([*base, "--feature-cache-mb", "0"])
    assert config_from_args(args, torch.device("cpu"), "s").feature_cache_mb == 0.0
    assert MeasureConfig().feature_cache_mb == 512.0  # the CLI's default is the library's
    with pytest.raises(ValueError, match="--feature-cache-mb must be a finite number >= 0, got -1.0"):
        config_from_args(parser.parse_args([*base, "--feature-cache-mb", "-1"]), torch.device("cpu"), "s")
