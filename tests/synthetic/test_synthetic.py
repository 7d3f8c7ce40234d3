"""Transforms-2D generator: reproducibility by index, storage round trip, what each transformation
changes, SPEC §2.3 parameter distributions, families and bad inputs."""

from __future__ import annotations

import colorsys
import json
import os

import numpy as np
import pytest
import torch
from scipy import stats

from invfast import backend
from invfast.synthetic import (
    PARAM_NAMES,
    TRANSFORMATION_TYPES,
    ObjectBank,
    Recipe,
    Transforms2D,
    builtin_objects,
    families,
    load_backgrounds,
    load_objects,
    rng,
    storage,
)
from invfast.synthetic.recipe import sample

ALL = TRANSFORMATION_TYPES
BLACK = torch.zeros(1, 3, 32, 32, dtype=torch.uint8)
WHITE = torch.full((1, 3, 32, 32), 255, dtype=torch.uint8)


def make(transforms, n=64, seed=0, objects=12, **kw):
    return Transforms2D(objects, transforms, n=n, seed=seed, **kw)


def alpha_of(transforms, idx, seed=0, **kw):
    """Recover each sample's alpha from composites over black and white backgrounds ([B, H, W], 0..1)."""
    b = make(transforms, seed=seed, backgrounds=BLACK, **kw).generate(idx)[0].double()
    w = make(transforms, seed=seed, backgrounds=WHITE, **kw).generate(idx)[0].double()
    return 1.0 - (w - b).mean(1) / 255.0, b


# ----------------------------------------------------------------------------- RNG


def test_rng_pure_function_of_key_and_uniform():
    k1 = rng.sample_keys(3, "train", np.arange(1000))
    k2 = rng.sample_keys(3, "train", np.arange(1000)[::-1])[::-1]
    np.testing.assert_array_equal(k1, k2)
    assert not np.array_equal(rng.sample_keys(3, "val", np.arange(10)), k1[:10])
    assert not np.array_equal(rng.sample_keys(4, "train", np.arange(10)), k1[:10])
    u = rng.uniform(rng.sample_keys(0, "t", np.arange(20000)), "s")
    assert stats.kstest(u, "uniform").pvalue > 1e-3
    z = rng.normal(rng.sample_keys(0, "t", np.arange(20000)), "z")
    assert stats.kstest(z, "norm").pvalue > 1e-3
    # streams are independent
    v = rng.uniform(rng.sample_keys(0, "t", np.arange(20000)), "other")
    assert abs(np.corrcoef(u, v)[0, 1]) < 0.03


# ----------------------------------------------------------------------------- reproducibility


def test_item_independent_of_batch_and_order():
    ds = make(ALL, n=200)
    idx = np.arange(200)
    full = ds.generate(idx)
    perm = np.random.default_rng(0).permutation(200)
    shuffled = ds.generate(perm)
    inv = np.argsort(perm)
    assert torch.equal(shuffled[0][inv], full[0])
    assert torch.equal(shuffled[1][inv], full[1])
    for k in PARAM_NAMES:
        assert torch.equal(shuffled[2][k][inv], full[2][k])
    for i in (0, 57, 199):
        img, label, params = ds[i]
        assert torch.equal((img * 255).round().to(torch.uint8), full[0][i])
        assert label == int(full[1][i])
        assert params["angle"] == float(full[2]["angle"][i])
    assert torch.equal(ds[-1][0], ds[199][0])
    # a fresh object with the same arguments reproduces the bytes
    assert torch.equal(make(ALL, n=200).generate([5, 6])[0], full[0][[5, 6]])


def test_chunked_generation_equals_single_items():
    ds = make("rotate,hue,blur,noise,elastic", n=600)
    big = ds.generate(range(600))[0]  # several internal chunks
    singles = torch.stack([ds.generate([i])[0][0] for i in range(0, 600, 37)])
    assert torch.equal(big[::37], singles)


def test_dataloader_worker_counts_identical():
    ds = make("rotate,hue,blur,erasing", n=48)

    def collect(workers, shuffle):
        g = torch.Generator().manual_seed(1)
        dl = torch.utils.data.DataLoader(ds, batch_size=5, num_workers=workers, shuffle=shuffle, generator=g)
        out = {}
        for x, y, p in dl:
            for j in range(x.shape[0]):
                out[int(round(float(p["angle"][j]) * 1e6))] = (x[j], int(y[j]))
        return out

    a, b = collect(0, False), collect(2, True)
    assert a.keys() == b.keys() and len(a) == 48
    for k in a:
        assert torch.equal(a[k][0], b[k][0]) and a[k][1] == b[k][1]


