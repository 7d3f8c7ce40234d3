"""protocol='ericsson' against the published evaluation code's own operations (invfast issue 26, items 1, 2, 4,
6), each with an independent reference: Pillow (torchvision 0.10 calls Pillow for PIL images), torchvision's
published formulas written out here, and numpy for albumentations' elastic field.

The original: github.com/linusericsson/ssl-invariances, eval_synthetic_invariance.py (ManualTransform);
torchvision 0.10 ``transforms/functional.py`` (``affine``, ``rotate``, ``resized_crop``,
``_get_inverse_affine_matrix``); albumentations 1.0.3 ``augmentations/geometric/functional.py``
(``elastic_transform``, ``approximate=True``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from invfast.measure.core import transform_grids
from invfast.measure.protocol import PROTOCOLS, get_protocol
from invfast.transforms import ericsson as E
from invfast.transforms import registry


# ---------------------------------------------------------------------------------------------- references
def tv_inverse_affine(center, angle, translate, scale, shear):
    """torchvision 0.10 ``_get_inverse_affine_matrix``, as published (Python floats)."""
    rot = math.radians(angle)
    sx, sy = [math.radians(s) for s in shear]
    cx, cy = center
    tx, ty = translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [d, -b, 0.0, -c, a, 0.0]
    matrix = [x / scale for x in matrix]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def tv_affine(img: Image.Image, translate=(0.0, 0.0), scale=1.0, shear=(0.0, 0.0)) -> np.ndarray:
    """torchvision 0.10 ``F.affine`` on a PIL image (interpolation NEAREST, fill 0): centre (w/2, h/2)."""
    w, h = img.size
    m = tv_inverse_affine([w * 0.5, h * 0.5], 0.0, list(translate), scale, list(shear))
    return np.asarray(img.transform(img.size, Image.AFFINE, m, Image.NEAREST, fillcolor=(0, 0, 0)))


def tv_rotate(img: Image.Image, angle: float) -> np.ndarray:
    """torchvision 0.10 ``F.rotate`` on a PIL image: ``img.rotate(angle, NEAREST, expand=False, center=None)``."""
    return np.asarray(img.rotate(angle, Image.NEAREST, False, None, fillcolor=(0, 0, 0)))


def pil81_resize(img: Image.Image, size) -> np.ndarray:
    """Pillow 8.1's ``img.resize((w, h), BILINEAR)``: the horizontal pass, then the vertical one, each rounding
    to uint8 (Resample.c ``ImagingResampleInner``); single-axis resizes are unchanged in Pillow 13, which may
    order the two passes the other way."""
    w, h = size
    if w != img.size[0]:
        img = img.resize((w, img.size[1]), Image.BILINEAR)
    if h != img.size[1]:
        img = img.resize((w, h), Image.BILINEAR)
    return np.asarray(img)


def tv_resize_center_crop(img: Image.Image, size: int = 256, crop: int = 224) -> np.ndarray:
    """torchvision 0.10 ``Resize(size)`` (``F_pil.resize`` with an int) + ``CenterCrop(crop)`` on a PIL image."""
    w, h = img.size
    if not ((w <= h and w == size) or (h <= w and h == size)):
        img = Image.fromarray(pil81_resize(img, (size, int(size * h / w)) if w < h else (int(size * w / h), size)))
    w, h = img.size
    top, left = round((h - crop) / 2.0), round((w - crop) / 2.0)
    return np.asarray(img.crop((left, top, left + crop, top + crop)))


def to_tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a)).permute(2, 0, 1).unsqueeze(0).contiguous()


def to_hwc(x: torch.Tensor) -> np.ndarray:
    return x.permute(1, 2, 0).numpy()


def photo(rng, h, w) -> np.ndarray:
    """A random uint8 RGB image with structure at every scale (noise over gradients)."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([xx * 255.0 / w, yy * 255.0 / h, (xx + yy) % 97 * 2.6], -1)
    return np.clip(base * 0.6 + rng.integers(0, 100, (h, w, 3)), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------- item 1: posterize
def test_posterize_grid_is_the_published_bits_1_to_7(rng):
    t = get_protocol("ericsson").transform("posterize")
    for k in (7, 8, 256):
        assert t.grid(k).tolist() == [1, 2, 3, 4, 5, 6, 7]  # torch.arange(1, 8): 7 views, no identity
    assert not t.is_identity(t.grid(256)).any()
    assert registry.get("posterize").grid(256).tolist() == list(range(1, 9))  # invfast's default keeps 8
    a = rng.integers(0, 256, (23, 31, 3), dtype=np.uint8)
    out = t.apply(to_tensor(a), t.grid(7))[0]
    for j, bits in enumerate(range(1, 8)):
        np.testing.assert_array_equal(to_hwc(out[j]), np.asarray(ImageOps.posterize(Image.fromarray(a), bits)))
    # the measurement grid the protocol builds: 7 parameters, averaged with identity included
    ((_, params, ident),) = transform_grids(["posterize"], 256, get_protocol("ericsson"), 0)
    assert params.tolist() == list(range(1, 8)) and not ident.any()


# ---------------------------------------------------------------------------------------------- item 4: nearest
@pytest.mark.parametrize("name", ["translation", "scale", "shear"])
def test_affine_views_equal_torchvision_on_pil_pixel_for_pixel(rng, name):
    """Every view of the published grid (and random parameters off it) equals Pillow's ``Image.transform``
    with the matrix torchvision 0.10 computes, NEAREST, on odd-sized random images: bit-exact."""
    t = E.get(name)
    grid = t.grid(256)
    if name == "translation":
        extra = torch.from_numpy(rng.uniform(-40, 40, (12, 2))).float()
    elif name == "scale":
        extra = torch.from_numpy(rng.uniform(0.1, 3.0, 12)).float()
    else:
        extra = torch.from_numpy(rng.uniform(-80, 80, (12, 2))).float()
    params = torch.cat([grid, extra])
    for h, w in ((int(rng.integers(20, 70)), int(rng.integers(20, 70))), (48, 48)):
        a = photo(rng, h, w)
        out = t.apply(to_tensor(a), params)[0]
        pil = Image.fromarray(a)
        for j, p in enumerate(params.tolist()):
            if name == "translation":
                ref = tv_affine(pil, translate=p, shear=(1.0, 0.0))
            elif name == "scale":
                ref = tv_affine(pil, scale=p, shear=(1.0, 0.0))
            else:
                ref = tv_affine(pil, shear=p)
            np.testing.assert_array_equal(to_hwc(out[j]), ref, err_msg=f"{name} {p} on {h}x{w}")


def test_rotation_equals_pillow_rotate_nearest(rng):
    t = get_protocol("ericsson").transform("rotation")
    grid = t.grid(256)
    np.testing.assert_array_equal(grid.numpy(), (np.arange(256) * 360 / 256).astype(np.float32))
    params = torch.cat([grid, torch.from_numpy(rng.uniform(-400, 400, 8)).float(), torch.tensor([90.0, 270.0])])
    for h, w in ((int(rng.integers(20, 70)), int(rng.integers(20, 70))), (40, 40)):
        a = photo(rng, h, w)
        out = t.apply(to_tensor(a), params)[0]
        pil = Image.fromarray(a)
        for j, angle in enumerate(params.tolist()):
            np.testing.assert_array_equal(to_hwc(out[j]), tv_rotate(pil, angle), err_msg=f"{angle} on {h}x{w}")
    assert t.is_identity(torch.tensor([0.0, 360.0, 1.40625])).tolist() == [True, True, False]


def test_nearest_views_differ_from_bilinear_and_match_float_images(rng):
    """Nearest copies pixels: every output value is an input value (uint8 and float alike)."""
    a = photo(rng, 37, 41)
    x8 = to_tensor(a)
    xf = x8.double() / 255.0
    for name in ("translation", "scale", "shear", "rotation"):
        t = get_protocol("ericsson").transform(name)
        p = t.grid(16)
        y8, yf = t.apply(x8, p), t.apply(xf, p)
        np.testing.assert_array_equal((yf * 255.0).round().to(torch.uint8).numpy(), y8.numpy())
        values = set(a.reshape(-1).tolist()) | {0}
        assert set(y8.unique().tolist()) <= values
        with pytest.raises(ValueError, match="fill must be in"):
            t.apply(x8, p, fill=2.0)


# ---------------------------------------------------------------------------------------------- item 2: crop
def tv_resized_crop(img: Image.Image, top, left, height, width, size):
    """torchvision 0.10 ``F.resized_crop`` on PIL, crop part: ``img.crop((left, top, left + width, top + height))``
    (Pillow rounds the corners and pads outside with 0)."""
    return img.crop((left, top, left + width, top + height))


def test_crop_grid_is_published_pixel_boxes():
    g = E.get("crop").grid(256).numpy()
    a = (np.linspace(0, 0.25, 4) * 256).astype(np.float32)
    b = (np.linspace(0.75, 0.25, 4) * 256).astype(np.float32)
    want = np.array([[p, q, r, s] for p in a for q in a for r in b for s in b], dtype=np.float32)
    np.testing.assert_allclose(g, want, rtol=0, atol=1e-4)
    assert g.shape == (256, 4) and np.isclose(g[:, 0].max(), 64) and np.isclose(g[:, 2].max(), 192)
    assert E.get("crop").grid(81).shape == (81, 4) and E.get("crop").grid(80).shape == (16, 4)  # int(k ** 0.25)


@pytest.mark.parametrize("size", [(300, 451), (512, 512), (120, 90)])
def test_crop_boxes_are_pixels_of_the_image_as_loaded(rng, size):
    """Against Pillow's ``Image.crop`` on the image as loaded, then Pillow's bilinear resize to 224 x 224: equal."""
    h, w = size
    a = photo(rng, h, w)
    t = E.get("crop")
    params = t.grid(256)[rng.choice(256, 10, replace=False)]
    out = t.apply(to_tensor(a), params)[0]
    assert out.shape == (10, 3, 224, 224)
    pil = Image.fromarray(a)
    for j, p in enumerate(params.tolist()):
        ref = pil81_resize(tv_resized_crop(pil, *p, (224, 224)), (224, 224))
        np.testing.assert_array_equal(to_hwc(out[j]), ref, err_msg=str(p))


def test_crop_boxes_do_not_scale_with_the_image(rng):
    """The same pixel box on two images that share their top-left 200x220 px gives the same view; a box larger
    than a small image is padded with black, as PIL does."""
    big = photo(rng, 400, 380)
    small = big[:200, :220].copy()
    t = E.get("crop")
    inside = torch.tensor([[0.0, 21.333334, 149.33333, 192.0], [42.666668, 0.0, 106.66667, 149.33333]])
    np.testing.assert_array_equal(t.apply(to_tensor(big), inside).numpy(), t.apply(to_tensor(small), inside).numpy())
    tiny = np.full((40, 50, 3), 200, np.uint8)
    v = t.apply(to_tensor(tiny), torch.tensor([[0.0, 0.0, 192.0, 192.0]]))[0, 0]
    ref = pil81_resize(Image.fromarray(tiny).crop((0, 0, 192, 192)), (224, 224))
    np.testing.assert_array_equal(to_hwc(v), ref)
    assert int(v[:, -5:, -5:].max()) == 0 and int(v[:, :30, :30].min()) == 200


def test_crop_views_reach_the_model_without_a_second_resize(rng):
    """Under the protocol the crop views are the model's input (the original's resized_crop is not followed by
    Resize(256) + CenterCrop(224)); every other view is."""
    from invfast.measure import measure_invariance

    seen = []

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 2, 7, stride=8)

        def forward(self, x):
            seen.append(x.detach().clone())
            return self.conv(x).mean((2, 3))

    torch.manual_seed(0)
    x = to_tensor(photo(rng, 300, 340)).expand(3, -1, -1, -1).contiguous()
    proto = dataclasses.replace(PROTOCOLS["ericsson"], with_replacement=False)
    measure_invariance(
        Net(),
        x,
        "crop",
        grid_size=16,
        device="cpu",
        protocol=proto,
        normalize=False,
        shrinkage=1e-3,
        batch_size=3,
        forward_batch=48,
        progress=False,
    )
    views = E.get("crop").apply(x, E.get("crop").grid(16))  # [3, 16, 3, 224, 224] uint8
    inputs = torch.cat(seen)
    assert inputs.shape[-2:] == (224, 224)
    want = views.flatten(0, 1).float() / 255.0
    assert any(torch.equal(inputs[i : i + 48], want) for i in range(inputs.shape[0] - 47))


