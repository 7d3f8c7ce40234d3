"""Equivariance measures (invfast.measure.equivariance) against scikit-learn and float64 numpy: the
cross-validated R² of the best affine map, and tmeasures's same-equivariance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_measure_units import Body, tmeasures_nv_numpy

from invfast.measure.equivariance import kfold, linear_equivariance, same_equivariance

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