def test_splits_and_seeds_differ():
    a = make("rotate", split="train").generate(range(8))[0]
    b = make("rotate", split="val").generate(range(8))[0]
    c = make("rotate", seed=1).generate(range(8))[0]
    assert not torch.equal(a, b) and not torch.equal(a, c)


# ----------------------------------------------------------------------------- storage


def test_materialize_roundtrip_bit_identical(tmp_path):
    ds = make("translate,rotate,noise,erasing", n=130)
    out = ds.materialize(tmp_path / "ds", batch_size=32, shard_size=50, progress=False)
    loaded = storage.load(out)
    assert len(loaded) == 130 and len(loaded.manifest["shards"]) == 3
    a, b = ds.generate(range(130)), loaded.generate(np.arange(130))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    for k in PARAM_NAMES:
        assert torch.equal(a[2][k], b[2][k])
    x, y, p = loaded[17]
    x2, y2, p2 = ds[17]
    assert torch.equal(x, x2) and y == y2 and p == p2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["seed"] == 0 and manifest["fingerprint"] == ds.fingerprint()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temp folders left


def test_materialize_refuses_other_dataset_and_detects_corruption(tmp_path):
    d = tmp_path / "ds"
    make("rotate", n=20).materialize(d, progress=False)
    make("rotate", n=20).materialize(d, progress=False)  # same dataset: kept
    with pytest.raises(FileExistsError, match="different dataset"):
        make("hue", n=20).materialize(d, progress=False)
    make("hue", n=20).materialize(d, overwrite=True, progress=False)
    assert storage.load(d).config["transforms"] == ["hue"]
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "a.txt").write_text("x")
    with pytest.raises(FileExistsError, match="a.txt and is not an invfast dataset"):
        make("hue", n=20).materialize(tmp_path / "junk", progress=False)
    shard = d / "images_00000.npy"
    raw = bytearray(shard.read_bytes())
    raw[-1] ^= 0xFF
    shard.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="images_00000.npy.*checksum"):
        storage.load(d)
    with pytest.raises(ValueError, match="not a materialised"):
        storage.load(tmp_path / "junk")


# ----------------------------------------------------------------------------- what each type changes

PHOTOMETRIC_KEEP_ALPHA = ("hue", "brightness", "grayscale", "posterize", "invert", "sharpen", "contrast", "noise")


@pytest.mark.parametrize("t", PHOTOMETRIC_KEEP_ALPHA)
def test_colour_types_keep_alpha_and_background(t):
    idx = range(40)
    a0, img0 = alpha_of((), idx)
    a1, img1 = alpha_of((t,), idx)
    assert (a1 - a0).abs().max() <= 2.0 / 255  # alpha unchanged up to 8-bit rounding
    outside = (a0 == 0).unsqueeze(1).expand_as(img0)
    bg = make((t,), backgrounds=None).generate(idx)[0]
    bg0 = make((), backgrounds=None).generate(idx)[0]
    out2 = (alpha_of((), idx)[0] == 0).unsqueeze(1).expand_as(bg)
    # background pixels untouched (a pixel whose alpha rounds to 0 in 8 bits may still move by 1)
    diff = (bg[out2].int() - bg0[out2].int()).abs()
    assert int(diff.max()) <= 1 and float((diff == 0).float().mean()) > 0.995
    assert outside.any()
    if t in ("hue", "brightness", "invert", "contrast"):
        assert not torch.equal(img0, img1)


