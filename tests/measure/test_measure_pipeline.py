"""The measurement pipeline (issue 14): reads through ``source.batches`` (folder workers decode ahead),
no per-batch host reads of the accumulators, one progress bar over images x passes, model calls
bounded whatever N and k, and ``torchrun`` (gloo here; NCCL is the same code on CUDA tensors)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
from measure_helpers import MEASURE_CLI, Brightness, HFlip, Rot90, image_folder, random_images, small_net

from invfast.data.folder import FolderSource
from invfast.measure import measure_invariance
from invfast.measure.engine import default_workers

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the shared test helpers


def _means(r):
    return {
        n: (t.mean_distance, t.mean_cosine, t.distance.numpy(), t.per_image_cosine.numpy())
        for n, t in r.transforms.items()
    }


def test_folder_is_read_through_batches_with_workers(tmp_path):
    """Worker processes decode the passes (``load`` is never called) and give the in-process numbers."""
    d = image_folder(tmp_path / "imgs")
    (d / "zz_bad.png").write_bytes(b"not a png")
    kw = dict(grid_size=5, batch_size=3, forward_batch=12, resize=16)
    plain = measure_invariance(small_net(dim=6), FolderSource(d, resize=16, workers=0), [Rot90(), Brightness()], **kw)

    src = FolderSource(d, resize=16, workers=2)
    calls = {"batches": 0}
    real_batches = src.batches

    def batches(index_batches, **k):
        calls["batches"] += 1
        return real_batches(index_batches, **k)

    def no_load(indices):
        raise AssertionError("the measurement loop called source.load one batch at a time")

    src.batches, src.load = batches, no_load
    ahead = measure_invariance(small_net(dim=6), src, [Rot90(), Brightness()], **kw)
    assert calls["batches"] == 3  # one per pass: statistics, rot90, brightness
    assert ahead.errors["count"] == plain.errors["count"] == 1 and ahead.n_images == 10  # 11 files, 1 unreadable
    for name, (md, mc, dist, pic) in _means(plain).items():
        md2, mc2, dist2, pic2 = _means(ahead)[name]
        assert (md2, mc2) == (md, mc)
        np.testing.assert_array_equal(dist2, dist)
        np.testing.assert_array_equal(pic2, pic)


def test_folder_default_workers(tmp_path):
    d = image_folder(tmp_path / "imgs", n=4)
    assert 1 <= default_workers() <= 8
    r = measure_invariance(small_net(dim=6), f"folder:{d}", [HFlip()], resize=16, batch_size=2)
    assert r["hflip"].n_images == 4
    with pytest.raises(ValueError, match="workers must be an integer >= 0"):
        measure_invariance(small_net(dim=6), f"folder:{d}", [HFlip()], resize=16, workers=-1)


class _HostCopies:
    """Counts ``Tensor.cpu()`` calls (the host reads of device results) made by this thread while
    active: background threads left by other tests (loader prefetch, pin-memory) do not count."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = torch.Tensor.cpu
        me = threading.get_ident()

        def cpu(t, *a, **k):
            if threading.get_ident() == me:
                self.n += 1
            return real(t, *a, **k)

        monkeypatch.setattr(torch.Tensor, "cpu", cpu)


@pytest.mark.parametrize("pairs", [False, True])
def test_host_reads_do_not_grow_with_the_number_of_batches(monkeypatch, tmp_path, pairs):
    """Accumulators stay on the device: 3x the batches, the same number of host copies (the old loop
    copied every chunk's scores to the CPU). Per-pair scores add one copy per group of batches."""
    counts = []
    for n in (8, 24):
        x = random_images(n, seed=n)
        spy = _HostCopies(monkeypatch)
        measure_invariance(
            small_net(dim=6),
            x,
            [Rot90(), Brightness()],
            grid_size=6,
            batch_size=4,
            forward_batch=8,
            pair_scores_dir=tmp_path / f"p{n}" if pairs else None,
        )
        counts.append(spy.n)
        monkeypatch.undo()
    if pairs:  # rot90 (P=4) and brightness (P=6): one group per batch of 4 images
        assert counts[1] - counts[0] == 2 * (24 - 8) // 4
    else:
        assert counts[0] == counts[1]


