"""Hyper-ResNet benchmarks (issues 6 and 16).

CPU (always):
1. All 52 kernels of Hyper-ResNet-50 for B = 1, 8 (and 64 with INVFAST_BENCH_HYPER_B64=1)
   descriptors: the batched op (``invfast.ops.hyper.generate``, one call) vs the per-kernel loop a
   user would write from the paper (52 hypernetworks ``Linear(16->32) . ReLU .
   Linear(32->out*in*kh*kw)`` called one after another). The loop runs untimed-by-pytest-benchmark
   but timed by hand in the ``setup`` of every op round, so both sides are measured interleaved
   (load drift on a shared machine hits both); ratios use the minimum of each side.
2. Frozen Hyper-ResNet-18 forward vs a plain ResNet-18 forward (CIFAR stem, eval).
3. Per-sample descriptor formulations (Hyper-ResNet-18, CIFAR stem, eval): one shared descriptor,
   B distinct descriptors with generated kernels + grouped conv, the affine formulation, and 4
   groups of repeated descriptors (batch sorted by descriptor); ratios against one descriptor.

GPU (skipped without CUDA; the compiled op is called directly, whatever the dispatch default):
4. ``hyper_generate`` / ``hyper_generate_backward`` vs the torch reference vs the bytes-moved floor
   (bytes / copy bandwidth measured in the same run) at B = 1, 8, 64, fp32 and bf16; CUDA events.
5. Hyper-ResNet-50 vs ResNet-50 images/s (bf16 autocast, channels_last): forward with one
   descriptor, with per-sample distinct descriptors (generate and affine), and a training step.

Sizes: INVFAST_BENCH_HYPER_WIDTH (default 64 = the real ResNet-50, 3.1 GB of hypernetwork weights),
INVFAST_BENCH_FROZEN_BATCH (default 32); INVFAST_BENCH_SMALL=1 shrinks the model-level cases.
Run: python -m pytest benchmarks/bench_hyper.py --benchmark-only -o addopts=""
"""

from __future__ import annotations

import gc
import os
import time

import pytest
import torch
import torch.nn.functional as F
from conftest import SMALL  # noqa: E402

from invfast import backend
from invfast.models import HyperResNet, ResNet
from invfast.ops import hyper

WIDTH = int(os.environ.get("INVFAST_BENCH_HYPER_WIDTH", "64"))
FROZEN_BATCH = int(os.environ.get("INVFAST_BENCH_FROZEN_BATCH", "32"))
GEN_BATCHES = [1, 8] + ([64] if os.environ.get("INVFAST_BENCH_HYPER_B64") else [])
HAS_CUDA_OP = torch.cuda.is_available() and "hyper_generate" in backend.compiled_ops()