def test_hue_matches_colorsys():
    ds0, ds1 = make((), backgrounds=BLACK, objects=[0, 17, 30]), make(("hue",), backgrounds=BLACK, objects=[0, 17, 30])
    idx = range(12)
    x0, _, _ = ds0.generate(idx)
    x1, _, p = ds1.generate(idx)
    a, _ = alpha_of((), idx, objects=[0, 17, 30])
    for i in range(12):
        opaque = a[i] > 0.999
        rgb0 = x0[i][:, opaque].double().T / 255.0
        expect = np.array(
            [
                colorsys.hsv_to_rgb(((h + float(p["hue"][i])) % 1.0), s, v)
                for h, s, v in (colorsys.rgb_to_hsv(*c) for c in rgb0.tolist())
            ]
        )
        got = x1[i][:, opaque].double().T.numpy() / 255.0
        # the reference starts from the 8-bit image, the generator from the float object: rounding
        # of the input can move the shifted colour by a little more than one level
        err = np.abs(got - expect)
        assert err.max() <= 3.0 / 255 and np.median(err) <= 0.5 / 255


def test_invert_grayscale_posterize_values():
    idx = range(30)
    a, _ = alpha_of((), idx)
    opaque = (a > 0.999).unsqueeze(1).expand(-1, 3, -1, -1)
    base = make((), backgrounds=BLACK).generate(idx)[0]
    for t in ("invert", "grayscale", "posterize"):
        x, _, p = make((t,), backgrounds=BLACK).generate(idx)
        on = p[t] > 0.5
        assert on.any() and (~on).any()
        assert torch.equal(x[~on], base[~on])
        sel = opaque[on]
        xo, bo = x[on][sel].int(), base[on][sel].int()
        if t == "invert":
            assert (xo + bo - 255).abs().max() <= 1
        elif t == "posterize":
            assert set(xo.unique().tolist()) <= {0, 128}
        else:
            g = x[on].int()
            m = opaque[on][:, 0]
            assert torch.equal(g[:, 0][m], g[:, 1][m]) and torch.equal(g[:, 1][m], g[:, 2][m])


def test_translate_keeps_object_inside_and_spreads():
    idx = range(60)
    for ts in (("translate",), ("translate", "rotate", "scale", "shear")):
        ref_ts = tuple(t for t in ts if t != "translate")
        a_t, _ = alpha_of(ts, idx)
        # the same sample without translation, on a larger canvas: mass of the full object
        a_c, _ = alpha_of(ref_ts, idx, size=64)
        mass_t = a_t.sum((1, 2))
        mass_c = a_c.sum((1, 2)) / 4.0  # 64 px canvas: the object is drawn twice as large
        ok = (mass_t - mass_c).abs() / mass_c
        assert float(ok.median()) < 0.06
        if ts == ("translate",):
            # pure translation: object fully inside => mass equals the centred object's mass
            a0, _ = alpha_of((), idx)
            assert float(((mass_t - a0.sum((1, 2))).abs() / a0.sum((1, 2))).max()) < 0.01
    p = make(("translate",), n=2000).generate(range(2000))[2]
    assert float(p["x"].min()) < 0.3 and float(p["x"].max()) > 0.7
    assert float(p["y"].min()) < 0.3 and float(p["y"].max()) > 0.7


def test_geometric_types_move_alpha_only():
    idx = range(30)
    a0, _ = alpha_of((), idx)
    for t in ("rotate", "scale", "shear", "erasing", "elastic", "pixelate", "blur"):
        a1, _ = alpha_of((t,), idx)
        assert (a1 - a0).abs().max() > 0.2, t
    a_s, _ = alpha_of(("scale",), idx)
    p = make(("scale",)).generate(idx)[2]
    ratio = a_s.sum((1, 2)) / a0.sum((1, 2))
    np.testing.assert_allclose(ratio.numpy(), (p["scale"] ** 2).numpy(), rtol=0.08)


def test_noise_two_sided_and_clamped():
    idx = range(40)
    base = make((), backgrounds=BLACK).generate(idx)[0].int()
    x, _, p = make(("noise",), backgrounds=BLACK).generate(idx)
    a, _ = alpha_of((), idx)
    on = p["noise"] > 0.5
    m = (a[on] > 0.999).unsqueeze(1).expand(-1, 3, -1, -1)
    d = (x[on].int() - base[on])[m]
    assert (d > 0).float().mean() > 0.3 and (d < 0).float().mean() > 0.3
    assert 0.05 * 255 < float(d.float().std()) < 0.15 * 255


def test_erasing_removes_a_square():
    idx = range(40)
    a0, _ = alpha_of((), idx)
    a1, _ = alpha_of(("erasing",), idx)
    p = make(("erasing",)).generate(idx)[2]
    on = p["erasing"] > 0.5
    lost = (a0 - a1)[on].sum((1, 2))
    assert bool((lost > 1.0).all())
    assert torch.equal(a1[~on], a0[~on])
    assert float(lost.max()) <= 14 * 14 + 1e-6


