"""End-to-end invariance measurement (issue 8): images x parameters per second of
``invfast.measure_invariance`` with ResNet-18-CIFAR at 32 px, against

1. the bare backbone forward on the same inputs (the transformed images, pre-made and normalised,
   plus the reference images) -- goal: transforms + metrics add <= 25 %;
2. what the published code does: per-image PIL transforms, the model on one image's transformed
   versions at a time, and per-pair scipy ``mahalanobis`` / ``cosine`` with an explicit Σ⁻¹ --
   goal >= 20x. The baseline runs on a subset of the images and is extrapolated linearly (its
   cost is per image and per pair, so the extrapolation is exact up to noise); the record says so.

Sizes: N = 64 images, grid k = 16, 11 transforms with a PIL equivalent (INVFAST_BENCH_SMALL=1:
N = 16, k = 4; INVFAST_BENCH_MEASURE_N / _K / _BASELINE_N override). The model is
``invfast.models.create('resnet18-cifar')`` (recorded in extra_info['model']).
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest
import torch
from conftest import SMALL
from scipy.spatial.distance import cosine as scipy_cosine
from scipy.spatial.distance import mahalanobis as scipy_mahalanobis

from invfast import models
from invfast.bench import best_time
from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
from invfast.measure import measure_invariance

N = int(os.environ.get("INVFAST_BENCH_MEASURE_N", 16 if SMALL else 64))
K = int(os.environ.get("INVFAST_BENCH_MEASURE_K", 4 if SMALL else 16))
BASELINE_N = int(os.environ.get("INVFAST_BENCH_MEASURE_BASELINE_N", 2 if SMALL else 4))
FORWARD_BATCH = 256
TRANSFORMS = (
    "rotation",
    "hflip",
    "grayscale",
    "brightness",
    "contrast",
    "saturation",
    "blur",
    "sharpness",
    "equalize",
    "posterize",
    "invert",
)


def _model() -> tuple[torch.nn.Module, str]:
    torch.manual_seed(0)
    return models.create("resnet18-cifar").eval(), "invfast.models resnet18-cifar"


@pytest.fixture(scope="module")
def setup():
    from invfast import synthetic
    from invfast import transforms as T

    ds = synthetic.Transforms2D(synthetic.builtin_objects(n=10), (), size=32, n=N, seed=0, split="test")
    images = ds.generate(list(range(N)))[0]
    model, label = _model()
    tfs = [T.get(n) for n in TRANSFORMS]
    return images, model, label, tfs


def _normalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return (x.float() / 255 - mean) / std


def _bare_forward_seconds(model, images, tfs) -> tuple[float, int]:
    """Time of the model alone on the reference images and every transformed image, pre-made."""
    inputs = [_normalise(images)]
    for t in tfs:
        inputs.append(_normalise(t.apply(images, t.grid(K)).flatten(0, 1)))
    flat = torch.cat(inputs)

    def run() -> None:
        with torch.inference_mode():
            for s in range(0, flat.shape[0], FORWARD_BATCH):
                model(flat[s : s + FORWARD_BATCH])

    return best_time(run, repeat=2), flat.shape[0] - images.shape[0]


def _pil_op(name: str, p: float):
    from PIL import Image, ImageEnhance, ImageFilter, ImageOps

    if name == "rotation":
        return lambda im: im.rotate(p, resample=Image.BILINEAR)
    if name in ("hflip", "grayscale", "invert", "equalize"):
        op = {
            "hflip": ImageOps.mirror,
            "grayscale": lambda im: ImageOps.grayscale(im).convert("RGB"),
            "invert": ImageOps.invert,
            "equalize": ImageOps.equalize,
        }[name]
        return op if p else (lambda im: im)
    if name in ("brightness", "contrast", "saturation", "sharpness"):
        cls = {
            "brightness": ImageEnhance.Brightness,
            "contrast": ImageEnhance.Contrast,
            "saturation": ImageEnhance.Color,
            "sharpness": ImageEnhance.Sharpness,
        }[name]
        return lambda im: cls(im).enhance(p)
    if name == "blur":
        return lambda im: im.filter(ImageFilter.GaussianBlur(p))
    if name == "posterize":
        return lambda im: ImageOps.posterize(im, max(1, min(8, int(round(p)))))
    raise KeyError(name)


def _baseline_seconds(model, images, tfs, n: int) -> tuple[float, int]:
    """The published approach on the first ``n`` images: PIL per image and parameter, one image's
    transformed versions per forward, scipy per pair with an explicit inverse covariance."""
    from PIL import Image

    t0 = time.perf_counter()
    with torch.inference_mode():
        ref = model(_normalise(images)).double().numpy()  # reference statistics over all images
    mean = ref.mean(0)
    cov = np.cov(ref, rowvar=False)
    cov += 1e-6 * np.trace(cov) / cov.shape[0] * np.eye(cov.shape[0])
    vi = np.linalg.inv(cov)
    g = np.linalg.cholesky(vi)
    pairs = 0
    out = []
    for i in range(n):
        im = Image.fromarray(images[i].permute(1, 2, 0).numpy())
        with torch.inference_mode():
            f0 = model(_normalise(torch.from_numpy(np.asarray(im)).permute(2, 0, 1)[None]))[0].double().numpy()
        for t in tfs:
            views = [np.asarray(_pil_op(t.name, float(p))(im)) for p in t.grid(K).tolist()]
            batch = torch.from_numpy(np.stack(views)).permute(0, 3, 1, 2)
            with torch.inference_mode():
                ft = model(_normalise(batch)).double().numpy()
            for f in ft:
                d = scipy_mahalanobis(f0, f, vi)
                c = 1 - scipy_cosine((f0 - mean) @ g, (f - mean) @ g)
                out.append((d, c))
                pairs += 1
    return time.perf_counter() - t0, pairs


def test_measure_end_to_end(benchmark, setup, record_ratio):
    images, model, label, tfs = setup
    torch.manual_seed(0)

    def ours():
        return measure_invariance(
            model, images, tfs, grid_size=K, batch_size=N, forward_batch=FORWARD_BATCH, device="cpu"
        )

    result = benchmark.pedantic(ours, rounds=2, iterations=1, warmup_rounds=0)
    pairs = sum(t.n_pairs for t in result.transforms.values())
    ours_s = benchmark.stats.stats.min
    fwd_s, fwd_pairs = _bare_forward_seconds(model, images, tfs)
    assert fwd_pairs == pairs
    base_s, base_pairs = _baseline_seconds(model, images, tfs, BASELINE_N)
    base_extrapolated = base_s * pairs / base_pairs
    benchmark.extra_info.update(
        {
            "model": label,
            "images": N,
            "grid_k": K,
            "transforms": list(TRANSFORMS),
            "pairs": pairs,
            "invfast_pairs_per_s": pairs / ours_s,
            "bare_forward_pairs_per_s": pairs / fwd_s,
            "overhead_vs_bare_forward": ours_s / fwd_s - 1,
            "baseline_pairs_per_s": base_pairs / base_s,
            "baseline_images_measured": BASELINE_N,
            "baseline_note": f"per-image PIL + per-pair scipy measured on {BASELINE_N} images, "
            f"extrapolated linearly to {N}",
            "threads": torch.get_num_threads(),
        }
    )
    record_ratio(
        "measure: bare backbone forward / invfast end-to-end (1/1.25 = 0.8 is the goal)",
        fwd_s,
        ">= 0.80 (transforms + metrics add <= 25%)",
    )
    record_ratio(
        f"measure: PIL+scipy per pair (extrapolated from {BASELINE_N} imgs) / invfast", base_extrapolated, ">= 20x"
    )
    print(
        f"\n[bench_measure] {label}; N={N}, k={K}, {len(TRANSFORMS)} transforms, {pairs} pairs; "
        f"invfast {pairs / ours_s:.0f} pairs/s, bare forward {pairs / fwd_s:.0f} pairs/s "
        f"(overhead {100 * (ours_s / fwd_s - 1):.1f}%), PIL+scipy {base_pairs / base_s:.1f} pairs/s "
        f"({base_extrapolated / ours_s:.1f}x slower, extrapolated from {BASELINE_N} images)"
    )


def test_measure_pipeline_without_backbone(benchmark, setup, record_ratio):
    """The same measurement with a near-free model (4x4 patch embedding + pooling, D = 64), so the
    time is the pipeline itself: loading, transforms, whitening, scores, accumulation. This is the
    regime of a GPU-resident backbone, where the per-image PIL and per-pair scipy costs dominate the
    published approach. Not the issue's end-to-end figure: reported separately."""
    images, _, _, tfs = setup
    torch.manual_seed(0)
    cheap = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 4, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()
    ).eval()

    def ours():
        return measure_invariance(
            cheap, images, tfs, grid_size=K, batch_size=N, forward_batch=FORWARD_BATCH, device="cpu"
        )

    result = benchmark.pedantic(ours, rounds=3, iterations=1, warmup_rounds=1)
    pairs = sum(t.n_pairs for t in result.transforms.values())
    base_s, base_pairs = _baseline_seconds(cheap, images, tfs, min(N, 4 * BASELINE_N))
    base_extrapolated = base_s * pairs / base_pairs
    benchmark.extra_info.update(
        {
            "model": "4x4 patch embedding + pooling (near-free)",
            "pairs": pairs,
            "invfast_pairs_per_s": pairs / benchmark.stats.stats.min,
            "baseline_pairs_per_s": base_pairs / base_s,
        }
    )
    record_ratio("measure pipeline only (near-free model): PIL+scipy / invfast", base_extrapolated, ">= 20x")
    print(
        f"\n[bench_measure] pipeline only: invfast {pairs / benchmark.stats.stats.min:.0f} pairs/s, "
        f"PIL+scipy {base_pairs / base_s:.0f} pairs/s"
    )