def copy_bandwidth(nbytes: int = 1 << 29, reps: int = 3, device: str = "cpu") -> float:
    """Best-of-reps bytes moved per second (read + write) by a large float32 tensor copy."""
    src = torch.ones(nbytes // 4, device=device)
    dst = torch.zeros_like(src)
    best = float("inf")
    for _ in range(reps):
        _sync(device)
        t = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best


def _sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def per_kernel_loop(model: HyperResNet, i: torch.Tensor) -> list[torch.Tensor]:
    """The paper's generation: one hypernetwork call per kernel, one after another."""
    out = []
    for j, spec in enumerate(model.specs):
        e = F.linear(i, model.embed[model.block_of_kernel[j]])
        h = F.relu(F.linear(e, model.hid_weight[j], model.hid_bias[j]))
        a, b = model.offsets[j], model.offsets[j + 1]
        w = F.linear(h, model.out_weight[a:b], model.out_bias[a:b])
        out.append(w.reshape(i.shape[0], spec.out_ch, spec.in_ch, spec.k, spec.k))
    return out


def _interleaved(benchmark, fn, baseline, rounds: int = 5) -> float:
    """Benchmark fn; baseline runs (timed by hand) before every round. Returns the baseline's min time."""
    times: list[float] = []

    def setup():
        t = time.perf_counter()
        baseline()
        times.append(time.perf_counter() - t)

    benchmark.pedantic(fn, setup=setup, rounds=rounds, iterations=1, warmup_rounds=1)
    return min(times)


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

    @pytest.mark.parametrize("b", GEN_BATCHES)
    def test_generate_all_kernels(self, benchmark, record_ratio, model, bandwidth, b):
        i = torch.rand(b, 2, generator=torch.Generator().manual_seed(b))
        with torch.no_grad():
            loop_s = _interleaved(benchmark, lambda: model.generate_flat(i), lambda: per_kernel_loop(model, i))
        op_s = benchmark.stats.stats.min
        hyper_bytes = (model.out_weight.numel() + model.out_bias.numel()) * model.out_weight.element_size()
        floor_s = (hyper_bytes + b * model.num_generated * model.out_weight.element_size()) / (bandwidth / 2)
        benchmark.extra_info.update(
            {
                "generated_weights": model.num_generated,
                "kernels": model.num_kernels,
                "descriptors": b,
                "op_min_s": op_s,
                "loop_min_s": loop_s,
                "weights_read_GBps": hyper_bytes / op_s / 1e9,
                "copy_bandwidth_GBps": bandwidth / 1e9,
                "bytes_floor_s_at_half_copy_rate": floor_s,
            }
        )
        ratio = record_ratio(f"CPU generate Hyper-ResNet-50 w{WIDTH} B={b}: op vs per-kernel loop", loop_s, ">= 1.5x")
        print(
            f"\nHyper-ResNet-50 (width {WIDTH}) all {model.num_kernels} kernels, B={b}: op {op_s * 1e3:.1f} ms, "
            f"loop {loop_s * 1e3:.1f} ms (min, interleaved), speed-up {ratio:.2f}x; op reads the hypernetwork "
            f"weights at {hyper_bytes / op_s / 1e9:.2f} GB/s, copy bandwidth {bandwidth / 1e9:.2f} GB/s"
        )


class TestFrozenResNet18:
    @pytest.fixture(scope="class")
    def models(self):
        torch.manual_seed(0)
        hyper_m = HyperResNet(18, inv_dim=2, stem="cifar").eval()
        hyper_m.freeze_weights(torch.tensor([1.0, 0.0]))
        plain = ResNet(18, stem="cifar").eval()
        yield hyper_m, plain
        del hyper_m, plain
        gc.collect()

    def test_forward(self, benchmark, record_ratio, models):
        hyper_m, plain = models
        x = torch.randn(FROZEN_BATCH, 3, 32, 32, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            plain_s = _interleaved(benchmark, lambda: hyper_m(x), lambda: plain(x))
        benchmark.extra_info["batch"] = FROZEN_BATCH
        record_ratio(f"CPU frozen Hyper-ResNet-18 vs ResNet-18 forward, batch {FROZEN_BATCH}", plain_s, "~1x")


PS_BATCH = 8 if SMALL else 16
PS_WIDTH = 16 if SMALL else 32


class TestPerSampleFormulations:
    """Hyper-ResNet-18 (CIFAR stem, width PS_WIDTH, 32 px, eval, batch PS_BATCH) on the CPU."""

    @pytest.fixture(scope="class")
    def setup_(self):
        torch.manual_seed(0)
        m = HyperResNet(18, inv_dim=2, stem="cifar", width=PS_WIDTH).eval()
        x = torch.randn(PS_BATCH, 3, 32, 32, generator=torch.Generator().manual_seed(1))
        i = torch.rand(PS_BATCH, 2, generator=torch.Generator().manual_seed(2))
        yield m, x, i
        del m
        gc.collect()

    @pytest.mark.parametrize("case", ["distinct-generate", "distinct-affine", "4-groups-generate"])
    def test_per_sample(self, benchmark, record_ratio, setup_, case):
        m, x, i = setup_
        if case.startswith("4-groups"):
            i = i[torch.arange(PS_BATCH) % 4]
        m.per_sample = case.rsplit("-", 1)[1]
        with torch.no_grad():
            one_s = _interleaved(benchmark, lambda: m(x, i), lambda: m(x, i[0]))
        m.per_sample = "generate"
        record_ratio(
            f"CPU Hyper-ResNet-18 w{PS_WIDTH} B={PS_BATCH} per-sample {case} vs one descriptor", one_s, "informative"
        )


# ----------------------------------------------------------------------------------------- GPU
cuda_only = pytest.mark.skipif(not HAS_CUDA_OP, reason="needs CUDA and invfast built with CUDA")


def _record(record_ratio, benchmark, label: str, ratio: float, goal: str) -> None:
    """Record a ratio measured outside pytest-benchmark (record_ratio divides by the benchmark's min)."""
    record_ratio(label, ratio * benchmark.stats.stats.min, goal)


def _cuda_time(fn, reps: int = 10) -> float:
    """Median seconds of fn over reps, CUDA events, after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


@cuda_only
class TestGenerateGPU:
    @pytest.fixture(scope="class")
    def problem(self):
        torch.manual_seed(0)
        m = HyperResNet(50, inv_dim=2, stem="imagenet", width=16 if SMALL else 64)
        offsets = m.offsets
        weight, bias = m.out_weight.detach().cuda(), m.out_bias.detach().cuda()
        del m
        gc.collect()
        bw = copy_bandwidth(1 << 30, reps=5, device="cuda")
        yield weight, bias, offsets, bw
        del weight, bias
        torch.cuda.empty_cache()

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
    @pytest.mark.parametrize("b", [1, 8, 64])
    @pytest.mark.parametrize("direction", ["forward", "backward"])
    def test_op_vs_reference_vs_floor(self, benchmark, record_ratio, problem, dtype, b, direction):
        weight32, bias32, offs, bw = problem
        weight, bias = weight32.to(dtype), bias32.to(dtype)
        hidden = torch.rand(b, len(offs) - 1, weight.shape[1], device="cuda", dtype=dtype)
        es, n, h = weight.element_size(), weight.shape[0], weight.shape[1]
        if direction == "forward":
            op = lambda: torch.ops.invfast.hyper_generate(hidden, weight, bias, offs)  # noqa: E731
            ref = lambda: hyper.hyper_generate_reference(hidden, weight, bias, offs)  # noqa: E731
            nbytes = (n * h + n + b * n) * es
        else:
            g = torch.randn(b, n, device="cuda", dtype=dtype)
            op = lambda: torch.ops.invfast.hyper_generate_backward(g, hidden, weight, offs)  # noqa: E731
            ref = lambda: hyper.hyper_generate_backward_reference(g, hidden, weight, offs)  # noqa: E731
            nbytes = (b * n + 2 * n * h + n) * es  # read g and weight, write grad_weight and grad_bias
        op_s, ref_s = _cuda_time(op), _cuda_time(ref)
        benchmark.pedantic(op, rounds=3, iterations=1, warmup_rounds=1)
        torch.cuda.synchronize()
        floor_s = nbytes / bw  # nbytes counts reads and writes, as copy_bandwidth does
        benchmark.extra_info.update(
            {"op_median_s": op_s, "reference_median_s": ref_s, "floor_s": floor_s, "copy_bandwidth_GBps": bw / 1e9}
        )
        tag = f"GPU {direction} {str(dtype).split('.')[-1]} B={b}"
        _record(record_ratio, benchmark, f"{tag}: op vs torch reference (medians)", ref_s / op_s, ">= 1.0x")
        print(
            f"\n{tag}: op {op_s * 1e3:.2f} ms, reference {ref_s * 1e3:.2f} ms, floor {floor_s * 1e3:.2f} ms "
            f"(op / floor {op_s / floor_s:.2f}; goal <= {'1.3' if direction == 'forward' else '1.5'})"
        )


@cuda_only
class TestHyperResNet50GPU:
    BATCH = 32 if SMALL else 128
    TRAIN_BATCH = 16 if SMALL else 64
    SIZE = 128 if SMALL else 224

    @pytest.fixture(scope="class")
    def models(self):
        torch.manual_seed(0)
        hyper_m = HyperResNet(50, inv_dim=2, stem="imagenet").cuda().to(memory_format=torch.channels_last)
        plain = ResNet(50, stem="imagenet").cuda().to(memory_format=torch.channels_last)
        yield hyper_m, plain
        del hyper_m, plain
        torch.cuda.empty_cache()

    def _images_per_s(self, fn, batch):
        return batch / _cuda_time(fn, reps=5)

    @pytest.mark.parametrize("case", ["one-descriptor", "per-sample-generate", "per-sample-affine"])
    def test_forward(self, benchmark, record_ratio, models, case):
        hyper_m, plain = models
        hyper_m.eval()
        plain.eval()
        x = torch.randn(self.BATCH, 3, self.SIZE, self.SIZE, device="cuda").to(memory_format=torch.channels_last)
        i = torch.rand(self.BATCH, 2, device="cuda")
        hyper_m.per_sample = case.rsplit("-", 1)[1] if case.startswith("per-sample") else "generate"
        desc = i[0] if case == "one-descriptor" else i

        def run_hyper():
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16), backend.use("compiled"):
                hyper_m(x, desc)

        def run_plain():
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                plain(x)

        hyper_ips, plain_ips = self._images_per_s(run_hyper, self.BATCH), self._images_per_s(run_plain, self.BATCH)
        benchmark.pedantic(run_hyper, rounds=3, iterations=1, warmup_rounds=1)
        torch.cuda.synchronize()
        benchmark.extra_info.update({"hyper_images_per_s": hyper_ips, "resnet50_images_per_s": plain_ips})
        hyper_m.per_sample = "generate"
        _record(
            record_ratio,
            benchmark,
            f"GPU Hyper-ResNet-50 forward {case} vs ResNet-50 (images/s)",
            hyper_ips / plain_ips,
            ">= 0.9x (one descriptor)",
        )
        print(
            f"\nGPU forward batch {self.BATCH} at {self.SIZE} px, bf16 autocast: Hyper-ResNet-50 {case} "
            f"{hyper_ips:.0f} img/s, ResNet-50 {plain_ips:.0f} img/s"
        )

    def test_training_step(self, benchmark, record_ratio, models):
        hyper_m, plain = models
        hyper_m.train()
        plain.train()
        x = torch.randn(self.TRAIN_BATCH, 3, self.SIZE, self.SIZE, device="cuda").to(memory_format=torch.channels_last)
        i = torch.rand(2, device="cuda")  # AI-MoCo style: one descriptor per step
        opt_h = torch.optim.SGD(hyper_m.parameters(), lr=1e-3)
        opt_p = torch.optim.SGD(plain.parameters(), lr=1e-3)

        def step(model, opt, *args):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16), backend.use("compiled"):
                loss = model(x, *args).float().pow(2).mean()
            loss.backward()
            opt.step()

        hyper_ips = self._images_per_s(lambda: step(hyper_m, opt_h, i), self.TRAIN_BATCH)
        plain_ips = self._images_per_s(lambda: step(plain, opt_p), self.TRAIN_BATCH)
        benchmark.pedantic(lambda: step(hyper_m, opt_h, i), rounds=3, iterations=1, warmup_rounds=1)
        torch.cuda.synchronize()
        benchmark.extra_info.update({"hyper_images_per_s": hyper_ips, "resnet50_images_per_s": plain_ips})
        _record(
            record_ratio,
            benchmark,
            "GPU Hyper-ResNet-50 training step vs ResNet-50 (images/s)",
            hyper_ips / plain_ips,
            ">= 0.6x",
        )
        print(
            f"\nGPU training step batch {self.TRAIN_BATCH}: Hyper-ResNet-50 {hyper_ips:.0f} img/s, "
            f"ResNet-50 {plain_ips:.0f} img/s"
        )
