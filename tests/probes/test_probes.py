"""RidgeCV, grids, folds, fusion and the scikit-learn API of the probes, against scikit-learn."""

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.linear_model import RidgeCV as SkRidgeCV
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import invfast.probes as P
from invfast.probes.folds import resolve_cv
from invfast.probes.ridge import ridge_cv_predictions, ridge_loo_predictions

pytestmark = pytest.mark.usefixtures("one_thread")


def _structured(rng, n, d, t=3):
    """Correlated features with a large common offset, a few relevant directions, noisy targets."""
    base = rng.normal(size=(n, d)) @ (np.eye(d) + 0.5 * rng.normal(size=(d, d)) / np.sqrt(d))
    x = 5.0 + base * rng.uniform(0.1, 3.0, size=d)
    w = rng.normal(size=(d, t)) * (rng.uniform(size=(d, 1)) < 0.3)
    y = x @ w + 0.5 * rng.normal(size=(n, t)) + 2.0
    return x, y


def _rel(a, b):
    return np.abs(a - b) / np.maximum(np.abs(b), 1e-3)


@pytest.mark.parametrize("n,d", [(80, 12), (30, 50)])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("one_d", [False, True])
def test_ridge_cv_scores_match_gridsearch(rng, n, d, fit_intercept, one_d):
    x, y = _structured(rng, n, d)
    y = y[:, 0] if one_d else y
    grid = P.alpha_grid()
    ours = P.RidgeCV(fit_intercept=fit_intercept).fit(x, y)
    gs = GridSearchCV(Ridge(fit_intercept=fit_intercept), {"alpha": grid}, cv=5).fit(x, y)
    assert _rel(ours.cv_results_["mean_test_score"], gs.cv_results_["mean_test_score"]).max() < 1e-6
    assert np.abs(ours.cv_results_["std_test_score"] - gs.cv_results_["std_test_score"]).max() < 1e-6
    for f in range(5):
        assert _rel(ours.cv_results_[f"split{f}_test_score"], gs.cv_results_[f"split{f}_test_score"]).max() < 1e-6
    assert ours.alpha_ == pytest.approx(gs.best_params_["alpha"], rel=1e-12)
    assert ours.best_score_ == pytest.approx(gs.best_score_, rel=1e-6)
    sk = Ridge(alpha=ours.alpha_, fit_intercept=fit_intercept).fit(x, y)
    assert ours.coef_.shape == sk.coef_.shape
    np.testing.assert_allclose(ours.coef_, sk.coef_, rtol=1e-6, atol=1e-8 * np.abs(sk.coef_).max())
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours.predict(x), sk.predict(x), rtol=1e-6, atol=1e-8)
    assert ours.score(x, y) == pytest.approx(sk.score(x, y), rel=1e-9)


@pytest.mark.parametrize("n,d", [(60, 10), (25, 40)])
def test_ridge_predictions_every_penalty_match_ridge(rng, n, d):
    """Held-out predictions of every λ of every fold equal a fresh Ridge(alpha=λ) fit."""
    x, y = _structured(rng, n, d, t=2)
    grid = P.alpha_grid()
    splits = list(KFold(5).split(x))
    preds = ridge_cv_predictions(torch.from_numpy(x), torch.from_numpy(y), splits, torch.from_numpy(grid))
    for (train, test), pred in zip(splits, preds):
        for j, lam in enumerate(grid):
            sk = Ridge(alpha=lam).fit(x[train], y[train]).predict(x[test])
            np.testing.assert_allclose(pred[j].numpy(), sk, rtol=1e-6, atol=1e-9 * np.abs(sk).max())