# ----------------------------------------------------------------------------- parameter distributions


def test_parameters_follow_spec_ranges():
    rec = Recipe()
    keys = rng.sample_keys(11, "train", np.arange(20000))
    p = sample(keys, TRANSFORMATION_TYPES, rec)
    for name, (lo, hi) in (
        ("angle", (0, 360)),
        ("scale", (0.4, 1.0)),
        ("shear_x", (-50, 50)),
        ("shear_y", (-50, 50)),
        ("hue", (-0.5, 0.5)),
        ("brightness", (0, 2)),
        ("contrast", (0, 2)),
        ("blur_sigma", (0.1, 1.5)),
    ):
        v = p[name]
        assert v.min() >= lo and v.max() <= hi, name
        assert stats.kstest(v, "uniform", args=(lo, hi - lo)).pvalue > 1e-3, name
    for name in (
        "vflip",
        "hflip",
        "grayscale",
        "posterize",
        "invert",
        "sharpen",
        "noise",
        "pixelate",
        "elastic",
        "erasing",
    ):
        k = int(p[name].sum())
        assert stats.binomtest(k, 20000, 0.5).pvalue > 1e-3, name
    assert abs(np.corrcoef(p["shear_x"], p["shear_y"])[0, 1]) < 0.03
    # the generator reports exactly these values, and identity values for absent types
    ds = make(("rotate", "hue"), n=50, seed=11)
    got = ds.generate(range(50))[2]
    np.testing.assert_array_equal(got["angle"].numpy(), p["angle"][:50])
    np.testing.assert_array_equal(got["hue"].numpy(), p["hue"][:50])
    assert bool((got["scale"] == 1).all()) and bool((got["x"] == 0.5).all()) and bool((got["brightness"] == 1).all())


def test_labels_and_backgrounds_uniform():
    ds = make((), n=6000, objects=10)
    _, y, p = ds.generate(range(6000))
    assert stats.chisquare(np.bincount(y.numpy(), minlength=10)).pvalue > 1e-3
    bg = p["background"].long().numpy()
    assert bg.min() >= 0 and bg.max() < 867 and len(np.unique(bg)) > 800


# ----------------------------------------------------------------------------- banks


def test_builtin_objects_distinct_and_deterministic():
    bank = builtin_objects(61)
    assert len(bank) == 61 and len(set(bank.names)) == 61
    for img in bank.images:
        assert img[..., 3].min() == 0 and img[..., 3].max() == 255
    flat = np.stack([b.reshape(-1).astype(np.float32) for b in bank.images])
    d = ((flat[:, None, :] - flat[None, :, :]) ** 2).mean(-1)
    np.fill_diagonal(d, np.inf)
    assert d.min() > 100.0  # no two objects nearly equal
    from invfast.synthetic.banks import _render_object

    img, name = _render_object(5, 64)
    assert np.array_equal(img, bank.images[5]) and name == bank.names[5]


def test_builtin_backgrounds_vary():
    from invfast.synthetic import builtin_backgrounds

    bg = builtin_backgrounds(200, 32)
    assert bg.shape == (200, 3, 32, 32) and bg.dtype == torch.uint8
    assert len({bytes(b.numpy()) for b in bg}) == 200


def _png(path, arr, mode):
    from PIL import Image

    Image.fromarray(arr, mode=mode).save(path)