# ---------------------------------------------------------------------------------------------- the resize after
def test_pillow_resize_is_bit_exact(rng):
    for _ in range(25):
        H, W = (int(v) for v in rng.integers(1, 90, 2))
        h, w = (int(v) for v in rng.integers(1, 200, 2))
        a = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        got = E.resize_bilinear(to_tensor(a), (h, w))[0]
        want = pil81_resize(Image.fromarray(a), (w, h))
        np.testing.assert_array_equal(to_hwc(got), want, err_msg=f"{H}x{W}->{h}x{w}")


def test_resize_center_crop_is_torchvisions_on_pil(rng):
    """Resize(256) + CenterCrop(224) of the protocol against torchvision 0.10 on PIL, bit for bit, including sizes
    where ``int(256 * h / w)`` and ``int(h * (256 / w))`` differ (196 x 294: 384, not 383)."""
    from invfast.measure.protocol import resize_center_crop

    for h, w in ((294, 196), (196, 294), (300, 451), (256, 300), (224, 224), (103, 103)):
        a = photo(rng, h, w)
        got = resize_center_crop(to_tensor(a), 256, 224)[0]
        np.testing.assert_array_equal(to_hwc(got), tv_resize_center_crop(Image.fromarray(a)), err_msg=f"{h}x{w}")