def test_one_progress_bar_over_images_and_transforms(monkeypatch):
    bars = []

    class Bar:
        def __init__(self, total, initial=0, desc="", **kw):
            self.total, self.n, self.descs, self.closed = total, initial, [desc], False
            bars.append(self)

        def update(self, k):
            self.n += k

        def set_description(self, desc, refresh=True):
            self.descs.append(desc)

        def close(self):
            self.closed = True

    import invfast.runtime.progress

    monkeypatch.setattr(invfast.runtime.progress, "bar", lambda total, **kw: Bar(total, **kw))
    measure_invariance(
        small_net(dim=6), random_images(10), [Rot90(), HFlip(), Brightness()], grid_size=4, batch_size=3, progress=True
    )
    assert len(bars) == 1
    bar = bars[0]
    # views: the statistics pass (10) + 10 images x (4 rot90 + 2 hflip + 4 brightness parameters)
    assert bar.total == bar.n == 10 + 10 * (4 + 2 + 4) and bar.closed
    assert bar.descs[1:] == ["reference statistics", "rot90", "hflip", "brightness"]


def test_the_bar_moves_within_a_group_of_images(monkeypatch):
    """Issue 62: a large grid's first group took 18 minutes with the bar at 0 %. The bar now moves after every
    chunk of parameters that goes through the model, not only at the end of a group of images, and still ends
    at its total."""
    steps = []

    class Bar:
        def __init__(self, total, initial=0, **kw):
            self.total, self.n = total, initial

        def update(self, k):
            self.n += k
            steps.append(k)

        def set_description(self, desc, refresh=True):
            pass

        def close(self):
            pass

    import invfast.runtime.progress

    monkeypatch.setattr(invfast.runtime.progress, "bar", lambda total, **kw: Bar(total, **kw))
    # 6 images in one batch (one group); brightness at grid 12: 12 parameters, 2 x 6 = 12 views per model call
    measure_invariance(
        small_net(dim=6), random_images(6), [Brightness()], grid_size=12, batch_size=6, forward_batch=12, progress=True
    )
    scoring = [k for k in steps[1:] if k]  # after the statistics pass (6 views)
    assert steps[0] == 6 and sum(scoring) == 6 * 12
    assert len(scoring) == 6 and set(scoring) == {12}  # six chunks of 2 parameters x 6 images, each shown


