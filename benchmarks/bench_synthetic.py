"""Transforms-2D generation throughput: invfast (batched, compiled per-sample kernels) vs a per-sample
PIL implementation of the same recipe (what the published generator does).

    python -m pytest benchmarks/bench_synthetic.py --benchmark-only -o addopts=""
    INVFAST_BENCH_N=2000 python -m pytest benchmarks/bench_synthetic.py --benchmark-only -o addopts=""   # quick

Recipe: 30 built-in objects, 32 px, three concatenated types rotate U(0, 360), hue U(-0.5, 0.5),
blur (kernel 7, sigma U(0.1, 1.5)), random backgrounds from the built-in bank.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

from invfast import backend
from invfast.synthetic import Transforms2D, builtin_backgrounds, builtin_objects

N = int(os.environ.get("INVFAST_BENCH_N", "50000"))
N_PIL = max(200, N // 25)
SIZE = 32
TRANSFORMS = "rotate,hue,blur"


class PILGenerator:
    """Per-sample PIL pipeline of the same recipe (one Python call chain per image)."""

    def __init__(self, n_objects: int = 30, size: int = SIZE, seed: int = 0):
        from PIL import Image

        ds = Transforms2D(n_objects, (), size=size, n=1)
        canv = ds._canvases  # premultiplied RGBA base layout
        a = canv[:, 3:4]
        rgb = torch.where(a > 0, canv[:, :3] / a.clamp_min(1e-12), torch.zeros_like(canv[:, :3]))
        straight = torch.cat([rgb, a], 1).clamp(0, 1)
        self.objects = [
            Image.fromarray((o.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8), "RGBA") for o in straight
        ]
        bgs = builtin_backgrounds(867, size)
        self.backgrounds = [Image.fromarray(b.permute(1, 2, 0).numpy(), "RGB").convert("RGBA") for b in bgs]
        self.rng = np.random.default_rng(seed)

    def sample(self):
        from PIL import Image, ImageFilter

        r = self.rng
        label = int(r.integers(len(self.objects)))
        obj = self.objects[label].rotate(float(r.uniform(0, 360)), resample=Image.Resampling.BILINEAR)
        hsv = np.array(obj.convert("RGB").convert("HSV"))
        hsv[..., 0] = (hsv[..., 0].astype(np.int16) + int(round(r.uniform(-0.5, 0.5) * 255))) % 256
        rgb = Image.fromarray(hsv, "HSV").convert("RGB")
        obj = Image.merge("RGBA", (*rgb.split(), obj.getchannel("A")))
        obj = obj.filter(ImageFilter.GaussianBlur(radius=float(r.uniform(0.1, 1.5))))
        bg = self.backgrounds[int(r.integers(len(self.backgrounds)))]
        out = Image.alpha_composite(bg, obj).convert("RGB")
        return np.asarray(out), label

    def generate(self, n: int) -> np.ndarray:
        return np.stack([self.sample()[0] for _ in range(n)])


@pytest.fixture(scope="module")
def pil_rate() -> float:
    gen = PILGenerator()
    gen.generate(20)
    t0 = time.perf_counter()
    gen.generate(N_PIL)
    return N_PIL / (time.perf_counter() - t0)


def test_pil_per_sample_baseline(benchmark):
    gen = PILGenerator()
    benchmark.pedantic(gen.generate, args=(N_PIL,), rounds=2, iterations=1, warmup_rounds=0)
    benchmark.extra_info["samples"] = N_PIL
    benchmark.extra_info["samples_per_s"] = N_PIL / benchmark.stats.stats.mean
    print(f"\nPIL per-sample: {N_PIL / benchmark.stats.stats.mean:,.0f} samples/s")


def test_invfast_generate(benchmark, pil_rate):
    builtin_objects(61)
    ds = Transforms2D(30, TRANSFORMS, size=SIZE, n=N, seed=0)
    ds.generate(range(512))
    benchmark.pedantic(ds.generate, args=(range(N),), rounds=3, iterations=1, warmup_rounds=0)
    rate = N / benchmark.stats.stats.mean
    benchmark.extra_info.update(
        samples=N,
        samples_per_s=rate,
        pil_samples_per_s=pil_rate,
        speedup_vs_pil=rate / pil_rate,
        threads=torch.get_num_threads(),
    )
    print(
        f"\ninvfast: {rate:,.0f} samples/s on {torch.get_num_threads()} threads; PIL per-sample: "
        f"{pil_rate:,.0f} samples/s; speed-up {rate / pil_rate:.1f}x"
    )


def test_invfast_generate_reference_backend(benchmark):
    ds = Transforms2D(30, TRANSFORMS, size=SIZE, n=N, seed=0)
    n = max(256, N // 10)
    with backend.use("reference"):
        benchmark.pedantic(ds.generate, args=(range(n),), rounds=2, iterations=1, warmup_rounds=1)
    benchmark.extra_info["samples_per_s"] = n / benchmark.stats.stats.mean
    print(f"\ninvfast torch-reference path: {n / benchmark.stats.stats.mean:,.0f} samples/s")


def test_composite_compiled_vs_torch(benchmark):
    from invfast.ops.synth import composite, synth_composite_reference

    g = torch.Generator().manual_seed(0)
    B = max(256, N // 10)
    a = torch.rand(B, 1, SIZE, SIZE, generator=g)
    obj = torch.cat([torch.rand(B, 3, SIZE, SIZE, generator=g) * a, a], 1)
    bgs = builtin_backgrounds(867, SIZE)
    idx = torch.randint(0, 867, (B,), generator=g)
    synth_composite_reference(obj, bgs, idx)
    t0 = time.perf_counter()
    for _ in range(3):
        synth_composite_reference(obj, bgs, idx)
    torch_s = (time.perf_counter() - t0) / 3
    benchmark.pedantic(composite, args=(obj, bgs, idx), rounds=5, iterations=1, warmup_rounds=1)
    ratio = torch_s / benchmark.stats.stats.mean
    benchmark.extra_info.update(
        torch_reference_s=torch_s, speedup_vs_torch=ratio, compiled="synth_composite" in backend.compiled_ops()
    )
    print(
        f"\ncomposite {B} x {SIZE}px: compiled {benchmark.stats.stats.mean * 1e3:.2f} ms, torch "
        f"{torch_s * 1e3:.2f} ms, {ratio:.1f}x"
    )