# ---------------------------------------------------------------------------------------------- pipeline vs backbone
# Issue 14: the measurement of all 18 test transforms against the bare backbone forward on the same
# inputs (goal >= 0.8x, i.e. transforms + scoring + upload <= 25 % overhead). GPU: ResNet-50 bf16
# channels_last at 224 px (skipped without CUDA; unmeasured in this project so far). CPU: the same
# ratio at small sizes in the same run.
PIPE_CPU_N = int(os.environ.get("INVFAST_BENCH_PIPE_CPU_N", 4 if SMALL else 8))
PIPE_CPU_K = int(os.environ.get("INVFAST_BENCH_PIPE_CPU_K", 4))
PIPE_GPU_N = int(os.environ.get("INVFAST_BENCH_PIPE_GPU_N", 256))
PIPE_GPU_K = int(os.environ.get("INVFAST_BENCH_PIPE_GPU_K", 4))
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _photo_crops(n: int, size: int, seed: int = 0) -> torch.Tensor:
    """uint8 [n, 3, size, size]: random crops of the bundled photographs (scikit-image), resized."""
    from skimage import data as skd

    photos = [
        torch.from_numpy(np.ascontiguousarray(getattr(skd, name)())).permute(2, 0, 1).float()
        for name in ("astronaut", "chelsea", "coffee", "rocket")
    ]
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(n, 3, size, size, dtype=torch.uint8)
    for i in range(n):
        im = photos[i % len(photos)]
        h, w = im.shape[1:]
        side = int(torch.randint(min(h, w) // 2, min(h, w) + 1, (1,), generator=g))
        top = int(torch.randint(0, h - side + 1, (1,), generator=g))
        left = int(torch.randint(0, w - side + 1, (1,), generator=g))
        crop = im[None, :, top : top + side, left : left + side]
        out[i] = (
            torch.nn.functional.interpolate(
                crop, size=(size, size), mode="bilinear", antialias=True, align_corners=False
            )[0]
            .round()
            .clamp(0, 255)
            .to(torch.uint8)
        )
    return out


def _pipeline_vs_forward(
    benchmark,
    model,
    images,
    k: int,
    device: torch.device,
    dtype,
    channels_last: bool,
    crop,
    batch_size: int,
    forward_batch: int,
) -> dict:
    """Seconds of ``measure_invariance`` over all 18 transforms and of the bare backbone forward on the
    same inputs (the reference images and every transformed image, pre-made, normalised and cropped
    on the device: only the model runs). The two are timed alternately, 3 rounds each after a
    warm-up, and the best of each is kept, so load on a shared machine hits both alike (the
    measurement ends with its host reads, so its time includes the device work)."""
    import contextlib

    import invfast.transforms as T
    from invfast.measure.extractor import FeatureExtractor

    tfs = [T.get(n) for n in T.TEST_TRANSFORMS]
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model = model.to(device).eval()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)

    def ours():
        return measure_invariance(
            model,
            images,
            tfs,
            grid_size=k,
            batch_size=batch_size,
            forward_batch=forward_batch,
            device=device,
            dtype=dtype,
            channels_last=channels_last,
            crop=crop,
            workers=0,
        )

    result = benchmark.pedantic(ours, rounds=1, iterations=1, warmup_rounds=1)
    pairs = sum(t.n_pairs for t in result.transforms.values())
    prep = FeatureExtractor(model, device, dtype, channels_last, crop, True, forward_batch)
    store = torch.bfloat16 if dtype == torch.bfloat16 else torch.float32
    x = images.to(device)
    inputs = [prep.prepare(x).to(store)]
    with torch.inference_mode():
        for t in tfs:
            xt = t.apply(x, t.grid(k)).flatten(0, 1)
            inputs += [prep.prepare(xt[s : s + forward_batch]).to(store) for s in range(0, xt.shape[0], forward_batch)]
    flat = torch.cat(inputs)
    if channels_last:
        flat = flat.contiguous(memory_format=torch.channels_last)
    del inputs
    ctx = (
        (lambda: torch.autocast(device.type, dtype=dtype))
        if dtype in (torch.bfloat16, torch.float16)
        else contextlib.nullcontext
    )

    def bare():
        with torch.inference_mode(), ctx():
            for s in range(0, flat.shape[0], forward_batch):
                model(flat[s : s + forward_batch])

    bare()
    sync()
    ours_s, fwd_s = benchmark.stats.stats.min, float("inf")
    for _ in range(2):
        for fn in (bare, ours):
            t0 = time.perf_counter()
            fn()
            sync()
            if fn is bare:
                fwd_s = min(fwd_s, time.perf_counter() - t0)
            else:
                ours_s = min(ours_s, time.perf_counter() - t0)
    assert flat.shape[0] - images.shape[0] == pairs
    return {
        "pairs": pairs,
        "measure_s": ours_s,
        "forward_s": fwd_s,
        "measure_images_per_s": pairs / ours_s,
        "forward_images_per_s": pairs / fwd_s,
        "ratio": fwd_s / ours_s,
        "transforms": len(tfs),
    }


def _report(benchmark, record_ratio, label: str, r: dict, **info) -> None:
    benchmark.extra_info.update({**r, **info})
    # record_ratio divides by the benchmark's own best time; the ratio kept is the interleaved one
    record_ratio(
        f"measure/{label}: bare forward / measurement (18 transforms)",
        r["ratio"] * benchmark.stats.stats.min,
        ">= 0.80",
    )
    print(
        f"\n[bench_measure] {label}: {r['pairs']} pairs, measurement {r['measure_images_per_s']:.0f} img/s, bare "
        f"forward {r['forward_images_per_s']:.0f} img/s on the same inputs: {r['ratio']:.2f}x (goal >= 0.8)"
    )


def test_measure_vs_backbone_cpu_small(benchmark, record_ratio):
    """CPU, small sizes: ResNet-50 float32 at 64 px (centre crop 56), all 18 transforms."""
    from invfast import models

    torch.manual_seed(0)
    images = _photo_crops(PIPE_CPU_N, 64)
    # forward_batch 2N: every model call of the measurement carries 2N images (a few image
    # batches x a few parameters), and the bare forward runs the same call size
    r = _pipeline_vs_forward(
        benchmark,
        models.create("resnet50"),
        images,
        PIPE_CPU_K,
        torch.device("cpu"),
        None,
        False,
        56,
        batch_size=PIPE_CPU_N,
        forward_batch=2 * PIPE_CPU_N,
    )
    _report(
        benchmark,
        record_ratio,
        f"cpu ResNet-50 fp32 56px N={PIPE_CPU_N} k={PIPE_CPU_K}",
        r,
        threads=torch.get_num_threads(),
    )


@cuda
def test_measure_vs_backbone_gpu(benchmark, record_ratio):
    """One GPU: ResNet-50 bf16 channels_last at 224 px (256-px images, centre crop 224), all 18
    transforms, images uploaded per batch from pinned host memory."""
    from invfast import models

    torch.manual_seed(0)
    images = _photo_crops(PIPE_GPU_N, 256)
    r = _pipeline_vs_forward(
        benchmark,
        models.create("resnet50"),
        images,
        PIPE_GPU_K,
        torch.device("cuda"),
        torch.bfloat16,
        True,
        224,
        batch_size=64,
        forward_batch=256,
    )
    _report(
        benchmark,
        record_ratio,
        f"cuda ResNet-50 bf16 224px N={PIPE_GPU_N} k={PIPE_GPU_K}",
        r,
        device=torch.cuda.get_device_name(),
    )


# ---------------------------------------------------------------------------------------------- model calls
CALLS = [("resnet50", 160, 16 if SMALL else 64), ("resnet18-cifar", 32, 64 if SMALL else 256)]


@pytest.mark.parametrize("name,px,n", CALLS, ids=[c[0] for c in CALLS])
def test_forward_in_cache_sized_calls_vs_one_model_call(benchmark, record_ratio, default_threads, name, px, n):
    """The measurement's forward passes on the CPU (``FeatureExtractor.features``: the call cut into sub-batches
    whose largest activation fits ``CALL_ACTIVATION_BYTES``, taken by torch's threads at one intra-op thread
    each) against the model called once on the whole batch at torch's default threads, what a user's own loop
    does; same float images, no normalisation. ResNet-50 at 160 px and ResNet-18-CIFAR at 32 px, N images;
    alternating, 3 rounds each, best kept. The features are checked equal to 1e-4 relative first."""
    from invfast.measure.extractor import CALL_ACTIVATION_BYTES, FeatureExtractor

    torch.manual_seed(0)
    model = models.create(name).eval()
    x = _photo_crops(n, px).float().div_(255.0)
    ex = FeatureExtractor(model, torch.device("cpu"), normalize=False, forward_batch=n)

    def ours():
        with torch.inference_mode():
            return ex.features(x)["output"]

    def whole():
        with torch.inference_mode():
            return model(x)

    want, got = whole(), ours()
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))
    benchmark.pedantic(ours, rounds=1, iterations=1)
    ours_s, whole_s = benchmark.stats.stats.min, best_time(whole, 1)
    for _ in range(2):
        ours_s, whole_s = min(ours_s, best_time(ours, 1)), min(whole_s, best_time(whole, 1))
    per_call = ex.images_per_call(x)
    benchmark.extra_info.update(
        {
            "model": name,
            "px": px,
            "images": n,
            "threads": torch.get_num_threads(),
            "images_per_call": per_call,
            "budget_bytes": CALL_ACTIVATION_BYTES,
            "whole_call_s": whole_s,
            "sub_batches_s": ours_s,
        }
    )
    # record_ratio divides by the benchmark's own best time; the ratio kept is over the alternating rounds
    ratio = whole_s / ours_s
    record_ratio(
        f"forward passes: one model call / cache-sized sub-batches ({name} {px}px, N={n})",
        ratio * benchmark.stats.stats.min,
        ">= 1",
    )
    print(f"\n[bench_measure] {name} {px}px N={n}: one call {whole_s:.2f} s, {per_call} images per call {ours_s:.2f} s")
    ex.close()