@pytest.mark.parametrize("n,d", [(40, 8), (20, 30)])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_ridge_loo_equals_refitting(rng, n, d, fit_intercept):
    """The closed form e / (1 - h_ii) against refitting without each sample (scikit-learn). Near
    interpolation (n < d, small penalty) 1 - h_ii falls to ~1e-5 and the division loses digits: the
    tolerance grows as max|y| / (1 - h_ii), with the leverages h_ii from numpy (measured over 300 seeds:
    errors up to 2.7e-12 max|y| / (1 - h_ii), relative errors up to 2.3e-5)."""
    x, y = _structured(rng, n, d, t=2)
    grid = np.logspace(-3, 3, 7)
    loo = ridge_loo_predictions(torch.from_numpy(x), torch.from_numpy(y), torch.from_numpy(grid), fit_intercept)
    xc = x - x.mean(0) if fit_intercept else x
    for j, lam in enumerate(grid):
        brute = np.stack(
            [
                Ridge(alpha=lam, fit_intercept=fit_intercept)
                .fit(np.delete(x, i, 0), np.delete(y, i, 0))
                .predict(x[i : i + 1])[0]
                for i in range(n)
            ]
        )
        h = np.einsum("ij,ji->i", xc, np.linalg.solve(xc.T @ xc + lam * np.eye(d), xc.T)) + (
            1 / n if fit_intercept else 0
        )
        tol = 1e-6 * np.abs(brute) + 1e-10 * np.abs(y).max() / (1 - h)[:, None]
        assert (np.abs(loo[j].numpy() - brute) <= tol).all(), (lam, np.abs(loo[j].numpy() - brute).max())


def test_ridge_loo_mode_picks_sklearn_alpha(rng):
    x, y = _structured(rng, 50, 10, t=1)
    grid = P.alpha_grid()
    ours = P.RidgeCV(cv="loo").fit(x, y[:, 0])
    sk = SkRidgeCV(alphas=grid).fit(x, y[:, 0])
    assert ours.alpha_ == pytest.approx(sk.alpha_)
    assert ours.cv_scores_per_target_.shape == (45, 1, 1)
    assert "split0_test_score" in ours.cv_results_ and "split1_test_score" not in ours.cv_results_


def test_ridge_custom_and_shuffled_splits_match(rng):
    x, y = _structured(rng, 50, 6)
    splitter = KFold(5, shuffle=True, random_state=3)
    grid = np.logspace(-2, 2, 5)
    ours = P.RidgeCV(alphas=grid, cv=splitter).fit(x, y)
    gs = GridSearchCV(Ridge(), {"alpha": grid}, cv=splitter).fit(x, y)
    assert _rel(ours.cv_results_["mean_test_score"], gs.cv_results_["mean_test_score"]).max() < 1e-6
    # non-partition splits (train is not the complement of test) take the direct path
    splits = [(np.arange(0, 30), np.arange(30, 50)), (np.arange(20, 50), np.arange(0, 10))]
    ours = P.RidgeCV(alphas=grid, cv=splits).fit(x, y)
    gs = GridSearchCV(Ridge(), {"alpha": grid}, cv=splits).fit(x, y)
    assert _rel(ours.cv_results_["mean_test_score"], gs.cv_results_["mean_test_score"]).max() < 1e-6
    a = P.RidgeCV(shuffle=True, random_state=1).fit(x, y).cv_results_["mean_test_score"]
    b = P.RidgeCV(shuffle=True, random_state=1).fit(x, y).cv_results_["mean_test_score"]
    np.testing.assert_array_equal(a, b)


def test_ridge_torch_in_torch_out_and_per_target_r2(rng):
    x, y = _structured(rng, 60, 8, t=2)
    xt, yt = torch.from_numpy(x).float(), torch.from_numpy(y).float()
    m = P.RidgeCV().fit(xt, yt)
    assert isinstance(m.coef_, torch.Tensor) and isinstance(m.predict(xt), torch.Tensor)
    assert m.predict(xt).dtype == torch.float32
    mn = P.RidgeCV().fit(x, y)
    assert isinstance(mn.coef_, np.ndarray)
    np.testing.assert_allclose(
        m.cv_results_["mean_test_score"], mn.cv_results_["mean_test_score"], rtol=1e-5, atol=1e-6
    )
    assert mn.cv_scores_per_target_.shape == (45, 5, 2)
    per = mn.cv_scores_per_target_.mean(1)
    np.testing.assert_allclose(per.mean(1), mn.cv_results_["mean_test_score"], rtol=1e-12)
    np.testing.assert_allclose(mn.r2_per_target_, per[mn.best_index_])


