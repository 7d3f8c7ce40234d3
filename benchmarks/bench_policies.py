"""Pretraining-policy benchmarks: two augmented views per image, invfast against what a user would otherwise run,
in the same process, interleaved (one round of each side, best of ``ROUNDS``), so load drift on a shared machine
hits both sides.

1. The Default MoCo-v2 policy (``invfast.transforms.policy("default")``: the fused ``augment_views`` kernel where
   the dispatch table runs it, CPU by default) against kornia's equivalent ``AugmentationSequential`` on float
   images (issue 29: >= 3x at 32 px and at 224 px) and against invfast's own torch-ops path (backend
   'reference'); separately (not interleaved: its executor works ahead on its own threads) against DALI CPU used
   naively (a pipeline fed from memory, one call per batch) where nvidia-dali is installed. 224 px views from
   256-px photographs, 32 px views from 32-px ones, batch ``POLICY_B``.
2. The fused view op (FusedPolicy) against the torch policy path on CPU, Default and Spatial, 224 px.
3. GPU (skipped without CUDA): the Default policy, two views, batch 256 at 224 px, fused CUDA kernels (opted in)
   vs the torch path vs kornia, in images/s.

Run:   python -m pytest benchmarks/bench_policies.py --benchmark-only -o addopts=""
Small: INVFAST_BENCH_SMALL=1 (batch 16). INVFAST_BENCH_POLICY_B sets the batch, INVFAST_BENCH_THREADS the torch
threads (1 by default: kornia and invfast on one core each).
kornia: ``pip install --no-deps kornia kornia_rs`` (no-deps keeps the installed torch).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import platform
import time

import numpy as np
import pytest
import torch
from conftest import SMALL

import invfast.backend as backend
import invfast.dispatch as dispatch
import invfast.transforms as T

# This machine's glibc returns every large freed block to the OS, so each fresh torch temporary
# page-faults anew. Keep freed memory for reuse, as a tuned deployment (jemalloc/tcmalloc or
# MALLOC_MMAP_THRESHOLD_) would, for both sides alike; INVFAST_BENCH_MALLOC=0 turns this off.
if os.environ.get("INVFAST_BENCH_MALLOC", "1") == "1":
    try:
        _libc = ctypes.CDLL("libc.so.6")
        _libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        _libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    except OSError:
        pass
torch.set_num_threads(int(os.environ.get("INVFAST_BENCH_THREADS", "1")))

POLICY_B = int(os.environ.get("INVFAST_BENCH_POLICY_B", 16 if SMALL else 64))
ROUNDS = 3 if SMALL else 5
HAS_KORNIA = importlib.util.find_spec("kornia") is not None
HAS_DALI = importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None


def _machine() -> dict:
    """Where the numbers come from: CPU model, cores, torch threads, load average at the time of the test."""
    model = platform.processor()
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), model)
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "loadavg_1min": os.getloadavg()[0],
        "torch": torch.__version__,
    }


def _photos(n: int, size: int) -> torch.Tensor:
    """n uint8 photographs [n, 3, size, size] (scikit-image's astronaut, chelsea, coffee, rocket, repeated)."""
    import skimage.data as d

    names = ("astronaut", "chelsea", "coffee", "rocket")
    imgs = [torch.from_numpy(np.ascontiguousarray(getattr(d, k)()[..., :3])).permute(2, 0, 1)[None] for k in names]
    base = torch.cat([T.preprocess(x, resize=size, crop=size) for x in imgs])
    return base.repeat((n + 3) // 4, 1, 1, 1)[:n].contiguous()


def _kornia_default(size: int):
    """kornia's equivalent of the Default policy (MoCo v2): the same ops, probabilities and blur range."""
    import kornia.augmentation as K

    k = 2 * int(round(3 * 2.0 * size / 224)) + 1  # covers 3 sigma of the largest blur, like ours
    return K.AugmentationSequential(
        K.RandomResizedCrop((size, size), scale=(0.2, 1.0)),
        K.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
        K.RandomGrayscale(p=0.2),
        K.RandomGaussianBlur((k, k), (0.1 * size / 224, 2.0 * size / 224), p=0.5),
        K.RandomHorizontalFlip(),
        K.Normalize(torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])),
    )


