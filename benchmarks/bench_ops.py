"""Every compiled op against its own torch reference, on one device, in the same process: the evidence
behind the dispatch table (``invfast/dispatch.py``, ``invfast info``).

    python -m pytest benchmarks/bench_ops.py --benchmark-only -o addopts=""          # CPU (+ CUDA where present)
    INVFAST_BENCH_SMALL=1 python -m pytest benchmarks/bench_ops.py --benchmark-only -o addopts=""

For each (op, device): ``torch.ops.invfast.<op>`` and ``invfast.backend.reference(<op>)`` are timed on the same
inputs, alternately (one round of each, ``ROUNDS`` times), so load drift on a shared machine hits both sides;
the ratio printed is reference min / kernel min (> 1: the kernel is faster). CPU runs on one torch thread
(the kernels' OpenMP and torch's intra-op pool share that setting), so the ratio does not depend on how
many other jobs share the cores. A table entry becomes an ``auto`` default only where this ratio is > 1
on that device. Sizes are the regimes invfast runs the ops in (see each factory).

    INVFAST_DISPATCH_EVIDENCE=invfast/dispatch_evidence.json python -m pytest benchmarks/bench_ops.py ...

writes each measured ratio, with the run's machine, load and date, into the table's evidence file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import SMALL

from invfast import backend
from invfast.ops import augment, hyper, invariance, synth, transforms_u8  # noqa: F401  (registers the references)

ROUNDS = 3 if SMALL else 5
#: set to the dispatch table's evidence file to record each measured ratio there (review the diff)
EVIDENCE_ENV = "INVFAST_DISPATCH_EVIDENCE"


def _pair_scores(dev: str) -> tuple:
    """invariance_scores' inner op: N=200 images x P=64 parameters x D=512 (whitened features)."""
    n, p, d = (50, 16, 128) if SMALL else (200, 64, 512)
    g = torch.Generator().manual_seed(0)
    z_ref = torch.randn(n, d, generator=g)
    return (
        z_ref.to(dev),
        (z_ref[:, None] + 0.5 * torch.randn(n, p, d, generator=g)).to(dev),
        torch.randn(d, generator=g).to(dev),
    )


def _sqdist_logsumexp(dev: str) -> tuple:
    """uniformity's streamed block: 512 rows against N=4000 unit vectors, D=128."""
    b, n = (128, 1000) if SMALL else (512, 4000)
    x = torch.nn.functional.normalize(torch.randn(n, 128, generator=torch.Generator().manual_seed(0)), dim=1)
    return x[:b].to(dev), x.to(dev), 0, 2.0


def _pairwise_logsumexp(dev: str) -> tuple:
    """uniformity over all pairs: N=2000 float32 rows, D=128, 256-row blocks (issue 29's size)."""
    n = 500 if SMALL else 2000
    return torch.randn(n, 128, generator=torch.Generator().manual_seed(0)).to(dev), 2.0, True, 256


def _knn_sqdist(dev: str) -> tuple:
    """ACR's search: 4000 views (1000 images x 4), D=128, k=10, 256-row blocks."""
    n = 1000 if SMALL else 4000
    return torch.randn(n, 128, generator=torch.Generator().manual_seed(0)).to(dev), 10, True, 256


def _merge_unit_moments(dev: str) -> tuple:
    """The per-unit moments of one chunk of the per-layer measurement with units='elements': 16 images x 16
    views of a 16 x 32 x 32 activation map (16 384 units), float32, merged into running moments."""
    b, v, n = (4 if SMALL else 16), 16, 16 * 32 * 32
    u = torch.randn(b, v, n, generator=torch.Generator().manual_seed(0)).add_(1.0).to(dev)
    z = {"dtype": torch.float64, "device": dev}
    return u, torch.zeros(b, n, **z), torch.zeros(b, n, **z), 16, torch.zeros(v, n, **z), torch.zeros(v, n, **z), 64


def _hyper_problem(dev: str, b: int) -> tuple:
    """Hyper-ResNet-18-like output layer: 20 kernels (3x3, 64..256 channels at width 1/2), H=32."""
    g = torch.Generator().manual_seed(0)
    sizes = [32 * 3 * 49] + [c * c * 9 for c in (32,) * 4 + (64,) * 4 + (128,) * 4 + (128,) * 7]
    offs = [0]
    for s in sizes:
        offs.append(offs[-1] + s)
    hidden = torch.randn(b, len(sizes), 32, generator=g)
    weight = torch.randn(offs[-1], 32, generator=g) * 0.05
    bias = torch.randn(offs[-1], generator=g) * 0.05
    return hidden.to(dev), weight.to(dev), bias.to(dev), offs


