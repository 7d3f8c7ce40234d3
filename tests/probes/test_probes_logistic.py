"""LogisticCV and the batched L-BFGS against scikit-learn (LogisticRegression, LogisticRegressionCV) and scipy.

References are independent solvers run to tight tolerances: scikit-learn's Newton solver
("newton-cholesky", exact to ~1e-10 whatever the conditioning) for coefficients and CV accuracies,
its default L-BFGS where the comparison is at default settings, scipy's L-BFGS-B for the optimiser."""

import warnings

import numpy as np
import pytest
import scipy.optimize
import torch
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.model_selection import StratifiedKFold, cross_validate

import invfast.probes as P
from invfast.probes.lbfgs import lbfgs

pytestmark = pytest.mark.usefixtures("one_thread")


def _blobs(rng, n, d, k, spread=1.5):
    mu = rng.normal(size=(k, d))
    y = np.concatenate([np.arange(k).repeat(5), rng.integers(0, k, n - 5 * k)])
    return mu[y] + spread * rng.normal(size=(n, d)) + 2.0, y


def _ill_conditioned(rng, n, d, k, spread=1.5):
    """Blobs seen through a random mixing with singular values 1e-3..1e2 and an offset of 10: correlated,
    unstandardised features whose covariance has a condition number near 1e10."""
    z, y = _blobs(rng, n, d, k, spread)
    q1, _ = np.linalg.qr(rng.normal(size=(d, d)))
    q2, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (z @ q1 @ np.diag(np.logspace(-3, 2, d)) @ q2 + 10.0), y


def _newton(c, **kw):
    return LogisticRegression(C=c, solver="newton-cholesky", tol=1e-12, max_iter=200, **kw)


def _sk_cv(x, y, lams):
    acc, bacc = [], []
    for lam in lams:
        r = cross_validate(_newton(1 / lam), x, y, cv=StratifiedKFold(5), scoring=("accuracy", "balanced_accuracy"))
        acc.append(r["test_accuracy"].mean()), bacc.append(r["test_balanced_accuracy"].mean())
    return np.array(acc), np.array(bacc)


@pytest.mark.parametrize("k", [2, 4])
def test_logistic_cv_matches_sklearn_each_C(rng, k):
    x, y = _blobs(rng, 150, 6, k)
    lams = np.logspace(-2, 3, 6)
    ours = P.LogisticCV(alphas=lams, tol=1e-9, max_iter=3000, dtype="float64").fit(x, y)
    acc, bacc = _sk_cv(x, y, lams)
    # at most one test image of the 200 predicted differently (0.005 of the mean over 5 folds of 40), plus rounding
    assert np.abs(ours.cv_results_["mean_test_accuracy"] - acc).max() <= 0.005 + 1e-12
    assert np.abs(ours.cv_results_["mean_test_mean_per_class_accuracy"] - bacc).max() <= 0.005
    assert all(ours.cv_results_[f"split{f}_converged"].all() for f in range(5)) and ours.converged_
    assert ours.C_ == pytest.approx(1 / ours.alpha_) and ours.best_params_ == {"C": ours.C_}
    sk = _newton(ours.C_).fit(x, y)
    assert ours.coef_.shape == sk.coef_.shape
    np.testing.assert_allclose(ours.coef_, sk.coef_, atol=1e-5 * max(1.0, np.abs(sk.coef_).max()))
    np.testing.assert_allclose(ours.intercept_, sk.intercept_, atol=1e-5 * max(1.0, np.abs(sk.intercept_).max()))
    np.testing.assert_allclose(ours.predict_proba(x), sk.predict_proba(x), atol=1e-7)
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
    # at most one test image of the 200 predicted differently (0.005 of the mean over 5 folds of 40), plus rounding
    assert np.abs(ours.cv_results_["mean_test_accuracy"] - acc).max() <= 0.005 + 1e-12
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
    with pytest.warns(UserWarning, match="least populated class"):  # as StratifiedKFold / LogisticRegressionCV
        rare = P.LogisticCV(alphas=[1.0]).fit(x, y_rare)
    assert rare.classes_.tolist() == [0, 1, 7] and np.isfinite(rare.best_score_)
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

    def fun(w, idx):
        at, bt = torch.from_numpy(a)[idx], torch.from_numpy(b)[idx]
        z = torch.einsum("fnd,fd->fn", at, w)
        loss = (torch.nn.functional.softplus(z) - bt * z).sum(1) + 0.5 * (w * w).sum(1)
        return loss, torch.einsum("fnd,fn->fd", at, torch.sigmoid(z) - bt) + w

    res = lbfgs(fun, torch.zeros(nf, d, dtype=torch.float64), tol=1e-10, max_iter=500)
    assert res.converged.all()
    for i in range(nf):
        ref = scipy.optimize.minimize(
            f_np, np.zeros(d), args=(i,), jac=True, method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 0}
        )
        np.testing.assert_allclose(res.x[i].numpy(), ref.x, atol=1e-7)