def test_user_folders(tmp_path):
    obj = tmp_path / "objects"
    for cat in ("banana", "sock"):
        (obj / cat).mkdir(parents=True)
        rgba = np.zeros((20, 30, 4), np.uint8)
        rgba[5:15, 5:25] = (200, 100, 50, 255) if cat == "banana" else (10, 20, 200, 255)
        _png(obj / cat / "b.png", rgba, "RGBA")
        _png(obj / cat / "a.png", rgba, "RGBA")
    bank = load_objects(obj)
    assert bank.names == ["banana", "sock"] and bank.images[0].shape == (20, 30, 4)
    bgd = tmp_path / "bg"
    bgd.mkdir()
    _png(bgd / "x.jpg", np.full((40, 60, 3), 90, np.uint8), "RGB")
    bgs = load_backgrounds(bgd, size=32)
    ds = Transforms2D(obj, "rotate", n=10, backgrounds=bgd)
    x, y, p = ds.generate(range(10))
    assert set(y.tolist()) <= {0, 1} and bgs.shape == (1, 3, 32, 32)
    # bad inputs name the file
    _png(obj / "sock" / "0.png", np.zeros((8, 8, 3), np.uint8), "RGB")
    with pytest.raises(ValueError, match=r"0\.png.*no alpha"):
        load_objects(obj)
    (obj / "sock" / "0.png").write_bytes(b"not a png at all")
    with pytest.raises(ValueError, match=r"0\.png.*corrupt"):
        load_objects(obj)
    (bgd / "bad.png").write_bytes(b"\x89PNG garbage")
    with pytest.raises(ValueError, match=r"bad\.png"):
        load_backgrounds(bgd)


# ----------------------------------------------------------------------------- families


def test_same_vs_different_disjoint():
    sv = families.same_vs_different(n_objects=30, n_transforms=3, seed=4, n=20)
    assert len(sv.source_objects) == 30 and len(sv.target_objects) == 30
    assert not set(sv.source_objects) & set(sv.target_objects)
    assert len(sv.target_transforms) == 3 and not set(sv.target_transforms) & set(sv.other_transforms)
    a, b, t = sv.source_same(), sv.source_different(), sv.target("test")
    assert a.transforms == t.transforms and not set(b.transforms) & set(t.transforms)
    assert not set(a.classes) & set(t.classes) and a.classes == b.classes
    assert families.same_vs_different(seed=4).target_objects == sv.target_objects
    assert families.same_vs_different(seed=5).target_objects != sv.target_objects


def test_nested_and_ood():
    sets = families.nested_transformation_sets((1, 3, 6, 18), seed=2)
    for s0, s1 in zip(sets, sets[1:]):
        assert set(s0) < set(s1)
    assert set(sets[-1]) == set(TRANSFORMATION_TYPES)
    ds = make(("rotate",), n=20, objects=20)
    ood = families.mild_ood(ds)
    used = {o.tobytes() for o in ds.objects.images}
    assert ood.num_classes == 20 and not any(o.tobytes() in used for o in ood.objects.images)
    assert ood.transforms == ds.transforms
    s = families.strong_ood(5, "rotate", n=30)
    x, y, p = s.generate(range(30))
    # uniform-random backgrounds: corner pixels spread over the whole range
    corners = x[:, :, 0, 0].float()
    assert corners.std() > 50 and len(s.objects) == 5


def test_irrelevant_feature_correlation_and_availability():
    X, y, names = families.builtin_base_set(60, size=32)
    assert len(names) >= 8 and X.shape[0] == 60 * len(names)
    ds = families.IrrelevantFeatureDataset(X, y, alpha=0.8, task="object")
    _, lab, p = ds.generate(range(len(ds)))
    match = (p["object_label"] == p["base_label"] % 10).float().mean().item()
    assert abs(match - (0.8 + 0.2 / 10)) < 0.05
    assert torch.equal(lab, p["object_label"])
    ds = families.IrrelevantFeatureDataset(X, y, beta=0.3, task="base", position="upper-right")
    img, lab, p = ds.generate(range(len(ds)))
    present = (p["object_label"] >= 0).float().mean().item()
    assert abs(present - 0.3) < 0.05 and torch.equal(lab, y)
    absent = p["object_label"] < 0
    assert torch.equal(img[absent], X[absent])
    assert float(p["x"][~absent].min()) > 0.5 and float(p["y"][~absent].max()) < 0.5
    with pytest.raises(ValueError, match="at most one"):
        families.IrrelevantFeatureDataset(X, y, alpha=0.5, beta=0.5)