def _hyper_generate(dev: str) -> tuple:
    """Hyper-ResNet weight generation: B=8 descriptors, 20 kernels, 1.8M rows, H=32."""
    return _hyper_problem(dev, 1 if SMALL else 8)


def _hyper_generate_backward(dev: str) -> tuple:
    """Its backward at the same sizes (B=8, 1.8M rows, H=32)."""
    hidden, weight, _, offs = _hyper_problem(dev, 1 if SMALL else 8)
    grad = torch.randn(hidden.shape[0], weight.shape[0], generator=torch.Generator().manual_seed(1)).to(dev)
    return grad, hidden, weight, offs


def _synth_batch(dev: str) -> tuple[torch.Tensor, torch.Generator]:
    """Transforms-2D regime: B=512 premultiplied RGBA objects of 32 px, 40 % transparent."""
    b = 128 if SMALL else 512
    g = torch.Generator().manual_seed(0)
    a = torch.rand(b, 1, 32, 32, generator=g)
    a[a < 0.4] = 0
    return torch.cat([torch.rand(b, 3, 32, 32, generator=g) * a, a], 1).to(dev), g


def _synth_color(dev: str) -> tuple:
    """Transforms-2D colour: B=512 RGBA objects of 32 px, a random set of the six colour flags each."""
    pm, g = _synth_batch(dev)
    b = pm.shape[0]
    return (
        pm,
        (torch.rand(b, generator=g) - 0.5).to(dev),
        (torch.rand(b, generator=g) * 2).to(dev),
        (torch.rand(b, generator=g) * 2).to(dev),
        torch.randint(0, 64, (b,), generator=g).to(dev),
        3,
    )


def _synth_blur(dev: str) -> tuple:
    """Transforms-2D blur: B=512 RGBA objects of 32 px, 7 taps each."""
    pm, g = _synth_batch(dev)
    taps = torch.exp(-0.5 * (torch.arange(-3, 4.0).view(1, 7) / (torch.rand(pm.shape[0], 1, generator=g) + 0.3)) ** 2)
    return pm, (taps / taps.sum(1, keepdim=True)).to(dev)


def _synth_warp(dev: str) -> tuple:
    """Transforms-2D placement warp: B=512 RGBA objects of 32 px, random rotations and shifts."""
    pm, g = _synth_batch(dev)
    ang = torch.rand(pm.shape[0], generator=g) * 6.283
    inv = torch.stack([torch.stack([ang.cos(), -ang.sin()], 1), torch.stack([ang.sin(), ang.cos()], 1)], 1)
    return pm, inv.to(dev), (torch.randn(pm.shape[0], 2, generator=g) * 0.2).to(dev), True


def _synth_composite(dev: str) -> tuple:
    """Transforms-2D compositing: B=512 objects of 32 px onto 64 uint8 backgrounds."""
    pm, g = _synth_batch(dev)
    bgs = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, generator=g)
    return pm, bgs.to(dev), torch.randint(0, 64, (pm.shape[0],), generator=g).to(dev)