POOL_MODELS = [("resnet18", 64, 32 if SMALL else 256), ("vgg11-cifar", 32, 32 if SMALL else 256)]


@pytest.mark.parametrize("name,px,n", POOL_MODELS, ids=[c[0] for c in POOL_MODELS])
def test_forward_with_nchw_pools_through_channels_last(benchmark, record_ratio, default_threads, name, px, n):
    """The measurement's forward passes on the CPU (``FeatureExtractor.features``) with its max-pools run on
    channels-last copies (``invfast.measure.cpu_pooling``) against the same extractor with torch's NCHW pool, the
    path every model takes by itself; same images, alternating, 3 rounds each, best kept. The features are
    checked bit-identical first. Also recorded: the stem pool alone, ``F.max_pool2d`` on [32, 64, 32, 32] NCHW."""
    import torch.nn.functional as F

    from invfast.measure.cpu_pooling import nhwc_max_pools
    from invfast.measure.extractor import FeatureExtractor

    torch.manual_seed(0)
    model = models.create(name).eval()
    x = _photo_crops(n, px).float().div_(255.0)
    ex = FeatureExtractor(model, torch.device("cpu"), normalize=False, forward_batch=n)
    hooks = ex._pool_hooks

    def run(on: bool) -> Any:
        ex._pool_hooks = nhwc_max_pools(model) if on else []
        try:
            with torch.inference_mode():
                return ex.features(x)["output"]
        finally:
            for h in ex._pool_hooks:
                h.remove()

    for h in hooks:
        h.remove()
    assert torch.equal(run(True), run(False))
    benchmark.pedantic(lambda: run(True), rounds=1, iterations=1)
    ours_s, plain_s = benchmark.stats.stats.min, best_time(lambda: run(False), 1)
    for _ in range(2):
        ours_s, plain_s = min(ours_s, best_time(lambda: run(True), 1)), min(plain_s, best_time(lambda: run(False), 1))
    y = torch.relu(torch.randn(32, 64, 32, 32))
    pool = torch.nn.MaxPool2d(3, 2, 1)
    nhwc_max_pools(pool)
    with torch.inference_mode():
        pool_plain = best_time(lambda: F.max_pool2d(y, 3, 2, 1), 10)
        pool_ours = best_time(lambda: pool(y), 10)
    benchmark.extra_info.update(
        {
            "model": name,
            "px": px,
            "images": n,
            "threads": torch.get_num_threads(),
            "nchw_pool_forward_s": plain_s,
            "channels_last_pool_forward_s": ours_s,
            "stem_pool_alone_nchw_s": pool_plain,
            "stem_pool_alone_through_channels_last_s": pool_ours,
            "loadavg_1min": os.getloadavg()[0],
        }
    )
    record_ratio(
        f"forward passes: NCHW max-pools / through channels-last ({name} {px}px, N={n})",
        plain_s / ours_s * benchmark.stats.stats.min,
        ">= 1",
    )
    print(
        f"\n[bench_measure] {name} {px}px N={n}: NCHW pools {plain_s:.3f} s, through channels-last {ours_s:.3f} s; "
        f"the stem pool alone {pool_plain * 1e3:.2f} -> {pool_ours * 1e3:.2f} ms; load {os.getloadavg()[0]:.2f}"
    )
    ex.close()