# ---------------------------------------------------------------------------------------------- item 6: elastic
def cv2_gaussian_kernel(ksize: int, sigma: float) -> np.ndarray:
    """OpenCV ``getGaussianKernel(ksize, sigma)`` (sigma > 0): exp(-(i - (ksize-1)/2)² / (2σ²)), normalised."""
    x = np.arange(ksize) - (ksize - 1) / 2
    k = np.exp(-(x**2) / (2 * sigma**2))
    return k / k.sum()


def cv2_gaussian_blur(a: np.ndarray, sigma: float, ksize: int = 17) -> np.ndarray:
    """``cv2.GaussianBlur(a, (ksize, ksize), sigma)`` with BORDER_REFLECT_101 (numpy's 'reflect'), float64."""
    k = cv2_gaussian_kernel(ksize, sigma)
    r = ksize // 2
    p = np.pad(a, r, mode="reflect")
    rows = sum(k[i] * p[:, i : i + a.shape[1]] for i in range(ksize))
    return sum(k[i] * rows[i : i + a.shape[0], :] for i in range(ksize))


def test_elastic_smoothing_is_albumentations_fixed_17_tap_blur(rng):
    for h, w in ((40, 33), (9, 12), (64, 64)):
        noise = rng.uniform(-1, 1, (2, h, w))
        for sigma in (10.0, 27.0, 50.0, 3.0):
            got = E.gaussian_blur_reflect101(torch.from_numpy(noise), sigma).numpy()
            for c in range(2):
                np.testing.assert_allclose(got[c], cv2_gaussian_blur(noise[c], sigma), rtol=0, atol=1e-12)


