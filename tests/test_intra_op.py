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


def test_at_threads_sets_the_count_for_the_block_and_gives_it_back(two_threads):
    from invfast.intra_op import at_threads

    with at_threads(1):
        assert torch.get_num_threads() == 1
        with at_threads(2):
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with pytest.raises(RuntimeError, match="boom"):
        with at_threads(1):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == 2


def test_the_scoring_loop_runs_small_work_at_one_thread_and_the_model_at_the_runs(two_threads, monkeypatch):
    """Beside a busy process a small op forked over two threads waits for the one the OS took away, so the
    measurement's own torch work between model calls runs at one thread on the CPU; the model's calls (whether
    split over threads or not) and the per-unit moments kernel run at the caller's count, which comes back."""
    import invfast.measure.scoring as scoring
    from invfast.measure import measure_invariance
    from invfast.models import create

    seen: dict[str, set[int]] = {"model": set(), "scores": set(), "moments": set()}

    class Recording(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = create("resnet18-cifar", width=4).eval()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen["model"].add(torch.get_num_threads())
            return self.net(x)

    def spy(name, fn):
        def wrapped(*a, **k):
            seen[name].add(torch.get_num_threads())
            return fn(*a, **k)

        return wrapped

    monkeypatch.setattr(scoring, "scores_of_whitened", spy("scores", scoring.scores_of_whitened))
    monkeypatch.setattr(scoring, "merge_unit_moments_", spy("moments", scoring.merge_unit_moments_))
    torch.manual_seed(0)
    x = torch.rand(24, 3, 32, 32)
    for split in (False, True):
        seen = {k: set() for k in seen}
        measure_invariance(
            Recording(), x, ["rotation"], grid_size=4, device="cpu", progress=False, split_forward=split, workers=0
        )
        assert seen["scores"] == {1}
        assert seen["moments"] == {2}
        # whole: at the run's two; split: each sub-batch at one thread on a thread of its own (a call too small to
        # split, and the one-image call that sizes the sub-batches, at two or one)
        assert seen["model"] == {2} if not split else 1 in seen["model"]
        assert torch.get_num_threads() == 2


@pytest.mark.parametrize("px, want", [(32, 1), (64, 2)])
def test_views_are_made_at_the_runs_threads_only_in_large_chunks(two_threads, monkeypatch, px, want):
    """A chunk of views below PARALLEL_VIEW_VALUES values is made at one thread (the transform's checks are small
    ops), a larger one at the run's count: 256 views of 3 x 32 x 32 px hold 0.8e6 values, of 64 px 3.1e6."""
    from invfast.measure import engine, measure_invariance
    from invfast.measure.scoring import PARALLEL_VIEW_VALUES
    from invfast.models import create

    assert 256 * 3 * 32 * 32 < PARALLEL_VIEW_VALUES <= 256 * 3 * 64 * 64
    seen: set[int] = set()
    views = engine.Run.views

    def spy(self, *a, **k):
        seen.add(torch.get_num_threads())
        return views(self, *a, **k)

    monkeypatch.setattr(engine.Run, "views", spy)
    torch.manual_seed(0)
    x = torch.rand(32, 3, px, px)
    model = create("resnet18-cifar", width=4).eval()
    measure_invariance(
        model, x, ["rotation"], grid_size=8, batch_size=32, forward_batch=256, device="cpu", progress=False,
        overlap=False, workers=0,
    )  # fmt: skip
    assert seen == {want}
