"""``oof_predictions_`` of RidgeCV, LogisticCV and KernelRidgeCV: each sample's held-out prediction at the
selected penalty, checked against scikit-learn's ``cross_val_predict`` on the same folds."""

import numpy as np
import pytest
import torch
from sklearn.compose import TransformedTargetRegressor
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import KFold, LeaveOneOut, StratifiedKFold, cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import invfast.probes as P

pytestmark = pytest.mark.usefixtures("one_thread")


def _regression(rng, n, d, t):
    x = rng.normal(size=(n, d)) * rng.uniform(0.5, 3.0, d) + 2.0
    w = rng.normal(size=(d, t))
    y = x @ w + rng.normal(size=(n, t)) * 2.0 + 5.0
    return x, (y[:, 0] if t == 1 else y)


def _assert_close(ours, ref, rtol=1e-8):
    scale = np.abs(ref).max()
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("n,d", [(90, 12), (60, 40)])
@pytest.mark.parametrize("t", [1, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_ridge_kfold_oof_matches_cross_val_predict(rng, n, d, t, shuffle):
    x, y = _regression(rng, n, d, t)
    splits = list(KFold(5, shuffle=shuffle, random_state=7 if shuffle else None).split(x))
    ours = P.RidgeCV(cv=5, shuffle=shuffle, random_state=7 if shuffle else None).fit(x, y)
    assert isinstance(ours.oof_predictions_, np.ndarray) and ours.oof_predictions_.shape == y.shape
    ref = cross_val_predict(Ridge(alpha=ours.alpha_), x, y, cv=splits)
    _assert_close(ours.oof_predictions_, ref)
    # an explicit list of the same splits gives the same numbers
    again = P.RidgeCV(cv=splits).fit(x, y)
    np.testing.assert_array_equal(again.oof_predictions_, ours.oof_predictions_)
    # the held-out R² per fold at alpha_ is the score that selected it
    for f, (_, te) in enumerate(splits):
        res = y[te] - ours.oof_predictions_[te]
        yt = y[te].reshape(len(te), -1)
        r2 = 1 - (res.reshape(len(te), -1) ** 2).sum(0) / ((yt - yt.mean(0)) ** 2).sum(0)
        assert r2.mean() == pytest.approx(ours.cv_results_[f"split{f}_test_score"][ours.best_index_], rel=1e-9)


@pytest.mark.parametrize("n,d,rtol", [(70, 8, 1e-8), (40, 60, 1e-6)])
@pytest.mark.parametrize("t", [1, 2])
def test_ridge_loo_oof_matches_cross_val_predict(rng, n, d, rtol, t):
    x, y = _regression(rng, n, d, t)
    ours = P.RidgeCV(cv="loo", alphas=np.logspace(-1, 4, 12)).fit(x, y)
    assert ours.oof_predictions_.shape == y.shape
    ref = cross_val_predict(Ridge(alpha=ours.alpha_), x, y, cv=LeaveOneOut())
    # LOO from the hat matrix divides by 1 - h_ii: a few digits go when n < d (see ridge_loo_predictions)
    _assert_close(ours.oof_predictions_, ref, rtol=rtol)


def test_ridge_oof_torch_in_torch_out(rng):
    x, y = _regression(rng, 80, 10, 2)
    xt, yt = torch.tensor(x), torch.tensor(y)
    ours = P.RidgeCV(cv=4).fit(xt, yt)
    assert isinstance(ours.oof_predictions_, torch.Tensor) and ours.oof_predictions_.shape == (80, 2)
    ours1 = P.RidgeCV(cv="loo").fit(xt, yt[:, 0])
    assert isinstance(ours1.oof_predictions_, torch.Tensor) and ours1.oof_predictions_.shape == (80,)
    ref = P.RidgeCV(cv=4).fit(x, y)
    np.testing.assert_allclose(ours.oof_predictions_.numpy(), ref.oof_predictions_, rtol=1e-12, atol=1e-12)


def _blobs(rng, n, d, k, sep):
    mu = rng.normal(size=(k, d)) * sep
    y = np.concatenate([np.arange(k).repeat(6), rng.integers(0, k, n - 6 * k)])
    return mu[y] + rng.normal(size=(n, d)) + 1.0, y


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize("scoring", ["accuracy", "mean_per_class_accuracy"])
def test_logistic_oof_is_fold_weighted_accuracy(rng, k, scoring):
    x, y = _blobs(rng, 103, 6, k, sep=0.8)  # 103: folds of 20 and 21
    ours = P.LogisticCV(alphas=np.logspace(-2, 3, 6), scoring=scoring).fit(x, y)
    oof = ours.oof_predictions_
    assert isinstance(oof, np.ndarray) and oof.shape == (103,) and oof.dtype == ours.classes_.dtype
    assert np.isin(oof, ours.classes_).all()
    splits = list(StratifiedKFold(5).split(x, y))
    b, sizes = ours.best_index_, np.array([len(te) for _, te in splits])
    per_fold = np.array([ours.cv_results_[f"split{f}_test_accuracy"][b] for f in range(5)])
    for f, (_, te) in enumerate(splits):
        assert np.mean(oof[te] == y[te]) == pytest.approx(per_fold[f], abs=1e-12)
    assert np.mean(oof == y) == pytest.approx((per_fold * sizes).sum() / sizes.sum(), abs=1e-12)
    if scoring == "accuracy":  # best_score_ is the unweighted mean over folds
        assert ours.best_score_ == pytest.approx(per_fold.mean(), abs=1e-12)


def test_logistic_oof_string_labels_and_torch(rng):
    x, y = _blobs(rng, 90, 5, 3, sep=1.0)
    names = np.array(["cat", "dog", "eel"])
    ours = P.LogisticCV(alphas=np.logspace(-1, 2, 4), dtype="float64").fit(x, names[y])
    codes = P.LogisticCV(alphas=np.logspace(-1, 2, 4), dtype="float64").fit(x, y)
    assert ours.oof_predictions_.dtype.kind == "U" and set(ours.oof_predictions_) <= set(names)
    assert ours.best_index_ == codes.best_index_
    np.testing.assert_array_equal(ours.oof_predictions_, names[codes.oof_predictions_])
    # tensor in: numeric labels come back as a tensor, strings stay numpy (as predict)
    tens = P.LogisticCV(alphas=np.logspace(-1, 2, 4), dtype="float64").fit(torch.tensor(x), torch.tensor(y))
    assert isinstance(tens.oof_predictions_, torch.Tensor)
    np.testing.assert_array_equal(tens.oof_predictions_.numpy(), codes.oof_predictions_)
    strs = P.LogisticCV(alphas=np.logspace(-1, 2, 4), dtype="float64").fit(torch.tensor(x), names[y])
    assert isinstance(strs.oof_predictions_, np.ndarray)
    np.testing.assert_array_equal(strs.oof_predictions_, ours.oof_predictions_)


def test_logistic_oof_agrees_with_sklearn(rng):
    x, y = _blobs(rng, 150, 8, 3, sep=1.5)
    splits = list(StratifiedKFold(5, shuffle=True, random_state=3).split(x, y))
    ours = P.LogisticCV(alphas=np.logspace(-1, 3, 5), cv=splits, dtype="float64", tol=1e-8, max_iter=2000).fit(x, y)
    sk = LogisticRegression(C=ours.C_, tol=1e-10, max_iter=5000)
    ref = cross_val_predict(sk, x, y, cv=splits)
    assert np.mean(ours.oof_predictions_ == ref) >= 0.98


def _sk_kernel(alpha, gamma):
    return TransformedTargetRegressor(
        Pipeline([("s", StandardScaler()), ("k", KernelRidge(kernel="rbf", alpha=alpha, gamma=gamma))]),
        transformer=StandardScaler(),
    )


def _kernel_data(rng, n, t):
    x = rng.normal(size=(n, 5)) * [1.0, 3.0, 0.5, 10.0, 2.0] + 4.0
    y = np.stack([np.sin(x[:, 0]) + x[:, 1] / 3, np.cos(x[:, 2]) * 4 - 20], 1) + 0.05 * rng.normal(size=(n, 2))
    return x, (y[:, 0] * 7 + 3 if t == 1 else y)


@pytest.mark.parametrize("solver", ["eigh", "cholesky"])
@pytest.mark.parametrize("t", [1, 2])
def test_kernel_ridge_oof_matches_cross_val_predict(rng, solver, t):
    x, y = _kernel_data(rng, 80, t)
    splits = list(KFold(5, shuffle=True, random_state=1).split(x))
    ours = P.KernelRidgeCV(alphas=np.logspace(-3, 0, 4), gammas=np.logspace(-3, 1, 5), cv=splits, solver=solver)
    ours.fit(x, y)
    assert isinstance(ours.oof_predictions_, np.ndarray) and ours.oof_predictions_.shape == y.shape
    # standardisation is per training fold, as this pipeline inside cross_val_predict
    ref = cross_val_predict(_sk_kernel(ours.alpha_, ours.gamma_), x, y, cv=splits)
    _assert_close(ours.oof_predictions_, ref, rtol=1e-7)


@pytest.mark.parametrize("t", [1, 2])
def test_kernel_ridge_loo_oof(rng, t):
    x, y = _kernel_data(rng, 60, t)
    ours = P.KernelRidgeCV(alphas=np.logspace(-2, 0, 3), gammas=np.logspace(-2, 0, 3), cv="loo").fit(x, y)
    # "loo" standardises features and targets once on all samples, then leaves one out of KernelRidge
    xs = StandardScaler().fit_transform(x)
    ysc = StandardScaler().fit(y.reshape(len(y), -1))
    z = ysc.transform(y.reshape(len(y), -1))
    kr = KernelRidge(kernel="rbf", alpha=ours.alpha_, gamma=ours.gamma_)
    ref = ysc.inverse_transform(cross_val_predict(kr, xs, z, cv=LeaveOneOut())).reshape(y.shape)
    _assert_close(ours.oof_predictions_, ref, rtol=1e-7)


def test_kernel_ridge_oof_torch_in_torch_out(rng):
    x, y = _kernel_data(rng, 60, 1)
    kw = {"alphas": [0.01, 0.1], "gammas": [0.1, 1.0]}
    ours = P.KernelRidgeCV(**kw).fit(torch.tensor(x), torch.tensor(y))
    assert isinstance(ours.oof_predictions_, torch.Tensor) and ours.oof_predictions_.shape == (60,)
    ref = P.KernelRidgeCV(**kw).fit(x, y)
    np.testing.assert_allclose(ours.oof_predictions_.numpy(), ref.oof_predictions_, rtol=1e-12, atol=1e-12)
