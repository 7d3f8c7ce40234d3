"""Transforms benchmarks: invfast against what a user would otherwise run, in the same run.

1. A test-transform grid on a batch (issue: the full 256-point grid on 64 images at 224 px):
   invfast ``get(name).apply(images, grid)`` vs a per-image, per-parameter PIL loop (the published
   measurement code). PIL is timed on a random subset of (image, parameter) pairs and scaled to the
   full grid, so the baseline stays affordable; the ratio is per (image, parameter).
2. The Default MoCo-v2 policy, two views, at 224 px (from 256-px images) and at 32 px:
   invfast (torch) vs kornia's equivalent AugmentationSequential vs DALI CPU used naively
   (a pipeline fed from memory, one call per batch), when those packages are installed.
3. The fused policy-view op (csrc/augment, FusedPolicy) against the torch policy path on CPU.
4. GPU sections (skipped without CUDA): the Default policy, two views, batch 256 at 224 px, fused CUDA
   kernels (backend "compiled") vs the torch path vs kornia, in images/s; the 18 test transforms on CUDA, compiled
   kernels vs the torch path (backend "reference"). Sizes: INVFAST_BENCH_GPU_B (256), INVFAST_BENCH_GPU_P (32).

Run:   python -m pytest benchmarks/bench_transforms.py --benchmark-only -o addopts=""
Small: INVFAST_BENCH_SMALL=1 (8 images, 16 grid points); or set INVFAST_BENCH_B / _P / _SIZE / _PIL_PAIRS /
       INVFAST_BENCH_NAMES (comma-separated transforms).
"""

from __future__ import annotations

import ctypes
import os
import random
import time

import numpy as np
import pytest
import torch

import invfast.transforms as T
from invfast.bench import best_time

# This machine's glibc returns every large freed block to the OS, so each fresh torch temporary
# page-faults anew (20x slower elementwise ops here). Keep freed memory for reuse, as a tuned
# deployment (jemalloc/tcmalloc or MALLOC_MMAP_THRESHOLD_) would; INVFAST_BENCH_MALLOC=0 turns this off.
if os.environ.get("INVFAST_BENCH_MALLOC", "1") == "1":
    try:
        _libc = ctypes.CDLL("libc.so.6")
        _libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        _libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    except OSError:
        pass
# PIL runs on one core; so does invfast unless INVFAST_BENCH_THREADS says otherwise.
torch.set_num_threads(int(os.environ.get("INVFAST_BENCH_THREADS", "1")))

from bench_policies import _cuda_kernels, _cuda_time  # noqa: E402  (the policy benchmarks' CUDA timing helpers)
from conftest import SMALL  # noqa: E402

B = int(os.environ.get("INVFAST_BENCH_B", 8 if SMALL else 64))
P = int(os.environ.get("INVFAST_BENCH_P", 16 if SMALL else 256))
SIZE = int(os.environ.get("INVFAST_BENCH_SIZE", 224))
PIL_PAIRS = int(os.environ.get("INVFAST_BENCH_PIL_PAIRS", 64 if SMALL else 256))
NAMES = [n for n in os.environ.get("INVFAST_BENCH_NAMES", ",".join(T.TEST_TRANSFORMS)).split(",") if n]
POLICY_B = int(os.environ.get("INVFAST_BENCH_POLICY_B", 16 if SMALL else 64))


