"""Invariance metrics: fused invariance_scores and streamed uniformity against what a user would
otherwise run (issue: foundation). Sizes: N=1000 images × P=256 parameters × D=2048."""
import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import cosine as scipy_cosine
from scipy.spatial.distance import mahalanobis as scipy_mahalanobis

import invfast as ivf
from conftest import SMALL, best_time

N, P, D = (100, 32, 256) if SMALL else (1000, 256, 2048)


@pytest.fixture(scope="module")
def data():
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(N, D, generator=gen)
    f_t = ref[:, None, :] + 0.5 * torch.randn(N, P, D, generator=gen)
    stats = ivf.FeatureStats().update(ref).finalize()
    return ref, f_t, stats


def plain_torch_scores(ref, f_t, stats):
    """What a user writes in plain torch: explicit Σ⁻¹, its Cholesky, separate ops, materialised differences."""
    vi = torch.linalg.inv(stats.cov_)
    g = torch.linalg.cholesky(vi).float()
    mu = stats.mean.float()
    z_ref = (ref - mu) @ g
    z_t = ((f_t.reshape(-1, D) - mu) @ g).view(N, P, D)
    diff = z_ref[:, None] - z_t
    dist = diff.norm(dim=-1)
    cos = torch.nn.functional.cosine_similarity(z_ref[:, None], z_t, dim=-1)
    return dist, cos


def test_invariance_scores_fused(benchmark, data, record_ratio):
    ref, f_t, stats = data
    w, shift = stats.whitening(torch.float32, torch.device("cpu"))
    benchmark.pedantic(lambda: ivf.invariance_scores(ref, f_t, stats), rounds=3, warmup_rounds=1)

    # the floor: one bare matmul of the same shape
    flat = f_t.reshape(-1, D)
    t_mm = best_time(lambda: torch.mm(flat, w), repeat=3)
    record_ratio("invariance_scores vs bare matmul [N*P,D]x[D,D] (floor; >= 0.67 means within 1.5x)", t_mm, ">= 0.67")

    t_torch = best_time(lambda: plain_torch_scores(ref, f_t, stats), repeat=2)
    record_ratio("invariance_scores vs plain torch (explicit inverse, separate ops)", t_torch, ">= 1.5x")

    # per-pair scipy loop, timed on a subset and scaled to all N*P pairs
    vi = np.linalg.inv(stats.cov_.numpy())
    g = np.linalg.cholesky(vi)
    mu = stats.mean.numpy()
    r64, t64 = ref.double().numpy(), f_t.double().numpy()
    pairs = [(i % N, (i * 7) % P) for i in range(300)]

    def scipy_loop():
        for i, j in pairs:
            scipy_mahalanobis(r64[i], t64[i, j], vi)
            scipy_cosine((r64[i] - mu) @ g, (t64[i, j] - mu) @ g)

    t_pair = best_time(scipy_loop, repeat=1) / len(pairs)
    record_ratio(f"invariance_scores vs per-pair scipy loop ({t_pair * 1e3:.2f} ms/pair, extrapolated)",
                 t_pair * N * P, ">= 100x")


NU, DU = (2000, 64) if SMALL else (20_000, 512)


def test_uniformity_streamed(benchmark, record_ratio):
    x = torch.nn.functional.normalize(torch.randn(NU, DU, generator=torch.Generator().manual_seed(1)), dim=1)
    got = benchmark.pedantic(lambda: ivf.uniformity(x), rounds=2, warmup_rounds=0)

    def pdist_uniformity():
        return torch.pdist(x).pow(2).mul(-2).exp().mean().log()

    ref = pdist_uniformity()
    assert abs(float(got) - float(ref)) < 1e-4
    t = best_time(pdist_uniformity, repeat=2)
    record_ratio(f"uniformity N={NU}, D={DU} vs torch.pdist", t, "> 1x")


@pytest.mark.skipif(SMALL, reason="the 100 000-sample run is the full-size benchmark only")
def test_uniformity_at_100k(benchmark):
    n = 100_000
    x = torch.nn.functional.normalize(torch.randn(n, DU, generator=torch.Generator().manual_seed(2)), dim=1)
    u = benchmark.pedantic(lambda: ivf.uniformity(x), rounds=1, warmup_rounds=0)
    assert math.isfinite(float(u))
    benchmark.extra_info["pdist_bytes_needed"] = n * (n - 1) // 2 * 4
    benchmark.extra_info["note"] = "torch.pdist would need %.0f GB for the condensed matrix alone" % (n * (n - 1) / 2 * 4 / 1e9)
