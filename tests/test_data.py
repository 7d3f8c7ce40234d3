"""invfast.data: one folder reader (resize/crop order, 16-bit images, worker processes), one
synthetic: spec with one set of defaults, the one source protocol."""

import os

import numpy as np
import pytest
import torch

from invfast.data import (
    SYNTHETIC_DEFAULTS,
    FolderSource,
    ImageDecodeError,
    ImageSource,
    TensorSource,
    as_source,
    decode_image,
    heldout_source,
    parse_synthetic_spec,
)

SEED = int(np.random.SeedSequence().entropy % 2**31)


def _folder(tmp_path, sizes, broken=False):
    from PIL import Image

    rng = np.random.default_rng(SEED)
    arrays = []
    for i, (h, w) in enumerate(sizes):
        a = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        sub = tmp_path / ("a" if i % 2 else "b")
        sub.mkdir(exist_ok=True)
        Image.fromarray(a).save(sub / f"{i:02d}.png")
        arrays.append(a)
    if broken:
        (tmp_path / "a" / "00broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    return arrays


def test_sixteen_bit_png_scales_to_eight_bits(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(SEED)
    a = rng.integers(0, 65536, (12, 12), dtype=np.uint16)
    Image.fromarray(a).save(tmp_path / "deep.png")  # mode I;16 (16-bit grayscale PNG)
    got = decode_image(tmp_path / "deep.png", 12).numpy()
    ref = np.clip(np.round(a.astype(np.float64) / 257.0), 0, 255).astype(np.uint8)
    for c in range(3):
        np.testing.assert_array_equal(got[c], ref, err_msg=f"seed {SEED}")


def test_resize_then_centre_crop_for_measurement_and_pretraining(tmp_path):
    """Both front doors read a folder with torchvision's Resize(s) + CenterCrop(s) order."""
    from PIL import Image

    import invfast.pretrain as P

    arrays = _folder(tmp_path, [(30, 47), (50, 21), (16, 16)])
    measure_src = as_source(f"folder:{tmp_path}", resize=14)
    pretrain_src = P.data.open_training_source(f"folder:{tmp_path}", load_size=14)
    order = [os.path.basename(p) for p in measure_src.files]
    x, ok = measure_src.load([0, 1, 2])
    assert ok.all()
    torch.testing.assert_close(pretrain_src.get(torch.arange(3)), x, atol=0, rtol=0)
    for j, name in enumerate(order):
        a = arrays[int(name[:2])]
        h, w = a.shape[:2]
        s = 14 / min(h, w)
        nw, nh = max(14, round(w * s)), max(14, round(h * s))
        im = Image.fromarray(a).resize((nw, nh), Image.BILINEAR)
        left, top = (nw - 14) // 2, (nh - 14) // 2
        ref = np.asarray(im.crop((left, top, left + 14, top + 14)))
        np.testing.assert_array_equal(x[j].permute(1, 2, 0).numpy(), ref)


def test_worker_processes_read_the_same_images(tmp_path):
    _folder(tmp_path, [(20, 20 + i) for i in range(7)], broken=True)
    plain = FolderSource(tmp_path, 10)
    pooled = FolderSource(tmp_path, 10, workers=2)
    batches = [[0, 1, 2], [6, 5], [3, 4, 0]]
    for (a, oka), (b, okb) in zip(plain.batches(batches), pooled.batches(batches)):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
        assert torch.equal(oka, okb)
    a, ok = pooled.load([4, 0, 1])
    assert ok.tolist() == [True, False, True] and pooled.errors.count == 1 == plain.errors.count
    assert os.path.basename(pooled.errors.examples[0][0]) == "00broken.jpg"
    with pytest.raises(ImageDecodeError, match="cannot be read"):
        pooled.get([0, 1])
    torch.testing.assert_close(pooled.get([5, 6]), plain.get([5, 6]), atol=0, rtol=0)
    cached = FolderSource(tmp_path, 10, cache=True)
    torch.testing.assert_close(cached.get([1, 2]), cached.get([1, 2]), atol=0, rtol=0)
    with pytest.raises(ValueError, match="workers"):
        FolderSource(tmp_path, 10, workers=-1)
    assert FolderSource(tmp_path, resize=9).resize == 9


def test_one_synthetic_spec_for_measure_and_pretrain():
    import invfast.pretrain as P

    s = parse_synthetic_spec("synthetic:")
    assert (s.objects, s.n, s.size, s.seed, s.split) == (61, 5000, 32, 0, "train") and len(s.transforms) == 18
    assert SYNTHETIC_DEFAULTS["transforms"] == "all"
    spec = "synthetic:objects=5,n=12,size=16,seed=3"
    measured = as_source(spec)
    trained = P.data.open_training_source(spec)
    assert len(measured) == len(trained) == 12
    x, ok = measured.load(torch.arange(12))
    torch.testing.assert_close(x, trained.get(torch.arange(12)), atol=0, rtol=0)
    assert ok.all() and measured.describe()["split"] == "train"
    assert parse_synthetic_spec("transforms=none").transforms == ()
    assert (
        parse_synthetic_spec({"transforms": "rotate+hue"}).transforms
        == parse_synthetic_spec("transforms=hue+rotate").transforms
    )
    with pytest.raises(ValueError, match="split must be one of"):
        parse_synthetic_spec("split=tset")
    with pytest.raises(ValueError, match=r"unknown synthetic data option\(s\) \['colour'\]"):
        parse_synthetic_spec("colour=1")
    with pytest.raises(ValueError, match="objects must be an integer"):
        parse_synthetic_spec("objects=many")
    with pytest.raises(ValueError, match="transforms"):
        parse_synthetic_spec("transforms=twirl")
    held = heldout_source(spec, trained)
    assert held.dataset.split == "val" and not torch.equal(held.get(torch.arange(4)), trained.get(torch.arange(4)))


def test_every_source_speaks_the_protocol(tmp_path):
    _folder(tmp_path, [(10, 10)])
    x = torch.rand(5, 3, 8, 8)
    for src in (TensorSource(x), as_source(tmp_path, resize=8), as_source("synthetic:objects=2,n=4,size=8")):
        assert isinstance(src, ImageSource)
        got = src.get([0])
        assert got.dtype == torch.uint8 and got.shape[0] == 1 and isinstance(src.spec, str)
    torch.testing.assert_close(TensorSource(x).get([1, 2]), (x[1:3] * 255).round().to(torch.uint8), atol=0, rtol=0)


def test_synthetic_spec_order_and_split_are_validated():
    from invfast.data.synthetic import parse_synthetic_spec

    spec = parse_synthetic_spec("synthetic:n=4,order=random")
    assert spec.to_string().endswith(",order=random")
    assert parse_synthetic_spec(spec.to_string()) == spec
    assert "order" not in parse_synthetic_spec("synthetic:n=4").to_string()  # canonical specs read as before
    ds = spec.dataset()
    assert len(set(ds.orders([0, 1, 2, 3]))) > 1  # a permutation per image
    for bad in ("split=zzz", "order=zzz"):
        with pytest.raises(ValueError, match=bad.split("=")[0]):
            parse_synthetic_spec(bad)


def test_synthetic_source_serves_an_empty_request_before_any_image():
    """get([]) on a fresh synthetic source is an empty uint8 batch (it indexed its still-empty cache, None);
    the images served afterwards are unchanged."""
    from invfast.data.sources import open_source

    spec = "synthetic:objects=2,n=4,size=8,seed=1"
    src = open_source(spec)
    empty = src.get([])
    assert empty.dtype == torch.uint8 and tuple(empty.shape) == (0, 3, 8, 8)
    torch.testing.assert_close(src.get([2, 0]), open_source(spec).get([2, 0]), atol=0, rtol=0)
