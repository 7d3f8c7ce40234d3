"""KernelRidgeCV against scikit-learn's KernelRidge, few-shot episodes against naive loops, the CLI."""

import numpy as np
import pytest
from sklearn.compose import TransformedTargetRegressor
from sklearn.kernel_ridge import KernelRidge
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

import invfast.probes as P
from invfast.cli import main as cli_main

pytestmark = pytest.mark.usefixtures("one_thread")


def _sk_kernel_search(alphas, gammas):
    est = TransformedTargetRegressor(
        Pipeline([("s", StandardScaler()), ("k", KernelRidge(kernel="rbf"))]), transformer=StandardScaler()
    )
    return GridSearchCV(est, {"regressor__k__alpha": list(alphas), "regressor__k__gamma": list(gammas)}, cv=5)


@pytest.mark.parametrize("solver", ["eigh", "cholesky"])
@pytest.mark.parametrize("two_targets", [False, True])
def test_kernel_ridge_matches_sklearn(rng, solver, two_targets):
    x = rng.normal(size=(70, 4)) * [1.0, 3.0, 0.5, 10.0] + 4.0
    y = np.stack([np.sin(x[:, 0]) + x[:, 1] / 3, np.cos(x[:, 2])], 1) + 0.05 * rng.normal(size=(70, 2))
    y = y if two_targets else y[:, 0] * 7 + 3
    alphas, gammas = np.logspace(-3, 0, 4), np.logspace(-3, 1, 5)
    ours = P.KernelRidgeCV(alphas=alphas, gammas=gammas, solver=solver).fit(x, y)
    gs = _sk_kernel_search(alphas, gammas).fit(x, y)
    np.testing.assert_allclose(
        ours.cv_results_["mean_test_score"], gs.cv_results_["mean_test_score"], rtol=1e-6, atol=1e-8
    )
    np.testing.assert_allclose(ours.cv_results_["std_test_score"], gs.cv_results_["std_test_score"], atol=1e-7)
    assert ours.alpha_ == gs.best_params_["regressor__k__alpha"]
    assert ours.gamma_ == gs.best_params_["regressor__k__gamma"]
    assert [p["alpha"] for p in ours.cv_results_["params"]] == list(gs.cv_results_["param_regressor__k__alpha"])
    np.testing.assert_array_equal(ours.cv_results_["param_gamma"], gs.cv_results_["param_regressor__k__gamma"])
    np.testing.assert_array_equal(ours.cv_results_["rank_test_score"], gs.cv_results_["rank_test_score"])
    assert ours.best_index_ == gs.best_index_
    np.testing.assert_allclose(ours.predict(x), gs.predict(x), rtol=1e-6, atol=1e-8)
    assert ours.score(x, y) == pytest.approx(gs.score(x, y), rel=1e-8)


def test_kernel_ridge_unstandardised_equals_kernelridge(rng):
    x, y = rng.normal(size=(50, 3)), rng.normal(size=50)
    ours = P.KernelRidgeCV(alphas=[0.5], gammas=[0.3], standardize=False).fit(x, y)
    sk = KernelRidge(alpha=0.5, kernel="rbf", gamma=0.3).fit(x, y)
    np.testing.assert_allclose(ours.dual_coef_, sk.dual_coef_, rtol=1e-8)
    np.testing.assert_allclose(ours.predict(x[:7]), sk.predict(x[:7]), rtol=1e-8, atol=1e-10)


def _class_data(rng, n_cls=8, per=12, d=10):
    y = np.arange(n_cls).repeat(per)
    return rng.normal(size=(n_cls, d))[y] + 0.8 * rng.normal(size=(y.size, d)), y


