"""protocol='ericsson': each of its operations against a direct float64 numpy implementation of the
stated formula, and the two protocols giving identical numbers where they agree."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from invfast.measure import measure_invariance, measure_real_world
from invfast.measure.protocol import PROTOCOLS, get_protocol, resample_indices, resize_center_crop
from invfast.stats import FeatureStats
from invfast.transforms import ericsson as E
from invfast.transforms import ericsson_ops as Eo
from invfast.transforms import registry
from invfast.transforms.ericsson_elastic import elastic_params


# ---------------------------------------------------------------------------------------------- references
def bilinear_np(img, sx, sy, border):
    """img [C, H, W] float64 sampled at (sx, sy) [H', W']; border 'zero' (taps outside are 0) or 'reflect101'."""
    C, H, W = img.shape
    x0, y0 = np.floor(sx).astype(int), np.floor(sy).astype(int)
    fx, fy = sx - x0, sy - y0
    out = np.zeros((C,) + sx.shape)

    def refl(i, n):
        p = 2 * (n - 1)
        i = np.mod(i, p)
        return np.where(i > n - 1, p - i, i)

    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            xi, yi = x0 + dx, y0 + dy
            if border == "reflect101":
                v = img[:, refl(yi, H), refl(xi, W)]
            else:
                inside = (xi >= 0) & (xi < W) & (yi >= 0) & (yi < H)
                v = img[:, np.clip(yi, 0, H - 1), np.clip(xi, 0, W - 1)] * inside
            out += v * (wy * wx)
    return out


def affine_np(img, A, t):
    """torchvision affine about the centre: output p shows source c + A (p - c - t)."""
    C, H, W = img.shape
    c = np.array([(W - 1) / 2, (H - 1) / 2])
    ys, xs = np.mgrid[0:H, 0:W].astype(float)
    px, py = xs - c[0] - t[0], ys - c[1] - t[1]
    sx = c[0] + A[0, 0] * px + A[0, 1] * py
    sy = c[1] + A[1, 0] * px + A[1, 1] * py
    return bilinear_np(img, sx, sy, "zero"), sx, sy


def shear1():
    return np.array([[1.0, math.tan(math.radians(1.0))], [0.0, 1.0]])


@pytest.fixture
def images():
    g = torch.Generator().manual_seed(7)
    return torch.rand(2, 3, 29, 33, generator=g, dtype=torch.float64)


# ---------------------------------------------------------------------------------------------- grids
def test_translation_grid_is_the_published_one():
    g = Eo.translation_grid(256).numpy()
    a = np.linspace(-16, 16, 17)[:16]
    assert g.shape == (256, 2)
    np.testing.assert_allclose(g, np.array([[x, y] for x in a for y in a]), atol=1e-6)
    assert ((g == 0).all(1)).any() and np.allclose(np.diff(a), 2.0)
    # invfast's registry grid has no zero and a 32/15 px step
    r = registry.get("translation").grid(256).numpy()
    assert not ((r == 0).all(1)).any()


def test_deform_grid_tiles_int_linspace():
    g = Eo.deform_grid(256).numpy()
    sig = np.linspace(10, 50, 8).astype(int)
    np.testing.assert_array_equal(g[:, 0], np.tile(sig, 32))
    np.testing.assert_array_equal(g[:, 1], np.arange(256))
    assert Eo.deform_grid(10)[:, 0].tolist() == list(sig) + list(sig[:2])


# ---------------------------------------------------------------------------------------------- affine with 1° shear
@pytest.mark.parametrize("name", ["translation", "scale"])
def test_scale_and_translation_carry_a_one_degree_shear(images, name):
    t = E.get(name)
    params = (
        torch.tensor([[3.0, -5.0], [0.0, 0.0], [-16.0, 14.0]])
        if name == "translation"
        else torch.tensor([0.5, 1.0, 1.7])
    )
    out = t.apply(images, params).numpy()
    assert out.shape == (2, 3, 3, 29, 33)
    assert not t.is_identity(params).any()  # the shear makes even zero shift / factor 1 a change
    for j, p in enumerate(params.numpy()):
        A, tr = (shear1(), p) if name == "translation" else (shear1() / p, np.zeros(2))
        for b in range(2):
            _, sx, sy = affine_np(images[b].numpy(), A, tr)
            # nearest (torchvision's default for PIL images): the pixel containing the point, 0 outside; Pillow's
            # 16.16 fixed point may pick the neighbour within 1e-3 px of a pixel edge
            xi, yi = np.floor(sx + 0.5).astype(int), np.floor(sy + 0.5).astype(int)
            inside = (xi >= 0) & (xi < 33) & (yi >= 0) & (yi < 29)
            ref = images[b].numpy()[:, yi.clip(0, 28), xi.clip(0, 32)] * inside
            edge = lambda v: np.abs((v + 0.5) - np.round(v + 0.5))  # noqa: E731
            sure = (edge(sx) > 1e-3) & (edge(sy) > 1e-3)
            assert sure.mean() > 0.99
            np.testing.assert_array_equal(out[b, j][:, sure], ref[:, sure])


# ---------------------------------------------------------------------------------------------- blur
def test_blur_uses_a_fixed_23_tap_kernel(images):
    sig = torch.tensor([1e-5, 0.7, 3.0, 20.0])
    out = E.get("blur").apply(images, sig).numpy()
    xs = np.arange(-11, 12, dtype=float)
    for j, s in enumerate(sig.tolist()):
        k = np.exp(-0.5 * (xs / s) ** 2)
        k /= k.sum()
        for b in range(2):
            x = np.pad(images[b].numpy(), ((0, 0), (0, 0), (11, 11)), mode="reflect")
            h = np.stack([np.convolve(row, k[::-1], mode="valid") for row in x.reshape(-1, x.shape[-1])])
            h = h.reshape(3, 29, 33)
            y = np.pad(h, ((0, 0), (11, 11), (0, 0)), mode="reflect")
            v = np.stack(
                [np.convolve(col, k[::-1], mode="valid") for col in y.transpose(0, 2, 1).reshape(-1, y.shape[1])]
            )
            ref = v.reshape(3, 33, 29).transpose(0, 2, 1)
            np.testing.assert_allclose(out[b, j], ref, atol=1e-9)
    np.testing.assert_allclose(out[:, 0], images.numpy(), atol=1e-12)  # sigma 1e-5: a delta kernel
    # the effective std saturates: sqrt((23² - 1) / 12) ≈ 6.63 px however large sigma is
    k = Eo.blur_kernels(torch.tensor([20.0, 1e4])).numpy()
    std = np.sqrt((k * xs**2).sum(1))
    assert 6.3 < std[0] < std[1] < math.sqrt((23**2 - 1) / 12) + 1e-9
    with pytest.raises(ValueError, match="larger than 11"):
        E.get("blur").apply(torch.rand(1, 3, 10, 10), [2.0])


# ---------------------------------------------------------------------------------------------- elastic
def test_elastic_affine_part_moves_three_points_by_at_most_alpha_affine():
    H, W = 60, 60
    m, d = elastic_params(torch.tensor([10.0, 32.0]), torch.tensor([0.0, 1.0]), (H, W), seed=3)
    c, sq = np.array([H // 2, W // 2], float), W // 3
    pts1 = np.array([c + sq, [c[0] + sq, c[1] - sq], c - sq])
    for j in range(2):
        inv = np.vstack([m[j].numpy(), [0, 0, 1]])
        fwd = np.linalg.inv(inv)  # pts1 -> pts2
        pts2 = (fwd[:2, :2] @ pts1.T).T + fwd[:2, 2]
        move = pts2 - pts1
        assert np.abs(move).max() <= 50 + 1e-6 and np.abs(move).max() > 1
    assert d.shape == (2, H, W, 2)
    # the same seed and draw give the same field; another draw another one
    m2, d2 = elastic_params(torch.tensor([10.0]), torch.tensor([0.0]), (H, W), seed=3)
    assert torch.equal(m2[0], m[0]) and torch.equal(d2[0], d[0])
    assert not torch.equal(m[0], m[1])


def test_elastic_apply_matches_numpy_composition(images):
    H, W = images.shape[-2:]
    params = torch.tensor([[10.0, 0.0], [21.0, 5.0]])
    out = E.get("deform").apply(images, params).numpy()
    m, d = elastic_params(params[:, 0].double(), params[:, 1].double(), (H, W), seed=0)
    ys, xs = np.mgrid[0:H, 0:W].astype(float)
    for j in range(2):
        M = m[j].numpy()
        for b in range(2):
            warped = bilinear_np(
                images[b].numpy(),
                M[0, 0] * xs + M[0, 1] * ys + M[0, 2],
                M[1, 0] * xs + M[1, 1] * ys + M[1, 2],
                "reflect101",
            )
            ref = bilinear_np(warped, xs + d[j, ..., 0].numpy(), ys + d[j, ..., 1].numpy(), "reflect101")
            np.testing.assert_allclose(out[b, j], np.clip(ref, 0, 1), atol=1e-9)
    assert not E.get("deform").is_identity(params).any()


# ---------------------------------------------------------------------------------------------- preprocessing
def test_resize_center_crop():
    x = torch.rand(2, 3, 256, 256)
    assert torch.equal(resize_center_crop(x, 256, 224), x[..., 16:240, 16:240])
    y = resize_center_crop(torch.rand(1, 3, 100, 150), 256, 224)
    assert y.shape == (1, 3, 224, 224)
    u8 = resize_center_crop(torch.randint(0, 256, (1, 3, 64, 80), dtype=torch.uint8), 32, 24)
    assert u8.dtype == torch.uint8 and u8.shape == (1, 3, 24, 24)


def test_protocol_lookup():
    assert get_protocol("invfast") is PROTOCOLS["invfast"]
    e = get_protocol("ericsson")
    assert e.include_identity and e.shrinkage == 0.0 and e.with_replacement and e.preprocess_after_transform
    with pytest.raises(ValueError, match="unknown protocol 'x'"):
        get_protocol("x")
    idx = resample_indices(10, 25, seed=1)
    assert idx.shape == (25,) and int(idx.max()) < 10 and len(set(idx.tolist())) < 25
    assert torch.equal(idx, resample_indices(10, 25, seed=1))


# ---------------------------------------------------------------------------------------------- the two protocols agree
def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 5, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()
    )


def test_protocols_agree_where_they_do_not_differ():
    """256-px images: Resize(256) is a no-op, so transform-then-crop == invfast's crop after the transform;
    per-parameter scores of an unchanged transform are identical, the means differ only by identity."""
    x = torch.rand(10, 3, 256, 256, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    model = _model()
    no_draw = dataclasses.replace(PROTOCOLS["ericsson"], with_replacement=False, shrinkage="trace")
    kw = dict(grid_size=5, crop=224, dtype=None, device="cpu")
    a = measure_invariance(model, x, "brightness,posterize,hflip", protocol="invfast", **kw)
    b = measure_invariance(model, x, "brightness,posterize,hflip", protocol=no_draw, **kw)
    for name in ("brightness", "posterize", "hflip"):
        ta, tb = a.transforms[name], b.transforms[name]
        n = tb.cosine.shape[0]  # posterize: bits 1..8 and the original's 1..7
        torch.testing.assert_close(ta.cosine[:n], tb.cosine, rtol=0, atol=1e-12)  # bit-identical features
        torch.testing.assert_close(ta.distance[:n], tb.distance, rtol=0, atol=1e-12)
        keep = ~ta.identity
        assert ta.mean_cosine == pytest.approx(float(ta.cosine[keep].mean()), abs=1e-12)
        assert tb.mean_cosine == pytest.approx(float(tb.cosine.mean()), abs=1e-12)  # identity averaged in
    # ericsson's λ = 0 (no shrinkage) by default
    c = measure_invariance(model, x, "hflip", protocol="ericsson", **kw)
    assert c.stats["lambda"] == 0.0 and a.stats["lambda"] > 0


def test_with_replacement_scores_a_draw_with_stats_from_all_images():
    x = torch.rand(8, 3, 256, 256, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    model = _model()
    kw = dict(grid_size=4, crop=224, dtype=None, device="cpu")
    proto = dataclasses.replace(PROTOCOLS["ericsson"], include_identity=False, shrinkage="trace")
    got = measure_invariance(model, x, "brightness", protocol=proto, n_images=12, protocol_seed=5, **kw)
    with torch.no_grad():
        xc = x[:, :, 16:240, 16:240].float()
        feats = model(
            (xc - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
            / torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        )
    stats = FeatureStats().update(feats.double()).finalize(shrinkage="trace")
    idx = resample_indices(8, 12, seed=5)
    ref = measure_invariance(model, x[idx], "brightness", stats=stats, **kw)
    assert got.transforms["brightness"].n_images == 12
    torch.testing.assert_close(
        got.transforms["brightness"].cosine, ref.transforms["brightness"].cosine, rtol=0, atol=1e-6
    )


def test_real_world_self_pairs():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(12, 3, 224, 224, generator=g, dtype=torch.float64)  # Resize(224) + CenterCrop(224): unchanged
    groups = [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2]
    model = _model()
    a = measure_real_world(model, x, groups=groups, device="cpu").transforms["real-world"]
    with pytest.warns(UserWarning, match="reference statistics from the views"):
        b = measure_real_world(
            model, x, groups=groups, device="cpu", protocol="ericsson", shrinkage="trace"
        ).transforms["real-world"]
    V = torch.tensor([3.0, 4.0, 5.0], dtype=torch.float64)
    torch.testing.assert_close(b.per_image_cosine, 1 / V + (V - 1) / V * a.per_image_cosine, rtol=0, atol=1e-9)
    # the distance is over distinct pairs in both (the original's torch.pdist), so it is the same
    torch.testing.assert_close(b.per_image_distance, a.per_image_distance, rtol=0, atol=1e-9)


def test_real_world_distance_is_the_mean_of_pdist_over_whitened_views():
    """Against an independent float64 computation: whiten with scipy-free numpy (Cholesky of Σ + λI) and
    average scipy's pdist within each group; the cosine includes self pairs under 'ericsson'."""
    from scipy.spatial.distance import pdist

    g = torch.Generator().manual_seed(5)
    x = torch.rand(14, 3, 24, 24, generator=g, dtype=torch.float64)
    groups = [0] * 4 + [1] * 5 + [2] * 5
    model = _model()
    stats = FeatureStats().update(torch.randn(50, 6, generator=g, dtype=torch.float64))  # given: no warning
    as_loaded = dataclasses.replace(PROTOCOLS["ericsson"], real_world_resize=None)  # 24 px, not Resize(224)
    r = measure_real_world(
        model, x, groups=groups, device="cpu", protocol=as_loaded, shrinkage=1e-3, normalize=False
    ).transforms["real-world"]
    assert (
        measure_real_world(model, x, groups=groups, device="cpu", protocol="ericsson", stats=stats).meta[
            "reference_stats"
        ]
        == "given"
    )
    with torch.no_grad():
        f = model(x.float()).double().numpy()
    mu = f.mean(0)
    cov = np.cov(f, rowvar=False, bias=False) + 1e-3 * np.eye(f.shape[1])
    z = np.linalg.solve(np.linalg.cholesky(cov), (f - mu).T).T
    for gi, members in enumerate([range(0, 4), range(4, 9), range(9, 14)]):
        zg = z[list(members)]
        assert float(r.per_image_distance[gi]) == pytest.approx(pdist(zg).mean(), rel=1e-5)
        u = zg / np.linalg.norm(zg, axis=1, keepdims=True)
        assert float(r.per_image_cosine[gi]) == pytest.approx((u @ u.T).mean(), rel=1e-5, abs=1e-7)