def _sk_logistic_cv(x, y, cs, **kw):
    """LogisticRegressionCV (pure L2, accuracy) and its mean CV accuracy per C, in the order of ``cs``."""
    import inspect

    params = inspect.signature(LogisticRegressionCV).parameters  # scikit-learn >= 1.8 warns without these
    kw.update({k: v for k, v in (("l1_ratios", (0.0,)), ("use_legacy_attributes", False)) if k in params})
    sk = LogisticRegressionCV(Cs=cs, cv=StratifiedKFold(5), scoring="accuracy", **kw).fit(x, y)
    scores = np.asarray(next(iter(sk.scores_.values())) if isinstance(sk.scores_, dict) else sk.scores_)
    return sk, scores.reshape(scores.shape[0], -1, scores.shape[-1])[:, 0].mean(0)


def test_logistic_cv_matches_logistic_regression_cv_ill_conditioned(rng):
    """Fresh ill-conditioned data: CV accuracy at every C within 0.01 of LogisticRegressionCV(newton-cholesky,
    tol 1e-12), the same best score within 0.01, and each side's chosen C scoring within 0.01 of the best on
    the other side's curve. Every fit converges, in float32 products at the default tolerance too."""
    x, y = _ill_conditioned(rng, 240, 10, 4)
    lams = np.logspace(-3, 3, 9)
    cs = np.sort(1 / lams)  # scikit-learn's order: strong -> weak
    sk, sk_acc = _sk_logistic_cv(x, y, cs, solver="newton-cholesky", tol=1e-12, max_iter=200)
    for kw in ({"dtype": "float64", "tol": 1e-8}, {}):
        with warnings.catch_warnings():
            warnings.simplefilter("error", P.ConvergenceWarning)
            ours = P.LogisticCV(alphas=lams, **kw).fit(x, y)
        assert ours.cv_converged_.all() and ours.converged_
        acc = ours.cv_results_["mean_test_accuracy"][::-1]  # in the order of cs
        assert np.abs(acc - sk_acc).max() <= 0.01 + 1e-12, kw
        assert abs(ours.best_score_ - sk_acc.max()) <= 0.01 + 1e-12
        assert sk_acc[list(cs).index(pytest.approx(ours.C_))] >= sk_acc.max() - 0.01 - 1e-12
        assert acc[list(cs).index(pytest.approx(sk.C_))] >= ours.best_score_ - 0.01 - 1e-12
    ref = _newton(ours.C_).fit(x, y)
    assert (ours.predict(x) == ref.predict(x)).mean() >= 0.99


