import numpy as np
import pytest
import torch

from invfast import FeatureStats


def _np_stats(x):
    mean = x.mean(0)
    cov = np.cov(x, rowvar=False)
    return mean, cov


@pytest.mark.parametrize("n,d", [(50, 8), (300, 32), (40, 100)])
def test_streaming_matches_numpy(rng, n, d):
    x = rng.normal(size=(n, d)) * rng.uniform(0.1, 5, size=d) + rng.normal(size=d) * 10
    st = FeatureStats()
    for chunk in np.array_split(x, 7):
        st.update(torch.from_numpy(chunk))
    mean, cov = _np_stats(x)
    np.testing.assert_allclose(st.mean.numpy(), mean, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(st.covariance.numpy(), cov, rtol=1e-9, atol=1e-10)
    c = x - mean
    np.testing.assert_allclose(st.m4.item(), ((c * c).sum(1) ** 2).sum(), rtol=1e-9)
    np.testing.assert_allclose(st.m3.numpy(), ((c * c).sum(1)[:, None] * c).sum(0), rtol=1e-8, atol=1e-8)


def test_merge_of_shards_equals_one_pass(rng):
    x = torch.from_numpy(rng.normal(size=(257, 16)) + 3.0)
    one = FeatureStats().update(x)
    shards = [FeatureStats().update(s) for s in torch.tensor_split(x, [10, 11, 100, 200])]
    merged = FeatureStats()
    for s in shards[::-1]:
        merged.merge(s)
    assert merged.n == one.n == 257
    for a, b in [(merged.mean, one.mean), (merged.m2, one.m2), (merged.m3, one.m3), (merged.m4, one.m4)]:
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-9)


def test_ledoit_wolf_matches_sklearn(rng):
    sk = pytest.importorskip("sklearn.covariance")
    x = rng.normal(size=(60, 40)) @ rng.normal(size=(40, 40)) * 0.3
    st = FeatureStats()
    for chunk in np.array_split(x, 3):
        st.update(torch.from_numpy(chunk))
    st.finalize(shrinkage="ledoit-wolf")
    cov_ref, rho_ref = sk.ledoit_wolf(x)
    np.testing.assert_allclose(st.rho_, rho_ref, rtol=1e-9)
    np.testing.assert_allclose(st.cov_.numpy(), cov_ref, rtol=1e-8, atol=1e-12)
    assert st.lambda_ == pytest.approx(rho_ref * np.trace(np.cov(x, rowvar=False, bias=True)) / 40)


def test_trace_shrinkage_makes_rank_deficient_covariance_factor(rng):
    x = torch.from_numpy(rng.normal(size=(20, 64)))  # D > N: rank <= 19
    st = FeatureStats().update(x)
    with pytest.raises(ValueError, match="not positive definite.*eps"):
        st.finalize(shrinkage="none")
    st.finalize()  # default trace shrinkage, eps = 1e-6
    lam = 1e-6 * np.trace(np.cov(x.numpy(), rowvar=False)) / 64
    assert st.lambda_ == pytest.approx(lam, rel=1e-10)
    torch.testing.assert_close(st.chol_ @ st.chol_.T, st.covariance + lam * torch.eye(64, dtype=torch.float64))


def test_whitening_gives_identity_covariance(rng):
    a = rng.normal(size=(12, 12))
    x = torch.from_numpy(rng.normal(size=(4000, 12)) @ a + 5.0)
    st = FeatureStats.from_features(x, shrinkage="none")
    z = st.whiten(x)
    assert z.dtype == torch.float64
    torch.testing.assert_close(torch.cov(z.T), torch.eye(12, dtype=torch.float64), atol=1e-9, rtol=0)
    torch.testing.assert_close(z.mean(0), torch.zeros(12, dtype=torch.float64), atol=1e-9, rtol=0)
    assert st.whiten(x.float()).dtype == torch.float32


@pytest.mark.parametrize("d", [3, 200])
def test_whitener_is_the_inverse_cholesky_factor(rng, d):
    """W = C^-T for the Cholesky factor C of the shrunk covariance, against numpy's float64 inverse."""
    x = rng.normal(size=(3 * d, d)) @ rng.normal(size=(d, d)) + 2.0
    st = FeatureStats.from_features(torch.from_numpy(x), shrinkage="trace", eps=1e-6)
    cov = np.cov(x, rowvar=False)
    cov += 1e-6 * np.trace(cov) / d * np.eye(d)
    want = np.linalg.inv(np.linalg.cholesky(cov)).T
    np.testing.assert_allclose(st.whitener_.numpy(), want, rtol=1e-8, atol=1e-10 * np.abs(want).max())
    assert np.array_equal(np.tril(st.whitener_.numpy(), -1), np.zeros((d, d)))  # upper triangular


def test_save_load_roundtrip(tmp_path, rng):
    x = torch.from_numpy(rng.normal(size=(30, 5)))
    st = FeatureStats().update(x)
    st.save(tmp_path / "s.pt")
    back = FeatureStats.load(tmp_path / "s.pt")
    assert back.n == 30
    torch.testing.assert_close(back.m2, st.m2, rtol=0, atol=0)
    torch.testing.assert_close(back.finalize().chol_, st.finalize().chol_)
    with pytest.raises(FileNotFoundError, match="no FeatureStats file"):
        FeatureStats.load(tmp_path / "missing.pt")


