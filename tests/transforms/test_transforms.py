"""The 18 test transforms against independent per-image references (PIL / numpy / scipy / skimage) on
real photographs, exactness of flips / 90-degree rotations / identities, the SPEC §2.1 grids, and bad input.

Tolerances (mean absolute error in 0..255 levels, all pixels, 64x64 / 80x96 photos):
  exact ops (flip, rot90, integer translation, posterize, invert, equalize, identities) : 0
  bilinear warps vs PIL (rotation, scale, shear, translation, crop)                    : < 1.5 (PIL rounds its
      fixed-point coordinates and treats the border differently; we compare all pixels anyway)
  colour ops vs PIL ImageEnhance (uint8 rounding/truncation differs)                   : < 1.0
  hue vs skimage HSV (float64), blur vs scipy.ndimage (float64)                        : < 0.5
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from PIL import Image, ImageEnhance, ImageOps

import invfast.transforms as T
from invfast.transforms import functional as Fn

skimage_data = pytest.importorskip("skimage.data")

PHOTOS = ("astronaut", "chelsea", "coffee")


def _photo(name: str, h: int, w: int) -> np.ndarray:
    arr = getattr(skimage_data, name)()[..., :3]
    return np.asarray(Image.fromarray(arr).resize((w, h), Image.BILINEAR))


@pytest.fixture(scope="module")
def photos() -> np.ndarray:
    """[3, 64, 64, 3] uint8 HWC photos."""
    return np.stack([_photo(n, 64, 64) for n in PHOTOS])


@pytest.fixture(scope="module")
def photos_rect() -> np.ndarray:
    """[3, 80, 96, 3] uint8 non-square photos."""
    return np.stack([_photo(n, 80, 96) for n in PHOTOS])


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2).contiguous()


def _hwc(t: torch.Tensor) -> np.ndarray:
    return t.permute(1, 2, 0).numpy()


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


# ---------------------------------------------------------------------------------------------
# registry and grids (SPEC §2.1)


def test_registry_names_and_families():
    assert len(T.TEST_TRANSFORMS) == 18 and len(set(T.TEST_TRANSFORMS)) == 18
    spatial = {"crop", "hflip", "vflip", "scale", "shear", "rotation", "translation", "deform"}
    for n in T.TEST_TRANSFORMS:
        t = T.get(n)
        assert t.name == n
        assert t.family == ("spatial" if n in spatial else "appearance")


def test_grids_match_spec():
    crop = T.get("crop").grid(256)
    assert crop.shape == (256, 4)
    np.testing.assert_allclose(np.unique(crop[:, 0].numpy()), [0, 1 / 12, 2 / 12, 3 / 12], atol=1e-6)
    np.testing.assert_allclose(np.unique(crop[:, 1].numpy()), [0, 1 / 12, 2 / 12, 3 / 12], atol=1e-6)
    np.testing.assert_allclose(np.unique(crop[:, 2].numpy()), [0.25, 5 / 12, 7 / 12, 0.75], atol=1e-6)
    assert len({tuple(r) for r in crop.tolist()}) == 256
    for n in ("hflip", "vflip", "grayscale", "invert", "equalize"):
        assert T.get(n).grid(256).tolist() == [0.0, 1.0]
        assert T.get(n).is_identity(T.get(n).grid()).tolist() == [True, False]
    for n, lo, hi in (
        ("scale", 0.25, 2),
        ("brightness", 0.25, 5),
        ("contrast", 0.25, 5),
        ("saturation", 0.25, 5),
        ("hue", -0.5, 0.5),
        ("blur", 1e-5, 20),
        ("sharpness", 1, 30),
        ("deform", 10, 50),
    ):
        g = T.get(n).grid(256).double().numpy()
        assert g.shape == (256,)
        np.testing.assert_allclose([g[0], g[-1]], [lo, hi], rtol=1e-6)
        np.testing.assert_allclose(np.diff(g), (hi - lo) / 255, rtol=1e-3)  # evenly spaced
    shear = T.get("shear").grid(256)
    assert shear.shape == (256, 2)
    np.testing.assert_array_equal(np.unique(shear[:, 0].numpy()), np.arange(-160, 160, 20))
    tr = T.get("translation").grid(256)
    assert tr.shape == (256, 2)
    np.testing.assert_allclose(np.unique(tr[:, 1].numpy()), np.linspace(-16, 16, 16), atol=1e-5)
    rot = T.get("rotation").grid(256)
    np.testing.assert_allclose(rot.numpy(), np.arange(256) * 360 / 256, atol=1e-4)
    assert float(rot.max()) < 360
    assert T.get("posterize").grid().tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert T.get("posterize").is_identity(T.get("posterize").grid()).sum() == 1
    assert T.get("rotation").grid(8).tolist() == [0, 45, 90, 135, 180, 225, 270, 315]


def test_is_identity():
    assert T.get("rotation").is_identity([0.0, 90.0, 360.0]).tolist() == [True, False, True]
    assert T.get("shear").is_identity([[0.0, 0.0], [20.0, 0.0]]).tolist() == [True, False]
    assert T.get("crop").is_identity([[0, 0, 1, 1], [0, 0, 0.5, 0.5]]).tolist() == [True, False]
    assert T.get("blur").is_identity([1e-5, 2.0]).tolist() == [True, False]
    assert T.get("brightness").is_identity([1.0, 1.5]).tolist() == [True, False]
    assert not T.get("deform").is_identity(T.get("deform").grid(4)).any()


# ---------------------------------------------------------------------------------------------
# exactness

IDENTITY = {
    "crop": [0.0, 0.0, 1.0, 1.0],
    "hflip": 0.0,
    "vflip": 0.0,
    "scale": 1.0,
    "shear": [0.0, 0.0],
    "rotation": 0.0,
    "translation": [0.0, 0.0],
    "grayscale": 0.0,
    "brightness": 1.0,
    "contrast": 1.0,
    "saturation": 1.0,
    "hue": 0.0,
    "blur": 1e-5,
    "sharpness": 1.0,
    "equalize": 0.0,
    "posterize": 8.0,
    "invert": 0.0,
}


@pytest.mark.parametrize("name", sorted(IDENTITY))
def test_identity_parameters_exact(name, photos_rect):
    x = _t(photos_rect)
    t = T.get(name)
    p = torch.tensor([IDENTITY[name]])
    assert bool(t.is_identity(p).all())
    y = t.apply(x, p)
    assert y.dtype == torch.uint8 and y.shape == (3, 1, 3, 80, 96)
    assert torch.equal(y[:, 0], x)
    xf = x.float() / 255
    yf = t.apply(xf, p)[:, 0]
    assert yf.dtype == torch.float32
    torch.testing.assert_close(yf, xf, atol=1e-6 if name == "hue" else 0.0, rtol=0)


def test_flips_and_right_angle_rotations_exact(photos):
    x = _t(photos)
    a = photos  # [B, H, W, C]
    for dtype in (torch.uint8, torch.float64):
        xx = x if dtype == torch.uint8 else x.to(dtype) / 255
        ref = torch.from_numpy(a).permute(0, 3, 1, 2)
        ref = ref if dtype == torch.uint8 else ref.to(dtype) / 255
        y = T.get("hflip").apply(xx, [1.0])[:, 0]
        assert torch.equal(y, ref.flip(-1))
        y = T.get("vflip").apply(xx, [1.0])[:, 0]
        assert torch.equal(y, ref.flip(-2))
        y = T.get("rotation").apply(xx, [90.0, 180.0, 270.0, -90.0, 450.0])
        for i, k in enumerate((1, 2, 3, 3, 1)):
            # np.rot90 on (H, W) rotates counter-clockwise as displayed, like PIL's rotate(+90)
            assert torch.equal(y[:, i], torch.rot90(ref, k, dims=(-2, -1))), (i, k)
    pil = np.asarray(Image.fromarray(a[0]).rotate(90))
    assert np.array_equal(_hwc(T.get("rotation").apply(x[:1], [90.0])[0, 0]), pil)


def test_integer_translation_exact(photos):
    x = _t(photos)
    y = T.get("translation").apply(x, [[5.0, -3.0]], fill=0.0)[:, 0].numpy()
    ref = np.zeros_like(photos)
    ref[:, : 64 - 3, 5:] = photos[:, 3:, : 64 - 5]
    assert np.array_equal(y, ref.transpose(0, 3, 1, 2))


def test_fill_value(photos):
    x = _t(photos)
    y = T.get("translation").apply(x, [[10.0, 0.0]], fill=(1.0, 0.5, 0.0))[:, 0]
    assert (y[:, 0, :, :10] == 255).all() and (y[:, 1, :, :10] == 128).all() and (y[:, 2, :, :10] == 0).all()


# ---------------------------------------------------------------------------------------------
# geometric transforms vs PIL


def _pil_affine(img: np.ndarray, A: np.ndarray, b_corner: np.ndarray) -> np.ndarray:
    """PIL affine with output->input map in corner coordinates: src = A @ (dst - c_out) + b_corner."""
    h, w = img.shape[:2]
    c = np.array([w / 2.0, h / 2.0])
    off = b_corner - A @ c
    data = (A[0, 0], A[0, 1], off[0], A[1, 0], A[1, 1], off[1])
    return np.asarray(
        Image.fromarray(img).transform((w, h), Image.AFFINE, data, resample=Image.BILINEAR, fillcolor=(0, 0, 0))
    )


@pytest.mark.parametrize("angle", [17.0, 45.0, 137.5, 300.0])
def test_rotation_vs_pil(angle, photos_rect):
    y = T.get("rotation").apply(_t(photos_rect), [angle])[:, 0]
    for i, img in enumerate(photos_rect):
        ref = np.asarray(Image.fromarray(img).rotate(angle, resample=Image.BILINEAR, fillcolor=(0, 0, 0)))
        assert _mae(_hwc(y[i]), ref) < 1.5


@pytest.mark.parametrize("factor", [0.25, 0.6, 1.37, 2.0])
def test_scale_vs_pil(factor, photos_rect):
    y = T.get("scale").apply(_t(photos_rect), [factor])[:, 0]
    for i, img in enumerate(photos_rect):
        h, w = img.shape[:2]
        ref = _pil_affine(img, np.eye(2) / factor, np.array([w / 2, h / 2]))
        assert _mae(_hwc(y[i]), ref) < 1.5


@pytest.mark.parametrize("sx,sy", [(-160.0, 20.0), (40.0, -60.0), (0.0, 120.0), (20.0, 20.0)])
def test_shear_vs_pil(sx, sy, photos_rect):
    y = T.get("shear").apply(_t(photos_rect), [[sx, sy]])[:, 0]
    # torchvision's forward shear: [[1, -tan sx], [-tan sy, 1 + tan sx tan sy]]; PIL needs the inverse
    tx, ty = math.tan(math.radians(sx)), math.tan(math.radians(sy))
    fwd = np.array([[1.0, -tx], [-ty, 1.0 + tx * ty]])
    inv = np.linalg.inv(fwd)
    for i, img in enumerate(photos_rect):
        h, w = img.shape[:2]
        ref = _pil_affine(img, inv, np.array([w / 2, h / 2]))
        assert _mae(_hwc(y[i]), ref) < 1.5


def test_translation_vs_pil(photos_rect):
    y = T.get("translation").apply(_t(photos_rect), [[-7.4, 12.6], [3.3, 3.3]])
    for j, (dx, dy) in enumerate([(-7.4, 12.6), (3.3, 3.3)]):
        for i, img in enumerate(photos_rect):
            h, w = img.shape[:2]
            ref = _pil_affine(img, np.eye(2), np.array([w / 2 - dx, h / 2 - dy]))
            assert _mae(_hwc(y[i, j]), ref) < 1.5


def test_crop_vs_pil(photos_rect):
    grid = T.get("crop").grid(256)[[0, 37, 128, 255]]
    y = T.get("crop").apply(_t(photos_rect), grid)
    for j, (top, left, hh, ww) in enumerate(grid.double().tolist()):
        for i, img in enumerate(photos_rect):
            h, w = img.shape[:2]
            box = (left * w, top * h, (left + ww) * w, (top + hh) * h)
            ref = np.asarray(Image.fromarray(img).resize((w, h), Image.BILINEAR, box=box))
            assert _mae(_hwc(y[i, j]), ref) < 1.5


def test_deform_field_and_warp_vs_scipy(photos_rect):
    t = T.get("deform")
    H, W = 80, 96
    sigma = torch.tensor([10.0, 30.0])
    # the field: seeded uniform noise smoothed with a periodic Gaussian, RMS = alpha px
    g = torch.Generator().manual_seed(t.seed)
    noise = (torch.rand((2, H, W), generator=g, dtype=torch.float64) * 2 - 1).numpy()
    disp = Fn.elastic_displacement(sigma, (H, W), t.alpha * min(H, W), t.seed).numpy()
    for j, s in enumerate(sigma.tolist()):
        ref = np.stack([ndi.gaussian_filter(noise[c], s, mode="wrap", truncate=8.0) for c in range(2)], -1)
        ref *= t.alpha * min(H, W) / np.sqrt((ref**2).mean())
        np.testing.assert_allclose(disp[j], ref, atol=2e-3 * t.alpha * min(H, W))
    # the warp: bilinear with constant 0 outside, as scipy's map_coordinates(order=1)
    y = t.apply(_t(photos_rect), sigma).numpy()
    yy, xx = np.meshgrid(np.arange(H), np.arange(W), indexing="ij")
    for j in range(2):
        sy, sx = yy + disp[j, ..., 1], xx + disp[j, ..., 0]
        for i, img in enumerate(photos_rect):
            ref = np.stack(
                [
                    ndi.map_coordinates(
                        img[..., c].astype(np.float64), [sy, sx], order=1, mode="grid-constant", cval=0.0
                    )
                    for c in range(3)
                ],
                -1,
            )
            assert _mae(y[i, j].transpose(1, 2, 0), np.round(ref)) < 0.6
    # deterministic given the seed, different for another seed
    assert torch.equal(t.apply(_t(photos_rect), sigma), t.apply(_t(photos_rect), sigma))
    import dataclasses

    other = dataclasses.replace(t, seed=1)
    assert not torch.equal(other.apply(_t(photos_rect), sigma), t.apply(_t(photos_rect), sigma))


# ---------------------------------------------------------------------------------------------
# appearance transforms vs PIL / skimage / scipy


def test_grayscale_vs_pil(photos):
    y = T.get("grayscale").apply(_t(photos), [1.0])[:, 0]
    for i, img in enumerate(photos):
        ref = np.asarray(Image.fromarray(img).convert("L").convert("RGB"))
        assert _mae(_hwc(y[i]), ref) < 1.0
        assert np.abs(_hwc(y[i]).astype(int) - ref.astype(int)).max() <= 1


@pytest.mark.parametrize(
    "name,enh",
    [
        ("brightness", ImageEnhance.Brightness),
        ("contrast", ImageEnhance.Contrast),
        ("saturation", ImageEnhance.Color),
        ("sharpness", ImageEnhance.Sharpness),
    ],
)
def test_enhance_vs_pil(name, enh, photos):
    factors = [0.25, 0.7, 1.8, 5.0] if name != "sharpness" else [1.0, 2.5, 12.0, 30.0]
    y = T.get(name).apply(_t(photos), factors)
    for j, f in enumerate(factors):
        for i, img in enumerate(photos):
            ref = np.asarray(enh(Image.fromarray(img)).enhance(f))
            assert _mae(_hwc(y[i, j]), ref) < 1.0, (f, i)


def test_hue_vs_skimage(photos):
    from skimage.color import hsv2rgb, rgb2hsv

    shifts = [-0.5, -0.2, 0.1, 0.37]
    xf = _t(photos).double() / 255
    y = T.get("hue").apply(xf, shifts)
    for j, s in enumerate(shifts):
        for i, img in enumerate(photos):
            hsv = rgb2hsv(img.astype(np.float64) / 255)
            hsv[..., 0] = (hsv[..., 0] + s) % 1.0
            ref = hsv2rgb(hsv)
            assert _mae(255 * _hwc(y[i, j]), 255 * ref) < 0.5


def test_blur_vs_scipy(photos):
    sigmas = [0.5, 1.3, 4.0, 9.0]
    y = T.get("blur").apply(_t(photos).float() / 255, sigmas)
    for j, s in enumerate(sigmas):
        for i, img in enumerate(photos):
            ref = np.stack(
                [ndi.gaussian_filter(img[..., c].astype(np.float64), s, mode="mirror", truncate=3.0) for c in range(3)],
                -1,
            )
            assert _mae(255 * _hwc(y[i, j]), ref) < 0.01


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_integer_ops_vs_pil(dtype, photos):
    x = _t(photos)
    xx = x if dtype == torch.uint8 else x.float() / 255
    scale = 1 if dtype == torch.uint8 else 255
    post = T.get("posterize").apply(xx, T.get("posterize").grid())
    eq = T.get("equalize").apply(xx, [1.0])[:, 0]
    inv = T.get("invert").apply(xx, [1.0])[:, 0]
    for i, img in enumerate(photos):
        pil = Image.fromarray(img)
        for j, bits in enumerate(range(1, 9)):
            ref = np.asarray(ImageOps.posterize(pil, bits))
            assert np.array_equal(np.round(_hwc(post[i, j]).astype(np.float64) * scale), ref)
        assert np.array_equal(np.round(_hwc(eq[i]).astype(np.float64) * scale), np.asarray(ImageOps.equalize(pil)))
        assert np.array_equal(np.round(_hwc(inv[i]).astype(np.float64) * scale), np.asarray(ImageOps.invert(pil)))


def test_equalize_constant_channel_unchanged():
    x = torch.full((2, 3, 8, 8), 77, dtype=torch.uint8)
    assert torch.equal(T.get("equalize").apply(x, [1.0])[:, 0], x)


# ---------------------------------------------------------------------------------------------
# batching, dtypes, preprocessing


@pytest.mark.parametrize("name", T.TEST_TRANSFORMS)
def test_batch_equals_per_image_and_dtypes_agree(name, photos):
    t = T.get(name)
    g = t.grid(9)
    x = _t(photos)
    y = t.apply(x, g)
    assert y.shape == (3, g.shape[0], 3, 64, 64) and y.dtype == torch.uint8
    for i in range(3):
        assert torch.equal(y[i], t.apply(x[i : i + 1], g)[0])
    yf = t.apply(x.double() / 255, g)
    assert yf.dtype == torch.float64
    # float path vs uint8 path: same maths, only rounding of intermediates differs (sharpness rounds its
    # smoothed image to uint8 levels like PIL, and factors up to 30 amplify that rounding)
    assert (yf * 255 - y.double()).abs().mean() < (3.0 if name == "sharpness" else 0.6)


def test_preprocess_vs_pil_and_small_sizes():
    img = skimage_data.chelsea()  # 300 x 451
    x = _t(img[None])
    y = T.preprocess(x, resize=256, crop=224)
    assert y.shape == (1, 3, 224, 224) and y.dtype == torch.uint8
    pil = Image.fromarray(img)
    w, h = pil.size
    r = pil.resize((int(256 * w / h), 256), Image.BILINEAR)
    left = int(round((r.size[0] - 224) / 2.0))
    top = int(round((r.size[1] - 224) / 2.0))
    ref = np.asarray(r.crop((left, top, left + 224, top + 224)))
    assert _mae(_hwc(y[0]), ref) < 1.5
    small = T.preprocess(x.float() / 255, resize=36, crop=32)
    assert small.shape == (1, 3, 32, 32) and small.dtype == torch.float32
    for n in T.TEST_TRANSFORMS:
        out = T.get(n).apply(small, T.get(n).grid(4))
        assert out.shape[-2:] == (32, 32) and torch.isfinite(out).all()


# ---------------------------------------------------------------------------------------------
# bad input


def test_bad_inputs():
    x = torch.zeros(2, 3, 16, 16, dtype=torch.uint8)
    with pytest.raises(ValueError, match="valid names: crop, hflip"):
        T.get("rotate")
    with pytest.raises(ValueError, match="sigma must be >= 0"):
        T.get("blur").apply(x, [-1.0])
    with pytest.raises(ValueError, match="bits must be an integer in 1..8"):
        T.get("posterize").apply(x, [0.0])
    with pytest.raises(ValueError, match="bits must be an integer"):
        T.get("posterize").apply(x, [2.5])
    with pytest.raises(ValueError, match="uint8 .* or floating"):
        T.get("invert").apply(x.to(torch.int32), [1.0])
    with pytest.raises(ValueError, match="4 dimensions"):
        T.get("invert").apply(x[0], [1.0])
    with pytest.raises(ValueError, match="RGB with 3 channels"):
        T.get("invert").apply(x[:, :1], [1.0])
    with pytest.raises(ValueError, match="channels-last"):
        T.get("invert").apply(x.permute(0, 2, 3, 1)[:, :4], [1.0])
    with pytest.raises(ValueError, match="empty batch"):
        T.get("invert").apply(x[:0], [1.0])
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        T.get("invert").apply(x.float(), [1.0]) if False else T.get("invert").apply(x.float() + 2, [1.0])
    with pytest.raises(ValueError, match="params is empty"):
        T.get("rotation").apply(x, [])
    with pytest.raises(ValueError, match=r"shape \[P, 2\]"):
        T.get("shear").apply(x, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="0 .identity. or 1"):
        T.get("hflip").apply(x, [0.5])
    with pytest.raises(ValueError, match="degenerate"):
        T.get("shear").apply(x, [[90.0, 0.0]])
    with pytest.raises(ValueError, match="inside the image"):
        T.get("crop").apply(x, [[0.5, 0.0, 0.75, 0.5]])
    with pytest.raises(ValueError, match="factor must be > 0"):
        T.get("scale").apply(x, [0.0])
    with pytest.raises(ValueError, match="positive int"):
        T.get("rotation").grid(0)
    with pytest.raises(ValueError, match="larger than"):
        T.preprocess(x, resize=None, crop=32)
    with pytest.raises(ValueError, match="NaN"):
        T.get("rotation").apply(x, [float("nan")])
    for bad in (float("nan"), float("inf"), -float("inf")):  # one non-finite pixel among values in range
        y = x.float() / 255
        y[1, 2, 3, 4] = bad
        with pytest.raises(ValueError, match="images contains NaN/Inf values"):
            T.get("rotation").apply(y, [0.0])
    with pytest.raises(ValueError, match="torch.Tensor"):
        T.get("rotation").apply([[1, 2]], [0.0])
