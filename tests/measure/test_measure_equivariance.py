"""Equivariance measures (invfast.measure.equivariance) against scikit-learn and float64 numpy: the
cross-validated R² of the best affine map, and tmeasures's same-equivariance."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from measure_helpers import Brightness, Rot90
from test_measure_units import Body, Pointwise, _activations, tmeasures_nv_numpy

from invfast.measure import InvarianceResult, measure_invariance
from invfast.measure.equivariance import (
    add_reference,
    add_views,
    fit_from_sums,
    fold_of,
    fold_sums,
    kfold,
    linear_equivariance,
    same_equivariance,
    sums_bytes,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _sklearn_r2(x: np.ndarray, y: np.ndarray, folds: int, ridge: float) -> np.ndarray:
    """Per parameter: KFold(folds) predictions of sklearn's Ridge (alpha = ridge * tr(XcᵀXc)/D of the
    training fold), then r2_score(variance_weighted) over all images."""
    from sklearn.linear_model import LinearRegression, Ridge
    from sklearn.metrics import r2_score
    from sklearn.model_selection import KFold

    n, p, _ = y.shape
    out = np.empty(p)
    for j in range(p):
        pred = np.empty_like(y[:, j])
        for tr, te in KFold(folds).split(x):
            xc = x[tr] - x[tr].mean(0)
            alpha = ridge * float((xc * xc).sum()) / x.shape[1]
            est = Ridge(alpha=alpha, solver="cholesky") if ridge > 0 else LinearRegression()
            pred[te] = est.fit(x[tr], y[tr, j]).predict(x[te])
        out[j] = r2_score(y[:, j], pred, multioutput="variance_weighted")
    return out


@pytest.mark.parametrize("ridge", [1e-3, 0.3, 0.0])
def test_linear_equivariance_equals_sklearn(rng, ridge):
    n, d = 37, 6
    x = rng.normal(size=(n, d)) * rng.uniform(0.5, 3, size=d)
    maps = rng.normal(size=(3, d, 5))
    y = np.stack([x @ maps[0], x @ maps[1] + 0.5 * rng.normal(size=(n, 5)), rng.normal(size=(n, 5))], 1)
    got = linear_equivariance(torch.from_numpy(x), torch.from_numpy(y), folds=4, ridge=ridge).numpy()
    want = _sklearn_r2(x, y, 4, ridge)
    assert np.abs(got - want).max() < 1e-10, (got, want)
    assert got[2] < 0.2  # no map at all
    if ridge <= 1e-3:  # a linear map, a noisy one
        assert got[0] > 0.999 and got[1] < got[0]


def test_linear_equivariance_edges():
    assert [len(f) for f in kfold(11, 3)] == [4, 4, 3]
    x = torch.randn(10, 3, dtype=torch.float64)
    const = torch.ones(10, 2, 3, dtype=torch.float64)
    assert torch.isnan(linear_equivariance(x, const, folds=2)).all()  # views that do not vary
    with pytest.raises(ValueError, match="folds must be"):
        linear_equivariance(x, const, folds=11)
    with pytest.raises(ValueError, match="reference must be"):
        linear_equivariance(x, const[:5])
    with pytest.raises(ValueError, match="ridge must be"):
        linear_equivariance(x, const, ridge=-1)
    with pytest.raises(ValueError, match="transformed holds NaN/Inf"):
        linear_equivariance(x, const.index_fill(0, torch.tensor([3]), float("nan")))


def test_same_equivariance_against_numpy_and_an_equivariant_layer(rng):
    """A pointwise layer commutes with rotations by 90°: mapped back, every view equals the image's maps, so
    same-equivariance is 0 where defined; against the numpy formula on the mapped-back maps otherwise."""
    x = torch.from_numpy(rng.uniform(0, 1, size=(9, 3, 5, 5)))
    with torch.no_grad():
        acts = torch.stack([Body()(torch.rot90(x, k, dims=(-2, -1))) for k in range(4)], 1)  # [N, V, C, H, W]

    def back(maps: torch.Tensor, v: int) -> torch.Tensor:
        return torch.rot90(maps, -v, dims=(-2, -1))

    se = same_equivariance(acts, back).numpy()
    assert se.shape == (10 * 25,)
    assert np.nanmax(np.abs(se)) == 0 and np.isnan(se[9 * 25 :]).all()  # the constant channel: NaN
    mapped = np.stack([np.rot90(acts[:, v].numpy(), -v, axes=(-2, -1)) for v in range(4)], 1)
    noisy = mapped + 0.1 * rng.normal(size=mapped.shape)
    got = same_equivariance(torch.from_numpy(noisy)).numpy()
    want = tmeasures_nv_numpy(noisy.reshape(9, 4, -1))
    assert np.abs(got - want).max() < 1e-12
    with pytest.raises(ValueError, match="feature maps"):
        same_equivariance(acts.flatten(2))


def test_fold_of_is_kfold():
    for n, folds in ((11, 3), (10, 5), (7, 7), (23, 5), (5, 2)):
        want = torch.cat([torch.full((len(f),), i) for i, f in enumerate(kfold(n, folds))])
        assert torch.equal(fold_of(torch.arange(n), n, folds), want)


def test_sums_in_any_order_and_chunks_equal_the_whole(rng):
    """The fit from per-fold sums added image group by group and parameter chunk by parameter chunk, in a
    shuffled order, equals the fit of all images at once; features far from 0 (a shift of 1e3) keep
    their accuracy."""
    n, d, p = 29, 5, 4
    x = rng.normal(size=(n, d)) + 1e3
    y = np.einsum("nd,pde->npe", x - 1e3, rng.normal(size=(p, d, d))) + 0.2 * rng.normal(size=(n, p, d)) + 1e3
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    want = linear_equivariance(xt, yt, folds=5)
    sums = fold_sums(5, p, d, d, torch.full((d,), 1e3, dtype=torch.float64))
    order = rng.permutation(n)
    for s in range(0, n, 4):
        rows = torch.from_numpy(order[s : s + 4])
        fold = fold_of(rows, n, 5)
        add_reference(sums, fold, xt[rows])
        for ps in range(0, p, 3):
            add_views(sums, fold, xt[rows], yt[rows, ps : ps + 3], ps)
    got = fit_from_sums(sums)
    assert torch.allclose(got, want, rtol=0, atol=1e-10), (got, want)
    assert (got > 0.5).all() and (got < 1).all()
    assert sums_bytes(5, p, d, d) == sum(v.numel() * 8 for v in sums.values())


@pytest.mark.parametrize("t", [Rot90(), Brightness()], ids=["rot90", "brightness"])
def test_streamed_measurement_equals_the_fit_of_its_features(rng, t):
    """measure_invariance(equivariance=True) on a pointwise network (activations independent of batching)
    equals linear_equivariance of the features the measurement saw, to 1e-9; groups of 3 images cross the
    fold boundaries."""
    x = torch.from_numpy(rng.integers(0, 256, (23, 3, 6, 6), dtype=np.uint8))
    r = measure_invariance(
        Pointwise(), x, [t], grid_size=6, batch_size=3, forward_batch=8, normalize=False, equivariance=True
    )
    a = torch.from_numpy(_activations(x, t, 6))  # [N, V, C]: the image first when the grid has no identity
    p = len(t.grid(6))
    a = a[:, a.shape[1] - p :]
    with torch.no_grad():
        ref = Body()(x.float() / 255.0).mean((2, 3)).double()
    want = linear_equivariance(ref, a)
    got = r[t.name].linear_equivariance
    assert got.shape == (p,) and torch.allclose(got, want, rtol=0, atol=1e-9), (got, want)
    ident = r[t.name].identity
    if ident.any():
        assert got[ident].min() > 0.99  # the identity view is the image itself
    keep = got[~ident]
    assert r[t.name].mean_linear_equivariance == pytest.approx(float(keep[~torch.isnan(keep)].mean()))
    back = InvarianceResult.from_json(r.to_json())[t.name]
    torch.testing.assert_close(back.linear_equivariance, got, equal_nan=True)


@pytest.mark.filterwarnings("ignore:FeatureStats")
def test_equivariance_errors_are_one_line_and_early(rng):
    x = torch.from_numpy(rng.integers(0, 256, (4, 3, 6, 6), dtype=np.uint8))
    with pytest.raises(ValueError, match="at least 5 images"):
        measure_invariance(Pointwise(), x, [Rot90()], grid_size=4, equivariance=True, normalize=False)
    x = torch.from_numpy(rng.integers(0, 256, (8, 3, 6, 6), dtype=np.uint8))
    with pytest.raises(ValueError, match="raise equivariance_mb"):
        measure_invariance(Pointwise(), x, [Rot90()], grid_size=4, equivariance=True, equivariance_mb=0.001)
    with pytest.raises(TypeError, match="equivariance must be True or False"):
        measure_invariance(Pointwise(), x, [Rot90()], equivariance="yes")
    r = measure_invariance(Pointwise(), x, [Rot90()], grid_size=4, normalize=False)
    assert r["rot90"].linear_equivariance is None and r["rot90"].mean_linear_equivariance is None


@pytest.mark.filterwarnings("ignore:FeatureStats")
def test_saved_equivariance_is_checked_and_real_world_refuses_it(rng):
    from invfast.measure import measure_real_world

    x = torch.from_numpy(rng.integers(0, 256, (10, 3, 6, 6), dtype=np.uint8))
    d = json.loads(measure_invariance(Pointwise(), x, [Rot90()], grid_size=4, equivariance=True).to_json())
    d["transforms"][0]["linear_equivariance"] = [0.5, 1.5, 0.2, 0.1]
    with pytest.raises(ValueError, match=r"linear_equivariance\[1\].*R² <= 1"):
        InvarianceResult.from_dict(d)
    d["transforms"][0]["linear_equivariance"] = [0.5, 0.2]
    with pytest.raises(ValueError, match="linear_equivariance.*4 numbers"):
        InvarianceResult.from_dict(d)
    with pytest.raises(ValueError, match="real-world groups have none"):
        measure_real_world(Pointwise(), x, groups=[0, 0, 1, 1, 2, 2, 3, 3, 4, 4], equivariance=True)


# ------------------------------------------------------------------------------------ same-equivariance, streamed
def test_back_maps_invert_the_transform_in_map_pixels(rng):
    """back_maps gives the transform's forward map in feature-map pixels: a map pixel q, taken to image pixels,
    moved by the forward map (numpy's inverse of the image-level sampling map), and taken back to map pixels."""
    from invfast.measure.equivariance import back_maps

    H, W, h, w = 32, 24, 8, 6
    m = np.concatenate([rng.normal(size=(5, 2, 2)) + 2 * np.eye(2), rng.normal(size=(5, 2, 1)) * 3], axis=2)
    got = back_maps(torch.from_numpy(m), (H, W), (h, w)).numpy()
    s = np.array([W / w, H / h])
    q = rng.uniform(0, 6, size=2)
    x_img = (q + 0.5) * s - 0.5
    for p in range(5):
        fwd = np.linalg.solve(m[p, :, :2], x_img - m[p, :, 2])  # the image point the view shows at x_img
        want = (fwd + 0.5) / s - 0.5
        np.testing.assert_allclose(got[p] @ np.append(q, 1.0), want, rtol=1e-12, atol=1e-12)


def _pointwise_same_equivariance(x: torch.Tensor, name: str, k: int) -> tuple[np.ndarray, InvarianceResult]:
    """invfast's streamed same-equivariance of the pointwise body's feature maps under built-in ``name``, and
    the numpy formula on maps brought back by numpy's inverse of each view's sampling map."""
    from invfast import transforms as T
    from invfast.ops.augment import warp_affine_reference
    from invfast.transforms.affine import affine_maps
    from invfast.transforms.builtin import RECORDS

    t = T.get(name)
    r = measure_invariance(
        Pointwise(),
        x,
        [t],
        grid_size=k,
        batch_size=4,
        forward_batch=8,
        normalize=False,
        units="elements",
        equivariance=True,
        layers="body",
    )
    params = t.grid(k)
    views = t.apply(x, params).float() / 255.0  # [N, P, 3, H, W]
    m = affine_maps(RECORDS[name].affine, params, x.shape[2], x.shape[3]).numpy()
    inv_a = np.linalg.inv(m[:, :, :2])
    back = torch.from_numpy(np.concatenate([inv_a, -np.einsum("pij,pj->pi", inv_a, m[:, :, 2])[..., None]], axis=2))
    with torch.no_grad():
        maps = [Body()(views[:, j]) for j in range(views.shape[1])]
        mapped = [
            warp_affine_reference(
                f, back[j : j + 1], f.shape[2], f.shape[3], torch.zeros(f.shape[1], dtype=torch.float64)
            )[:, 0]
            for j, f in enumerate(maps)
        ]
    a = torch.stack(mapped, 1).flatten(2).double().numpy()
    if not bool(t.is_identity(params).any()):
        with torch.no_grad():
            a = np.concatenate([Body()(x.float() / 255.0).flatten(1).double().numpy()[:, None], a], axis=1)
    return tmeasures_nv_numpy(a), r


@pytest.mark.filterwarnings("ignore:FeatureStats")
@pytest.mark.parametrize("name,k", [("rotation", 4), ("hflip", 2), ("rotation", 8), ("scale", 5)])
def test_streamed_same_equivariance_against_numpy(rng, name, k):
    """A pointwise layer commutes with every transform: mapped back, its views equal the image's maps wherever
    the view saw the image, so flips and 90° rotations give exactly 0; the others equal the numpy formula on the
    maps brought back (zeros outside) to float32 resampling (the compiled warp and torch's sum in other orders)."""
    x = torch.from_numpy(rng.integers(0, 256, (9, 3, 8, 8), dtype=np.uint8))
    want, r = _pointwise_same_equivariance(x, name, k)
    got = r[name].unit_same_equivariance.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.nanmax(np.abs(got - want) / np.maximum(np.abs(want), 1e-3)) < 1e-5
    if k <= 4:
        assert np.nanmax(np.abs(got)) == 0.0
    assert r[name].same_equivariance == pytest.approx(float(np.nanmean(want)), rel=1e-6)
    back = InvarianceResult.from_json(r.to_json())[name]
    torch.testing.assert_close(back.unit_same_equivariance, r[name].unit_same_equivariance, equal_nan=True)


@pytest.mark.filterwarnings("ignore:FeatureStats")
def test_same_equivariance_only_where_it_applies(rng):
    from invfast import transforms as T

    x = torch.from_numpy(rng.integers(0, 256, (6, 3, 8, 8), dtype=np.uint8))
    kw = dict(grid_size=2, normalize=False, layers="body")
    r = measure_invariance(
        Pointwise(), x, [T.get("hflip"), T.get("brightness")], units="elements", equivariance=True, **kw
    )
    assert r["hflip"].same_equivariance is not None and r["brightness"].unit_same_equivariance is None  # not affine
    assert (
        measure_invariance(Pointwise(), x, [T.get("hflip")], equivariance=True, **kw)["hflip"].same_equivariance is None
    )  # channels
    assert (
        measure_invariance(Pointwise(), x, [T.get("hflip")], units="elements", **kw)["hflip"].same_equivariance is None
    )