def test_elastic_field_matches_the_documented_draw():
    """The displacement of (sigma, draw) is the 17x17 blur of the U(-1, 1) field the documented generator draws."""
    H, W = 30, 47
    for sigma, draw in ((10.0, 0), (44.0, 5)):
        _, d = E.elastic_params(torch.tensor([sigma]), torch.tensor([float(draw)]), (H, W), seed=2)
        g = torch.Generator().manual_seed(2 * 1_000_003 + draw)
        torch.rand(3, 2, generator=g, dtype=torch.float64)  # the affine part's draw comes first
        noise = (torch.rand(2, H, W, generator=g, dtype=torch.float64) * 2 - 1).numpy()
        for c in range(2):
            np.testing.assert_allclose(d[0, ..., c].numpy(), cv2_gaussian_blur(noise[c], sigma), rtol=0, atol=1e-6)


def expected_rms(H: int, W: int, sigma: float) -> float:
    """sqrt(E|d|²) of albumentations' field on an H x W image: per axis, each output pixel's effective weights
    on the input (the 17 taps folded by reflect-101), Var U(-1, 1) = 1/3, two independent components."""
    k = cv2_gaussian_kernel(17, sigma)

    def mean_sq(n):
        idx = np.arange(-8, n + 8)
        period = 2 * (n - 1)
        idx = np.mod(idx, period)
        idx = np.where(idx > n - 1, period - idx, idx)
        total = 0.0
        for i in range(n):
            w = np.zeros(n)
            np.add.at(w, idx[i : i + 17], k)
            total += (w**2).sum()
        return total / n

    return math.sqrt(2 / 3 * mean_sq(H) * mean_sq(W))


