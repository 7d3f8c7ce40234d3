"""Images are read by what they hold (issue 25): float and 16-bit files by their range, EXIF orientation
applied (not for images as the published code loads them, ``native``), NaN refused; in-memory float arrays
by their range (0..1 or 0..255) or refused in one line, and float files by the same rule (issue 44)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from invfast.data.folder import FolderSource, decode_image, decode_native
from invfast.data.sources import open_source
from invfast.data.tensors import ArraySource, TensorSource


def _grey(a: np.ndarray) -> np.ndarray:
    """uint8 RGB [3, H, W] of a 2-D array already on 0..255 (what a correct decoder must give)."""
    g = np.clip(np.round(a), 0, 255).astype(np.uint8)
    return np.stack([g, g, g])


def test_float_tiff_in_0_1_and_0_255(tmp_path, rng):
    a = rng.random((20, 30)).astype(np.float32)
    Image.fromarray(a, mode="F").save(tmp_path / "unit.tif")
    np.testing.assert_array_equal(decode_native(tmp_path / "unit.tif").numpy(), _grey(a.astype(np.float64) * 255))
    b = (rng.random((20, 30)) * 255).astype(np.float32)
    b[0, 0] = 200.0
    Image.fromarray(b, mode="F").save(tmp_path / "bytes.tif")
    with pytest.warns(UserWarning, match="read as 0..255"):  # as the .npy path warns
        np.testing.assert_array_equal(decode_native(tmp_path / "bytes.tif").numpy(), _grey(b.astype(np.float64)))


def test_float_tiff_slightly_above_one_is_refused_as_arrays_are(tmp_path, rng):
    """Issue 44 (case 9): a 0..1 float TIFF with one pixel at 1.02 was read as 0..255 (nearly black), silently.
    A float image whose maximum is above 1 but at most 2 is 0..1 with overshoot or a black 0..255 one: the file,
    and the same values as an .npy array, are refused in one line naming the range and the fix."""
    a = rng.random((20, 30)).astype(np.float32)
    a[3, 4] = 1.02
    Image.fromarray(a, mode="F").save(tmp_path / "over.tif")
    msg = r"values in \[.*, 1\.02\]: slightly above 1, so neither 0..1 nor 0..255 can be told; clip them to 0..1"
    with pytest.raises(ValueError, match=msg):
        decode_native(tmp_path / "over.tif")
    src = FolderSource(tmp_path, resize=8)
    _, ok = src.load([0])
    assert not ok.any() and "slightly above 1" in src.errors.examples[0][1]
    np.save(tmp_path / "over.npy", np.stack([a, a, a], -1)[None])
    with pytest.raises(ValueError, match=msg):
        open_source(f"npy:{tmp_path / 'over.npy'}")
    with pytest.raises(ValueError, match=msg):
        TensorSource(torch.from_numpy(a).expand(1, 3, 20, 30))
    Image.fromarray(np.clip(a, 0, 1), mode="F").save(tmp_path / "clipped.tif")  # the fix the message names
    np.testing.assert_array_equal(
        decode_native(tmp_path / "clipped.tif").numpy(), _grey(np.clip(a, 0, 1).astype(np.float64) * 255)
    )


def test_float_tiff_with_nan_or_unknown_range_is_refused_in_one_line(tmp_path, rng):
    a = rng.random((8, 8)).astype(np.float32)
    a[2, 3] = np.nan
    Image.fromarray(a, mode="F").save(tmp_path / "nan.tif")
    with pytest.raises(ValueError, match=r"holds 1 NaN/Inf pixel"):
        decode_native(tmp_path / "nan.tif")
    Image.fromarray(np.full((8, 8), -5.0, np.float32), mode="F").save(tmp_path / "neg.tif")
    with pytest.raises(ValueError, match=r"values in \[-5, -5\]: the scale cannot be told"):
        decode_native(tmp_path / "neg.tif")
    src = FolderSource(tmp_path, resize=8)
    _, ok = src.load([0, 1])
    assert not ok.any() and src.errors.count == 2 and "NaN" in src.errors.examples[0][1]


def test_sixteen_bit_png(tmp_path, rng):
    a = rng.integers(0, 65536, (12, 10)).astype(np.uint16)
    Image.fromarray(a).save(tmp_path / "deep.png")
    np.testing.assert_array_equal(decode_native(tmp_path / "deep.png").numpy(), _grey(a.astype(np.float64) / 257))


def test_exif_orientation_is_applied(tmp_path, rng):
    """A photo stored sideways with EXIF orientation 6 (rotate 90° clockwise to view) decodes upright,
    equal to Pillow's exif_transpose of it, and so do its resized squares."""
    a = rng.integers(0, 256, (20, 36, 3), dtype=np.uint8)
    im = Image.fromarray(a)
    exif = im.getexif()
    exif[0x0112] = 6
    im.save(tmp_path / "sideways.jpg", exif=exif, quality=100)
    with Image.open(tmp_path / "sideways.jpg") as f:
        want = np.asarray(ImageOps.exif_transpose(f).convert("RGB"))
    got = decode_native(tmp_path / "sideways.jpg").permute(1, 2, 0).numpy()
    assert got.shape == (36, 20, 3)  # upright: the stored 20x36 turned a quarter
    np.testing.assert_array_equal(got, want)
    assert decode_image(tmp_path / "sideways.jpg", 16).shape == (3, 16, 16)
    # images as the published code loads them (native; torchvision's pil_loader): as stored, unless asked
    with Image.open(tmp_path / "sideways.jpg") as f:
        stored = np.asarray(f.convert("RGB"))
    assert FolderSource(tmp_path).describe()["exif_transpose"] is True
    native = FolderSource(tmp_path, native=True)
    np.testing.assert_array_equal(native.load([0])[0][0].permute(1, 2, 0).numpy(), stored)
    assert native.describe()["exif_transpose"] is False
    upright = FolderSource(tmp_path, native=True, exif=True)
    np.testing.assert_array_equal(upright.load([0])[0][0].permute(1, 2, 0).numpy(), want)
    assert native.identity() != upright.identity()


