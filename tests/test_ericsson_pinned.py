"""protocol='ericsson' follows the versions the original evaluation code pins (issue 58; torchvision 0.10.0 with
Pillow 8.1.0): the image list of a folder is torchvision 0.10's ``ImageFolder(root).samples`` (the list the
protocol's draw indexes), and 16-bit, 32-bit and float files are read as its ``pil_loader`` reads them,
``Image.open(f).convert("RGB")``; the default protocol keeps invfast's listing and by-range reading. Blur's
truncation (the third item) is tested in tests/test_ericsson_fidelity.py. References: ``ImageFolder``'s listing
written out here from torchvision 0.10's ``datasets/folder.py``; the installed Pillow's own ``convert``."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import torch
from PIL import Image

from invfast.data.folder import FolderSource, imagefolder_listing
from invfast.measure.protocol import PROTOCOLS, Protocol, get_protocol

#: torchvision 0.10's IMG_EXTENSIONS (datasets/folder.py)
TV010_IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def tv010_image_folder_samples(directory: str) -> list[tuple[str, int]]:
    """torchvision 0.10 ``ImageFolder(directory).samples``: ``find_classes`` then ``make_dataset`` with
    ``extensions=IMG_EXTENSIONS`` (``has_file_allowed_extension``), as published."""
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    class_to_idx = {cls_name: i for i, cls_name in enumerate(classes)}
    instances = []
    for target_class in sorted(class_to_idx.keys()):
        class_index = class_to_idx[target_class]
        target_dir = os.path.join(directory, target_class)
        if not os.path.isdir(target_dir):
            continue
        for root, _, fnames in sorted(os.walk(target_dir, followlinks=True)):
            for fname in sorted(fnames):
                path = os.path.join(root, fname)
                if fname.lower().endswith(TV010_IMG_EXTENSIONS):
                    instances.append((path, class_index))
    return instances


#: every case the issue names: class names that sort differently with their '/', a hidden class and file, a
#: README, a .gif and a .jpe (invfast's extensions, not ImageFolder's), an image under the root, nested folders
#: (b/sub, b/sub-x, b/sub/deeper: os.walk's roots sorted as strings), upper-case extensions, every extension
CASES = (
    "a/x.png",
    "a/Y.JPG",
    "a/.hidden.png",
    "a/README.txt",
    "a/anim.gif",
    "a/photo.jpe",
    "a-b/x.png",
    "a-b/z.bmp",
    "a.b/x.png",
    "a.b/m.jpeg",
    "a.b/k.webp",
    ".h/x.png",
    "Z/x.tiff",
    "b/x.ppm",
    "b/g.pgm",
    "b/sub/x.png",
    "b/sub/t.TIF",
    "b/sub-x/q.png",
    "b/sub/deeper/y.png",
    "top.png",
)


def _colour(i: int) -> tuple[int, int, int]:
    return (13 * i + 20) % 256, (97 * i + 40) % 256, (181 * i + 60) % 256


def _make_folder(root) -> dict[str, tuple[int, int, int]]:
    """The CASES under ``root``: every image a solid colour of its own (lossless formats but JPEG/WebP), the
    README a text file; ``{relative path: colour}``."""
    colours = {}
    for i, rel in enumerate(CASES):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if rel.endswith(".txt"):
            with open(path, "w") as f:
                f.write("not an image\n")
            continue
        c = _colour(i)
        im = Image.new("RGB", (26, 24), c)
        if rel.endswith(".pgm"):
            im = im.convert("L")
            c = (im.getpixel((0, 0)),) * 3
        fmt = {".jpe": "JPEG", ".tif": "TIFF"}.get(os.path.splitext(rel)[1].lower())
        im.save(path, format=fmt, **({"lossless": True} if rel.endswith(".webp") else {}))
        colours[rel] = c
    return colours


# ---------------------------------------------------------------------------------------------- the image list
def test_imagefolder_listing_is_torchvision_0_10s(tmp_path):
    """FolderSource(listing='imagefolder') lists exactly ImageFolder(root).samples -- paths and class indices --
    on a folder with every case; invfast's default listing of it differs (and is unchanged)."""
    _make_folder(tmp_path)
    want = tv010_image_folder_samples(str(tmp_path))
    src = FolderSource(tmp_path, listing="imagefolder")
    assert src.files == [p for p, _ in want]
    assert src.groups is not None and src.groups.tolist() == [c for _, c in want]
    assert src.group_names == [".h", "Z", "a", "a-b", "a.b", "b"]
    rel = [os.path.relpath(p, tmp_path) for p in src.files]
    assert rel[:1] == [os.path.join(".h", "x.png")] and os.path.join("a", ".hidden.png") in rel
    assert not {"top.png", "a/README.txt", "a/anim.gif", "a/photo.jpe"} & {r.replace(os.sep, "/") for r in rel}
    b = [r.replace(os.sep, "/") for r in rel if r.startswith("b")]
    assert b == ["b/g.pgm", "b/x.ppm", "b/sub/t.TIF", "b/sub/x.png", "b/sub-x/q.png", "b/sub/deeper/y.png"]
    assert src.describe()["listing"] == "imagefolder"
    default = FolderSource(tmp_path)  # invfast's: every file by relative path, hidden ones skipped
    assert "listing" not in default.describe() and "pixels" not in default.describe()
    assert default.files != src.files and len(default.files) == len(CASES) - 2
    assert [os.path.relpath(p, tmp_path) for p in default.files] == sorted(
        os.path.relpath(p, tmp_path) for p in default.files
    )


