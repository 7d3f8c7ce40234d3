"""The probes as scikit-learn estimators: scikit-learn's own ``check_estimator`` suite, the
GridSearchCV layout of ``cv_results_``, the exception and warning types, and the 0.1 names that
keep working for one release with a FutureWarning."""

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn", minversion="1.6")  # estimator tags and expected_failed_checks

from sklearn.exceptions import ConvergenceWarning as SkConvergenceWarning  # noqa: E402
from sklearn.exceptions import NotFittedError as SkNotFittedError  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.utils import get_tags  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import invfast.probes as P  # noqa: E402
from invfast.cli import main as cli_main  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

# short grids keep the whole suite (about 160 fits per estimator) to seconds
CHECKED = [
    P.RidgeCV(alphas=[1e-3, 1e-1, 10.0]),
    P.LogisticCV(alphas=[1e-3, 1e-1, 10.0]),
    P.KernelRidgeCV(alphas=[1e-2, 1.0], gammas=[1e-2, 1.0]),
]


@parametrize_with_checks(CHECKED)
def test_check_estimator(estimator, check):
    """scikit-learn's whole suite, no expected failures (LogisticCV's check_fit2d_1feature included: a class
    with fewer members than folds warns, as StratifiedKFold does)."""
    check(estimator)


@pytest.mark.parametrize("est", CHECKED, ids=lambda e: type(e).__name__)
def test_tags_declare_dense_numeric_input(est):
    tags = get_tags(est)
    assert not tags.input_tags.sparse and not tags.input_tags.allow_nan and not tags.input_tags.string
    assert tags.target_tags.required
    assert tags.target_tags.multi_output == (not isinstance(est, P.LogisticCV))


def _fitted(rng):
    x = rng.normal(size=(60, 4))
    y = x @ rng.normal(size=4) + 0.1 * rng.normal(size=60)
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    return (
        x,
        y,
        labels,
        [
            P.RidgeCV(alphas=[1e-2, 1.0, 100.0]).fit(x, y),
            P.LogisticCV(alphas=[1e-2, 1.0, 100.0]).fit(x, labels),
            P.KernelRidgeCV(alphas=[0.1, 1.0], gammas=[0.1, 1.0]).fit(x, y),
        ],
    )