def test_views_change_only_the_transformation():
    """view > 0: the same object, background and label; every transformation drawn anew (per view)."""
    ds = make(("rotate", "hue", "translate", "elastic"), n=40, objects=8)
    x0, y0, p0 = ds.generate(range(40))
    x1, y1, p1 = ds.generate(range(40), view=1)
    x1b, _, _ = ds.generate(list(reversed(range(40))), view=1)
    assert torch.equal(x1, x1b.flip(0))  # a view is a pure function of (index, view) too
    assert torch.equal(y0, y1) and torch.equal(p0["background"], p1["background"])
    assert (p0["angle"] != p1["angle"]).all() and (p0["hue"] != p1["hue"]).all()
    _, _, p2 = ds.generate(range(40), view=2)
    assert (p2["angle"] != p1["angle"]).all()
    assert torch.equal(ds.generate(range(40), view=0)[0], x0)
    plain = make((), n=10, objects=8)  # no transformation: every view is the sample itself
    assert torch.equal(plain.generate(range(10))[0], plain.generate(range(10), view=3)[0])
    with pytest.raises(ValueError, match="view must be an integer"):
        ds.generate([0], view=-1)


def test_per_class_transforms_puts_each_group_under_its_own_types():
    """D_{T1 ⊕ T2}: classes 0..2 rotate only, classes 3..4 change hue only; each group renders exactly as
    a Transforms2D of that group would render the same sample key with that label."""
    pc = families.PerClassTransforms([([0, 1, 2], "rotate"), ([3, 4], "hue")], n=60, seed=2)
    x, lab, p = pc.generate(range(60))
    assert pc.num_classes == 5 and set(lab.tolist()) == set(range(5))
    first, second = lab < 3, lab >= 3
    assert (p["angle"][first] != 0).all() and (p["hue"][first] == 0).all()
    assert (p["angle"][second] == 0).all() and (p["hue"][second] != 0).all()
    g = families.Transforms2D([3, 4], "hue", n=60, seed=2)
    keys = rng.sample_keys(2, "train", np.arange(60))
    sel = np.flatnonzero(second.numpy())
    want, _, _ = g._render(keys[sel], lab.numpy()[sel] - 3)
    assert torch.equal(x[second], want)
    x1, lab1, _ = pc.generate(range(60), view=1)
    assert torch.equal(lab1, lab) and not torch.equal(x1, x)


def test_irrelevant_feature_views_change_one_feature():
    X, y, _ = families.builtin_base_set(20, size=32)
    ds = families.IrrelevantFeatureDataset(X, y, objects=10, task="object", seed=1)
    img, _, p = ds.generate(range(len(ds)))
    _, _, po = ds.generate(range(len(ds)), view=1, vary="object")
    assert torch.equal(po["base_label"], p["base_label"]) and (po["x"] != p["x"]).float().mean() > 0.5
    ib, _, pb = ds.generate(range(len(ds)), view=1, vary="base")
    assert torch.equal(pb["object_label"], p["object_label"]) and torch.equal(pb["x"], p["x"])
    # where no object covers a pixel, the 'base' view shows another base image, never the sample's own
    assert not any(torch.equal(ib[i], img[i]) for i in range(len(ds)))
    with pytest.raises(ValueError, match="vary must be"):
        ds.generate([0], view=1, vary="colour")


def test_same_vs_different_gives_the_four_datasets_of_invariance_vs_equivariance():
    sv = families.same_vs_different(n_objects=5, n_transforms=2, seed=3, n=10)
    d_all, d_transforms = sv.source_same("val"), sv.target("val")
    d_objects, d_none = sv.source_different("val"), sv.target_different("val")
    assert d_all.classes == d_objects.classes and d_transforms.classes == d_none.classes
    assert d_all.transforms == d_transforms.transforms and d_objects.transforms == d_none.transforms
    assert not set(d_all.transforms) & set(d_none.transforms)


# ----------------------------------------------------------------------------- compiled vs reference