class _Recorder:
    """A transform that records the size of the images it is applied to (identity otherwise)."""

    name, family = "recorder", "spatial"

    def __init__(self):
        self.sizes = set()

    def grid(self, k):
        return torch.tensor([0.0, 1.0])

    def is_identity(self, params):
        return torch.as_tensor(params) == 0

    def apply(self, images, params):
        self.sizes.add(tuple(images.shape[-2:]))
        return images.unsqueeze(1).expand(-1, len(params), -1, -1, -1).clone()


class _SizeModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.sizes = set()
        self.net = _model()

    def forward(self, x):
        self.sizes.add(tuple(x.shape[-2:]))
        return self.net(x)


def test_ericsson_transforms_the_raw_image_then_resizes_and_crops():
    x = torch.rand(8, 3, 300, 340, generator=torch.Generator().manual_seed(4))
    for proto, seen_by_transform in (("ericsson", (300, 340)), ("invfast", (300, 340))):
        rec, model = _Recorder(), _SizeModel()
        measure_invariance(model, x, [rec], grid_size=2, crop=224, device="cpu", protocol=proto, shrinkage=1e-3)
        assert rec.sizes == {seen_by_transform}
        assert model.sizes == {(224, 224)}
    # a 16 px translation of the raw 300-px image is 16 * 256/300 px in the image the model sees
    t = E.get("translation")
    img = torch.zeros(1, 3, 300, 300)
    img[..., 140:160, 140:160] = 1.0
    moved = resize_center_crop(t.apply(img, torch.tensor([[16.0, 0.0]]))[:, 0], 256, 224)
    base = resize_center_crop(img, 256, 224)
    col = lambda im: float((im[0, 0].sum(0) * torch.arange(224)).sum() / im[0, 0].sum())  # noqa: E731
    assert col(moved) - col(base) == pytest.approx(16 * 256 / 300, abs=0.05)