def test_alpha_grid_and_fuse():
    g = P.alpha_grid()
    assert g.shape == (45,) and g[0] == pytest.approx(1e-6) and g[-1] == pytest.approx(1e5)
    assert np.allclose(np.diff(np.log10(g)), 11 / 44)
    assert P.alpha_grid(2)[0] == pytest.approx(1e-5) and P.alpha_grid(2)[-1] == pytest.approx(1e6)
    assert P.alpha_grid(3)[0] == pytest.approx(1e-4) and P.alpha_grid(3)[-1] == pytest.approx(1e7)
    a, b = np.ones((4, 2)), np.zeros((4, 3))
    assert P.fuse([a, b]).shape == (4, 5) and isinstance(P.fuse([a, b]), np.ndarray)
    ft = P.fuse([torch.ones(4, 2), b])
    assert isinstance(ft, torch.Tensor) and ft.shape == (4, 5) and ft.dtype == torch.float64
    with pytest.raises(ValueError, match="same number of samples"):
        P.fuse([a, np.ones((5, 2))])
    with pytest.raises(TypeError, match="list"):
        P.fuse(a)
    with pytest.raises(ValueError, match="n_models"):
        P.alpha_grid(0)


def test_folds_are_sklearn_splitters(rng):
    """An int cv is KFold / StratifiedKFold (shuffled with the seed); bad cv values raise clear errors."""
    n = 53
    y = np.concatenate([rng.integers(0, 4, n - 20), np.repeat(np.arange(4), 5)])
    for ours, ref in (
        (resolve_cv(5, n), KFold(5).split(np.zeros(n))),
        (resolve_cv(5, n, y=y, classifier=True), StratifiedKFold(5).split(np.zeros(n), y)),
        (
            resolve_cv(5, n, y=y, classifier=True, shuffle=True, seed=3),
            StratifiedKFold(5, shuffle=True, random_state=3).split(np.zeros(n), y),
        ),
    ):
        for (a, b), (c, d) in zip(ours, ref, strict=True):
            np.testing.assert_array_equal(a, c), np.testing.assert_array_equal(b, d)
    with pytest.raises(ValueError, match="at least 2 folds"):
        resolve_cv(1, n)
    with pytest.raises(ValueError, match="into 5 folds"):
        resolve_cv(5, 4)
    with pytest.raises(ValueError, match="outside"):
        resolve_cv([(np.arange(3), np.arange(3, 60))], n)
    with pytest.raises(TypeError, match="cv must be"):
        resolve_cv(2.5, n)


@pytest.mark.parametrize(
    "make",
    [
        lambda: P.RidgeCV(alphas=[0.1, 1.0, 10.0]),
        lambda: P.LogisticCV(alphas=[0.1, 1.0, 10.0]),
        lambda: P.KernelRidgeCV(alphas=[0.1, 1.0], gammas=[0.1, 1.0]),
    ],
)
def test_sklearn_api_clone_pipeline(rng, make):
    est = make()
    c = clone(est)
    assert type(c) is type(est) and c.get_params() == est.get_params()
    c.set_params(cv=3)
    assert c.cv == 3 and est.cv == 5
    x = rng.normal(size=(60, 5))
    y = (x[:, 0] > 0).astype(int) if isinstance(est, P.LogisticCV) else x[:, 0] + 0.1 * rng.normal(size=60)
    pipe = Pipeline([("scale", StandardScaler()), ("probe", est)]).fit(x, y)
    assert pipe.predict(x).shape == (60,)
    assert np.isfinite(pipe.score(x, y))
    fitted = pipe.named_steps["probe"]
    assert hasattr(fitted, "cv_results_") and not hasattr(clone(fitted), "cv_results_")
    for key in ("params", "mean_test_score", "std_test_score", "split0_test_score", "rank_test_score"):
        assert key in fitted.cv_results_
    assert fitted.best_params_ == fitted.cv_results_["params"][fitted.best_index_]


