"""LogisticCV and the batched L-BFGS against scikit-learn's LogisticRegression(lbfgs) and scipy."""
import warnings

import numpy as np
import pytest
import scipy.optimize
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_validate

import invfast.probes as P
from invfast.probes.lbfgs import lbfgs


pytestmark = pytest.mark.usefixtures("one_thread")


def _blobs(rng, n, d, k, spread=1.5):
    mu = rng.normal(size=(k, d))
    y = np.concatenate([np.arange(k).repeat(5), rng.integers(0, k, n - 5 * k)])
    return mu[y] + spread * rng.normal(size=(n, d)) + 2.0, y


def _sk_cv(x, y, lams, tol=1e-10):
    acc, bacc = [], []
    for lam in lams:
        r = cross_validate(LogisticRegression(C=1 / lam, tol=tol, max_iter=10000), x, y, cv=StratifiedKFold(5),
                           scoring=("accuracy", "balanced_accuracy"))
        acc.append(r["test_accuracy"].mean()), bacc.append(r["test_balanced_accuracy"].mean())
    return np.array(acc), np.array(bacc)


@pytest.mark.parametrize("k", [2, 4])
def test_logistic_cv_matches_sklearn_each_C(rng, k):
    x, y = _blobs(rng, 150, 6, k)
    lams = np.logspace(-2, 3, 6)
    ours = P.LogisticCV(alphas=lams, tol=1e-9, max_iter=3000, dtype="float64").fit(x, y)
    acc, bacc = _sk_cv(x, y, lams)
    assert np.abs(ours.cv_results_["mean_test_accuracy"] - acc).max() <= 0.005
    assert np.abs(ours.cv_results_["mean_test_mean_per_class_accuracy"] - bacc).max() <= 0.005
    assert all(ours.cv_results_[f"split{f}_converged"].all() for f in range(5)) and ours.converged_
    assert ours.C_ == pytest.approx(1 / ours.alpha_) and ours.best_params_ == {"C": ours.C_}
    sk = LogisticRegression(**ours.best_params_, tol=1e-10, max_iter=10000).fit(x, y)
    assert ours.coef_.shape == sk.coef_.shape
    np.testing.assert_allclose(ours.coef_, sk.coef_, atol=1e-5 * max(1.0, np.abs(sk.coef_).max()))
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=1e-5 * max(1.0, np.abs(sk.intercept_).max()))
    np.testing.assert_allclose(ours.predict_proba(x), sk.predict_proba(x), atol=1e-6)
    assert (ours.predict(x) == sk.predict(x)).mean() > 0.99
    assert ours.score(x, y) == pytest.approx(sk.score(x, y), abs=0.01)


@pytest.mark.filterwarnings("ignore::invfast.probes.ConvergenceWarning")
def test_logistic_float32_and_best_value_well_conditioned(rng):
    """Default float32 products: same best value as sklearn's loop on a well-conditioned problem."""
    x, y = _blobs(rng, 200, 5, 3, spread=2.5)
    x = (x - x.mean(0)) / x.std(0)
    lams = np.logspace(-1, 3, 5)
    ours = P.LogisticCV(alphas=lams, tol=1e-5, max_iter=2000).fit(x, y)
    acc, _ = _sk_cv(x, y, lams)
    assert np.abs(ours.cv_results_["mean_test_accuracy"] - acc).max() <= 0.005
    assert ours.alpha_ == lams[int(np.argmax(acc))]


def test_logistic_path_without_continuation_agrees(rng):
    x, y = _blobs(rng, 100, 4, 3)
    lams = np.logspace(-1, 2, 4)
    a = P.LogisticCV(alphas=lams, tol=1e-9, max_iter=2000, dtype="float64").fit(x, y)
    b = P.LogisticCV(alphas=lams, tol=1e-9, max_iter=2000, dtype="float64", path_continuation=False).fit(x, y)
    np.testing.assert_allclose(a.cv_results_["mean_test_accuracy"], b.cv_results_["mean_test_accuracy"])
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-6)