def test_cli_protocol_ericsson(tmp_path, capsys):
    import json

    from PIL import Image

    from invfast.cli import main

    d = tmp_path / "imgs"
    d.mkdir()
    g = np.random.default_rng(0)
    for i in range(30):
        Image.fromarray(g.integers(0, 256, (30, 30, 3), dtype=np.uint8)).save(d / f"{i:02d}.png")
    args = [
        "measure",
        "--model",
        "measure_helpers:small_net",
        "--transforms",
        "hflip,blur",
        "--grid-size",
        "4",
        "--resize",
        "30",
        "--crop",
        "24",
        "--data",
        f"folder:{d}",
        "--no-progress",
        "--no-plots",
    ]
    assert main(args + ["--out", str(tmp_path / "e"), "--protocol", "ericsson"]) == 0
    doc = json.loads((tmp_path / "e" / "result.json").read_text())
    assert doc["meta"]["protocol"] == "ericsson" and doc["stats"]["lambda"] == 0.0
    assert main(args + ["--out", str(tmp_path / "i")]) == 0
    doc = json.loads((tmp_path / "i" / "result.json").read_text())
    assert doc["meta"]["protocol"] == "invfast" and doc["stats"]["lambda"] > 0
    with pytest.raises(SystemExit) as e:
        main(args + ["--out", str(tmp_path / "x"), "--protocol", "paper"])
    assert e.value.code == 2 and "invalid choice: 'paper'" in capsys.readouterr().err


