"""Hyper-ResNet benchmarks (issue 6).

1. All kernels of Hyper-ResNet-50 for B = 1 and B = 8 descriptors: the batched op
   (``invfast.ops.hyper.generate``, one call) vs the per-kernel loop a user would write from the
   paper (52 hypernetworks ``Linear(16->32) . ReLU . Linear(32->out*in*kh*kw)`` called one after
   another, each on the batch of descriptors). Reports the speed-up and the rate at which the
   hypernetwork output layers (the 774M parameters) are read, against the machine's memory
   bandwidth measured in the same run by a large tensor copy.
2. Frozen Hyper-ResNet-18 forward vs a plain ResNet-18 forward (CIFAR stem, eval, batch 32).

Sizes: INVFAST_BENCH_HYPER_WIDTH (default 64 = the real ResNet-50, 3.1 GB of hypernetwork
weights; e.g. 16 runs in seconds), INVFAST_BENCH_FROZEN_BATCH (default 32).
Run: python -m pytest benchmarks/bench_hyper.py --benchmark-only -o addopts=""
"""
from __future__ import annotations

import gc
import os
import time

import pytest
import torch
import torch.nn.functional as F

from invfast.models import HyperResNet, ResNet

WIDTH = int(os.environ.get("INVFAST_BENCH_HYPER_WIDTH", "64"))
FROZEN_BATCH = int(os.environ.get("INVFAST_BENCH_FROZEN_BATCH", "32"))
_results: dict[tuple, float] = {}


def copy_bandwidth(nbytes: int = 1 << 29, reps: int = 3) -> float:
    """Best-of-reps bytes moved per second (read + write) by a large float32 tensor copy."""
    src = torch.ones(nbytes // 4)
    dst = torch.zeros_like(src)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best


def per_kernel_loop(model: HyperResNet, i: torch.Tensor) -> list[torch.Tensor]:
    """The paper's generation: one hypernetwork call per kernel, one after another."""
    out = []
    for l, spec in enumerate(model.specs):
        e = F.linear(i, model.embed[model.block_of_kernel[l]])
        h = F.relu(F.linear(e, model.hid_weight[l], model.hid_bias[l]))
        a, b = model.offsets[l], model.offsets[l + 1]
        w = F.linear(h, model.out_weight[a:b], model.out_bias[a:b])
        out.append(w.reshape(i.shape[0], spec.out_ch, spec.in_ch, spec.k, spec.k))
    return out


class TestGenerateResNet50:
    @pytest.fixture(scope="class")
    def model(self):
        torch.manual_seed(0)
        m = HyperResNet(50, inv_dim=2, stem="imagenet", width=WIDTH).eval()
        m.requires_grad_(False)
        yield m
        del m
        gc.collect()

    @pytest.fixture(scope="class")
    def bandwidth(self):
        return copy_bandwidth()

    @pytest.mark.parametrize("b", [1, 8])
    @pytest.mark.parametrize("impl", ["invfast-op", "per-kernel-loop"])
    def test_generate_all_kernels(self, benchmark, model, bandwidth, impl, b):
        i = torch.rand(b, 2, generator=torch.Generator().manual_seed(b))
        fn = (lambda: model.generate_flat(i)) if impl == "invfast-op" else (lambda: per_kernel_loop(model, i))
        with torch.no_grad():
            benchmark.pedantic(fn, rounds=5, iterations=1, warmup_rounds=1)
        t = benchmark.stats.stats.median
        _results[(impl, b)] = t
        hyper_bytes = (model.out_weight.numel() + model.out_bias.numel()) * model.out_weight.element_size()
        benchmark.extra_info.update({
            "hypernetwork_params": sum(p.numel() for p in (model.embed, model.hid_weight, model.hid_bias,
                                                           model.out_weight, model.out_bias)),
            "generated_weights": model.num_generated, "kernels": model.num_kernels, "descriptors": b,
            "weights_read_GBps": hyper_bytes / t / 1e9, "copy_bandwidth_GBps": bandwidth / 1e9,
            "read_fraction_of_copy_bandwidth": hyper_bytes / t / bandwidth,
        })
        other = ("per-kernel-loop" if impl == "invfast-op" else "invfast-op", b)
        if other in _results:
            speedup = _results[("per-kernel-loop", b)] / _results[("invfast-op", b)]
            benchmark.extra_info["speedup_op_vs_loop"] = speedup
            print(f"\nHyper-ResNet-50 (width {WIDTH}) all {model.num_kernels} kernels, B={b}: op "
                  f"{_results[('invfast-op', b)] * 1e3:.1f} ms, loop {_results[('per-kernel-loop', b)] * 1e3:.1f} ms, "
                  f"speed-up {speedup:.2f}x; op reads hypernetwork weights at "
                  f"{hyper_bytes / _results[('invfast-op', b)] / 1e9:.2f} GB/s, copy bandwidth {bandwidth / 1e9:.2f} GB/s")


class TestFrozenResNet18:
    @pytest.fixture(scope="class")
    def models(self):
        torch.manual_seed(0)
        hyper = HyperResNet(18, inv_dim=2, stem="cifar").eval()
        hyper.freeze_weights(torch.tensor([1.0, 0.0]))
        plain = ResNet(18, stem="cifar").eval()
        yield hyper, plain
        del hyper, plain
        gc.collect()

    @pytest.mark.parametrize("impl", ["plain-resnet18", "frozen-hyper-resnet18"])
    def test_forward(self, benchmark, models, impl):
        hyper, plain = models
        x = torch.randn(FROZEN_BATCH, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        fn = (lambda: plain(x)) if impl == "plain-resnet18" else (lambda: hyper(x))
        with torch.no_grad():
            benchmark.pedantic(fn, rounds=5, iterations=1, warmup_rounds=1)
        benchmark.extra_info["batch"] = FROZEN_BATCH
        if impl == "frozen-hyper-resnet18":
            # The ratio from alternating pairs, so that load drift on a shared machine hits both sides.
            pairs = []
            with torch.no_grad():
                for _ in range(5):
                    t0 = time.perf_counter()
                    plain(x)
                    t1 = time.perf_counter()
                    hyper(x)
                    t2 = time.perf_counter()
                    pairs.append((t2 - t1) / (t1 - t0))
            ratio = float(torch.tensor(pairs).median())
            benchmark.extra_info["frozen_over_plain_interleaved_median"] = ratio
            print(f"\nfrozen Hyper-ResNet-18 / plain ResNet-18 forward (batch {FROZEN_BATCH}, 32 px), median of "
                  f"5 alternating pairs: {ratio:.3f}x")