def test_logistic_string_labels_torch_input_and_convergence_report(rng):
    x, y = _blobs(rng, 80, 4, 3)
    names = np.array(["cat", "dog", "emu"])[y]
    m = P.LogisticCV(alphas=[1.0, 10.0]).fit(x, names)
    assert set(m.predict(x)) <= {"cat", "dog", "emu"} and list(m.classes_) == ["cat", "dog", "emu"]
    mt = P.LogisticCV(alphas=[1.0, 10.0]).fit(torch.from_numpy(x).float(), torch.from_numpy(y))
    assert isinstance(mt.coef_, torch.Tensor) and isinstance(mt.predict(torch.from_numpy(x)), torch.Tensor)
    p = mt.predict_proba(torch.from_numpy(x))
    torch.testing.assert_close(p.sum(1), torch.ones(80, dtype=p.dtype))
    with pytest.warns(P.ConvergenceWarning, match="stopped before"):
        m2 = P.LogisticCV(alphas=[1e-3], max_iter=1, tol=1e-12).fit(x, y)
    assert not m2.converged_ and not any(m2.cv_results_[f"split{f}_converged"].any() for f in range(5))
    assert all((m2.cv_results_[f"split{f}_n_iter"] <= 1).all() for f in range(5))


def test_bad_input_logistic(rng):
    x, y = _blobs(rng, 40, 3, 2)
    with pytest.raises(ValueError, match="one class"):
        P.LogisticCV().fit(x, np.zeros(40, dtype=int))
    y_rare = y.copy()
    y_rare[:3] = 7
    with pytest.raises(ValueError, match="stratify=False"):
        P.LogisticCV(alphas=[1.0]).fit(x, y_rare)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fb = P.LogisticCV(alphas=[1.0], stratify=False, shuffle=True, random_state=0).fit(x, y_rare)
    assert fb.classes_.tolist() == [0, 1, 7]
    with pytest.raises(ValueError, match="labels but X has"):
        P.LogisticCV().fit(x, y[:-1])
    with pytest.raises(ValueError, match="NaN"):
        P.LogisticCV().fit(np.where(np.eye(40, 3) > 0, np.nan, x), y)
    with pytest.raises(ValueError, match="NaN"):
        P.LogisticCV().fit(x, np.where(np.arange(40) == 0, np.nan, y.astype(float)))
    with pytest.raises(ValueError, match="folds"):
        P.LogisticCV(cv=5).fit(x[:4], [0, 1, 0, 1])
    with pytest.raises(ValueError, match="scoring"):
        P.LogisticCV(scoring="f1").fit(x, y)


def test_batched_lbfgs_matches_scipy(rng):
    """Independent problems solved together reach scipy's L-BFGS-B minima."""
    nf, n, d = 3, 40, 5
    a = rng.normal(size=(nf, n, d))
    b = (rng.uniform(size=(nf, n)) < 0.5).astype(float)

    def f_np(w, i):
        z = a[i] @ w
        return np.sum(np.logaddexp(0, z) - b[i] * z) + 0.5 * w @ w, a[i].T @ (1 / (1 + np.exp(-z)) - b[i]) + w

    def fun(w):
        z = torch.einsum("fnd,fd->fn", torch.from_numpy(a), w)
        bt = torch.from_numpy(b)
        loss = (torch.nn.functional.softplus(z) - bt * z).sum(1) + 0.5 * (w * w).sum(1)
        return loss, torch.einsum("fnd,fn->fd", torch.from_numpy(a), torch.sigmoid(z) - bt) + w

    res = lbfgs(fun, torch.zeros(nf, d, dtype=torch.float64), tol=1e-10, max_iter=500)
    assert res.converged.all()
    for i in range(nf):
        ref = scipy.optimize.minimize(f_np, np.zeros(d), args=(i,), jac=True, method="L-BFGS-B",
                                      options={"gtol": 1e-12, "ftol": 0})
        np.testing.assert_allclose(res.x[i].numpy(), ref.x, atol=1e-7)
