"""invfast.measure_invariance: streamed = direct, exact invariance, sharding, resume, real-world mode, bad input."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from measure_helpers import Brightness, HFlip, Rot90, Rot90Averaged, dist_worker, free_port, random_images, small_net
from ranks import run_ranks

from invfast import FeatureStats, aggregate_scores, invariance_scores
from invfast.data import FolderSource, ImageDecodeError
from invfast.measure import InvarianceResult, measure_invariance, measure_real_world

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


def _prep(x: torch.Tensor) -> torch.Tensor:
    return (x.float() / 255 - MEAN) / STD


def _direct(model, x, transforms, k):
    """All features at once, then the foundation metrics on full [N, P] score matrices."""
    with torch.no_grad():
        f_ref = model(_prep(x))
        stats = FeatureStats().update(f_ref.double()).finalize()
        out = {}
        for t in transforms:
            params = t.grid(k)
            xt = t.apply(x, params)
            f_t = model(_prep(xt.flatten(0, 1))).view(x.shape[0], params.shape[0], -1)
            sc = invariance_scores(f_ref, f_t, stats)
            ident = t.is_identity(params)
            out[t.name] = {m: (aggregate_scores(sc[m], ident), sc[m]) for m in ("distance", "cosine")}
    return stats, out


def test_streamed_equals_direct(tmp_path):
    x = random_images(30, seed=1)
    model = small_net(seed=1, dim=6)
    tfs = [Rot90(), HFlip(), Brightness()]
    # forward_batch=30: rot90 (P=4) and brightness (P=7) split the grid, hflip (P=2) groups two image batches
    r = measure_invariance(
        model, x, tfs, grid_size=7, batch_size=7, forward_batch=30, pair_scores_dir=tmp_path / "pairs"
    )
    stats, ref = _direct(model, x, tfs, 7)
    assert r.stats["n"] == 30 and r.stats["lambda"] == pytest.approx(stats.lambda_, rel=1e-9)
    for t in tfs:
        tr = r[t.name]
        for m in ("distance", "cosine"):
            agg, full = ref[t.name][m]
            assert getattr(tr, f"mean_{m}") == pytest.approx(agg["mean"], rel=1e-5, abs=1e-6)
            torch.testing.assert_close(getattr(tr, m), agg["per_param"], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(getattr(tr, f"per_image_{m}"), agg["per_image"], rtol=1e-5, atol=1e-6)
            if agg["identity_mean"] is not None:
                assert getattr(tr, f"identity_{m}") == pytest.approx(agg["identity_mean"], rel=1e-5, abs=1e-6)
            std = full.double().std(0, unbiased=False)
            torch.testing.assert_close(getattr(tr, f"{m}_std"), std, rtol=1e-4, atol=1e-5)
            on_disk = np.load(tr.pair_scores[m])
            np.testing.assert_allclose(on_disk, full.numpy(), rtol=1e-5, atol=1e-5)
        assert tr.n_images == 30 and tr.n_pairs == 30 * t.grid(7).shape[0]
    # identity parameters are excluded from the mean: rot90 k = 0 scores distance 0 / cosine 1 exactly
    assert r["rot90"].identity_distance == pytest.approx(0.0, abs=1e-5)
    assert r["rot90"].identity_cosine == pytest.approx(1.0, abs=1e-6)
    assert r["brightness"].identity_distance is None


def test_given_stats_are_used():
    x = random_images(24, seed=2)
    model = small_net(seed=2, dim=6)
    other = random_images(40, seed=3)
    with torch.no_grad():
        stats = FeatureStats().update(model(_prep(other)).double()).finalize(shrinkage=0.5)
    r = measure_invariance(model, x, [HFlip()], stats=stats, batch_size=5)
    assert r.stats["n"] == 40 and r.stats["lambda"] == 0.5
    with torch.no_grad():
        f = model(_prep(x))
        d = invariance_scores(f, model(_prep(x.flip(-1))), stats)["distance"]
    assert r["hflip"].mean_distance == pytest.approx(float(d.double().mean()), rel=1e-5)


def test_exactly_rotation_invariant_model():
    x = random_images(40, seed=4)
    model = Rot90Averaged(small_net(seed=4, dim=6))
    r = measure_invariance(model, x, [Rot90(), HFlip(), Brightness()], grid_size=4, batch_size=10)
    rot, flip, bright = r["rot90"], r["hflip"], r["brightness"]
    assert rot.mean_distance < 1e-3 * flip.mean_distance
    assert rot.mean_cosine == pytest.approx(1.0, abs=1e-6)
    assert float(rot.distance.max()) < 1e-3 * flip.mean_distance
    assert flip.mean_cosine < 0.9 and bright.mean_cosine < 0.9
    # the same backbone without averaging is not rotation-invariant
    r0 = measure_invariance(small_net(seed=4, dim=6), x, [Rot90()], grid_size=4, batch_size=10)
    assert r0["rot90"].mean_cosine < 0.9


class _Killer(torch.nn.Module):
    """Wraps a model and raises after ``k`` forward calls (a simulated kill)."""

    def __init__(self, inner: torch.nn.Module, k: int | None) -> None:
        super().__init__()
        self.inner, self.k, self.calls = inner, k, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.k is not None and self.calls > self.k:
            raise KeyboardInterrupt("simulated kill")
        return self.inner(x)


def _same(a: InvarianceResult, b: InvarianceResult) -> None:
    assert list(a.transforms) == list(b.transforms)
    for name in a.transforms:
        ta, tb = a[name], b[name]
        for m in ("distance", "cosine"):
            assert getattr(ta, f"mean_{m}") == pytest.approx(getattr(tb, f"mean_{m}"), rel=1e-12, abs=1e-12)
            torch.testing.assert_close(getattr(ta, m), getattr(tb, m), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(
                getattr(ta, f"per_image_{m}"), getattr(tb, f"per_image_{m}"), rtol=1e-12, atol=1e-12, equal_nan=True
            )
        if ta.linear_equivariance is not None or tb.linear_equivariance is not None:
            torch.testing.assert_close(ta.linear_equivariance, tb.linear_equivariance, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kill_after", [3, 11])  # during the statistics pass / during the second transform
def test_kill_and_resume_equals_uninterrupted(tmp_path, kill_after):
    x = random_images(26, seed=5)
    tfs = [Rot90(), Brightness()]
    kw = dict(grid_size=5, batch_size=5, forward_batch=12, equivariance=True, split_forward=False)  # kills count calls
    counting = _Killer(small_net(seed=5, dim=6), None)
    full = measure_invariance(counting, x, tfs, **kw)
    state = tmp_path / "state.pt"
    pairs = tmp_path / "pairs"
    with pytest.raises(KeyboardInterrupt):
        measure_invariance(
            _Killer(small_net(seed=5, dim=6), kill_after),
            x,
            tfs,
            state_path=state,
            save_every=0,
            pair_scores_dir=pairs,
            **kw,
        )
    assert state.exists()
    resumed_model = _Killer(small_net(seed=5, dim=6), None)
    resumed = measure_invariance(resumed_model, x, tfs, state_path=state, save_every=0, pair_scores_dir=pairs, **kw)
    _same(full, resumed)
    # it resumed instead of starting over (a kill in the statistics pass loses the cached reference
    # features of the finished batches, which the first transform recomputes)
    assert resumed_model.calls < counting.calls if kill_after > 6 else resumed_model.calls <= counting.calls
    d = np.load(pairs / "brightness.distance.npy")
    assert not np.isnan(d).any()


def test_state_of_another_run_is_refused(tmp_path):
    x = random_images(12, seed=6)
    state = tmp_path / "state.pt"
    measure_invariance(small_net(dim=6), x, [HFlip()], batch_size=6, state_path=state)
    with pytest.raises(ValueError, match="another run"):
        measure_invariance(small_net(dim=6), x, [Rot90()], batch_size=6, state_path=state)
    with pytest.raises(ValueError, match="another run"):
        measure_invariance(small_net(seed=9, dim=6), x, [HFlip()], batch_size=6, state_path=state)


def test_two_gloo_processes_equal_single_process(tmp_path):
    x = random_images(22, seed=7)
    torch.save(x, tmp_path / "x.pt")
    run_ranks(dist_worker, 2, (2, free_port(), str(tmp_path / "x.pt"), str(tmp_path)))
    sharded = InvarianceResult.from_json(tmp_path / "result.json")
    single = measure_invariance(
        small_net(dim=6),
        x,
        [Rot90(), Brightness()],
        grid_size=5,
        batch_size=4,
        forward_batch=64,
        pair_scores_dir=tmp_path / "pairs1",
        equivariance=True,
    )
    assert sharded.meta["world_size"] == 2 and sharded.stats["n"] == 22
    for name in ("rot90", "brightness"):
        a, b = sharded[name], single[name]
        assert a.n_images == b.n_images == 22
        torch.testing.assert_close(a.linear_equivariance, b.linear_equivariance, rtol=1e-5, atol=1e-6)
        for m in ("distance", "cosine"):
            assert getattr(a, f"mean_{m}") == pytest.approx(getattr(b, f"mean_{m}"), rel=1e-5)
            torch.testing.assert_close(getattr(a, m), getattr(b, m), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(getattr(a, f"per_image_{m}"), getattr(b, f"per_image_{m}"), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(
                np.load(tmp_path / "pairs" / f"{name}.{m}.npy"),
                np.load(tmp_path / "pairs1" / f"{name}.{m}.npy"),
                rtol=1e-5,
                atol=1e-5,
            )
    assert (tmp_path / "state.pt.rank0").exists() and (tmp_path / "state.pt.rank1").exists()


# ---------------------------------------------------------------------------------------------- real world
def _naive_real_world(model, x, groups, stats):
    with torch.no_grad():
        f = model(_prep(x))
    means_d, means_c = [], []
    for g in sorted(set(groups)):
        idx = [i for i, gi in enumerate(groups) if gi == g]
        ds, cs = [], []
        for i in idx:
            for j in idx:
                if i != j:
                    sc = invariance_scores(f[i : i + 1], f[j : j + 1], stats)
                    ds.append(float(sc["distance"][0]))
                    cs.append(float(sc["cosine"][0]))
        means_d.append(np.mean(ds))
        means_c.append(np.mean(cs))
    return np.array(means_d), np.array(means_c)


def test_real_world_groups_of_tensors():
    base = random_images(8, seed=8)
    views = torch.cat([torch.rot90(base, k, dims=(-2, -1)) for k in range(3)])  # 3 views of each of 8 objects
    groups = list(range(8)) * 3
    inv = Rot90Averaged(small_net(seed=8, dim=6))
    r = measure_real_world(inv, views, groups=groups, batch_size=5)
    t = r["real-world"]
    assert t.mean_distance < 1e-3 and t.mean_cosine == pytest.approx(1.0, abs=1e-6)
    assert t.n_pairs == 8 * 3 * 2 and t.per_image_cosine.shape == (8,)
    plain = small_net(seed=8, dim=6)
    r2 = measure_real_world(plain, views, groups=groups, batch_size=5)
    with torch.no_grad():
        stats = FeatureStats().update(plain(_prep(views)).double()).finalize()
    d, c = _naive_real_world(plain, views, groups, stats)
    np.testing.assert_allclose(r2["real-world"].per_image_distance.numpy(), d, rtol=1e-5)
    np.testing.assert_allclose(r2["real-world"].per_image_cosine.numpy(), c, rtol=1e-5, atol=1e-6)
    assert r2["real-world"].mean_distance == pytest.approx(d.mean(), rel=1e-5)


def _write_png(path, arr):
    from PIL import Image

    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(arr).save(path)


def test_real_world_grouped_folders(tmp_path):
    x = random_images(9, size=20, seed=9).permute(0, 2, 3, 1).numpy()
    for g in range(3):
        for v in range(3):
            _write_png(str(tmp_path / f"obj{g}" / f"view{v}.png"), x[3 * g + v])
    (tmp_path / "obj1" / "notes.txt").write_text("not an image")
    r = measure_real_world(small_net(seed=9, dim=6), tmp_path, resize=16, batch_size=4)
    t = r["real-world"]
    assert r.meta["groups"] == 3 and r.meta["group_names"] == ["obj0", "obj1", "obj2"]
    assert t.n_pairs == 3 * 6 and r.errors["count"] == 1 and r.errors["examples"][0][0].endswith("notes.txt")
    assert np.isfinite(t.per_image_distance.numpy()).all()


def test_real_world_needs_groups():
    with pytest.raises(ValueError, match="groups"):
        measure_real_world(small_net(dim=6), random_images(6))


# ---------------------------------------------------------------------------------------------- folders
def test_folder_decode_error_policy(tmp_path):
    x = random_images(6, size=24, seed=10).permute(0, 2, 3, 1).numpy()
    for i in range(6):
        _write_png(str(tmp_path / f"img{i}.png"), x[i])
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    (tmp_path / "readme.txt").write_text("hello")
    r = measure_invariance(small_net(dim=6), f"folder:{tmp_path}", [HFlip()], resize=20, crop=16, batch_size=3)
    assert r.errors["count"] == 2 and r.n_images == 6 and r["hflip"].n_images == 6  # unreadable: listed, not counted
    assert r.meta["images"]["n"] == 8  # the listing (what identifies the image set), per-image arrays sized by it
    assert sorted(os.path.basename(e[0]) for e in r.errors["examples"]) == ["broken.jpg", "readme.txt"]
    assert int(torch.isnan(r["hflip"].per_image_distance).sum()) == 2
    with pytest.raises(ImageDecodeError, match="broken.jpg"):
        measure_invariance(small_net(dim=6), tmp_path, [HFlip()], resize=20, batch_size=3, strict=True)
    src = FolderSource(tmp_path, resize=20)
    imgs, ok = src.load([1, 2])  # 0 is broken.jpg (sorted first)
    assert imgs.shape == (2, 3, 20, 20) and imgs.dtype == torch.uint8 and ok.all()


def test_folder_pixels_match_pil(tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    _write_png(str(tmp_path / "a.png"), arr)
    imgs, ok = FolderSource(tmp_path, resize=20).load([0])
    im = Image.fromarray(arr).resize((27, 20), Image.BILINEAR).crop((3, 0, 23, 20))
    np.testing.assert_array_equal(imgs[0].permute(1, 2, 0).numpy(), np.asarray(im))


# ---------------------------------------------------------------------------------------------- bad input
def test_bad_model_output():
    x = random_images(8)

    class Spatial(torch.nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(ValueError, match=r"pooled features \[B, D\]"):
        measure_invariance(Spatial(), x, [HFlip()])
    with pytest.raises(TypeError, match="model must be"):
        measure_invariance(42, x, [HFlip()])


def test_bad_transforms_and_arguments():
    x = random_images(8)
    m = small_net(dim=6)

    class NoApply:
        name, family = "x", "spatial"

        def grid(self, k):
            return torch.zeros(1)

    with pytest.raises(TypeError, match="apply"):
        measure_invariance(m, x, [NoApply()])
    with pytest.raises(ValueError, match="more than once"):
        measure_invariance(m, x, [HFlip(), HFlip()])
    with pytest.raises(ValueError, match="empty"):
        measure_invariance(m, x, [])
    with pytest.raises(ValueError, match="batch_size"):
        measure_invariance(m, x, [HFlip()], batch_size=0)
    with pytest.raises(ValueError, match="grid_size"):
        measure_invariance(m, x, [HFlip()], grid_size=0)
    with pytest.raises(ValueError, match=r"\[N, C, H, W\]"):
        measure_invariance(m, x[0], [HFlip()])
    with pytest.raises(TypeError, match="uint8"):
        measure_invariance(m, x.int(), [HFlip()])
    with pytest.raises(TypeError, match="FeatureStats"):
        measure_invariance(m, x, [HFlip()], stats="nope")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        measure_invariance(m, "/nonexistent/folder", [HFlip()])
    with pytest.raises(ValueError, match="crop"):
        measure_invariance(m, x, [HFlip()], crop=64)


def test_checkpoint_mismatch(tmp_path):
    m = small_net(dim=6)
    torch.save({"state_dict": small_net(dim=4).state_dict()}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="does not match"):
        measure_invariance(m, random_images(8), [HFlip()], checkpoint=tmp_path / "other.pt")
    good = small_net(seed=3, dim=6)
    torch.save({"model": {"module." + k: v for k, v in good.state_dict().items()}}, tmp_path / "good.pt")
    r = measure_invariance(small_net(seed=0, dim=6), random_images(10), [HFlip()], checkpoint=tmp_path / "good.pt")
    r2 = measure_invariance(good, random_images(10), [HFlip()])
    assert r["hflip"].mean_distance == pytest.approx(r2["hflip"].mean_distance, rel=1e-6)


def test_json_round_trip():
    r = measure_invariance(small_net(dim=6), random_images(12), [Rot90(), Brightness()], grid_size=3, batch_size=5)
    back = InvarianceResult.from_json(r.to_json())
    _same(r, back)
    doc = json.loads(r.to_json(per_image=False))
    assert "per_image_distance" not in doc["transforms"][0]


# ---------------------------------------------------------------------------------------------- real registry
def test_real_transform_registry_and_synthetic_data():
    from invfast import transforms as T

    model = small_net(seed=12, dim=6)
    r = measure_invariance(
        model, "synthetic:objects=4,n=16,size=32,seed=1", "all", grid_size=3, batch_size=8, forward_batch=64
    )
    assert list(r.transforms) == list(T.TEST_TRANSFORMS)
    assert {t.family for t in r.transforms.values()} == {"spatial", "appearance"}
    assert r.n_images == 16 and r.meta["data"]["n"] == 16
    for t in r.transforms.values():
        ident = t.identity
        if bool((~ident).any()):
            assert np.isfinite(t.mean_cosine) and t.per_image_cosine.shape == (16,)
        assert t.params.shape[0] == t.distance.shape[0] == ident.shape[0]
    hf = r["hflip"]  # binary transform: the 'not flipped' half is the identity and is excluded
    assert hf.identity.tolist() == [True, False] and hf.identity_distance == pytest.approx(0.0, abs=1e-5)
    assert hf.mean_distance == pytest.approx(float(hf.distance[1]), rel=1e-9)
    from invfast.measure import resolve_transforms

    spatial = resolve_transforms("spatial")
    assert [t.name for t in spatial] == [n for n in T.TEST_TRANSFORMS if T.get(n).family == "spatial"]
    assert [t.name for t in resolve_transforms("rotation, hue")] == ["rotation", "hue"]
    one = measure_invariance(model, "synthetic:objects=4,n=16,size=32,seed=1", "rotation", grid_size=3, batch_size=8)
    assert one["rotation"].mean_cosine == pytest.approx(r["rotation"].mean_cosine, rel=1e-5)
    with pytest.raises(ValueError, match="unknown transform 'nope'"):
        measure_invariance(model, random_images(8), "rotation,nope")


def test_real_transforms_against_direct_metrics():
    from invfast import transforms as T

    x = random_images(20, size=32, seed=13)
    model = small_net(seed=13, dim=6)
    tfs = [T.get("rotation"), T.get("hue"), T.get("translation")]
    r = measure_invariance(model, x, tfs, grid_size=5, batch_size=6, forward_batch=9)
    _, ref = _direct(model, x, tfs, 5)
    for t in tfs:
        for m in ("distance", "cosine"):
            agg = ref[t.name][m][0]
            assert getattr(r[t.name], f"mean_{m}") == pytest.approx(agg["mean"], rel=1e-5, abs=1e-6)
            torch.testing.assert_close(getattr(r[t.name], m), agg["per_param"], rtol=1e-5, atol=1e-5)


def test_bfloat16_autocast_and_callable_model():
    x = random_images(20, seed=14)
    net = small_net(seed=14, dim=6)
    tfs = [Rot90(), Brightness()]
    r32 = measure_invariance(net, x, tfs, grid_size=3, batch_size=10)
    r16 = measure_invariance(lambda im: net(im), x, tfs, grid_size=3, batch_size=10, dtype=torch.bfloat16)
    for name in ("rot90", "brightness"):
        assert r16[name].mean_cosine == pytest.approx(r32[name].mean_cosine, abs=0.1)
    with pytest.raises(ValueError, match="dtype"):
        measure_invariance(net, x, tfs, dtype=torch.float64)


def test_invfast_models_by_name_and_checkpoint(tmp_path):
    from invfast import models as M
    from invfast.measure import load_model

    torch.manual_seed(0)
    net = M.create("resnet18-cifar").eval()
    torch.save({"format": "invfast.pretrained/1", "encoder": net.state_dict()}, tmp_path / "model.pt")
    x = random_images(6, size=32, seed=15)
    by_name = measure_invariance("resnet18-cifar", x, [HFlip()], checkpoint=tmp_path / "model.pt", batch_size=6)
    direct = measure_invariance(net, x, [HFlip()], batch_size=6)
    assert by_name["hflip"].mean_distance == pytest.approx(direct["hflip"].mean_distance, rel=1e-5)
    assert by_name.model == "resnet18-cifar"
    partial = {k: v for k, v in net.state_dict().items() if not k.startswith("stem.")}
    torch.save(partial, tmp_path / "partial.pt")
    with pytest.raises(ValueError, match="does not match.*missing stem"):
        load_model("resnet18-cifar", tmp_path / "partial.pt")
    with pytest.raises(ValueError, match="unknown model 'nope'"):
        load_model("nope")
    with pytest.raises(ValueError, match="amortised"):
        load_model("hyper-resnet18-cifar")
    with pytest.raises(ValueError, match="no invariance descriptor"):
        load_model("resnet18-cifar", invariance=[1, 0])


def test_descriptor_wrapper_fixes_the_invariance():
    from invfast.measure import WithDescriptor

    class Amortised(torch.nn.Module):
        def forward(self, x, i):
            return x.mean((2, 3)) * i.sum() + i[0]

    x = torch.rand(3, 3, 8, 8)
    w = WithDescriptor(Amortised(), [1.0, 0.5])
    torch.testing.assert_close(w(x), x.mean((2, 3)) * 1.5 + 1.0)