def _interleaved(benchmark, ours, baselines: dict) -> dict[str, float]:
    """Time ``ours`` with pytest-benchmark and each baseline once before each of its rounds (untimed by the
    benchmark, timed here): {name: best seconds}."""
    best = {k: float("inf") for k in baselines}

    def baseline_round() -> None:
        for k, fn in baselines.items():
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)

    ours()
    for fn in baselines.values():  # warm-up: allocations, lazy init, kornia's first-call setup
        fn()
    benchmark.pedantic(ours, setup=baseline_round, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    return best


# ------------------------------------------------------------------------------------------
# 1. Default policy, two views


@pytest.mark.parametrize("size", [32, 224])
def test_default_policy_vs_kornia(benchmark, record_ratio, size):
    src = 256 if size == 224 else 32
    images = _photos(POLICY_B, src)
    pol = T.policy("default", size=size)
    gen = torch.Generator().manual_seed(0)
    baselines = {}
    if HAS_KORNIA:
        aug = _kornia_default(size)
        xf = images.float() / 255
        baselines["kornia"] = lambda: (aug(xf), aug(xf))

    def torch_path():
        with backend.use("reference"):
            pol(images, generator=gen)

    baselines["invfast torch ops"] = torch_path
    best = _interleaved(benchmark, lambda: pol(images, generator=gen), baselines)
    info = {
        "images": POLICY_B,
        "size": size,
        "source_px": src,
        "views": 2,
        **_machine(),
        "fused_kernel": backend.uses_kernel("augment_views", "cpu"),
    }
    benchmark.extra_info.update(info)
    ours = benchmark.stats.stats.min
    msg = f"\nDefault policy, 2 views, B={POLICY_B}, {size}px: invfast {ours * 1e3:.1f} ms"
    if "kornia" in best:
        r = record_ratio(f"Default policy {size}px, 2 views, B={POLICY_B} vs kornia", best["kornia"], ">= 3x")
        msg += f", kornia {best['kornia'] * 1e3:.1f} ms ({r:.2f}x)"
    else:
        msg += ", kornia not installed (pip install --no-deps kornia kornia_rs)"
    r = record_ratio(f"Default policy {size}px, 2 views vs invfast's torch-ops path", best["invfast torch ops"], "> 1x")
    msg += f", torch ops {best['invfast torch ops'] * 1e3:.1f} ms ({r:.2f}x)"
    print(msg + f" [load {info['loadavg_1min']:.1f}]")


@pytest.mark.skipif(not HAS_DALI, reason="nvidia-dali not installed")
@pytest.mark.parametrize("size", [32, 224])
def test_default_policy_vs_dali_cpu(benchmark, record_ratio, size):
    """DALI CPU fed from memory, one pipeline call per two-view batch. Its executor works ahead on its own
    threads (a call can return a batch made in the background), so it is not interleaved with invfast (that
    background work would land in invfast's rounds); its time is the mean per call over consecutive calls after
    a warm-up, i.e. its throughput."""
    from invfast.transforms import dali

    src = 256 if size == 224 else 32
    images = _photos(POLICY_B, src)
    pol = T.policy("default", size=size)
    gen = torch.Generator().manual_seed(0)
    benchmark.pedantic(lambda: pol(images, generator=gen), rounds=ROUNDS, iterations=1, warmup_rounds=1)
    dp = dali.DaliPolicy(pol.config, name="default", batch_size=POLICY_B, num_threads=torch.get_num_threads())
    for _ in range(3):
        dp(images)
    t0 = time.perf_counter()
    for _ in range(2 * ROUNDS):
        dp(images)
    dali_s = (time.perf_counter() - t0) / (2 * ROUNDS)
    benchmark.extra_info.update({"images": POLICY_B, "size": size, "dali_cpu_s": dali_s, **_machine()})
    r = record_ratio(f"Default policy {size}px, 2 views vs DALI CPU (throughput, not interleaved)", dali_s, "")
    print(
        f"\nDefault policy {size}px: invfast {benchmark.stats.stats.min * 1e3:.1f} ms, DALI CPU {dali_s * 1e3:.1f} "
        f"ms per call ({r:.2f}x) [load {os.getloadavg()[0]:.1f}]"
    )


# ------------------------------------------------------------------------------------------
# 2. the fused policy-view op against the torch policy path (CPU)


@pytest.mark.parametrize("name", ["default", "spatial"])
def test_fused_policy_vs_torch_path_cpu(benchmark, record_ratio, name):
    from invfast.transforms.fused import FusedPolicy

    if "augment_views" not in backend.compiled_ops():
        pytest.skip("compiled core without augment_views")
    images = _photos(POLICY_B, 256)
    fused, torch_pol = FusedPolicy(T.policy(name, size=224)), T.policy(name, size=224)
    gen = torch.Generator().manual_seed(0)

    def torch_path():
        with backend.use("reference"):
            torch_pol(images, generator=gen)

    best = _interleaved(benchmark, lambda: fused(images, generator=gen), {"torch": torch_path})
    benchmark.extra_info.update({"images": POLICY_B, **_machine()})
    r = record_ratio(f"{name} policy 224px, 2 views: fused op vs torch-ops path", best["torch"], "> 1x")
    print(
        f"\n{name} policy, 2 views, B={POLICY_B}, 224px, CPU: fused {benchmark.stats.stats.min * 1e3:.1f} ms, "
        f"torch path {best['torch'] * 1e3:.1f} ms -> {r:.2f}x"
    )


# ------------------------------------------------------------------------------------------
# 3. GPU (skipped without CUDA)

GPU_B = int(os.environ.get("INVFAST_BENCH_GPU_B", 256))
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _cuda_time(fn, repeats: int = 5) -> float:
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


@contextlib.contextmanager
def _cuda_kernels(on: bool):
    """Every compiled CUDA kernel this build has (backend 'auto' with ``INVFAST_CUDA_KERNELS=all``: an op without
    a CUDA kernel, blur_u8 for one, runs its torch reference inside a transform whose other ops use kernels;
    backend 'compiled' would refuse it), or the torch references (backend 'reference')."""
    if not on:
        with backend.use("reference"):
            yield
        return
    if not backend.backend_info()["cuda_built"]:
        pytest.skip("invfast was built without CUDA: no kernels to compare with the torch path")
    with pytest.MonkeyPatch.context() as mp, backend.use("auto"):
        mp.setenv(dispatch.CUDA_KERNELS_ENV, "all")
        yield


@cuda
def test_cuda_default_policy_two_views(benchmark):
    from invfast.transforms.fused import FusedPolicy

    dev = torch.device("cuda")
    images = _photos(GPU_B, 256).to(dev)
    fused = FusedPolicy(T.policy("default", size=224), dtype=torch.bfloat16, channels_last=True)
    torch_pol = T.policy("default", size=224)
    gen = torch.Generator().manual_seed(0)
    with _cuda_kernels(True):
        benchmark.pedantic(
            lambda: (fused(images, generator=gen), torch.cuda.synchronize()), rounds=5, iterations=1, warmup_rounds=1
        )
    ours = benchmark.stats.stats.min
    with _cuda_kernels(False):
        torch_s = _cuda_time(lambda: torch_pol(images, generator=gen))
    info = {
        "images": GPU_B,
        "fused_images_per_s": GPU_B / ours,
        "torch_path_images_per_s": GPU_B / torch_s,
        "speedup_vs_torch_path": torch_s / ours,
    }
    msg = (
        f"\nCUDA Default policy, 2 views, B={GPU_B}, 224px: fused {GPU_B / ours:.0f} img/s, torch path "
        f"{GPU_B / torch_s:.0f} img/s ({torch_s / ours:.1f}x)"
    )
    if HAS_KORNIA:
        aug = _kornia_default(224).to(dev)
        xf = images.float() / 255
        kt = _cuda_time(lambda: (aug(xf), aug(xf)))
        info.update({"kornia_images_per_s": GPU_B / kt, "speedup_vs_kornia": kt / ours})
        msg += f", kornia {GPU_B / kt:.0f} img/s ({kt / ours:.1f}x; goal >= 5x and >= 20000 img/s)"
    else:
        msg += ", kornia not installed"
    benchmark.extra_info.update(info)
    print(msg)