def test_few_shot_episodes_match_naive_ridge_and_are_reproducible(rng):
    x, y = _class_data(rng)
    res = P.few_shot(x, y, n_way=3, k_shot=2, n_query=4, episodes=12, alpha=0.7, seed=5)
    again = P.few_shot(x, y, n_way=3, k_shot=2, n_query=4, episodes=12, alpha=0.7, seed=5)
    np.testing.assert_array_equal(res.scores, again.scores)
    from invfast.probes.few_shot import sample_episodes

    sup, qry = sample_episodes(y, 3, 2, 4, 12, 5)
    other_sup, other_qry = sample_episodes(y, 3, 2, 4, 12, 6)  # another seed draws other episodes
    assert not np.array_equal(sup, other_sup) and not np.array_equal(qry, other_qry)
    for e in range(12):
        ys = np.arange(3).repeat(2)
        r = Ridge(alpha=0.7).fit(x[sup[e]], np.eye(3)[ys])
        acc = (r.predict(x[qry[e]]).argmax(1) == np.arange(3).repeat(4)).mean()
        assert res.scores[e] == pytest.approx(acc)
        # every episode: distinct classes, support/query of the right class, no overlap
        cls = y[sup[e]].reshape(3, 2)
        assert len(set(cls[:, 0])) == 3 and (cls == cls[:, :1]).all()
        assert (y[qry[e]].reshape(3, 4) == cls[:, :1]).all() and not set(sup[e]) & set(qry[e])
    assert res.mean == pytest.approx(res.scores.mean())
    assert res.ci95 == pytest.approx(1.96 * res.scores.std(ddof=1) / np.sqrt(12))


def test_few_shot_regression_matches_naive_loop(rng):
    x = rng.normal(size=(60, 5))
    y = x @ rng.normal(size=(5, 2)) + 0.3 * rng.normal(size=(60, 2))
    out = P.few_shot(x, y, task="regression", fractions=(0.2, 0.5), splits=6, alpha=2.0, seed=3)
    perm_rng = np.random.default_rng(3)
    for frac in (0.2, 0.5):
        m = int(round(frac * 60))
        for i in range(6):
            p = perm_rng.permutation(60)
            r = Ridge(alpha=2.0).fit(x[p[:m]], y[p[:m]])
            assert out[frac].scores[i] == pytest.approx(r.score(x[p[m:]], y[p[m:]]), rel=1e-9)
    loo = P.few_shot(x, y, task="regression", fractions=(0.5,), splits=3, alpha="loo", seed=3)
    assert np.isfinite(loo[0.5].scores).all()


def test_few_shot_bad_input(rng):
    x, y = _class_data(rng, n_cls=3, per=5)
    with pytest.raises(ValueError, match="classes with"):
        P.few_shot(x, y, n_way=5, k_shot=1, n_query=3)
    with pytest.raises(ValueError, match="task"):
        P.few_shot(x, y, task="ranking")
    with pytest.raises(ValueError, match="train fraction"):
        P.few_shot(x, x[:, 0], task="regression", fractions=(0.01,))
    with pytest.raises(ValueError, match="one class"):
        P.few_shot(x, np.zeros(len(y)))


def test_cli_probe_tables(tmp_path, capsys, rng):
    x, y = _class_data(rng, n_cls=3, per=20, d=6)
    np.save(tmp_path / "f.npy", x.astype(np.float32))
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "r.npy", x[:, :2] @ np.ones((2, 2)) + 0.1 * rng.normal(size=(60, 2)))
    assert (
        cli_main(
            [
                "probe",
                "--features",
                str(tmp_path / "f.npy"),
                "--targets",
                str(tmp_path / "y.npy"),
                "--task",
                "classification",
                "--json",
                str(tmp_path / "o.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "accuracy" in out and "mean per-class accuracy" in out and "±" in out and "C = " in out
    assert (tmp_path / "o.json").exists()
    assert (
        cli_main(
            [
                "probe",
                "--features",
                str(tmp_path / "f.npy"),
                str(tmp_path / "f.npy"),
                "--targets",
                str(tmp_path / "r.npy"),
                "--task",
                "regression",
                "--all",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "R² (mean over targets)" in out and "d = 12 (2 model(s))" in out and "1e+06" in out
    assert (
        cli_main(
            [
                "probe",
                "--features",
                str(tmp_path / "f.npy"),
                "--targets",
                str(tmp_path / "r.npy"),
                "--task",
                "regression",
                "--kernel",
            ]
        )
        == 0
    )
    assert "γ" in capsys.readouterr().out
    np.save(tmp_path / "short.npy", y[:10])
    assert (
        cli_main(
            [
                "probe",
                "--features",
                str(tmp_path / "f.npy"),
                "--targets",
                str(tmp_path / "short.npy"),
                "--task",
                "classification",
            ]
        )
        == 2
    )
    assert "must match" in capsys.readouterr().err
