"""invfast.intra_op: small torch work runs on one thread, the caller's thread count comes back."""

from __future__ import annotations

import pytest
import torch

from invfast.intra_op import SERIAL_MACS, serial_if_small
from invfast.stats import FeatureStats, upper_mm


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_small_work_runs_on_one_thread_and_the_count_comes_back(two_threads):
    with serial_if_small(SERIAL_MACS / 2):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with serial_if_small(SERIAL_MACS):
        assert torch.get_num_threads() == 2
    with serial_if_small(1.0, device="meta"):  # not the CPU: left alone
        assert torch.get_num_threads() == 2


def test_the_count_comes_back_after_an_error(two_threads):
    with pytest.raises(RuntimeError, match="boom"):
        with serial_if_small(10.0):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("n, d", [(64, 16), (300, 300)])  # below and above the threshold
def test_stats_and_products_are_the_same_at_either_thread_count(two_threads, n, d):
    g = torch.Generator().manual_seed(n + d)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    w = torch.randn(d, d, generator=g, dtype=torch.float64).triu_()
    got = FeatureStats().update(x)
    ref = x.numpy().astype("float64")
    c = ref - ref.mean(0)
    torch.testing.assert_close(got.mean, torch.from_numpy(ref.mean(0)), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got.m2, torch.from_numpy(c.T @ c), rtol=1e-10, atol=1e-10)
    assert torch.get_num_threads() == 2
    torch.testing.assert_close(upper_mm(x, w), torch.from_numpy(ref @ w.numpy()), rtol=1e-12, atol=1e-10)
    assert torch.get_num_threads() == 2