def test_compiled_matches_reference():
    from invfast.ops import synth as S
    from invfast.ops.kernels import gaussian_taps

    if "synth_color" not in backend.compiled_ops():
        pytest.skip("compiled core without the synth ops")
    g = torch.Generator().manual_seed(0)
    B, H = 16, 20
    a = torch.rand(B, 1, H, H, generator=g)
    a[a < 0.3] = 0
    pm = torch.cat([torch.rand(B, 3, H, H, generator=g) * a, a], 1)
    hue, br, co = torch.rand(B, generator=g) - 0.5, torch.rand(B, generator=g) * 2, torch.rand(B, generator=g) * 2
    fl = torch.randint(0, 64, (B,), generator=g)
    taps = gaussian_taps(torch.rand(B, generator=g) + 0.1, size=7).float()
    inv, off = torch.randn(B, 2, 2, generator=g), torch.randn(B, 2, generator=g) * 0.3
    bgs = torch.randint(0, 256, (5, 3, H, H), dtype=torch.uint8, generator=g)
    bi = torch.randint(0, 5, (B,), generator=g)
    c = (S.color(pm, hue, br, co, fl), S.blur(pm, taps), S.warp_rgba(pm, inv, off), S.composite(pm, bgs, bi))
    with backend.use("reference"):
        r = (S.color(pm, hue, br, co, fl), S.blur(pm, taps), S.warp_rgba(pm, inv, off), S.composite(pm, bgs, bi))
    assert torch.equal(c[0], r[0]) and torch.equal(c[1], r[1]) and torch.equal(c[3], r[3])
    torch.testing.assert_close(c[2], r[2], atol=1e-5, rtol=0)
    assert torch.equal(S.warp_rgba(pm, inv, off, True), c[2])  # skipping transparent pixels changes nothing
    # warp against torch's affine_grid + grid_sample in float64
    theta = torch.cat([inv.double(), (-inv.double() @ off.double().unsqueeze(-1))], 2)
    grid = torch.nn.functional.affine_grid(theta, (B, 4, H, H), align_corners=False)
    ref = torch.nn.functional.grid_sample(pm.double(), grid, align_corners=False)
    torch.testing.assert_close(c[2].double(), ref, atol=1e-5, rtol=0)
    # composite against a float64 numpy formula
    bg = bgs[bi].double().numpy()
    exp = np.clip(bg * (1 - a.double().numpy()) + pm[:, :3].double().numpy() * 255, 0, 255)
    assert np.abs(c[3].numpy().astype(np.float64) - exp).max() <= 0.5 + 1e-4
    # whole generator: compiled and reference paths agree to 8-bit rounding
    ds = make(ALL, n=40)
    x1 = ds.generate(range(40))[0]
    with backend.use("reference"):
        x2 = ds.generate(range(40))[0]
    assert (x1.int() - x2.int()).abs().max() <= 2


# ----------------------------------------------------------------------------- bad inputs and CLI


def test_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="unknown transformation 'spin'"):
        Transforms2D(10, "rotate,spin")
    with pytest.raises(ValueError, match="5 classes requested.*only 3"):
        Transforms2D(builtin_objects(3), (), n_classes=5)
    with pytest.raises(IndexError, match="out of range"):
        make((), n=10).generate([10])
    with pytest.raises(ValueError, match="n is required"):
        Transforms2D(10, (), split="extra")
    with pytest.raises(ValueError, match="backgrounds must be"):
        Transforms2D(10, (), n=5, backgrounds=torch.zeros(3, 32, 32, dtype=torch.uint8))
    with pytest.raises(TypeError, match="objects must be"):
        Transforms2D(object(), ())
    with pytest.raises(ValueError, match="uint8"):
        ObjectBank([np.zeros((4, 4, 3), np.uint8)], ["x"])
    with pytest.raises(ValueError, match="needs 2 x 40"):
        families.same_vs_different(n_objects=40)


def test_cli_generate(tmp_path, capsys):
    from invfast.cli import main

    out = tmp_path / "d"
    rc = main(
        [
            "generate",
            "--transforms",
            "rotate,hue,blur",
            "--objects",
            "5",
            "--n",
            "64",
            "--out",
            str(out),
            "--preview",
            str(tmp_path / "g.png"),
            "--no-progress",
        ]
    )
    assert rc == 0 and (tmp_path / "g.png").stat().st_size > 0
    loaded = storage.load(out)
    assert torch.equal(
        loaded.generate(np.arange(64))[0], Transforms2D(5, "rotate,hue,blur", n=64).generate(range(64))[0]
    )
    assert (
        main(["generate", "--transforms", "hue", "--objects", "5", "--n", "64", "--out", str(out), "--no-progress"])
        == 2
    )
    assert "different dataset" in capsys.readouterr().err
    assert main(["generate", "--transforms", "warp", "--out", str(tmp_path / "e")]) == 2
    assert (
        main(
            [
                "generate",
                "--transforms",
                "hue",
                "--objects",
                "5",
                "--n",
                "64",
                "--out",
                str(out),
                "--no-progress",
                "--overwrite",
            ]
        )
        == 0
    )