def test_imagefolder_listing_of_a_flat_folder_and_bad_arguments(tmp_path):
    """A folder without sub-folders (ImageFolder refuses it) is listed as ImageFolder lists it as its parent's
    one class: its image files, sorted, hidden ones included, no groups."""
    for name in ("b.png", "A.png", ".c.png", "d.gif", "notes.txt"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(FileNotFoundError):
        tv010_image_folder_samples(str(tmp_path))
    parent = tv010_image_folder_samples(str(tmp_path.parent))
    want = [p for p, c in parent if os.path.dirname(p) == str(tmp_path)]
    files, targets, classes = imagefolder_listing(str(tmp_path))
    assert files == want == [str(tmp_path / n) for n in (".c.png", "A.png", "b.png")] and classes == []
    assert FolderSource(tmp_path, listing="imagefolder").groups is None
    with pytest.raises(ValueError, match="extensions cannot be given with listing='imagefolder'"):
        FolderSource(tmp_path, listing="imagefolder", extensions=[".png"])
    with pytest.raises(ValueError, match="listing must be one of invfast, imagefolder"):
        FolderSource(tmp_path, listing="torchvision")
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "readme.txt").write_bytes(b"")
    with pytest.raises(ValueError, match="holds no images"):
        FolderSource(tmp_path / "only", listing="imagefolder")