# ---------------------------------------------------------------------------------------------- layers
LAYERS_N = 16 if SMALL else 64
LAYERS_K = 4 if SMALL else 16


def test_measure_four_layers_vs_final_layer(benchmark, record_ratio):
    """Issue 28: four ResNet stages measured together (one forward pass per view, hooks) against the final
    layer alone, same images and grid: goal <= 1.3x the time (ratio >= 0.77). ResNet-18 (ImageNet stem,
    width 64) at 64 px, 4 transforms; the two runs alternate and the best of each is kept."""
    from invfast.models import create

    torch.manual_seed(0)
    model = create("resnet18").eval()
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (LAYERS_N, 3, 64, 64), generator=g, dtype=torch.uint8)
    tfs = ["rotation", "hflip", "brightness", "blur"]
    kw = dict(grid_size=LAYERS_K, batch_size=16, device="cpu", workers=0, shrinkage="ledoit-wolf")

    def final():
        return measure_invariance(model, images, tfs, **kw)

    def four():
        return measure_invariance(model, images, tfs, layers="all", **kw)

    final_s = best_time(final, 2)
    result = benchmark.pedantic(four, rounds=2, iterations=1, warmup_rounds=0)
    final_s = min(final_s, best_time(final, 1))
    assert list(result.layers) == ["layer1", "layer2", "layer3", "layer4"]
    record_ratio(
        f"measure: final layer alone / four layers together (ResNet-18 64px N={LAYERS_N} k={LAYERS_K})",
        final_s,
        ">= 0.77 (four layers <= 1.3x the final layer)",
    )