def _photos(n: int, size: int) -> torch.Tensor:
    import skimage.data as d

    names = ("astronaut", "chelsea", "coffee", "rocket")
    imgs = [torch.from_numpy(np.ascontiguousarray(getattr(d, k)()[..., :3])).permute(2, 0, 1)[None] for k in names]
    base = torch.cat([T.preprocess(x, resize=size, crop=size) for x in imgs])
    return base.repeat((n + 3) // 4, 1, 1, 1)[:n].contiguous()


def _grid(name: str, k: int) -> torch.Tensor:
    g = T.get(name).grid(256)
    if g.shape[0] > k:
        g = g[torch.linspace(0, g.shape[0] - 1, k).round().long()]
    return g


# ------------------------------------------------------------------------------------------
# per-image PIL baseline (what Ericsson et al.'s code does, one image and one parameter at a time)


def _pil_op(name: str):
    from PIL import Image, ImageEnhance, ImageFilter, ImageOps

    def affine(im, A, shift=(0.0, 0.0)):
        w, h = im.size
        c = np.array([w / 2.0, h / 2.0])
        b = c - np.asarray(shift)
        off = b - A @ c
        return im.transform(
            (w, h), Image.AFFINE, (A[0, 0], A[0, 1], off[0], A[1, 0], A[1, 1], off[1]), resample=Image.BILINEAR
        )

    def shear(im, p):
        tx, ty = np.tan(np.radians(p[0])), np.tan(np.radians(p[1]))
        return affine(im, np.array([[1 + tx * ty, tx], [ty, 1.0]]))

    def crop(im, p):
        w, h = im.size
        top, left, hh, ww = p
        return im.resize((w, h), Image.BILINEAR, box=(left * w, top * h, (left + ww) * w, (top + hh) * h))

    def hue(im, p):
        hsv = np.array(im.convert("HSV"))
        hsv[..., 0] = (hsv[..., 0].astype(np.int32) + int(round(p * 255))) % 256
        return Image.fromarray(hsv, "HSV").convert("RGB")

    def deform(im, p):
        import scipy.ndimage as ndi

        a = np.asarray(im).astype(np.float32)
        h, w = a.shape[:2]
        rng = np.random.default_rng(0)
        dx = ndi.gaussian_filter(rng.uniform(-1, 1, (h, w)), p, mode="wrap")
        dy = ndi.gaussian_filter(rng.uniform(-1, 1, (h, w)), p, mode="wrap")
        yy, xx = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        out = [ndi.map_coordinates(a[..., c], [yy + dy, xx + dx], order=1) for c in range(3)]
        return Image.fromarray(np.stack(out, -1).astype(np.uint8))

    ops = {
        "crop": crop,
        "hflip": lambda im, p: im.transpose(Image.FLIP_LEFT_RIGHT) if p else im.copy(),
        "vflip": lambda im, p: im.transpose(Image.FLIP_TOP_BOTTOM) if p else im.copy(),
        "scale": lambda im, p: affine(im, np.eye(2) / p),
        "shear": shear,
        "rotation": lambda im, p: im.rotate(p, resample=Image.BILINEAR),
        "translation": lambda im, p: affine(im, np.eye(2), p),
        "deform": deform,
        "grayscale": lambda im, p: im.convert("L").convert("RGB") if p else im.copy(),
        "brightness": lambda im, p: ImageEnhance.Brightness(im).enhance(p),
        "contrast": lambda im, p: ImageEnhance.Contrast(im).enhance(p),
        "saturation": lambda im, p: ImageEnhance.Color(im).enhance(p),
        "hue": hue,
        "blur": lambda im, p: im.filter(ImageFilter.GaussianBlur(p)),
        "sharpness": lambda im, p: ImageEnhance.Sharpness(im).enhance(p),
        "equalize": lambda im, p: ImageOps.equalize(im) if p else im.copy(),
        "posterize": lambda im, p: ImageOps.posterize(im, int(p)),
        "invert": lambda im, p: ImageOps.invert(im) if p else im.copy(),
    }
    return ops[name]


def _pil_time_per_pair(name: str, images: torch.Tensor, grid: torch.Tensor, pairs: int) -> float:
    from PIL import Image

    op = _pil_op(name)
    pils = [Image.fromarray(x.permute(1, 2, 0).numpy()) for x in images]
    params = grid.tolist()
    rng = random.Random(0)
    chosen = [(rng.randrange(len(pils)), rng.randrange(len(params))) for _ in range(pairs)]
    t0 = time.perf_counter()
    for i, j in chosen:
        np.asarray(op(pils[i], params[j]))
    return (time.perf_counter() - t0) / pairs


@pytest.mark.parametrize("name", NAMES)
def test_grid_vs_pil(benchmark, name):
    images = _photos(B, SIZE)
    grid = _grid(name, P)
    t = T.get(name)
    chunk = 32  # parameters per call, so the [B, P, 3, H, W] output of a full grid is never held at once

    def run():
        for s in range(0, grid.shape[0], chunk):
            t.apply(images, grid[s : s + chunk])

    benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)
    pairs = B * grid.shape[0]
    ours = benchmark.stats.stats.mean / pairs
    pil = _pil_time_per_pair(name, images, grid, min(PIL_PAIRS, pairs))
    benchmark.extra_info.update(
        {
            "images": B,
            "grid_points": int(grid.shape[0]),
            "size": SIZE,
            "invfast_ms_per_image_param": ours * 1e3,
            "pil_ms_per_image_param": pil * 1e3,
            "pil_full_grid_s_estimate": pil * pairs,
            "speedup_vs_pil": pil / ours,
        }
    )
    print(
        f"\n{name:12s} B={B} P={grid.shape[0]} {SIZE}px: invfast {ours * 1e3:.3f} ms, PIL {pil * 1e3:.3f} ms "
        f"per image-param -> {pil / ours:.1f}x"
    )


def _time(fn, repeats: int = 2) -> float:
    fn()  # warm-up
    return best_time(fn, repeats)


# ------------------------------------------------------------------------------------------
# the compiled affine warp (csrc/augment) against the torch path it replaces