def _photos(dev: str, b: int, size: int) -> torch.Tensor:
    """b uint8 noise images [b, 3, size, size] (a fixed seed)."""
    return (torch.rand(b, 3, size, size, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8).to(dev)


def _warp_affine(dev: str) -> tuple:
    """Test-transform regime: B=16 uint8 photographs of 96 px through P=32 rotations (fractional maps)."""
    b, size, p = (4, 48, 8) if SMALL else (16, 96, 32)
    ang = torch.linspace(-3.0, 3.0, p, dtype=torch.float64)
    c = (size - 1) / 2.0
    m = torch.zeros(p, 2, 3, dtype=torch.float64)
    m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = ang.cos(), -ang.sin(), ang.sin(), ang.cos()
    m[:, 0, 2] = c - m[:, 0, 0] * c - m[:, 0, 1] * c
    m[:, 1, 2] = c - m[:, 1, 0] * c - m[:, 1, 1] * c
    return _photos(dev, b, size), m.to(dev), size, size, torch.zeros(3, dtype=torch.float64)


def _warp_coords(dev: str) -> tuple:
    """The elastic deform's sampler: identity plus a smooth random displacement, P=8 fields."""
    b, size, p = (4, 48, 4) if SMALL else (16, 96, 8)
    yy, xx = torch.meshgrid(
        torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij"
    )
    disp = torch.nn.functional.interpolate(
        torch.randn(p, 2, 6, 6, generator=torch.Generator().manual_seed(0)) * 3,
        size=(size, size),
        mode="bilinear",
        align_corners=False,
    )
    coords = torch.stack([xx, yy], -1).unsqueeze(0) + disp.permute(0, 2, 3, 1)
    return _photos(dev, b, size), coords.to(dev), torch.zeros(3, dtype=torch.float64)


def _augment_views(dev: str) -> tuple:
    """One Default-policy view batch: B=16 uint8 images of 160 px cropped to 128 px, every stage on for
    the images the policy's probabilities pick (jitter 0.8, grayscale 0.2, blur 0.5, solarize 0.1)."""
    b, size, out = (4, 64, 48) if SMALL else (16, 160, 128)
    g = torch.Generator().manual_seed(0)
    s = (torch.rand(b, generator=g) * 0.5 + 0.5) * size / out
    m = torch.zeros(b, 2, 3)
    m[:, 0, 0], m[:, 1, 1] = s, s
    m[:, 0, 2], m[:, 1, 2] = torch.rand(b, generator=g) * 10, torch.rand(b, generator=g) * 10

    def mask(p: float) -> torch.Tensor:
        return (torch.rand(b, generator=g) < p).to(dev)

    factors = torch.stack([torch.rand(b, generator=g) * 0.8 + 0.6] * 3 + [torch.rand(b, generator=g) * 0.2 - 0.1], 1)
    order = torch.argsort(torch.rand(b, 4, generator=g), 1)
    return (
        _photos(dev, b, size),
        m.to(dev),
        out,
        out,
        mask(0.8),
        factors.to(dev),
        order.to(dev),
        mask(0.2),
        mask(0.5),
        (torch.rand(b, generator=g, dtype=torch.float64) * 1.9 + 0.1).to(dev),
        mask(0.1),
        0.5,
        torch.tensor([0.485, 0.456, 0.406], device=dev),
        torch.tensor([0.229, 0.224, 0.225], device=dev),
        torch.float32,
        False,
    )


def _test_transform_batch(dev: str) -> tuple[torch.Tensor, int]:
    """Test-transform regime (issue 29): B=16 uint8 photographs of 224 px, P=16 grid values."""
    b, size, p = (4, 64, 4) if SMALL else (16, 224, 16)
    return _photos(dev, b, size), p


def _lut_u8(dev: str) -> tuple:
    """Brightness-like tables (general lookups, not byte logic), one per parameter."""
    images, p = _test_transform_batch(dev)
    f = torch.linspace(0.25, 4.0, p).view(p, 1)
    tables = (torch.arange(256.0).view(1, 256) * f).clamp(0, 255).round().to(torch.uint8)
    return images, tables.view(1, p, 1, 256).to(dev)


def _histogram_u8(dev: str) -> tuple:
    """Per-image level counts of the test-transform batch (B=16 uint8 224 px)."""
    return (_test_transform_batch(dev)[0],)


def _blend_u8(dev: str) -> tuple:
    """The saturation test transform: B=16 uint8 224 px, P=16 factors 0.25..4 against luma."""
    images, p = _test_transform_batch(dev)
    return images, torch.linspace(0.25, 4.0, p).to(dev), "luma"


def _hue_u8(dev: str) -> tuple:
    """The hue test transform: B=16 uint8 224 px, P=16 shifts -0.5..0.5."""
    images, p = _test_transform_batch(dev)
    return images, torch.linspace(-0.5, 0.5, p).to(dev)


def _blur_u8(dev: str) -> tuple:
    """The blur test transform's grid: sigma 0..20 px (radius up to 60)."""
    from invfast.ops.kernels import gaussian_taps

    images, p = _test_transform_batch(dev)
    sigma = torch.linspace(0.0, 20.0 if not SMALL else 5.0, p, dtype=torch.float64)
    return images, gaussian_taps(sigma, max_radius=min(images.shape[2:]) - 1).to(torch.float32).to(dev)


def _warp_affine_u8(dev: str) -> tuple:
    """The rotation test transform's grid: P rotations about the centre (fractional maps)."""
    images, p = _test_transform_batch(dev)
    size = images.shape[-1]
    ang = torch.linspace(0.0, 2 * torch.pi, p + 1, dtype=torch.float64)[:-1] + 0.1
    c = (size - 1) / 2.0
    m = torch.zeros(p, 2, 3, dtype=torch.float64)
    m[:, 0, 0], m[:, 0, 1], m[:, 1, 0], m[:, 1, 1] = ang.cos(), -ang.sin(), ang.sin(), ang.cos()
    m[:, 0, 2] = c - m[:, 0, 0] * c - m[:, 0, 1] * c
    m[:, 1, 2] = c - m[:, 1, 0] * c - m[:, 1, 1] * c
    return images, m.to(dev), torch.zeros(3, dtype=torch.float64, device=dev)


FACTORIES: dict[str, Callable[[str], tuple]] = {
    "pair_scores": _pair_scores,
    "sqdist_logsumexp": _sqdist_logsumexp,
    "pairwise_logsumexp": _pairwise_logsumexp,
    "knn_sqdist": _knn_sqdist,
    "merge_unit_moments_": _merge_unit_moments,
    "hyper_generate": _hyper_generate,
    "hyper_generate_backward": _hyper_generate_backward,
    "synth_color": _synth_color,
    "synth_blur": _synth_blur,
    "synth_warp": _synth_warp,
    "synth_composite": _synth_composite,
    "warp_affine": _warp_affine,
    "warp_coords": _warp_coords,
    "augment_views": _augment_views,
    "lut_u8": _lut_u8,
    "histogram_u8": _histogram_u8,
    "blend_u8": _blend_u8,
    "hue_u8": _hue_u8,
    "blur_u8": _blur_u8,
    "warp_affine_u8": _warp_affine_u8,
}


def _sync(dev: str) -> None:
    """Wait for the device (CUDA) so a timing covers the work."""
    if dev == "cuda":
        torch.cuda.synchronize()


def _timed(fn: Callable[[], Any], dev: str) -> float:
    """Seconds one call of ``fn`` takes on ``dev``."""
    t0 = time.perf_counter()
    fn()
    _sync(dev)
    return time.perf_counter() - t0


def test_every_op_has_a_benchmark():
    """Every op of the dispatch table has inputs here (tests/test_backend.py checks the same in CI)."""
    from invfast import dispatch

    assert set(FACTORIES) == {op for op, _ in dispatch.KNOWN}
    assert all(f.__doc__ for f in FACTORIES.values()), "a factory's docstring is its regime in the evidence file"


@pytest.mark.parametrize("dev", ["cpu", "cuda"])
@pytest.mark.parametrize("op", sorted(FACTORIES))
def test_op_vs_reference(benchmark, record_ratio, op, dev):
    from invfast import dispatch

    if dev == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not dispatch.kernel_available(op, dev):
        pytest.skip(f"no compiled {op} kernel for {dev} in this build")
    old = torch.get_num_threads()
    if dev == "cpu":
        torch.set_num_threads(1)
    try:
        args = FACTORIES[op](dev)
        kernel, ref = getattr(torch.ops.invfast, op), backend.reference(op)
        ref_times: list[float] = []

        def reference_round() -> None:  # pytest-benchmark runs it untimed before each kernel round
            ref_times.append(_timed(lambda: ref(*args), dev))

        with torch.no_grad():
            kernel(*args), ref(*args)  # warm-up (allocations, lazy init)
            _sync(dev)
            benchmark.pedantic(
                lambda: (kernel(*args), _sync(dev)), setup=reference_round, rounds=ROUNDS, iterations=1, warmup_rounds=0
            )
    finally:
        torch.set_num_threads(old)
    ref_min = min(ref_times)
    ratio = record_ratio(
        f"{op} on {dev}: torch reference / compiled kernel (min / min, interleaved)",
        ref_min,
        "> 1x for an auto default",
    )
    print(
        f"\n{op} [{dev}]: kernel {benchmark.stats.stats.min * 1e3:.2f} ms, reference {ref_min * 1e3:.2f} ms, "
        f"{ratio:.2f}x"
    )
    evidence = os.environ.get(EVIDENCE_ENV)
    if evidence:  # the dispatch table's evidence file (invfast/dispatch_evidence.json): this run replaces the record
        regime = " ".join((FACTORIES[op].__doc__ or "").split()) + (" (INVFAST_BENCH_SMALL sizes)" if SMALL else "")
        dispatch.record_measurement(evidence, op, dev, ratio, regime, threads=1 if dev == "cpu" else old)