@pytest.mark.parametrize("size", [(256, 256), (300, 451)])
def test_elastic_displacement_rms_is_the_originals(size):
    """RMS of the displacement (px) at every sigma of the grid, over 8 draws each, against the expectation of
    albumentations' formula (numpy, above): within 3 % (a draw's RMS varies by ~4 %, 8 draws' by ~1.5 %),
    ~0.05 px and flat in sigma (scipy's gaussian_filter, the old field, fell from 0.023 to 0.004 px)."""
    H, W = size
    rms = []
    for s in E.deform_grid(8)[:, 0].tolist():
        _, d = E.elastic_params(
            torch.full((8,), s, dtype=torch.float64), torch.arange(8, dtype=torch.float64), (H, W), seed=0
        )
        rms.append(float(d.double().pow(2).sum(-1).mean().sqrt()))
        assert rms[-1] == pytest.approx(expected_rms(H, W, s), rel=0.03), (s, rms[-1])
        assert 0.048 < rms[-1] < 0.052
    assert max(rms) / min(rms) < 1.02


# ---------------------------------------------------------------------------------------------- the protocol
def test_protocol_hands_out_every_changed_transform():
    proto = get_protocol("ericsson")
    for name in E.ERICSSON_CHANGED:
        t = proto.transform(name)
        assert isinstance(t, E.EricssonTransform) and (t.resize, t.crop) == (256, 224)
    assert proto.transform("hflip") is registry.get("hflip")
    assert get_protocol("invfast").transform("rotation") == "rotation"
    small = dataclasses.replace(PROTOCOLS["ericsson"], resize=32, crop=24)
    assert small.transform("translation").grid(16)[:, 0].unique().tolist() == [-4.0, -2.0, 0.0, 2.0]
    assert small.transform("crop").grid(16).max().item() == pytest.approx(24.0)
    with pytest.raises(ValueError, match="crop .* must not exceed resize"):
        E.get("crop", resize=200, crop=224)
    with pytest.raises(ValueError, match="height and width"):
        E.get("crop").apply(torch.zeros(1, 3, 8, 8, dtype=torch.uint8), [[0.0, 0.0, 0.0, 5.0]])
    with pytest.raises(ValueError, match="bits must be integers"):
        E.get("posterize").apply(torch.zeros(1, 3, 8, 8, dtype=torch.uint8), [0.5])
    with pytest.raises(ValueError, match="degenerate"):
        E.get("shear").apply(torch.zeros(1, 3, 8, 8, dtype=torch.uint8), [[90.0, 0.0]])


def test_elastic_fields_kept_between_calls_are_bounded_in_bytes(monkeypatch):
    """Photos measured at their own sizes each get their own fields: the cache holds at most CACHE_BYTES (least
    recently used dropped first), and a field computed again after eviction is the same."""
    from invfast.transforms import ericsson_elastic as EE

    H, W = 21, 34
    one = 2 * H * W * 4 + 6 * 8  # a field (float32 [H, W, 2]) and its matrix (float64 [2, 3])
    monkeypatch.setattr(EE, "CACHE_BYTES", 3 * one)
    monkeypatch.setattr(EE, "_FIELDS", EE._FieldCache())
    sig, draws = torch.full((6,), 10.0, dtype=torch.float64), torch.arange(6, dtype=torch.float64)
    m1, d1 = EE.elastic_params(sig, draws, (H, W), seed=4)
    assert len(EE._FIELDS) == 3 and EE._FIELDS.nbytes == 3 * one
    m2, d2 = EE.elastic_params(sig[:2], draws[:2], (H, W), seed=4)  # evicted, drawn again from the same seed
    torch.testing.assert_close(d2, d1[:2], rtol=0, atol=0)
    torch.testing.assert_close(m2, m1[:2], rtol=0, atol=0)
    assert EE._FIELDS.nbytes <= 3 * one