class _Recorder(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.sizes = inner, []

    def forward(self, x):
        self.sizes.append(x.shape[0])
        return self.inner(x)


class _RecordedBrightness(Brightness):
    def __init__(self):
        self.images = []

    def apply(self, images, params):
        self.images.append(images.shape[0] * params.shape[0])
        return super().apply(images, params)


@pytest.mark.parametrize("n,k", [(6, 3), (20, 24)])
def test_chunks_bounded_whatever_n_and_k(n, k):
    """Every model call and every transform call carries at most max(forward_batch, batch_size)
    images, so memory is bounded by the chunk, not by N x k."""
    model, t = _Recorder(small_net(dim=6)), _RecordedBrightness()
    r = measure_invariance(
        model, random_images(n, size=8, seed=k), [t], grid_size=k, batch_size=4, forward_batch=10, feature_cache_mb=0
    )
    assert r["brightness"].n_pairs == n * k
    assert max(model.sizes) <= 10 and max(t.images) <= 10
    assert sum(t.images) == n * k


def _torchrun(nproc, args, out):
    env = {**os.environ, "PYTHONPATH": TESTS + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "-m",
        "invfast",
        *args,
        "--out",
        str(out),
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return json.loads((out / "result.json").read_text())


CLI = MEASURE_CLI


def _same_result(a, b):
    assert [t["name"] for t in a["transforms"]] == [t["name"] for t in b["transforms"]]
    for ta, tb in zip(a["transforms"], b["transforms"]):
        assert ta["n_images"] == tb["n_images"]
        assert ta["mean_distance"] == pytest.approx(tb["mean_distance"], rel=1e-6)
        assert ta["mean_cosine"] == pytest.approx(tb["mean_cosine"], rel=1e-5, abs=1e-6)


def test_torchrun_one_process_joins_a_group_and_equals_plain_run(tmp_path):
    from invfast.cli import main

    d = image_folder(tmp_path / "imgs", n=30)  # N > D = 24: well conditioned, so thread counts cannot matter
    assert main(CLI + ["--data", f"folder:{d}", "--out", str(tmp_path / "plain")]) == 0
    plain = json.loads((tmp_path / "plain" / "result.json").read_text())
    # world size 1 under torchrun: the gloo group is initialised (NCCL on a GPU) and the numbers are the same
    one = _torchrun(1, CLI + ["--data", f"folder:{d}", "--workers", "1"], tmp_path / "tr1")
    assert one["meta"]["world_size"] == 1
    _same_result(plain, one)


@pytest.mark.slow
def test_torchrun_two_gloo_processes_equal_one(tmp_path):
    d = image_folder(tmp_path / "imgs", n=36)  # N > D = 24: the merged statistics are well conditioned
    one = _torchrun(1, CLI + ["--data", f"folder:{d}"], tmp_path / "tr1")
    two = _torchrun(2, CLI + ["--data", f"folder:{d}"], tmp_path / "tr2")
    assert two["meta"]["world_size"] == 2
    _same_result(one, two)


def test_cli_rejects_negative_workers(tmp_path, capsys):
    from invfast.cli import main

    d = image_folder(tmp_path / "imgs", n=3)
    assert main(CLI + ["--data", f"folder:{d}", "--out", str(tmp_path / "o"), "--workers", "-1"]) == 2
    assert "--workers must be an integer >= 0, got -1" in capsys.readouterr().err


def test_views_made_ahead_on_a_thread_give_the_same_numbers(one_thread):
    """The background view producer (CPU default) changes when views are made, not what is scored."""
    x = random_images(11, size=8, seed=3)
    kw = dict(grid_size=4, batch_size=4, forward_batch=6, layers=None)
    a = measure_invariance(small_net(dim=5), x, [Rot90(), Brightness()], overlap=True, **kw)
    b = measure_invariance(small_net(dim=5), x, [Rot90(), Brightness()], overlap=False, **kw)
    for name in ("rot90", "brightness"):
        torch.testing.assert_close(a[name].per_image_cosine, b[name].per_image_cosine, rtol=0, atol=0)
        torch.testing.assert_close(a[name].cosine, b[name].cosine, rtol=0, atol=0)


@pytest.mark.parametrize("stats_given", [False, True])
def test_the_model_never_runs_with_autograd_recording(stats_given):
    """A model whose parameters require grad runs without an autograd graph in every pass. The reference
    pass recorded one per batch and the statistics held it, every batch's activations, until the run ended."""
    from invfast.stats import FeatureStats

    x = random_images(9, size=8, seed=5)
    net = small_net(dim=5)
    assert all(p.requires_grad for p in net.parameters())
    stats = None
    if stats_given:
        with torch.no_grad():
            stats = FeatureStats().update(net(x.float() / 255)).finalize(shrinkage="ledoit-wolf")
    modes: list[bool] = []
    net.register_forward_pre_hook(lambda m, a: modes.append(torch.is_grad_enabled()))
    measure_invariance(net, x, [Rot90(), Brightness()], stats=stats, grid_size=4, batch_size=4, forward_batch=6)
    assert modes and not any(modes), modes


def test_statistics_hold_no_autograd_graph():
    """FeatureStats.update takes features that require grad without keeping their graph."""
    from invfast.stats import FeatureStats

    w = torch.randn(6, 4, requires_grad=True)
    st = FeatureStats().update(torch.randn(20, 6) @ w).update(torch.randn(15, 6) @ w).finalize()
    assert not any(t.requires_grad for t in (st.mean, st.m2, st.m3, st.m4, st.whitener_))


def test_view_thread_only_where_a_core_is_left_over(monkeypatch):
    """overlap=None starts the CPU view thread only where the process may use more cores than torch's
    intra-op threads (otherwise it preempts a model thread); overlap=True / False decide it outright."""
    from types import SimpleNamespace

    from invfast.measure import scoring

    def producer(overlap, cores, threads):
        monkeypatch.setattr(scoring.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
        monkeypatch.setattr(scoring.torch, "get_num_threads", lambda: threads)
        run = SimpleNamespace(device=torch.device("cpu"), cfg=SimpleNamespace(overlap=overlap))
        with scoring._ViewProducer(run) as p:
            return p.pool is not None

    assert not producer(None, cores=2, threads=2)
    assert producer(None, cores=4, threads=2)
    assert producer(True, cores=2, threads=2)
    assert not producer(False, cores=8, threads=1)


def test_without_a_feature_cache_each_reference_batch_runs_once_per_transform():
    """feature_cache_mb=0: the reference images are recomputed for each transform, once; whitening them must
    not run them through the model a second time."""
    x = random_images(9, size=8, seed=5)  # 3 batches of <= 4 images
    net = small_net(dim=5)
    calls: list[int] = []
    net.register_forward_pre_hook(lambda m, a: calls.append(a[0].shape[0]))
    kw = dict(grid_size=4, batch_size=4, forward_batch=64, feature_cache_mb=0, split_forward=False)  # one call a chunk
    measure_invariance(net, x, [Rot90(), Brightness()], **kw)
    # statistics pass: 3 batches; each transform: 3 reference batches, then its 9 x 4 views in one call
    assert calls == [4, 4, 1] + 2 * [4, 4, 1, 36], calls