@pytest.mark.parametrize("name", ["rotation", "scale"])
def test_compiled_warp_vs_torch_path(benchmark, name):
    import invfast.backend as backend

    if "warp_affine" not in backend.compiled_ops():
        pytest.skip("compiled core without warp_affine")
    images = _photos(B, SIZE)
    grid = _grid(name, min(P, 32))
    t = T.get(name)
    benchmark.pedantic(lambda: t.apply(images, grid), rounds=2, iterations=1, warmup_rounds=1)
    ours = benchmark.stats.stats.min
    with backend.use("reference"):
        ref = _time(lambda: t.apply(images, grid))
    benchmark.extra_info.update({"compiled_s": ours, "torch_path_s": ref, "speedup_vs_torch_path": ref / ours})
    print(
        f"\n{name} warp B={B} P={grid.shape[0]} {SIZE}px: compiled {ours * 1e3:.1f} ms, torch path "
        f"{ref * 1e3:.1f} ms -> {ref / ours:.1f}x"
    )


# ------------------------------------------------------------------------------------------
# the torch path's blur (matrix products) against direct convolution, on each device


def _conv_blur_2d(x: torch.Tensor, k1: torch.Tensor) -> torch.Tensor:
    """torchvision's ``gaussian_blur`` algorithm: reflect padding, one depthwise conv2d with the outer product."""
    R = (k1.shape[0] - 1) // 2
    C = x.shape[1]
    k2 = torch.outer(k1, k1).expand(C, 1, -1, -1)
    return torch.nn.functional.conv2d(torch.nn.functional.pad(x, (R, R, R, R), mode="reflect"), k2, groups=C)


def _conv_blur_separable(x: torch.Tensor, k1: torch.Tensor) -> torch.Tensor:
    """The same blur as two depthwise 1-D convolutions (invfast's torch path before the matrix products)."""
    R = (k1.shape[0] - 1) // 2
    C = x.shape[1]
    F = torch.nn.functional
    h = F.conv2d(F.pad(x, (R, R, 0, 0), mode="reflect"), k1.view(1, 1, 1, -1).expand(C, 1, 1, -1), groups=C)
    return F.conv2d(F.pad(h, (0, 0, R, R), mode="reflect"), k1.view(1, 1, -1, 1).expand(C, 1, -1, 1), groups=C)


@pytest.mark.parametrize("dev", ["cpu", "cuda"])
def test_blur_torch_path_vs_direct_convolution(benchmark, record_ratio, dev):
    """``functional.blur_grid`` (two matrix products per sigma, every sigma at once) against direct convolution
    with each sigma's own radius, float32 images at 224 px, sigma 0.5..20 px (the blur test grid's range):
    torchvision's 2-D depthwise convolution, and the separable 1-D pair."""
    from invfast.ops.kernels import gaussian_taps
    from invfast.transforms import functional as Fn

    if dev == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    x = (_photos(4 if SMALL else 16, SIZE).float() / 255).to(dev)
    sigma = torch.linspace(0.5, 5.0 if SMALL else 20.0, 4 if SMALL else 8, dtype=torch.float64)
    taps = [gaussian_taps(s.view(1))[0].float().to(dev) for s in sigma]

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    def direct(conv):
        return lambda: ([conv(x, k) for k in taps], sync())

    benchmark.pedantic(lambda: (Fn.blur_grid(x, sigma.to(dev)), sync()), rounds=3, iterations=1, warmup_rounds=1)
    record_ratio(f"blur grid on {dev}: torchvision's 2-D conv / invfast", _time(direct(_conv_blur_2d), 1), "> 1x")
    record_ratio(f"blur grid on {dev}: separable 1-D convs / invfast", _time(direct(_conv_blur_separable), 2), "> 1x")


# ------------------------------------------------------------------------------------------
# GPU sections (skipped without CUDA)

GPU_B = int(os.environ.get("INVFAST_BENCH_GPU_B", 256))
GPU_P = int(os.environ.get("INVFAST_BENCH_GPU_P", 32))
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("name", NAMES)
def test_cuda_test_transforms(benchmark, name):
    dev = torch.device("cuda")
    images = _photos(min(B, 64), SIZE).to(dev)
    grid = _grid(name, min(P, GPU_P)).to(dev)
    t = T.get(name)
    with _cuda_kernels(True):
        benchmark.pedantic(
            lambda: (t.apply(images, grid), torch.cuda.synchronize()), rounds=3, iterations=1, warmup_rounds=1
        )
    ours = benchmark.stats.stats.min
    with _cuda_kernels(False):
        ref = _cuda_time(lambda: t.apply(images, grid), 3)
    pairs = images.shape[0] * grid.shape[0]
    benchmark.extra_info.update(
        {"kernel_pairs_per_s": pairs / ours, "torch_path_pairs_per_s": pairs / ref, "speedup_vs_torch_path": ref / ours}
    )
    print(
        f"\nCUDA {name}: B={images.shape[0]} P={grid.shape[0]} {SIZE}px: kernels {pairs / ours:.0f} pairs/s, "
        f"torch path {pairs / ref:.0f} pairs/s ({ref / ours:.2f}x)"
    )