class _Seen(torch.nn.Module):
    """Records every input batch (and pools it to 3 features). It keeps state between calls, so it is measured
    with ``split_forward=False`` (MeasureConfig's rule for such a model): otherwise torch's threads call it on
    sub-batches in turn and the order of ``seen`` follows the scheduler, not the draw."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        self.seen.append(x.detach().clone())
        return x.mean((2, 3)) + 0.01 * x.std((2, 3))


def _one_stats():
    from invfast.stats import FeatureStats

    return FeatureStats().update(torch.randn(40, 3, generator=torch.Generator().manual_seed(0)).double())


def test_the_protocols_draw_indexes_imagefolders_list(tmp_path):
    """Under protocol='ericsson' the images scored are np.random.choice(np.arange(N), n) of ImageFolder's list
    (README.txt, the .gif, the .jpe and the root's image not in it, hidden ones in it): every view the model sees
    is the colour of the drawn file."""
    from invfast.measure import measure_invariance

    colours = _make_folder(tmp_path)
    samples = tv010_image_folder_samples(str(tmp_path))
    n, k, seed = len(samples), 9, 3
    want = np.random.RandomState(seed).choice(np.arange(n), k)
    small = dataclasses.replace(PROTOCOLS["ericsson"], resize=24, crop=24)
    net = _Seen()
    r = measure_invariance(
        net,
        f"folder:{tmp_path}",
        "hflip",
        protocol=small,
        n_images=k,
        protocol_seed=seed,
        crop=24,
        stats=_one_stats(),
        device="cpu",
        normalize=False,
        workers=0,
        progress=False,
        split_forward=False,
    )
    data = r.meta["data"]
    assert data["resampled_from"]["n"] == n and data["resampled_from"]["listing"] == "imagefolder"
    assert data["indices_head"] == want[:8].tolist() and data["indices_sum"] == int(want.sum())
    palette = np.array([colours[os.path.relpath(p, tmp_path).replace(os.sep, "/")] for p, _ in samples], float)
    seen = torch.cat(net.seen).mean((2, 3)).double().numpy() * 255  # one mean colour per view
    got = np.abs(seen[:, None, :] - palette[None]).sum(-1).argmin(1)
    assert np.abs(seen - palette[got]).max() < 3  # a solid colour of the list (JPEG: within a level or two)
    # the drawn images in the draw's order, then each one's two views (hflip off, on); before them, at most a
    # forward probe of a drawn image
    order = want.tolist() + np.repeat(want, 2).tolist()
    assert got.tolist()[-len(order) :] == order and set(got.tolist()) <= set(want.tolist())


# ---------------------------------------------------------------------------------------------- 16-bit and float
def _wide_files(root, rng) -> dict[str, np.ndarray]:
    """16-bit PNGs (full range; only 0..255), float TIFFs (0..1; 0..255 with fractions), a 32-bit integer TIFF."""
    os.makedirs(root, exist_ok=True)
    arrays = {
        "w16.png": rng.integers(0, 65536, (24, 26)).astype(np.uint16),
        "low16.png": rng.integers(0, 256, (24, 26)).astype(np.uint16),
        "f01.tif": rng.random((24, 26)).astype(np.float32),
        "f255.tif": (rng.random((24, 26)) * 250).astype(np.float32),
        "i32.tif": rng.integers(0, 1000, (24, 26)).astype(np.int32),
    }
    arrays["f255.tif"][0, 0] = 254.75
    for name, a in arrays.items():
        Image.fromarray(a, mode="F" if a.dtype == np.float32 else None).save(os.path.join(root, name))
    return arrays


def _pillow81(a: np.ndarray) -> np.ndarray:
    """Pillow 8.1's convert("RGB") of a 16/32-bit or float image, in its C converters: ``I;16`` -> ``L`` and
    ``I`` -> ``RGB`` clip to 0..255, ``F`` -> ``L`` (``f2l``) clips and truncates toward zero."""
    if a.dtype == np.float32:
        g = np.where(a <= 0, 0, np.where(a >= 255, 255, np.trunc(np.clip(a, 0, 255)))).astype(np.uint8)
    else:
        g = np.clip(a.astype(np.int64), 0, 255).astype(np.uint8)
    return np.stack([g, g, g], -1)


def test_wide_files_are_read_as_pillows_convert_under_the_protocol(tmp_path, rng):
    """pixels='pillow': every 16-bit, 32-bit and float file equals the installed Pillow's
    Image.open(f).convert("RGB") bit for bit (= Pillow 8.1's converters, written out above), each with a one-line
    warning naming it; an 8-bit file reads as before, without a warning. The default reads them by their range
    (16-bit / 257, 0..1 floats x 255), as before."""
    arrays = _wide_files(tmp_path / "c", rng)
    Image.fromarray(rng.integers(0, 256, (24, 26, 3), dtype=np.uint8)).save(tmp_path / "c" / "rgb.png")
    src = FolderSource(tmp_path, native=True, listing="imagefolder", pixels="pillow")
    assert src.describe()["pixels"] == "pillow" and src.identity() != FolderSource(tmp_path, native=True).identity()
    with pytest.warns(UserWarning) as record:
        imgs, ok = src.load(range(len(src)))
    assert bool(ok.all())
    messages = [str(w.message) for w in record]
    for path, img in zip(src.files, imgs):
        name = os.path.basename(path)
        with Image.open(path) as im:
            want = np.asarray(im.convert("RGB"))
        np.testing.assert_array_equal(img.permute(1, 2, 0).numpy(), want, err_msg=name)
        said = [m for m in messages if path in m]
        if name == "rgb.png":
            assert not said
            continue
        np.testing.assert_array_equal(want, _pillow81(arrays[name]), err_msg=name)
        assert len(said) == 1 and "\n" not in said[0] and "its range is lost" in said[0], said
    mean = {os.path.basename(p): float(x.double().mean()) for p, x in zip(src.files, imgs)}
    assert mean["w16.png"] > 250 and mean["f01.tif"] < 0.01  # clipped to white; truncated to black
    with pytest.warns(UserWarning, match="float image with values up to 254.8 read as 0..255"):  # as before
        default, _ = FolderSource(tmp_path, native=True).load(range(len(src)))
    by_name = dict(zip([os.path.basename(p) for p in FolderSource(tmp_path).files], default))
    w16 = arrays["w16.png"].astype(np.float64)
    np.testing.assert_array_equal(by_name["w16.png"][0].numpy(), np.clip(np.round(w16 / 257), 0, 255))
    np.testing.assert_array_equal(by_name["f01.tif"][0].numpy(), np.round(arrays["f01.tif"].astype(np.float64) * 255))


def test_the_protocol_measures_wide_files_as_the_original_reads_them(tmp_path, rng):
    """measure_invariance and measure_real_world under protocol='ericsson' read a 16-bit PNG as Pillow's
    convert("RGB") (warning, naming the file); the default reads it by its range."""
    from invfast.measure import measure_invariance, measure_real_world

    a = rng.integers(0, 65536, (24, 24)).astype(np.uint16)
    for g in ("c", "d"):  # two groups of two views (real-world mode)
        (tmp_path / g).mkdir()
        Image.fromarray(a).save(tmp_path / g / "deep.png")
        Image.fromarray(a[::-1].copy()).save(tmp_path / g / "deep2.png")
    with Image.open(tmp_path / "c" / "deep.png") as im:
        pillow = torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1)
    every = dataclasses.replace(PROTOCOLS["ericsson"], with_replacement=False, resize=24, crop=24)
    kw = dict(device="cpu", normalize=False, workers=0, progress=False, split_forward=False)
    net = _Seen()
    with pytest.warns(
        UserWarning,
        match=r"deep2?\.png: a 16-bit image \(values above 255 clipped to 255\) read as the original's loader",
    ):
        r = measure_invariance(net, f"folder:{tmp_path}", "hflip", protocol=every, crop=24, stats=_one_stats(), **kw)
    assert r.meta["data"]["pixels"] == "pillow"
    seen = (net.seen[0] * 255).round().to(torch.uint8)
    assert any(torch.equal(v, pillow) for v in seen)  # the identity view: the file as Pillow converts it
    net = _Seen()
    measure_invariance(net, f"folder:{tmp_path}", "hflip", crop=24, resize=24, stats=_one_stats(), **kw)
    ranged = torch.from_numpy(np.clip(np.round(a / 257.0), 0, 255).astype(np.uint8)).expand(3, 24, 24)
    assert any(torch.equal(v, ranged) for v in (net.seen[0] * 255).round().to(torch.uint8))
    as_loaded = dataclasses.replace(PROTOCOLS["ericsson"], real_world_resize=None)
    with pytest.warns(UserWarning, match=r"deep2?\.png: a 16-bit image"):
        rw = measure_real_world(
            _Seen(), f"folder:{tmp_path}", protocol=as_loaded, stats=_one_stats(), crop=24, resize=24, **kw
        )
    assert rw.meta["data"]["pixels"] == "pillow"


# ---------------------------------------------------------------------------------------------- the knobs
def test_protocol_knobs_and_their_defaults():
    e, d = get_protocol("ericsson"), get_protocol("invfast")
    assert (e.folder_listing, e.file_pixels, e.blur_rounding) == ("imagefolder", "pillow", "truncate")
    assert (d.folder_listing, d.file_pixels) == ("invfast", "range")
    for field, bad in (("folder_listing", "torchvision"), ("file_pixels", "clip"), ("blur_rounding", "floor")):
        with pytest.raises(ValueError, match=f"Protocol.{field} must be one of"):
            dataclasses.replace(e, **{field: bad})
    with pytest.raises(ValueError, match="blur_rounding must be one of"):
        from invfast.transforms import ericsson

        ericsson.get("blur", blur_rounding="half-up")
    assert isinstance(dataclasses.replace(e, blur_rounding="round"), Protocol)