def test_bad_input_ridge(rng):
    x, y = rng.normal(size=(20, 3)), rng.normal(size=20)
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        P.RidgeCV().fit(bad, y)
    with pytest.raises(ValueError, match="infinity"):
        P.RidgeCV().fit(x, np.where(np.arange(20) == 2, np.inf, y))
    with pytest.raises(ValueError, match="must match"):
        P.RidgeCV().fit(x, y[:15])
    with pytest.raises(ValueError, match="folds"):
        P.RidgeCV(cv=5).fit(x[:4], y[:4])
    with pytest.raises(ValueError, match="> 0"):
        P.RidgeCV(alphas=[1.0, -1.0]).fit(x, y)
    with pytest.raises(ValueError, match="dim 3"):
        P.RidgeCV().fit(x[None], y)
    with pytest.raises(P.NotFittedError, match="not fitted"):
        P.RidgeCV().predict(x)
    with pytest.raises(ValueError, match="features"):
        P.RidgeCV().fit(x, y).predict(x[:, :2])
    with pytest.raises(TypeError):
        P.RidgeCV().fit("abc", y)


def test_invariance_probe_is_lazy():
    assert "InvarianceProbe" in P.__all__
    with pytest.raises(AttributeError):
        P.__getattr__("NoSuchThing")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_probes_on_cuda_match_cpu(rng):
    x, y = _structured(rng, 80, 12, t=2)
    labels = (x[:, 0] > np.median(x[:, 0])).astype(int) + (x[:, 1] > np.median(x[:, 1])).astype(int)
    xc = torch.from_numpy(x).cuda()
    cpu = P.RidgeCV().fit(x, y)
    gpu = P.RidgeCV().fit(xc, torch.from_numpy(y).cuda())
    assert gpu.coef_.is_cuda and gpu.predict(xc).is_cuda
    np.testing.assert_allclose(
        gpu.cv_results_["mean_test_score"], cpu.cv_results_["mean_test_score"], rtol=1e-6, atol=1e-9
    )
    lc = P.LogisticCV(alphas=[0.1, 1.0, 10.0], dtype="float64", tol=1e-8, max_iter=2000).fit(x, labels)
    lg = P.LogisticCV(alphas=[0.1, 1.0, 10.0], dtype="float64", tol=1e-8, max_iter=2000).fit(xc, labels)
    np.testing.assert_allclose(lg.cv_results_["mean_test_accuracy"], lc.cv_results_["mean_test_accuracy"])
    kc = P.KernelRidgeCV(alphas=[0.1, 1.0], gammas=[0.01, 0.1]).fit(x, y)
    kg = P.KernelRidgeCV(alphas=[0.1, 1.0], gammas=[0.01, 0.1]).fit(xc, torch.from_numpy(y).cuda())
    np.testing.assert_allclose(
        kg.cv_results_["mean_test_score"], kc.cv_results_["mean_test_score"], rtol=1e-6, atol=1e-9
    )
    a = P.few_shot(x, labels, n_way=2, k_shot=2, n_query=3, episodes=20, seed=1)
    b = P.few_shot(xc, labels, n_way=2, k_shot=2, n_query=3, episodes=20, seed=1)
    np.testing.assert_allclose(a.scores, b.scores)


@pytest.mark.parametrize("make", [lambda: P.RidgeCV(alphas=[1.0, 10.0]), lambda: P.LogisticCV(alphas=[1.0, 10.0])])
def test_features_too_large_are_refused(rng, make):
    """Features ×1e200: the Gram matrix overflows float64; a clear error instead of chance scores or LinAlgError."""
    x = rng.normal(size=(40, 3)) * 1e200
    y = (rng.normal(size=40) > 0).astype(int)
    with pytest.raises(ValueError, match="too large"):
        make().fit(x, y)