def test_bad_inputs():
    st = FeatureStats()
    with pytest.raises(ValueError, match="at least 2 reference samples"):
        st.finalize()
    st.update(torch.randn(1, 4))
    with pytest.raises(ValueError, match="at least 2"):
        st.finalize()
    with pytest.raises(ValueError, match="D=5"):
        st.update(torch.randn(3, 5))
    with pytest.raises(ValueError, match="NaN"):
        st.update(torch.tensor([[1.0, float("nan"), 0.0, 0.0]]))
    with pytest.raises(TypeError, match="floating dtype"):
        st.update(torch.ones(3, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="2 dimensions"):
        st.update(torch.randn(4))
    with pytest.raises(ValueError, match="shrinkage must be one of"):
        FeatureStats().update(torch.randn(5, 2)).finalize(shrinkage="oas")
    with pytest.raises(ValueError, match="not finalized"):
        FeatureStats().update(torch.randn(5, 2)).whiten(torch.randn(3, 2))
    with pytest.raises(TypeError, match="FeatureStats"):
        FeatureStats().merge("x")


@pytest.mark.parametrize("d", [7, 256, 1030])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_upper_triangular_product_matches_numpy(rng, d, dtype):
    """upper_mm (the whitening product, blocked over the upper triangle on the CPU) against float64 numpy."""
    from invfast.stats import upper_mm

    w = np.triu(rng.normal(size=(d, d)))
    x = rng.normal(size=(d, 13)).T  # 13 rows, not contiguous
    got = upper_mm(torch.from_numpy(np.asarray(x)).to(dtype), torch.from_numpy(w).to(dtype))
    assert got.dtype == dtype and got.shape == (x.shape[0], d)
    tol = 1e-12 if dtype == torch.float64 else 1e-4
    np.testing.assert_allclose(got.double().numpy(), np.asarray(x) @ w, rtol=tol, atol=tol * np.sqrt(d))
    xn = np.asarray(x).copy()
    xn[0, 0] = np.nan  # a NaN feature still reaches the last column (it meets every row of w)
    assert np.isnan(upper_mm(torch.from_numpy(xn).to(dtype), torch.from_numpy(w).to(dtype))[0, -1].item())


def test_upper_triangular_product_keeps_gradients(rng):
    """Scores used as a loss: gradients flow through the whitening product as through a dense mm."""
    from invfast.stats import upper_mm

    w = torch.from_numpy(np.triu(rng.normal(size=(300, 300))))
    x = torch.from_numpy(rng.normal(size=(5, 300))).requires_grad_()
    (g,) = torch.autograd.grad(upper_mm(x, w).square().sum(), x)
    torch.testing.assert_close(g, 2 * (x.detach() @ w) @ w.T)


def _saved_state(rng, n=12, d=5):
    x = torch.from_numpy(rng.standard_t(3, size=(n, d)))  # heavy tails: m4 near its bounds is still valid
    return FeatureStats().update(x).state_dict()


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda s: s.update(n=10**18), "sample count of 1000000000000000000"),
        (lambda s: s["m2"].__setitem__((0, 1), s["m2"][0, 1] + 1.0), "not symmetric"),
        (lambda s: s["m2"].mul_(-1), "negative eigenvalue"),
        (lambda s: s.update(m4=-s["m4"]), "m4 = -"),
        (lambda s: s.update(m4=s["m4"] * 1e3), "outside [tr(m2)²/n, tr(m2)²]"),
        (lambda s: s.update(m4=torch.trace(s["m2"]) ** 2 / s["n"] * 0.5), "outside [tr(m2)²/n, tr(m2)²]"),
        (lambda s: s["m3"].__setitem__(0, torch.sqrt(s["m4"] * s["m2"][0, 0]) * 1.01), "third moment"),
    ],
    ids=["count", "asymmetric", "negative-variance", "negative-m4", "m4-too-large", "m4-too-small", "m3"],
)
def test_impossible_saved_moments_are_refused(edit, words, rng, tmp_path):
    """A FeatureStats file edited or damaged into moments no set of samples has is refused on load (a count of
    1e18 turned a distance of 1.22 into 5e7), naming what is impossible; real states of any size load."""
    state = _saved_state(rng)
    for n in (1, 2, 40):  # real states, small and large, pass every check
        FeatureStats.from_state_dict(_saved_state(rng, n=n))
    edit(state)
    torch.save(state, tmp_path / "s.pt")
    with pytest.raises(ValueError, match="impossible") as e:
        FeatureStats.from_state_dict(state)
    assert words in str(e.value)


@pytest.mark.parametrize("shrinkage", ["trace", "ledoit-wolf", "none"])
def test_constant_features_say_zero_variance_not_shrinkage(shrinkage, rng):
    """Issue 62: a model whose features do not vary (a zero-initialised head) is named as such; more shrinkage, the
    advice for a rank-deficient covariance, cannot help it."""
    row = torch.from_numpy(rng.normal(size=(1, 16)))
    st = FeatureStats().update(row.repeat(12, 1))
    with pytest.raises(ValueError, match=r"zero variance: all 12 reference samples give the same 16-d features") as e:
        st.finalize(shrinkage=shrinkage)
    assert "eps" not in str(e.value) and "\n" not in str(e.value)
    # one varying feature is enough to keep the shrinkage advice where shrinkage is the remedy
    x = row.repeat(12, 1)
    x[:, 0] = torch.from_numpy(rng.normal(size=12))
    with pytest.raises(ValueError, match="not positive definite"):
        FeatureStats().update(x).finalize(shrinkage="none")


def test_constant_features_with_an_explicit_shrinkage_are_whitened_by_it(rng):
    """An explicit λ > 0 defines the whitening (λ I) even for constant features: measured, not refused."""
    st = FeatureStats().update(torch.from_numpy(rng.normal(size=(1, 4))).repeat(5, 1)).finalize(shrinkage=1e-3)
    torch.testing.assert_close(st.chol_ @ st.chol_.T, 1e-3 * torch.eye(4, dtype=torch.float64))