def test_per_layer_job_at_two_threads_beside_a_competing_process(benchmark, competing_process):
    """Issue 42: the per-layer job (ResNet-18-CIFAR's four stages, rotation, 16 views, 64 px) beside a CPU-bound
    process: 2 torch threads must not be slower than 1 (threads that spin-wait on a taken core made it 1.7-3x
    slower). Each thread count timed twice, alternating; the record holds both best times and their ratio."""
    n = 16 if SMALL else 64
    torch.manual_seed(0)
    model = models.create("resnet18-cifar").eval()
    x = torch.rand(n, 3, 64, 64)
    kw = dict(layers=["layer1", "layer2", "layer3", "layer4"], grid_size=16, device="cpu", progress=False)
    old = torch.get_num_threads()
    best = {1: float("inf"), 2: float("inf")}
    try:
        measure_invariance(model, x[:4], ["rotation"], **kw)  # warm-up
        for _ in range(2):
            for threads in (1, 2):
                torch.set_num_threads(threads)
                t0 = time.perf_counter()
                measure_invariance(model, x, ["rotation"], **kw)
                best[threads] = min(best[threads], time.perf_counter() - t0)
        torch.set_num_threads(2)
        benchmark.pedantic(lambda: measure_invariance(model, x, ["rotation"], **kw), rounds=1, iterations=1)
    finally:
        torch.set_num_threads(old)
    _record_threads(benchmark, n, best[1], best[2], best)