def test_cv_results_has_gridsearch_layout(rng):
    x, y, labels, fitted = _fitted(rng)
    for est, names in zip(fitted, (["alpha"], ["C", "alpha"], ["alpha", "gamma"])):
        res = est.cv_results_
        n = len(res["params"])
        for key in ["mean_test_score", "std_test_score", "rank_test_score"] + [
            f"split{k}_test_score" for k in range(5)
        ]:
            assert key in res
        assert [k[6:] for k in res if k.startswith("param_")] == names
        for key, col in res.items():  # one row per candidate: what pandas.DataFrame(res) needs
            assert len(col) == n and np.ndim(col) == 1, key
        folds = np.stack([res[f"split{k}_test_score"] for k in range(5)], 1)
        np.testing.assert_allclose(res["mean_test_score"], folds.mean(1))
        np.testing.assert_allclose(res["std_test_score"], folds.std(1))
        assert est.best_index_ == int(np.argmin(res["rank_test_score"])) and res["rank_test_score"].min() == 1
        assert est.best_params_ == res["params"][est.best_index_]
        assert est.best_score_ == res["mean_test_score"][est.best_index_]
    ridge, logistic, kernel = fitted
    assert ridge.best_params_ == {"alpha": ridge.alpha_}
    assert logistic.best_params_ == {"C": logistic.C_} and logistic.C_ == 1 / logistic.alpha_
    np.testing.assert_allclose(logistic.cv_results_["param_C"], 1 / logistic.cv_results_["param_alpha"])
    assert kernel.best_params_ == {"alpha": kernel.alpha_, "gamma": kernel.gamma_}
    # the same search through GridSearchCV: same keys, same values
    gs = GridSearchCV(Ridge(), {"alpha": [1e-2, 1.0, 100.0]}, cv=5).fit(x, y)
    for key in ("mean_test_score", "std_test_score", "split0_test_score", "rank_test_score"):
        np.testing.assert_allclose(ridge.cv_results_[key], gs.cv_results_[key], rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(
        ridge.cv_results_["param_alpha"], np.asarray(gs.cv_results_["param_alpha"], dtype=float)
    )
    assert ridge.cv_results_["params"] == gs.cv_results_["params"] and ridge.best_index_ == gs.best_index_


def test_cv_results_loads_into_dataframe(rng):
    pd = pytest.importorskip("pandas")
    _, _, _, fitted = _fitted(rng)
    for est in fitted:
        df = pd.DataFrame(est.cv_results_)
        assert len(df) == len(est.cv_results_["params"])
        assert df.loc[df["rank_test_score"] == 1].index[0] == est.best_index_


def test_rank_ties_follow_gridsearch():
    from scipy.stats import rankdata

    from invfast.probes.cv_results import score_columns

    folds = np.array([[0.5, 0.7], [0.9, 0.9], [0.6, 0.6], [0.9, 0.9], [0.1, 0.2]])
    ranks = score_columns(folds)["rank_test_score"]
    np.testing.assert_array_equal(ranks, rankdata(-folds.mean(1), method="min"))
    assert ranks.dtype == np.int32


def test_feature_names_from_dataframe():
    pytest.importorskip("pandas")
    from sklearn.utils.estimator_checks import check_dataframe_column_names_consistency

    for est in CHECKED:
        check_dataframe_column_names_consistency(type(est).__name__, est)


def test_exception_and_warning_types(rng):
    assert issubclass(P.ConvergenceWarning, SkConvergenceWarning)
    assert issubclass(P.NotFittedError, SkNotFittedError) and not issubclass(P.NotFittedError, RuntimeError)
    x = rng.normal(size=(40, 3))
    y = (x[:, 0] > 0).astype(int)
    with pytest.warns(SkConvergenceWarning):
        P.LogisticCV(alphas=[1e-3], max_iter=1, tol=1e-12).fit(x, y)
    with pytest.warns(P.DataConversionWarning, match="column-vector"):
        m = P.LogisticCV(alphas=[1.0]).fit(x, y[:, None])
    assert m.predict(x).shape == (40,)
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        P.LogisticCV(alphas=[1.0]).fit(x, x[:, 0])
    with pytest.raises(TypeError, match="Sparse data was passed"):
        P.RidgeCV().fit(__import__("scipy.sparse").sparse.csr_matrix(x), x[:, 0])
    with pytest.raises(ValueError, match="numeric regression targets"):
        P.RidgeCV().fit(x, np.array(["a", "b"] * 20))
    r = P.RidgeCV(alphas=[1.0]).fit(x.tolist(), x[:, 0].tolist())  # lists are array-likes
    with pytest.raises(ValueError, match="X has 2 features, but RidgeCV is expecting 3 features"):
        r.predict(x[:, :2])


def test_01_names_are_removed(rng):
    """The 0.1 names were removed in 0.4 (docs/probes.md lists their replacements)."""
    x = rng.normal(size=(50, 3))
    y = x[:, 0] + 0.1 * rng.normal(size=50)
    with pytest.raises(TypeError, match="penalties"):
        P.RidgeCV(penalties=[0.1, 10.0])
    with pytest.raises(TypeError, match="warm_start"):
        P.LogisticCV(warm_start=False)
    assert not hasattr(P, "penalty_grid")
    fitted = P.RidgeCV(alphas=[0.1, 10.0]).fit(x, y)
    assert not hasattr(fitted, "penalty_")
    assert type(fitted.cv_results_) is dict and "mean_score" not in fitted.cv_results_


def test_cli_refuses_string_regression_targets(tmp_path, capsys, rng):
    np.save(tmp_path / "f.npy", rng.normal(size=(30, 4)))
    np.save(tmp_path / "y.npy", np.array(["cat", "dog", "emu"] * 10))
    assert (
        cli_main(
            [
                "probe",
                "--features",
                str(tmp_path / "f.npy"),
                "--targets",
                str(tmp_path / "y.npy"),
                "--task",
                "regression",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "numeric targets" in err[0] and "--task classification" in err[0]