def test_native_folder_keeps_each_size(tmp_path, rng):
    for i, (h, w) in enumerate([(30, 45), (50, 20)]):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    src = FolderSource(tmp_path, native=True)
    imgs, ok = src.load([0, 1])
    assert ok.all() and [tuple(x.shape) for x in imgs] == [(3, 30, 45), (3, 50, 20)]
    assert src.describe()["resize"] == "native" and src.identity() != FolderSource(tmp_path).identity()


def test_npy_arrays_by_range(tmp_path, rng):
    a = rng.random((3, 8, 8, 3)) * 255  # float 0..255: read as is, not clamped to white
    np.save(tmp_path / "bytes.npy", a)
    with pytest.warns(UserWarning, match="read as 0..255"):
        src = open_source(f"npy:{tmp_path / 'bytes.npy'}")
    np.testing.assert_array_equal(src.get([0, 1, 2]).permute(0, 2, 3, 1).numpy(), np.round(a).astype(np.uint8))
    unit = rng.random((2, 3, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(ArraySource(unit).get([0, 1]).numpy(), np.round(unit * 255).astype(np.uint8))
    a[1, 2, 3, 0] = np.nan
    np.save(tmp_path / "nan.npy", a)
    with pytest.raises(ValueError, match=r"hold 1 NaN/Inf value"):
        open_source(f"npy:{tmp_path / 'nan.npy'}")
    np.save(tmp_path / "wide.npy", rng.random((2, 4, 4, 3)) * 1000 - 10)
    with pytest.raises(ValueError, match=r"values in \[.*\]: the scale cannot be told \(expected 0..1 or 0..255\)"):
        open_source(f"npy:{tmp_path / 'wide.npy'}")


def test_integer_npy_arrays_follow_the_rule_of_integer_image_files(tmp_path, rng):
    """uint16 arrays are 16-bit (÷ 257, as I;16 PNGs); other integer arrays by their range, as 32-bit
    integer (I) TIFFs are: 0..255 as they are, up to 65535 as 16-bit, anything else refused."""
    deep = rng.integers(0, 65536, (2, 6, 5, 3)).astype(np.uint16)
    np.save(tmp_path / "u16.npy", deep)
    got = open_source(f"npy:{tmp_path / 'u16.npy'}").get([0, 1]).permute(0, 2, 3, 1).numpy()
    np.testing.assert_array_equal(got, np.round(deep.astype(np.float64) / 257).astype(np.uint8))
    small = rng.integers(0, 256, (2, 3, 5, 6))  # int64 holding 0..255
    np.save(tmp_path / "i64.npy", small)
    np.testing.assert_array_equal(open_source(f"npy:{tmp_path / 'i64.npy'}").get([0, 1]).numpy(), small)
    wide = rng.integers(256, 65536, (2, 3, 5, 6)).astype(np.int32)
    np.save(tmp_path / "i32.npy", wide)
    from_npy = open_source(f"npy:{tmp_path / 'i32.npy'}").get([0]).numpy()[0]
    Image.fromarray(wide[0, 0]).save(tmp_path / "wide.tif")  # the same values as a 32-bit integer file
    np.testing.assert_array_equal(from_npy[0], decode_native(tmp_path / "wide.tif").numpy()[0])
    np.testing.assert_array_equal(from_npy, np.round(wide[0].astype(np.float64) / 257).astype(np.uint8))
    np.save(tmp_path / "neg.npy", small - 300)
    with pytest.raises(ValueError, match=r"integer values in \[-\d+, .*\]: the scale cannot be told"):
        open_source(f"npy:{tmp_path / 'neg.npy'}")
    np.save(tmp_path / "mask.npy", small > 100)
    with pytest.raises(ValueError, match=r"holds bool values; images must be .*uint16"):
        open_source(f"npy:{tmp_path / 'mask.npy'}")


def test_float_tensors_for_measurement_must_be_0_1():
    with pytest.raises(ValueError, match="float images must be in 0..1; divide them by 255"):
        TensorSource(torch.rand(2, 3, 4, 4) * 200)
    with pytest.raises(ValueError, match="NaN/Inf"):
        TensorSource(torch.full((2, 3, 4, 4), float("nan")))
    TensorSource(torch.rand(2, 3, 4, 4))  # 0..1 is fine