def _record_threads(benchmark, images: int, one: Any, two: Any, best: dict[int, float], **extra: Any) -> None:
    """The record of a 1-thread / 2-thread job beside a busy process: its times (``one``, ``two``: seconds, or lists
    of them) and best 1-thread / best 2-thread time (goal >= 1: two threads never slower than one)."""
    benchmark.extra_info.update(
        {
            **extra,
            "images": images,
            "one_thread_s": one,
            "two_threads_s": two,
            "speedup_ratio_two_threads_vs_one_beside_a_busy_process": best[1] / best[2],
            "goal": ">= 1 (two threads never slower than one)",
            "loadavg_1min": os.getloadavg()[0],
        }
    )


#: the conv-net per-layer job of bench_tmeasures.py (4 blocks, 32 px, 16 rotations, every C×H×W unit), timed at
#: 1 and 2 torch threads alternately in a fresh interpreter (the OpenMP wait policy is read when torch loads)
_THREADS_JOB = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
import torch
from bench_tmeasures import ConvNet4, _images  # the job's net and photo crops, whether or not tmeasures is here
from invfast.measure import measure_invariance

n, rounds = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = ConvNet4().eval()
x = _images(n, 32)
kw = dict(layers=[f"blocks.{i}.1" for i in range(4)], units="elements", grid_size=16, batch_size=32,
          forward_batch=256, normalize=False, device="cpu", workers=0, progress=False)
