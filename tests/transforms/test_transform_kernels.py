"""The uint8 ops of the test transforms (csrc/transforms, invfast.ops.transforms_u8) against their torch
references and independent numpy / scipy / skimage computations on fresh random inputs, the transforms routed
through them, opcheck, bad inputs and thread-count independence.

Tolerances (uint8 levels):
  lut_u8, histogram_u8, blend_u8, hue_u8, integer maps of warp_affine_u8 : equal to the reference, bit for bit
  blur_u8                      : within 1 of the reference (float32 sums in another order) on <= 0.5 % of values
  warp_affine_u8, bilinear maps: within 1 of the reference (which normalises coordinates for grid_sample) on
                                 <= 2 % of values; within 1 of a float64 numpy sampler everywhere
  independent float64 references (numpy / scipy / skimage): within 1 everywhere
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch

import invfast.backend as backend
import invfast.transforms as T
from invfast.ops import transforms_u8 as U
from invfast.ops.kernels import gaussian_taps

OPS = ("lut_u8", "histogram_u8", "blend_u8", "hue_u8", "blur_u8", "warp_affine_u8")
compiled = pytest.mark.skipif(not set(OPS) <= set(backend.compiled_ops()), reason="compiled core without these ops")
SIZES = [(2, 37, 61), (3, 2, 5), (1, 1, 1), (2, 9, 4)]  # 37 x 61 = 2257 pixels: two point-wise chunks


def _images(rng, B: int, H: int, W: int, C: int = 3) -> torch.Tensor:
    """Random uint8 images; the first has few levels, so equal channels (gray pixels, hue ties) are common."""
    x = rng.integers(0, 256, (B, C, H, W))
    x[0] = rng.integers(0, 4, (C, H, W)) * 85
    return torch.from_numpy(x.astype(np.uint8))


def _both(fn, *args):
    with backend.use("compiled"):
        y = fn(*args)
    with backend.use("reference"):
        yr = fn(*args)
    return y, yr


def _close(y: torch.Tensor, yr: torch.Tensor, frac: float) -> None:
    d = (y.int() - yr.int()).abs()
    assert y.shape == yr.shape and y.dtype == yr.dtype == torch.uint8
    assert int(d.max()) <= 1 and float((d > 0).float().mean()) <= frac, (int(d.max()), float((d > 0).float().mean()))


def _u8(v: np.ndarray) -> np.ndarray:
    """float values in 0..255 -> levels, rounded half up (functional.from_float)."""
    return np.floor(np.clip(v + 0.5, 0, 255)).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# each op against its reference and an independent computation


@compiled
@pytest.mark.parametrize("B,H,W", SIZES)
def test_lut_and_histogram(B, H, W, rng):
    x = _images(rng, B, H, W)
    P = 4
    general = torch.from_numpy(rng.integers(0, 256, (B, P, 3, 256)).astype(np.uint8))
    v = torch.arange(256)
    bitwise = torch.stack([v, 255 - v, v & 0xE0, (v & 0x0F) ^ 0x33]).to(torch.uint8).view(1, P, 1, 256)
    for tables in (general, general[:1], general[:, :, :1], bitwise):
        y, yr = _both(U.lut, x, tables)
        assert torch.equal(y, yr)
        t, xn = tables.numpy(), x.numpy()
        for b in range(B):
            for p in range(P):
                for c in range(3):
                    want = t[min(b, t.shape[0] - 1), p, min(c, t.shape[2] - 1)][xn[b, c]]
                    assert np.array_equal(y[b, p, c].numpy(), want)
    h, hr = _both(U.histogram, x)
    assert h.dtype == torch.int64 and torch.equal(h, hr)
    want = np.stack([[np.bincount(x[b, c].numpy().ravel(), minlength=256) for c in range(3)] for b in range(B)])
    assert np.array_equal(h.numpy(), want)


def _numpy_blend(x: np.ndarray, f: np.ndarray, degenerate: str) -> np.ndarray:
    """The blend in numpy float32, written from the definition: x [B, 3, H, W] uint8 -> [B, P, 3, H, W]."""
    xf = x.astype(np.float32) / np.float32(255)
    w = [np.float32(c) for c in (0.2989, 0.587, 0.114)]
    if degenerate == "smooth_levels":
        k = np.ones((1, 1, 3, 3), np.int64)
        k[..., 1, 1] = 5
        s = ndi.correlate(x.astype(np.int64), k, mode="constant")
        d = xf.copy()
        d[..., 1:-1, 1:-1] = (np.round(s / 13.0).astype(np.float32) / np.float32(255))[..., 1:-1, 1:-1]
    else:
        d = (w[0] * xf[:, 0] + w[1] * xf[:, 1] + w[2] * xf[:, 2])[:, None]
        if degenerate == "luma_levels":
            d = np.round(d * np.float32(255)) / np.float32(255)
    ff = f.astype(np.float32).reshape(1, -1, 1, 1, 1)
    y = np.clip(ff * xf[:, None] + (np.float32(1) - ff) * d[:, None], 0, 1)
    return np.floor(np.clip(y * np.float32(255) + np.float32(0.5), 0, 255)).astype(np.uint8)


@compiled
@pytest.mark.parametrize("degenerate", U.DEGENERATES)
@pytest.mark.parametrize("B,H,W", SIZES)
def test_blend(degenerate, B, H, W, rng):
    x = _images(rng, B, H, W)
    f = torch.from_numpy(np.concatenate([[0.0, 1.0], rng.uniform(0, 5, 5)]).astype(np.float32))
    y, yr = _both(U.blend_degenerate, x, f, degenerate)
    assert y.shape == (B, 7, 3, H, W) and torch.equal(y, yr)
    assert np.array_equal(y.numpy(), _numpy_blend(x.numpy(), f.numpy(), degenerate))


@compiled
@pytest.mark.parametrize("B,H,W", SIZES)
def test_blend_on_off_grid(B, H, W, rng):
    """Grayscale's grid (factors 0 and 1 only) takes a fused byte path: still the float blend's bytes."""
    x = _images(rng, B, H, W)
    f = torch.tensor([1.0, 0.0, 0.0, 1.0])
    y, yr = _both(U.blend_degenerate, x, f, "luma_levels")
    assert torch.equal(y, yr)
    assert np.array_equal(y.numpy(), _numpy_blend(x.numpy(), f.numpy(), "luma_levels"))


@compiled
@pytest.mark.parametrize("B,H,W", SIZES)
def test_hue(B, H, W, rng):
    from skimage.color import hsv2rgb, rgb2hsv

    x = _images(rng, B, H, W)
    s = torch.from_numpy(np.concatenate([[-0.5, 0.0, 0.5], rng.uniform(-0.5, 0.5, 4)]).astype(np.float32))
    y, yr = _both(U.hue, x, s)
    assert y.shape == (B, 7, 3, H, W) and torch.equal(y, yr)
    for b in range(B):
        hsv = rgb2hsv(x[b].permute(1, 2, 0).numpy().astype(np.float64) / 255)
        for p, shift in enumerate(s.tolist()):
            h2 = hsv.copy()
            h2[..., 0] = (h2[..., 0] + shift) % 1.0
            want = _u8(255 * hsv2rgb(h2)).transpose(2, 0, 1)
            assert np.abs(y[b, p].numpy().astype(int) - want).max() <= 1


@compiled
@pytest.mark.parametrize("B,H,W", [(2, 37, 61), (1, 9, 4), (2, 64, 3)])
def test_blur(B, H, W, rng):
    x = _images(rng, B, H, W)
    sigma = torch.from_numpy(np.concatenate([[0.0, 0.2], rng.uniform(0.3, 12.0, 4)]))
    taps = gaussian_taps(sigma, max_radius=min(H, W) - 1).to(torch.float32)
    y, yr = _both(U.blur_taps, x, taps)
    _close(y, yr, 0.005)
    t = taps.double().numpy()
    for b in range(B):
        for p in range(len(sigma)):
            want = ndi.correlate1d(
                ndi.correlate1d(x[b].double().numpy(), t[p], axis=2, mode="mirror"), t[p], axis=1, mode="mirror"
            )
            assert np.abs(y[b, p].numpy().astype(int) - _u8(want)).max() <= 1
    assert torch.equal(y[:, 0], x)  # sigma 0: one tap of 1


def _numpy_warp(img: np.ndarray, m: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """float64 bilinear sampling with per-neighbour fill: img [C, H, W], m [2, 3] -> [C, H, W] (0..255)."""
    C, H, W = img.shape
    yy, xx = np.meshgrid(np.arange(H, dtype=np.float64), np.arange(W, dtype=np.float64), indexing="ij")
    sx, sy = m[0, 0] * xx + m[0, 1] * yy + m[0, 2], m[1, 0] * xx + m[1, 1] * yy + m[1, 2]
    x0, y0 = np.floor(sx), np.floor(sy)
    fx, fy = sx - x0, sy - y0
    out = np.zeros((C, H, W))
    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            xi, yi = (x0 + dx).astype(np.int64), (y0 + dy).astype(np.int64)
            inside = (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
            v = np.where(inside, img[:, np.clip(yi, 0, H - 1), np.clip(xi, 0, W - 1)], fill[:, None, None])
            out += wx * wy * v
    return out


def _maps(rng, H: int, W: int) -> torch.Tensor:
    """Every kind of map: general, axis-aligned zoom in / out, integer copies, transposes, far outside."""
    cx, cy = (W - 1) / 2, (H - 1) / 2
    ang = rng.uniform(0.1, 3.0)
    c, s = np.cos(ang), np.sin(ang)
    maps = [
        [[c, -s, cx - c * cx + s * cy], [s, c, cy - s * cx - c * cy]],  # rotation (general)
        [[1.3, 0.4, -2.0], [-0.2, 0.9, 1.5]],  # shear + scale (general)
        [[0.37, 0.0, rng.uniform(0, W / 2)], [0.0, 0.61, rng.uniform(0, H / 2)]],  # crop: zoom in (separable)
        [[2.5, 0.0, -7.25], [0.0, 0.75, -1.5]],  # wide x, zoom y (separable)
        [[0.8, 0.0, 0.5], [0.0, -0.9, H - 0.3]],  # flipped rows (separable)
        [[3.0, 0.0, -5.0], [0.0, 2.0, -3.0]],  # zoom out (general)
        [[-1.0, 0.0, W - 1.0], [0.0, 1.0, 0.0]],  # hflip (copy)
        [[1.0, 0.0, 3.0], [0.0, -1.0, H - 3.0]],  # vflip + shift (copy)
        [[1.0, 0.0, -2.0], [0.0, 1.0, 1.0]],  # integer shift (copy)
        [[0.0, -1.0, W - 1.0], [1.0, 0.0, 0.0]],  # transpose (rot90-like)
        [[0.0, 1.0, 1.0], [-1.0, 0.0, H - 2.0]],  # other transpose
        [[1.0, 0.0, 5000.0], [0.0, 1.0, 0.0]],  # all outside (copy)
        [[0.5, 0.0, -900.0], [0.0, 0.5, 7.0]],  # all outside (separable)
    ]
    return torch.tensor(maps, dtype=torch.float64)


@compiled
@pytest.mark.parametrize("fill01", [0.0, 1.0, 0.3])  # 0.3 * 255 is not a level: float padding
@pytest.mark.parametrize("B,H,W", [(2, 11, 14), (1, 17, 17), (2, 1, 6)])
def test_warp(fill01, B, H, W, rng):
    x = _images(rng, B, H, W)
    m = _maps(rng, H, W)
    fill = torch.tensor([fill01, 0.5 * fill01, 1.0]) * 255.0
    y, yr = _both(U.warp_u8, x, m, fill)
    want = np.stack(
        [
            np.stack([_numpy_warp(x[b].double().numpy(), m[p].numpy(), fill.double().numpy()) for p in range(len(m))])
            for b in range(B)
        ]
    )
    # the first image's few levels (multiples of 85) make exact .5 values common: either rounding is right there,
    # so the kernel and the float32 reference may differ on them; elsewhere they differ on at most 2 % of values
    tie = np.abs(want - np.floor(want) - 0.5) < 1e-6
    d = (y.int() - yr.int()).abs().numpy()
    assert d.max() <= 1 and ((d > 0) & ~tie).mean() <= 0.02, (d.max(), ((d > 0) & ~tie).mean())
    for p in range(m.shape[0]):
        if bool((m[p] == m[p].round()).all()):
            assert torch.equal(y[:, p], yr[:, p]), p  # integer maps: exact copies
        for b in range(B):
            assert np.abs(y[b, p].numpy().astype(int) - _u8(want[b, p])).max() <= 1, p
    assert torch.equal(y[:, 6], x.flip(-1))
    if H == W:
        assert torch.equal(y[:, 9], torch.rot90(x, 1, dims=(-2, -1)))  # out[y, x] = src[x, W - 1 - y]


@compiled
def test_separable_and_general_strategies_agree(rng):
    """An axis-aligned map and the same map with a cross term too small to move any coordinate give the same
    bytes: the separable strategy evaluates the general formula in another order only."""
    x = _images(rng, 2, 23, 29)
    m = torch.tensor([[[0.43, 0.0, 3.3], [0.0, 0.71, 2.1]]], dtype=torch.float64)
    m2 = m.clone()
    m2[0, 0, 1] = 1e-300
    with backend.use("compiled"):
        assert torch.equal(U.warp_u8(x, m, torch.zeros(3)), U.warp_u8(x, m2, torch.zeros(3)))


# ---------------------------------------------------------------------------------------------
# the test transforms routed through the ops


@compiled
@pytest.mark.parametrize("name", [n for n in T.TEST_TRANSFORMS if n != "deform"])
def test_transforms_kernel_vs_reference(name, rng):
    x = _images(rng, 3, 40, 44)
    t = T.get(name)
    g = t.grid(16)
    y, yr = _both(t.apply, x, g)
    assert y.shape == (3, g.shape[0], 3, 40, 44)
    if name == "blur":
        _close(y, yr, 0.005)
    elif t.family == "spatial":
        _close(y, yr, 0.02)
    else:
        assert torch.equal(y, yr)


@compiled
@pytest.mark.parametrize(
    "name", ["brightness", "contrast", "saturation", "hue", "posterize", "invert", "equalize", "blur", "grayscale"]
)
def test_uint8_route_equals_the_float_path(name, rng):
    """uint8 images through the ops give the bytes of the float path (float images in, rounded half up): the
    tables and blends repeat its float32 maths. Contrast takes the exact mean (the float path sums float32
    lumas), blur sums in another order, grayscale rounds its luma half to even: within one level there."""
    x = _images(rng, 2, 33, 35)
    t = T.get(name)
    g = t.grid(16)
    y = t.apply(x, g)
    yf = t.apply(x.float() / 255, g).mul(255.0).add_(0.5).clamp_(0, 255).to(torch.uint8)
    if name in ("contrast", "blur", "grayscale"):
        _close(y, yf, 0.005)
    else:
        assert torch.equal(y, yf)


@compiled
@pytest.mark.parametrize("size", [64, 160])
def test_results_do_not_depend_on_the_thread_count(rng, size):
    """At 64 px every call runs on one thread (under 2 ms of estimated work); at 160 px (8 images, 16 values:
    9.8 MB of output, 3.4 ms of table look-ups and more for the rest) and for the 512-px level counts the
    calls fork at two threads, so both paths are checked against one thread."""
    x = _images(rng, 8, size, size)
    calls = [
        (U.hue, (x, torch.linspace(-0.5, 0.5, 16))),
        (U.blend_degenerate, (x, torch.linspace(0, 3, 16), "luma")),
        (U.blur, (x, torch.linspace(0, 4, 16, dtype=torch.float64))),
        (U.warp_u8, (x, _maps(rng, size, size), torch.zeros(3))),
        (U.brightness, (x, torch.linspace(0, 3, 16))),
        (U.contrast, (x, torch.linspace(0, 3, 16))),
        (U.histogram, (_images(rng, 8, 512, 512),) if size > 64 else (x,)),
    ]
    old = torch.get_num_threads()
    try:
        with backend.use("compiled"):
            torch.set_num_threads(1)
            one = [fn(*a) for fn, a in calls]
            torch.set_num_threads(2)
            two = [fn(*a) for fn, a in calls]
    finally:
        torch.set_num_threads(old)
    for a, b in zip(one, two):
        assert torch.equal(a, b)


def test_per_image_tables_are_made_in_unforked_pieces_with_the_values_of_one_call(rng):
    mean = torch.from_numpy(rng.uniform(0, 1, (37, 1, 1, 1)).astype(np.float32))
    f = torch.from_numpy(rng.uniform(0, 3, (1, 40, 1, 1)).astype(np.float32))
    x = torch.arange(256, dtype=torch.float32).div(255.0).view(1, 1, 1, 256)
    whole = U._levels(U.blend(x, mean, f))
    pieces = []

    def fn(s, e):
        pieces.append(e - s)
        return U._levels(U.blend(x, mean[s:e], f))

    assert torch.equal(U._unforked(fn, 37, f.numel() * 256, torch.device("cpu")), whole)
    assert sum(pieces) == 37 and max(pieces) * 40 * 256 <= U._TORCH_GRAIN  # no op above torch's grain
    cpu = torch.device("cpu")
    assert torch.equal(U._unforked(lambda s, e: whole[s:e], 37, 1, cpu), whole)  # one piece when it fits
    pieces.clear()
    assert torch.equal(U._unforked(fn, 37, f.numel() * 256, torch.device("meta")), whole) and pieces == [37]


# ---------------------------------------------------------------------------------------------
# opcheck and bad inputs


@compiled
def test_opcheck(rng):
    x = _images(rng, 2, 7, 9)
    f = torch.tensor([0.5, 2.0])
    tables = torch.randint(0, 256, (2, 3, 1, 256), dtype=torch.uint8)
    torch.library.opcheck(torch.ops.invfast.lut_u8.default, (x, tables))
    torch.library.opcheck(torch.ops.invfast.histogram_u8.default, (x,))
    torch.library.opcheck(torch.ops.invfast.blend_u8.default, (x, f, "smooth_levels"))
    torch.library.opcheck(torch.ops.invfast.hue_u8.default, (x, torch.tensor([-0.25, 0.5])))
    taps = gaussian_taps(torch.tensor([0.0, 1.0]), max_radius=6).to(torch.float32)
    torch.library.opcheck(torch.ops.invfast.blur_u8.default, (x, taps))
    m = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[0.9, 0.1, 0.3], [-0.1, 1.1, 0.2]]], dtype=torch.float64)
    torch.library.opcheck(torch.ops.invfast.warp_affine_u8.default, (x, m, torch.zeros(3, dtype=torch.float64)))


def test_bad_inputs_name_the_problem():
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="images must be a uint8 tensor"):
        U.lut(x.float(), torch.zeros(1, 1, 1, 256, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"tables must be uint8 \[1 or B=2, P, 1 or C=3, 256\]"):
        U.lut(x, torch.zeros(3, 1, 1, 256, dtype=torch.uint8))
    with pytest.raises(ValueError, match="images must be RGB"):
        U.hue(x[:, :2], torch.zeros(1))
    with pytest.raises(ValueError, match="factors must be a 1-D float32 tensor"):
        U.blend_degenerate(x, torch.zeros(2, dtype=torch.float64), "luma")
    with pytest.raises(ValueError, match="degenerate must be one of luma, luma_levels, smooth_levels"):
        U.blend_degenerate(x, torch.zeros(2), "mean")
    with pytest.raises(ValueError, match="radius 8 must be smaller than the image"):
        U.blur_taps(x, torch.ones(1, 17))
    with pytest.raises(ValueError, match=r"matrix must be \[P, 2, 3\]"):
        U.warp_u8(x, torch.zeros(2, 3), torch.zeros(3))


@compiled
def test_kernels_reject_what_the_reference_cannot_mean():
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    with backend.use("compiled"):
        with pytest.raises(RuntimeError, match="taps must be symmetric"):
            U.blur_taps(x, torch.tensor([[0.1, 0.5, 0.4]]))
        with pytest.raises(RuntimeError, match=r"shifts must be in \[-0.5, 0.5\]"):
            U.hue(x, torch.tensor([0.75]))
        with pytest.raises(RuntimeError, match="fill must be in 0..255"):
            U.warp_u8(x, torch.zeros(1, 2, 3), torch.full((3,), 300.0))


def test_affine_maps_are_kept_per_transform_size_and_grid(rng):
    """The kept [P, 2, 3] maps of a grid are those a fresh computation gives, for every transform, image size
    and grid (a key missing any of them would hand one transform's maps to another)."""
    from invfast.transforms import affine, builtin

    cases = [
        (name, H, W)
        for name in ("rotation", "shear", "scale", "translation", "hflip", "vflip", "crop")
        for H, W in ((20, 31), (31, 20))
    ]
    for name, H, W in cases:
        t = T.get(name)
        g = t.grid(16)
        for grid in (g, g[1:]):
            rec = builtin.RECORDS[name]
            kept = affine.affine_matrix(name, rec.affine, grid, H, W)
            affine._MATRICES.clear()
            fresh = affine.affine_matrix(name, rec.affine, grid, H, W)
            assert torch.equal(kept, fresh), (name, H, W)
    x = _images(rng, 2, 20, 31)
    y1 = T.get("rotation").apply(x, torch.tensor([30.0]))
    y2 = T.get("shear").apply(x, torch.tensor([[30.0, 0.0]]))
    assert not torch.equal(y1, y2)


def test_affine_maps_kept_safely_across_threads(rng):
    """The measure loop makes views on a producer thread: threads applying many grids at once (more than are
    kept, so entries are evicted while others look up) get the maps a single thread gets."""
    import threading

    x = _images(rng, 1, 12, 13)
    t = T.get("rotation")
    grids = [torch.tensor([float(a), float(a) + 0.5]) for a in range(100)]
    want = [t.apply(x, g) for g in grids]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(k, len(grids) + k):
                j = i % len(grids)
                assert torch.equal(t.apply(x, grids[j]), want[j])
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k * 25,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
