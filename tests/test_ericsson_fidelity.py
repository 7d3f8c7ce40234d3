"""protocol='ericsson' against the published evaluation code's own operations (invfast issue 26, items 1, 2, 4,
6; issue 39: the colour transforms, blur, the image draw, real-world input, EXIF, end to end; issue 58: blur's
truncation), each with an independent reference: Pillow (torchvision 0.10 calls Pillow for PIL images),
torchvision's published formulas written out here, numpy for the draw and for albumentations' elastic field; on
real photographs (skimage's). Issue 58's image list and 16-bit / float reads: tests/test_ericsson_pinned.py.

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
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

from invfast.measure.core import transform_grids
from invfast.measure.protocol import PROTOCOLS, get_protocol
from invfast.transforms import ericsson as E
from invfast.transforms import ericsson_elastic as EE
from invfast.transforms import ericsson_ops as Eo
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
    # each view reaches the model as it is; not as one run of rows: at more than one torch thread a model call
    # is split into sub-batches on threads (split_forward), which append to ``seen`` in either order
    missing = [j for j, w in enumerate(want) if not any(torch.equal(w, r) for r in inputs)]
    assert not missing, f"views {missing} never reached the model unchanged"


# ---------------------------------------------------------------------------------------------- the resize after
def test_pillow_resize_is_bit_exact(rng):
    for _ in range(25):
        H, W = (int(v) for v in rng.integers(1, 90, 2))
        h, w = (int(v) for v in rng.integers(1, 200, 2))
        a = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
        got = Eo.resize_bilinear(to_tensor(a), (h, w))[0]
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
            got = EE.gaussian_blur_reflect101(torch.from_numpy(noise), sigma).numpy()
            for c in range(2):
                np.testing.assert_allclose(got[c], cv2_gaussian_blur(noise[c], sigma), rtol=0, atol=1e-12)


def test_elastic_field_matches_the_documented_draw():
    """The displacement of (sigma, draw) is the 17x17 blur of the U(-1, 1) field the documented generator draws."""
    H, W = 30, 47
    for sigma, draw in ((10.0, 0), (44.0, 5)):
        _, d = EE.elastic_params(torch.tensor([sigma]), torch.tensor([float(draw)]), (H, W), seed=2)
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
    for s in Eo.deform_grid(8)[:, 0].tolist():
        _, d = EE.elastic_params(
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


# ---------------------------------------------------------------------------------------------- issue 39: photographs
@pytest.fixture(scope="module")
def photographs() -> dict[str, np.ndarray]:
    """Real photographs (skimage's): non-square 300 x 451, square 512 x 512 cut to 256 x 256 (time), and a
    97 x 131 crop, below the 224 px the model sees."""
    data = pytest.importorskip("skimage.data")
    return {
        "chelsea 300x451": np.ascontiguousarray(data.chelsea()),
        "astronaut 256x256": np.ascontiguousarray(data.astronaut()[40:296, 128:384]),
        "coffee 97x131": np.ascontiguousarray(data.coffee()[100:197, 200:331]),
    }


def tv_colour(name: str, img: Image.Image, p) -> np.ndarray:
    """torchvision 0.10 ``F.<name>`` on a PIL image (``functional_pil``), as the original calls it."""
    if name == "grayscale":  # rgb_to_grayscale(num_output_channels=3) when the view's flag is set
        if not p:
            return np.asarray(img)
        g = np.array(img.convert("L"), dtype=np.uint8)
        return np.dstack([g, g, g])
    if name == "hue":  # adjust_hue: np_h += np.uint8(hue_factor * 255); numpy 1.x wraps the truncated negatives
        h, s, v = img.convert("HSV").split()
        np_h = np.array(h, dtype=np.uint8)
        np_h += np.uint8(int(p * 255) % 256)
        return np.asarray(Image.merge("HSV", (Image.fromarray(np_h, "L"), s, v)).convert("RGB"))
    enhancer = {
        "brightness": ImageEnhance.Brightness,
        "contrast": ImageEnhance.Contrast,
        "saturation": ImageEnhance.Color,
        "sharpness": ImageEnhance.Sharpness,
    }[name]
    return np.asarray(enhancer(img).enhance(p))


def tv_gaussian_kernel1d(kernel_size: int, sigma: float) -> torch.Tensor:
    """torchvision 0.10 ``_get_gaussian_kernel1d``, as published (float32, the default dtype)."""
    ksize_half = (kernel_size - 1) * 0.5
    x = torch.linspace(-ksize_half, ksize_half, steps=kernel_size)
    pdf = torch.exp(-0.5 * (x / sigma).pow(2))
    return pdf / pdf.sum()


def tv_gaussian_blur(a: np.ndarray, sigma: float, kernel_size: int = 23, version: str = "0.10") -> np.ndarray:
    """torchvision ``F.gaussian_blur(img, kernel_size, sigma)`` of the PIL image ``a`` (uint8 HWC). 0.10 (the
    version the original pins): ``to_tensor`` (uint8 -> float32 / 255), ``F_t.gaussian_blur`` (the kernel
    ``mm(k[:, None], k[None, :])`` expanded to [3, 1, k, k], reflect padding by k // 2, ``conv2d(groups=3)``),
    then ``to_pil_image``: ``pic.mul(255).byte()``, truncated. 0.29: ``pil_to_tensor`` (the uint8 values as
    float32), the same blur, ``torch.round`` and uint8 (``_cast_squeeze_out``)."""
    k1 = tv_gaussian_kernel1d(kernel_size, sigma)
    k2 = torch.mm(k1[:, None], k1[None, :]).expand(3, 1, kernel_size, kernel_size)
    img = torch.from_numpy(np.array(a)).permute(2, 0, 1).contiguous().to(torch.float32)
    img = img.div(255) if version == "0.10" else img
    img = torch.nn.functional.pad(img.unsqueeze(0), [kernel_size // 2] * 4, mode="reflect")
    out = torch.nn.functional.conv2d(img, k2, groups=3)[0]
    out = out.mul(255).byte() if version == "0.10" else torch.round(out).to(torch.uint8)
    return out.permute(1, 2, 0).numpy()


def _every_colour() -> np.ndarray:
    """uint8 [4096, 4096, 3]: all 2^24 byte triples, in the order ``a << 16 | b << 8 | c``."""
    v = np.arange(1 << 24, dtype=np.uint32)
    return np.stack([v >> 16, (v >> 8) & 255, v & 255], -1).astype(np.uint8).reshape(4096, 4096, 3)


def test_pillow_hsv_to_rgb_on_every_colour():
    """Pillow's HSV -> RGB (Convert.c hsv2rgb) for all 2^24 (h, s, v): the table invfast builds is Pillow's."""
    from invfast.ops.color import _pillow_hsv_table

    every = _every_colour()
    want = np.asarray(Image.frombytes("HSV", (4096, 4096), every.tobytes()).convert("RGB"))
    got = _pillow_hsv_table(torch.device("cpu")).view(3, 4096, 4096).permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(got, want)


def _hsv_probe_colours(rng) -> np.ndarray:
    """uint8 [N, 3]: every colour with two equal channels (the ties of rgb2hsv's branches, greys included) and
    random others."""
    a, b = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    a, b = a.ravel(), b.ravel()
    ties = [np.stack(c, -1) for c in ((a, a, b), (a, b, a), (b, a, a))]
    return np.concatenate(ties + [rng.integers(0, 256, (1 << 18, 3))]).astype(np.uint8)


def test_pillow_rgb_to_hsv_luma_and_blend(rng):
    """convert("HSV") on every tie colour and 2^18 random ones, convert("L") on all 2^24 colours, and
    Image.blend (both of Blend.c's loops: 0 <= alpha <= 1 and extrapolation) on random images: Pillow's bytes."""
    from invfast.ops.color import pillow_blend, pillow_luma, pillow_rgb_to_hsv

    c = _hsv_probe_colours(rng)
    img = c[None]  # [1, N, 3]
    got = pillow_rgb_to_hsv(torch.from_numpy(img).permute(2, 0, 1))
    np.testing.assert_array_equal(got.permute(1, 2, 0).numpy(), np.asarray(Image.fromarray(img).convert("HSV")))
    every = _every_colour()
    luma = pillow_luma(torch.from_numpy(every).permute(2, 0, 1))[0].numpy()
    np.testing.assert_array_equal(luma, np.asarray(Image.fromarray(every).convert("L")))
    for alpha in [0.0, 1.0, -1.5, 0.37, 0.9999, 1.0001, 4.99, 30.0] + rng.uniform(-2, 31, 8).tolist():
        alpha = float(np.float32(alpha))  # a C float, as Image.blend passes it
        a = rng.integers(0, 256, (29, 37, 3), dtype=np.uint8)
        b = rng.integers(0, 256, (29, 37, 3), dtype=np.uint8)
        out = pillow_blend(to_tensor(a)[0], to_tensor(b)[0], torch.tensor(alpha)).permute(1, 2, 0).numpy()
        np.testing.assert_array_equal(out, np.asarray(Image.blend(Image.fromarray(a), Image.fromarray(b), alpha)))


@pytest.mark.slow
def test_pillow_rgb_to_hsv_on_every_colour():
    from invfast.ops.color import pillow_rgb_to_hsv

    every = _every_colour()
    got = pillow_rgb_to_hsv(torch.from_numpy(every).permute(2, 0, 1)).permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(got, np.asarray(Image.fromarray(every).convert("HSV")))


def test_pillow_smooth_filter(rng):
    """ImageFilter.SMOOTH (Sharpness' degenerate image): float32 sums from 0.5, truncated, border copied, and
    images under 3 px copied whole."""
    from invfast.ops.pillow import pillow_smooth

    for h, w in [(1, 7), (2, 9), (3, 3), (17, 23), (40, 31)] + [tuple(rng.integers(3, 60, 2)) for _ in range(6)]:
        a = rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8)
        a[: h // 2] = a[: h // 2] // 51 * 51  # flat areas: sums that land on exact levels
        got = pillow_smooth(to_tensor(a)[0]).permute(1, 2, 0).numpy()
        np.testing.assert_array_equal(
            got, np.asarray(Image.fromarray(a).filter(ImageFilter.SMOOTH)), err_msg=f"{h}x{w}"
        )


@pytest.mark.parametrize("name", ["grayscale", "brightness", "contrast", "saturation", "hue", "sharpness"])
def test_colour_views_are_torchvision_on_pil_bit_for_bit(photographs, name):
    """Every colour transform under the protocol, at the published grid's values (k = 256, every 15th and the
    ends; k = 16), on photographs as loaded: the bytes of torchvision 0.10 on the PIL image."""
    t = get_protocol("ericsson").transform(name)
    grid = t.grid(256)
    params = torch.cat([grid[::15], grid[-1:], t.grid(16)])
    want_grid = {"hue": (-0.5, 0.5), "sharpness": (1.0, 30.0)}.get(name, (0.25, 5.0))
    if name != "grayscale":  # the published torch.linspace(lo, hi, k), float32
        np.testing.assert_array_equal(grid.numpy(), torch.linspace(*want_grid, 256).numpy())
    for label, a in photographs.items():
        out = t.apply(to_tensor(a), params)[0]
        pil = Image.fromarray(a)
        for j, p in enumerate(params.tolist()):
            want = tv_colour(name, pil, bool(p) if name == "grayscale" else p)
            np.testing.assert_array_equal(to_hwc(out[j]), want, err_msg=f"{name} {p} on {label}")


def test_hue_steps_truncate_toward_zero_and_wrap():
    """np.uint8(255 shift): 0.5 -> 127, -0.5 -> -127 -> 129, a shift under 1/255 turn -> 0 (the identity)."""
    from invfast.ops.color import pillow_hue_steps

    shifts = torch.tensor([0.5, -0.5, 0.003, -0.003, 0.0, 0.25, -0.25], dtype=torch.float32)
    assert pillow_hue_steps(shifts).tolist() == [127, 129, 0, 0, 0, 63, 193]


def test_blur_is_torchvision_0_10s_gaussian_blur_on_pil(photographs):
    """Issue 58: torchvision 0.10's F.gaussian_blur of a PIL image (the version the original pins), bit for bit
    at the published grid's values (k = 256 and 16) on photographs: to_tensor's / 255, the float32 blur with
    torchvision's float32 taps, to_pil_image's truncation; 0.29's rounding (``blur_rounding="round"``) bit for
    bit too, and about half of the pixel-channels one level above 0.10's."""
    t = get_protocol("ericsson").transform("blur")
    t29 = dataclasses.replace(PROTOCOLS["ericsson"], blur_rounding="round").transform("blur")
    assert (t.blur_rounding, t29.blur_rounding) == ("truncate", "round")
    grid = t.grid(256)
    np.testing.assert_array_equal(grid.numpy(), torch.linspace(1e-5, 20.0, 256).numpy())
    params = torch.cat([grid[:3], grid[40::90], grid[-1:], t.grid(16)[1::7]])
    darker = total = 0
    for label, a in photographs.items():
        out, out29 = t.apply(to_tensor(a), params)[0], t29.apply(to_tensor(a), params)[0]
        for j, s in enumerate(params.tolist()):
            want = tv_gaussian_blur(a, s)
            np.testing.assert_array_equal(to_hwc(out[j]), want, err_msg=f"0.10: sigma {s} on {label}")
            want29 = tv_gaussian_blur(a, s, version="0.29")
            np.testing.assert_array_equal(to_hwc(out29[j]), want29, err_msg=f"0.29: sigma {s} on {label}")
            d = want.astype(int) - want29
            assert d.min() >= -1 and d.max() <= 0
            if j:  # sigma 1e-5 is the identity under both
                darker, total = darker + int((d != 0).sum()), total + d.size
            else:
                np.testing.assert_array_equal(want, a)
    assert 0.3 < darker / total < 0.6, darker / total


# ---------------------------------------------------------------------------------------------- issue 39: the draw
def test_images_are_drawn_as_the_original_draws_them():
    """np.random.seed(seed); np.random.choice(np.arange(N), n) -- the original's call -- for ImageNet's
    validation size and others; measure_invariance under the protocol scores exactly those images."""
    from invfast.measure import measure_invariance
    from invfast.measure.protocol import resample_indices

    state = np.random.get_state()
    try:
        for n, k, seed in ((50_000, 1000, 0), (10, 25, 1), (7, 3, 12345)):
            np.random.seed(seed)
            want = np.random.choice(np.arange(n), k)
            np.testing.assert_array_equal(resample_indices(n, k, seed).numpy(), want)
        np.random.seed(3)
        want = np.random.choice(np.arange(20), 9)
    finally:
        np.random.set_state(state)
    x = torch.rand(20, 3, 24, 24, generator=torch.Generator().manual_seed(0))
    small = dataclasses.replace(PROTOCOLS["ericsson"], resize=24, crop=24)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 2, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    r = measure_invariance(
        net, x, "hflip", protocol=small, n_images=9, protocol_seed=3, device="cpu", shrinkage=1e-3, progress=False
    )
    drawn = r.meta["data"]
    assert drawn["indices_head"] == want[:8].tolist() and drawn["indices_sum"] == int(want.sum())


# ---------------------------------------------------------------------------------------------- issue 39: real world
class _Seen(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seen = []
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 8, stride=8), torch.nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        self.seen.append(x.detach().clone())
        return self.net(x).flatten(1)


def test_real_world_views_are_resize_224_center_crop_224_of_the_photo_as_loaded(tmp_path, photographs):
    """The original's real-world input: each view as loaded (pil_loader: no EXIF turn), Resize(224) (the longer
    side int(224 * long / short): 336 for 300 x 451, not 337) + CenterCrop(224), bit for bit; invfast's default
    keeps its square loading. The reference statistics default to the views, with a warning and in meta."""
    from invfast.measure import measure_real_world

    arrays = []
    for g in range(2):
        (tmp_path / f"obj{g}").mkdir()
        for i, a in enumerate(photographs.values()):
            a = a if g == 0 else np.ascontiguousarray(a[:, ::-1])
            Image.fromarray(a).save(tmp_path / f"obj{g}" / f"{i}.png")
            arrays.append(a)
    model = _Seen()
    with pytest.warns(UserWarning, match="reference statistics from the views"):
        r = measure_real_world(
            model, f"folder:{tmp_path}", protocol="ericsson", device="cpu", normalize=False, shrinkage=1e-3, workers=0
        )
    assert r.meta["reference_stats"] == "the views" and r.meta["exif_transpose"] is False
    seen = (torch.cat(model.seen) * 255).round().to(torch.uint8).permute(0, 2, 3, 1).numpy()
    want = [tv_resize_center_crop(Image.fromarray(a), 224, 224) for a in arrays]
    assert tv_resize_center_crop(Image.fromarray(arrays[0]), 224, 224).shape == (224, 224, 3)
    for w in want:  # every view, as the original's transform makes it, reaches the model (stats pass and scores)
        assert any(np.array_equal(s, w) for s in seen)
    default = _Seen()
    measure_real_world(default, f"folder:{tmp_path}", device="cpu", normalize=False, resize=64, workers=0)
    assert {tuple(x.shape[-2:]) for x in default.seen} == {(64, 64)}


# ---------------------------------------------------------------------------------------------- issue 39: EXIF
def test_exif_orientation_is_not_applied_under_the_protocol(tmp_path, photographs):
    """A 300 x 451 photo stored with EXIF Orientation = 6: the original's loader (Image.open(f).convert("RGB"))
    measures it as stored; invfast's default turns it upright. Each run's meta records which."""
    from invfast.measure import measure_invariance

    a = photographs["chelsea 300x451"]
    im = Image.fromarray(a)
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(tmp_path / "sideways.jpg", exif=exif, quality=95)
    with Image.open(tmp_path / "sideways.jpg") as f:
        stored = np.asarray(f.convert("RGB"))
    net = _Seen()
    every = dataclasses.replace(PROTOCOLS["ericsson"], with_replacement=False)
    kw = dict(device="cpu", normalize=False, shrinkage=1e-3, workers=0, progress=False)
    r = measure_invariance(net, f"folder:{tmp_path}", "hflip", protocol=every, stats=_one_stats(), **kw)
    assert r.meta["data"]["exif_transpose"] is False
    want = tv_resize_center_crop(Image.fromarray(stored))
    seen = (net.seen[0][0] * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(seen, want)  # 451 wide, 300 high: as stored
    default = measure_invariance(_Seen(), f"folder:{tmp_path}", "hflip", stats=_one_stats(), **kw)
    assert default.meta["data"]["exif_transpose"] is True


def _one_stats():
    from invfast.stats import FeatureStats

    return FeatureStats().update(torch.randn(40, 3, generator=torch.Generator().manual_seed(0)).double())


# ---------------------------------------------------------------------------------------------- issue 39: end to end
def _original_view(name: str, a: np.ndarray, p) -> np.ndarray:
    """The original's final view of photo ``a`` (uint8 HWC): ``FT.<fn>(img, **params)`` on the PIL image as
    loaded, then Resize(256) + CenterCrop(224) -- except resized_crop, resized straight to 224 x 224."""
    pil = Image.fromarray(a)
    if name == "crop":
        top, left, h, w = p
        return pil81_resize(tv_resized_crop(pil, top, left, h, w, (224, 224)), (224, 224))
    if name in ("hflip", "vflip", "invert", "equalize", "grayscale") and not p:  # 'aug': False
        out = pil
    elif name in ("hflip", "vflip"):
        out = pil.transpose(Image.FLIP_LEFT_RIGHT if name == "hflip" else Image.FLIP_TOP_BOTTOM)
    elif name in ("invert", "equalize"):
        out = getattr(ImageOps, name)(pil)
    elif name == "posterize":
        out = ImageOps.posterize(pil, int(p))
    elif name == "rotation":
        out = Image.fromarray(tv_rotate(pil, p))
    elif name in ("translation", "scale", "shear"):
        kw = {"translation": dict(translate=p, shear=(1.0, 0.0)), "scale": dict(scale=p, shear=(1.0, 0.0))}
        out = Image.fromarray(tv_affine(pil, **kw.get(name, dict(shear=p))))
    elif name == "blur":
        out = Image.fromarray(tv_gaussian_blur(a, p))
    else:
        out = Image.fromarray(tv_colour(name, pil, p))
    return tv_resize_center_crop(out)


@pytest.mark.slow
def test_end_to_end_means_equal_the_original_pipelines(tmp_path, photographs):
    """Same fixed network, same photographs (non-square, square, below 224 px), k = 16: every transform's mean
    distance and cosine under protocol='ericsson' against the original pipeline's views (Pillow, above) scored
    with the same statistics agree within 0.05 % (they agree to float32 summation: every view is bit-exact, blur's
    since issue 58). Deform is left out: its random field cannot be the original's draws."""
    from invfast.measure import measure_invariance
    from invfast.metrics import invariance_scores
    from invfast.stats import FeatureStats
    from invfast.transforms import TEST_TRANSFORMS

    arrays = list(photographs.values())
    for i, a in enumerate(arrays):
        Image.fromarray(a).save(tmp_path / f"{i}.png")
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 7, stride=4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 5, 5, stride=4),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
    ).eval()
    mean, std = (
        torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1),
        torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1),
    )

    def features(views):
        x = torch.from_numpy(np.stack(views)).permute(0, 3, 1, 2).float() / 255.0
        with torch.no_grad():
            return net((x - mean) / std).double()

    f_ref = features([tv_resize_center_crop(Image.fromarray(a)) for a in arrays])
    crops = E.get("crop").grid(256)[::5].tolist()
    stats = FeatureStats().update(
        torch.cat([f_ref, features([_original_view("crop", a, p) for a in arrays for p in crops])])
    )
    stats.finalize(shrinkage=0.0)
    every = dataclasses.replace(PROTOCOLS["ericsson"], with_replacement=False)
    names = [n for n in TEST_TRANSFORMS if n != "deform"]
    got = measure_invariance(
        net,
        f"folder:{tmp_path}",
        names,
        grid_size=16,
        protocol=every,
        stats=stats,
        device="cpu",
        workers=0,
        progress=False,
    )
    for name in names:
        params = every.transform(name).grid(16).tolist()
        if name in ("hflip", "vflip", "invert", "equalize", "grayscale"):
            params = [bool(p) for p in params]
        f_t = torch.stack([features([_original_view(name, a, p) for p in params]) for a in arrays])
        want = invariance_scores(f_ref, f_t, stats)
        tr = got.transforms[name]
        for have, ref in ((tr.mean_distance, want["distance"].mean()), (tr.mean_cosine, want["cosine"].mean())):
            assert have == pytest.approx(float(ref), rel=5e-4), name