class _Inputs(torch.nn.Module):
    """Records every input batch the model sees (and returns mean-pooled features)."""

    def __init__(self):
        super().__init__()
        self.seen = []
        self.net = _model()

    def forward(self, x):
        self.seen.append(x.detach().clone())
        return self.net(x)


def test_ericsson_transforms_folder_photos_at_their_own_resolution(tmp_path):
    """Photos of different sizes and aspects are transformed as loaded (no --resize first), then each view
    is resized (shorter side 256) and centre-cropped to 224 -- checked against Pillow doing the same."""
    from PIL import Image

    d = tmp_path / "photos"
    d.mkdir()
    g = np.random.default_rng(1)
    sizes = [(451, 300), (260, 390), (300, 300)]  # (H, W): portrait, landscape, square
    arrays = []
    for i, (h, w) in enumerate(sizes):
        a = (g.random((h, w, 3)) * 40 + np.linspace(0, 200, w)[None, :, None]).astype(np.uint8)
        Image.fromarray(a).save(d / f"{i}.png")
        arrays.append(a)
    rec, model = _Recorder(), _Inputs()
    every_image = dataclasses.replace(get_protocol("ericsson"), with_replacement=False)
    measure_invariance(
        model,
        f"folder:{d}",
        [rec],
        grid_size=2,
        device="cpu",
        protocol=every_image,
        normalize=False,
        shrinkage=1e-3,
        workers=0,
        resize=64,
    )
    assert rec.sizes == {(h, w) for h, w in sizes}  # --resize 64 does not apply: images as loaded

    def pil_pipeline(a):
        im = Image.fromarray(a)
        w, h = im.size
        s = 256 / min(w, h)
        im = im.resize((max(256, int(w * s)), max(256, int(h * s))), Image.BILINEAR)
        nw, nh = im.size
        top, left = int(round((nh - 224) / 2.0)), int(round((nw - 224) / 2.0))
        return np.asarray(im.crop((left, top, left + 224, top + 224)), dtype=np.float64)

    seen = torch.cat(model.seen)  # float 0..1 (normalize=False), every view the model saw
    want = [pil_pipeline(a) for a in arrays]
    for wnt in want:  # each image's view (identity parameter) is among the inputs, up to resampling detail
        diffs = [(s.permute(1, 2, 0).double().numpy() * 255 - wnt) for s in seen]
        best = min(float(np.abs(df).mean()) for df in diffs)
        assert best < 1.5, best