def test_logistic_cv_default_settings_match_logistic_regression_cv(rng):
    """Default tolerances on both sides (1e-4 on the mean loss's gradient), standardised data where
    scikit-learn's L-BFGS converges: the same chosen C up to the accuracy tolerance of 0.02."""
    x, y = _blobs(rng, 300, 8, 5, spread=2.0)
    x = (x - x.mean(0)) / x.std(0)
    lams = P.alpha_grid()[::4]
    _, sk_acc = _sk_logistic_cv(x, y, np.sort(1 / lams), tol=1e-4, max_iter=500)
    ours = P.LogisticCV(alphas=lams).fit(x, y)
    acc = ours.cv_results_["mean_test_accuracy"][::-1]
    assert abs(ours.best_score_ - sk_acc.max()) <= 0.02
    assert np.abs(acc - sk_acc).max() <= 0.02
    assert ours.cv_converged_.all() and ours.converged_


def test_logistic_hard_data_converges_everywhere_on_the_45_value_grid(rng):
    """Ill-conditioned, many-class data over the full 45-value grid: every one of the 226 fits meets
    tol at max_iter=500, and the solution at the chosen C is the Newton solver's."""
    x, y = _ill_conditioned(rng, 300, 12, 6, spread=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", P.ConvergenceWarning)
        ours = P.LogisticCV().fit(x, y)
    assert all(ours.cv_results_[f"split{f}_converged"].all() for f in range(5)) and ours.converged_
    assert (ours.cv_n_iter_ <= 500).all()
    ref = _newton(ours.C_).fit(x, y)
    np.testing.assert_allclose(ours.predict_proba(x), ref.predict_proba(x), atol=2e-3)


def test_float32_fits_that_stall_are_finished_in_float64(rng):
    """A tolerance below float32's resolution: the float32 L-BFGS stalls, the float64 finish converges."""
    x, y = _ill_conditioned(rng, 150, 6, 3)
    lams = np.logspace(-2, 2, 3)
    ours = P.LogisticCV(alphas=lams, tol=1e-8, max_iter=2000).fit(x, y)
    assert ours.cv_converged_.all() and ours.converged_
    ref = _newton(ours.C_).fit(x, y)
    np.testing.assert_allclose(ours.predict_proba(x), ref.predict_proba(x), atol=1e-6)


def test_unconverged_fits_recorded_and_named_in_one_warning(rng):
    x, y = _blobs(rng, 80, 4, 3)
    lams = np.array([1e-3, 1e-1, 1e3])
    with pytest.warns(P.ConvergenceWarning) as rec:
        m = P.LogisticCV(alphas=lams, max_iter=1, tol=1e-12).fit(x, y)
    assert len(rec) == 1
    msg = str(rec[0].message)
    assert "\n" not in msg and msg.startswith("LogisticCV: ")
    bad = int((~m.cv_converged_).sum()) + (not m.converged_)
    assert f"{bad} of 16 fits" in msg
    for j in np.flatnonzero((~m.cv_converged_).any(1)):
        assert f"{1 / lams[j]:.3g}" in msg
    with pytest.warns(P.ConvergenceWarning, match=r"of 226 fits stopped .* at C = 45 values from 1e-05 to 1e\+06"):
        P.LogisticCV(max_iter=1, tol=1e-12).fit(x, y)
    assert m.cv_converged_.shape == m.cv_n_iter_.shape == (3, 5) and (m.cv_n_iter_ <= 1).all()
    for f in range(5):
        np.testing.assert_array_equal(m.cv_results_[f"split{f}_converged"], m.cv_converged_[:, f])
        np.testing.assert_array_equal(m.cv_results_[f"split{f}_n_iter"], m.cv_n_iter_[:, f])
    assert "max_iter" in msg and "dtype" not in msg  # advice names real parameters only


def test_score_refuses_nan_labels(rng):
    """score() with a NaN label raises scikit-learn's ValueError instead of counting it as a miss."""
    x, y = _blobs(rng, 60, 3, 2)
    m = P.LogisticCV(alphas=[1.0]).fit(x, y)
    y_nan = y.astype(float)
    y_nan[4] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        m.score(x, y_nan)
    with pytest.raises(ValueError, match="NaN"):
        m.score(torch.from_numpy(x), torch.from_numpy(y_nan))
    assert m.score(x, y) == pytest.approx(float((m.predict(x) == y).mean()))


def test_preconditioned_batched_lbfgs_matches_scipy_on_ill_conditioned_problems(rng):
    """Problems of very different conditioning finish at different iterations; each reaches scipy's minimum."""
    nf, n, d = 3, 60, 8
    scales = [np.logspace(0, 0, d), np.logspace(-1, 1, d), np.logspace(-2, 2, d)]
    a = np.stack([rng.normal(size=(n, d)) * s for s in scales])
    b = (rng.uniform(size=(nf, n)) < 0.5).astype(float)
    h = np.stack([ai.T @ ai / 4 + np.eye(d) for ai in a])  # Hessian bound at w = 0
    h_inv = torch.from_numpy(np.linalg.inv(h))

    def fun(w, idx):
        at, bt = torch.from_numpy(a)[idx], torch.from_numpy(b)[idx]
        z = torch.einsum("fnd,fd->fn", at, w)
        loss = (torch.nn.functional.softplus(z) - bt * z).sum(1) + 0.5 * (w * w).sum(1)
        return loss, torch.einsum("fnd,fn->fd", at, torch.sigmoid(z) - bt) + w

    res = lbfgs(
        fun,
        torch.zeros(nf, d, dtype=torch.float64),
        tol=1e-8,
        max_iter=500,
        precond=lambda v, idx: torch.einsum("fij,fj->fi", h_inv[idx], v),
    )
    plain = lbfgs(fun, torch.zeros(nf, d, dtype=torch.float64), tol=1e-8, max_iter=500)
    assert res.converged.all()
    # the preconditioner pays off where conditioning is bad (without it, 500 iterations may not even suffice)
    assert res.n_iter[2] < plain.n_iter[2]  # (a run that did not converge stopped at max_iter, above res's)
    for i in range(nf):  # reference: damped Newton in float64 numpy, to machine precision

        def f_g_h(w, ai=a[i], bi=b[i]):
            z = ai @ w
            sig = 1 / (1 + np.exp(-z))
            return (
                np.sum(np.logaddexp(0, z) - bi * z) + 0.5 * w @ w,
                ai.T @ (sig - bi) + w,
                ai.T @ (ai * (sig * (1 - sig))[:, None]) + np.eye(d),
            )

        w = np.zeros(d)
        for _ in range(100):
            f0, g0, h0 = f_g_h(w)
            step, t = np.linalg.solve(h0, g0), 1.0
            # near the minimum f changes by less than its rounding: a full Newton step is then taken
            while f_g_h(w - t * step)[0] > f0 + 64 * np.finfo(float).eps * abs(f0) and t > 1e-8:
                t /= 2
            w = w - t * step
        assert np.abs(f_g_h(w)[1]).max() < 1e-8
        # |Δw| <= ‖∇‖₂ / (smallest curvature, 1) on each side: sqrt(8) (1e-8 + 1e-8)
        np.testing.assert_allclose(res.x[i].numpy(), w, atol=6e-8)


def test_fewer_samples_than_features_matches_newton(rng):
    """n < d (the preconditioner works in the n-dimensional span of the samples and with the penalty
    alone on the rest): the same minimiser as the Newton solver."""
    n, d, k = 60, 100, 3
    y = np.concatenate([np.arange(k).repeat(10), rng.integers(0, k, n - 10 * k)])
    x = (0.3 * rng.normal(size=(k, d))[y] + rng.normal(size=(n, d))) * np.logspace(-1, 1, d) + 3.0
    lams = np.logspace(-1, 2, 3)
    ours = P.LogisticCV(alphas=lams, tol=1e-8, dtype="float64").fit(x, y)
    assert ours.cv_converged_.all() and ours.converged_
    ref = _newton(ours.C_).fit(x, y)
    np.testing.assert_allclose(ours.predict_proba(x), ref.predict_proba(x), atol=1e-6)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-5 * max(1.0, np.abs(ref.coef_).max()))