measure_invariance(model, x, ["rotation"], **kw)  # warm-up
times = {1: [], 2: []}
for _ in range(rounds):
    for threads in (2, 1):
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        measure_invariance(model, x, ["rotation"], **kw)
        times[threads].append(time.perf_counter() - t0)
print(json.dumps(times))
"""


@pytest.mark.parametrize("policy", ["runtime default", "PASSIVE"])
def test_conv_net_job_threads_beside_a_competing_process_by_wait_policy(benchmark, competing_process, policy):
    """Issues 42, 43: the conv-net per-layer job beside a CPU-bound process, at 1 and 2 torch threads, under the
    OpenMP runtime's default wait policy (threads spin before they sleep: what ``import invfast`` in a user's
    program gets) and under ``PASSIVE`` (what ``invfast measure`` sets, invfast/wait_policy.py). Records the
    best time per thread count and 1-thread / 2-thread (goal >= 1: two threads never slower than one)."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if policy == "PASSIVE":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    n, rounds = (64, 1) if SMALL else (500, 3)

    def job() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", _THREADS_JOB, str(n), str(rounds), os.path.dirname(os.path.abspath(__file__))],
            capture_output=True,
            text=True,
            env=env,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}

    times = benchmark.pedantic(job, rounds=1, iterations=1, warmup_rounds=0)
    best = {t: min(v) for t, v in times.items()}
    _record_threads(benchmark, n, times[1], times[2], best, policy=policy)
    print(f"\n[{policy}] 1 thread {times[1]} s, 2 threads {times[2]} s: best 1t / 2t {best[1] / best[2]:.2f}")
