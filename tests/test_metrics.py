import numpy as np
import pytest
import torch
from scipy.spatial.distance import mahalanobis as scipy_mahalanobis
from scipy.spatial.distance import pdist

import invfast as ivf
from invfast import backend

needs_core = pytest.mark.skipif(not ivf.backend_info()["cpp"], reason="compiled core not built")


def _features(rng, n, p, d, noise=0.5):
    base = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) / np.sqrt(d) + rng.normal(size=d)
    t = base[:, None, :] + noise * rng.normal(size=(n, p, d))
    return base, t


def _numpy_scores(stats, f_ref, f_t):
    """float64 numpy reference: explicit Σ_λ⁻¹ through scipy, cosine of C⁻¹-whitened vectors."""
    cov = stats.cov_.numpy()
    vi = np.linalg.inv(cov)
    mean = stats.mean.numpy()
    chol = np.linalg.cholesky(cov)
    n, p, _ = f_t.shape
    dist = np.array([[scipy_mahalanobis(f_ref[i], f_t[i, j], vi) for j in range(p)] for i in range(n)])
    za = np.linalg.solve(chol, (f_ref - mean).T).T
    zb = np.linalg.solve(chol, (f_t.reshape(n * p, -1) - mean).T).T.reshape(n, p, -1)
    cos = (za[:, None] * zb).sum(-1) / (np.linalg.norm(za, axis=-1)[:, None] * np.linalg.norm(zb, axis=-1))
    return dist, cos


@pytest.mark.parametrize("n,p,d", [(40, 3, 8), (64, 5, 32), (12, 4, 48)])  # the last has D > N
@pytest.mark.parametrize("mode", ["auto", "reference"])
def test_scores_match_scipy(rng, n, p, d, mode):
    f_ref, f_t = _features(rng, n, p, d)
    # the compiled path gets float32 features: give numpy the same rounded values
    f_ref, f_t = f_ref.astype(np.float32).astype(np.float64), f_t.astype(np.float32).astype(np.float64)
    stats = ivf.FeatureStats().update(torch.from_numpy(f_ref)).finalize()
    dist_np, cos_np = _numpy_scores(stats, f_ref, f_t)
    with backend.use(mode):
        out = ivf.invariance_scores(
            torch.from_numpy(f_ref).float(), torch.from_numpy(f_t).float(), stats, precision="float64"
        )
        out32 = ivf.invariance_scores(torch.from_numpy(f_ref).float(), torch.from_numpy(f_t).float(), stats)
    np.testing.assert_allclose(out["distance"].numpy(), dist_np, rtol=1e-5)
    np.testing.assert_allclose(out["cosine"].numpy(), cos_np, rtol=1e-5, atol=1e-6)
    # float32 whitening (the default fast path): error grows with the condition number of C
    tol = max(1e-5, 30 * np.finfo(np.float32).eps * np.linalg.cond(stats.chol_.numpy()))
    np.testing.assert_allclose(out32["distance"].numpy(), dist_np, rtol=tol)
    np.testing.assert_allclose(out32["cosine"].numpy(), cos_np, rtol=tol, atol=tol)


@needs_core
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_pair_scores_equal_reference(rng, dtype):
    z_ref = torch.from_numpy(rng.normal(size=(33, 70))).to(dtype)
    z_t = torch.from_numpy(rng.normal(size=(33, 9, 70))).to(dtype)
    shift = torch.from_numpy(rng.normal(size=70)).to(dtype)
    z_t[0, 0] = z_ref[0]  # identical pair: distance exactly 0, cosine 1
    z_t[1, 1] = shift  # zero vector after centring: cosine defined as 0
    d_c, c_c = torch.ops.invfast.pair_scores(z_ref, z_t, shift)
    d_r, c_r = backend.reference("pair_scores")(z_ref, z_t, shift)
    # independent float64 numpy
    a = z_ref.double().numpy() - shift.double().numpy()
    b = z_t.double().numpy() - shift.double().numpy()
    d_np = np.linalg.norm(a[:, None] - b, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        c_np = np.nan_to_num(
            (a[:, None] * b).sum(-1) / (np.linalg.norm(a, axis=-1)[:, None] * np.linalg.norm(b, axis=-1))
        )
    np.testing.assert_allclose(d_c.double().numpy(), d_np, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-6)
    np.testing.assert_allclose(c_c.double().numpy(), c_np, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-6)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(d_c, d_r, **tol)
    torch.testing.assert_close(c_c, c_r, **tol)
    assert d_c[0, 0] == 0 and abs(float(c_c[0, 0]) - 1) < 1e-6 and c_c[1, 1] == 0


def test_mahalanobis_and_cosine_wrappers(rng):
    f_ref, f_t = _features(rng, 30, 1, 6)
    stats = ivf.FeatureStats.from_features(torch.from_numpy(f_ref))
    d = ivf.mahalanobis(torch.from_numpy(f_ref), torch.from_numpy(f_t[:, 0]), stats)
    c = ivf.standardized_cosine(torch.from_numpy(f_ref), torch.from_numpy(f_t[:, 0]), stats)
    assert d.shape == (30,) and c.shape == (30,) and d.dtype == torch.float64
    dist_np, cos_np = _numpy_scores(stats, f_ref, f_t)
    np.testing.assert_allclose(d.numpy(), dist_np[:, 0], rtol=1e-9)
    np.testing.assert_allclose(c.numpy(), cos_np[:, 0], rtol=1e-9, atol=1e-12)


def test_any_square_root_of_precision_gives_same_scores(rng):
    # SPEC §1.2: every G with G Gᵀ = Σ⁻¹ gives the same norms and cosines; check with the symmetric root.
    f_ref, f_t = _features(rng, 50, 2, 5)
    stats = ivf.FeatureStats.from_features(torch.from_numpy(f_ref))
    w, v = np.linalg.eigh(stats.cov_.numpy())
    g = v @ np.diag(w**-0.5) @ v.T
    za = (f_ref - stats.mean.numpy()) @ g
    zb = (f_t - stats.mean.numpy()) @ g
    cos = (za[:, None] * zb).sum(-1) / (np.linalg.norm(za, axis=-1)[:, None] * np.linalg.norm(zb, axis=-1))
    out = ivf.invariance_scores(torch.from_numpy(f_ref), torch.from_numpy(f_t), stats)
    np.testing.assert_allclose(out["cosine"].numpy(), cos, rtol=1e-8)
    np.testing.assert_allclose(out["distance"].numpy(), np.linalg.norm(za[:, None] - zb, axis=-1), rtol=1e-8)


@needs_core
def test_opcheck_pair_scores(rng):
    z_ref = torch.from_numpy(rng.normal(size=(4, 6))).requires_grad_()
    z_t = torch.from_numpy(rng.normal(size=(4, 3, 6))).requires_grad_()
    shift = torch.from_numpy(rng.normal(size=6)).requires_grad_()
    torch.library.opcheck(torch.ops.invfast.pair_scores.default, (z_ref, z_t, shift))
    assert torch.autograd.gradcheck(torch.ops.invfast.pair_scores, (z_ref, z_t, shift))
    torch.library.opcheck(torch.ops.invfast.sqdist_logsumexp.default, (z_t[0].detach(), z_ref.detach(), 1, 2.0))


@pytest.mark.parametrize("mode", ["auto", "reference"])
def test_gradcheck_invariance_scores(rng, mode):
    f_ref = torch.from_numpy(rng.normal(size=(5, 4))).requires_grad_()
    f_t = torch.from_numpy(rng.normal(size=(5, 3, 4))).requires_grad_()
    stats = ivf.FeatureStats.from_features(torch.from_numpy(rng.normal(size=(20, 4))))

    def fn(a, b):
        out = ivf.invariance_scores(a, b, stats)
        return out["distance"], out["cosine"]

    with backend.use(mode):
        assert torch.autograd.gradcheck(fn, (f_ref, f_t))


def test_invariance_scores_bad_inputs(rng):
    stats = ivf.FeatureStats.from_features(torch.randn(20, 4))
    good_ref, good_t = torch.randn(6, 4), torch.randn(6, 3, 4)
    cases = [
        ((torch.randn(5, 4), good_t), ValueError, "N=5"),
        ((good_ref, torch.randn(6, 3, 5)), ValueError, "D=4 but f_t has D=5"),
        ((torch.randn(6, 4, 1), good_t), ValueError, "f_ref must have 2 dimensions"),
        ((good_ref, torch.randn(6, 0, 4)), ValueError, "P=0"),
        ((good_ref.long(), good_t), TypeError, "floating dtype"),
        ((good_ref, torch.full((6, 3, 4), float("nan"))), ValueError, "NaN"),
        ((torch.randn(6, 5), torch.randn(6, 3, 5)), ValueError, "stats were accumulated with D=4"),
    ]
    for args, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            ivf.invariance_scores(*args, stats)
    with pytest.raises(ValueError, match="not finalized"):
        ivf.invariance_scores(good_ref, good_t, ivf.FeatureStats().update(torch.randn(9, 4)))
    with pytest.raises(TypeError, match="FeatureStats"):
        ivf.invariance_scores(good_ref, good_t, None)
    bad_t = good_t.clone()
    bad_t[0, 0, 0] = float("nan")
    out = ivf.invariance_scores(good_ref, bad_t, stats, nan_policy="propagate")
    assert torch.isnan(out["distance"][0, 0]) and torch.isfinite(out["distance"][1:]).all()


def test_aggregate_excludes_identity():
    s = torch.tensor([[0.0, 1.0, 3.0], [0.0, 3.0, 5.0]])
    agg = ivf.aggregate_scores(s, identity=torch.tensor([True, False, False]))
    assert agg["mean"] == pytest.approx(3.0)
    assert agg["identity_mean"] == 0.0
    torch.testing.assert_close(agg["per_param"], torch.tensor([0.0, 2.0, 4.0], dtype=torch.float64))
    torch.testing.assert_close(agg["per_image"], torch.tensor([2.0, 4.0], dtype=torch.float64))
    s[1, 2] = float("nan")
    with pytest.raises(ValueError, match="nan_policy='omit'"):
        ivf.aggregate_scores(s)
    assert ivf.aggregate_scores(s, nan_policy="omit")["mean"] == pytest.approx(7 / 5)
    assert ivf.aggregate_scores(s, torch.tensor([True, False, False]), nan_policy="omit")["mean"] == pytest.approx(
        7 / 3
    )
    with pytest.raises(ValueError, match="every parameter is marked identity"):
        ivf.aggregate_scores(s, torch.tensor([True, True, True]), nan_policy="omit")


def _uniformity_np(x, t):
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    d2 = pdist(x, "sqeuclidean")
    v = -t * d2
    m = v.max()
    return m + np.log(np.exp(v - m).mean())


@pytest.mark.parametrize("mode", ["auto", "reference"])
@pytest.mark.parametrize("block", [None, 7])
def test_uniformity_matches_pdist(rng, mode, block):
    x = rng.normal(size=(150, 9))
    with backend.use(mode):
        u = ivf.uniformity(torch.from_numpy(x), t=2.0, block_rows=block)
        u32 = ivf.uniformity(torch.from_numpy(x).float(), t=2.0, block_rows=block)
    ref = _uniformity_np(x, 2.0)
    assert float(u) == pytest.approx(ref, rel=1e-10)
    assert float(u32) == pytest.approx(ref, rel=1e-5)


@pytest.mark.parametrize("block", [None, 7])
def test_uniformity_through_the_per_row_kernel_matches_pdist(rng, monkeypatch, block):
    """The route a device without the all-pairs kernel takes (CUDA): row blocks through sqdist_logsumexp, chosen
    by the ops layer from the dispatch table. Taken here on the CPU by hiding the all-pairs kernel."""
    from invfast import dispatch
    from invfast.ops import invariance as ops_inv

    if "sqdist_logsumexp" not in backend.compiled_ops():
        pytest.skip("the compiled core is not built")
    calls = []
    real = ops_inv.pairwise_logsumexp_by_rows
    monkeypatch.setattr(ops_inv, "pairwise_logsumexp_by_rows", lambda *a: calls.append(1) or real(*a))
    real_available = dispatch.kernel_available
    monkeypatch.setattr(
        dispatch, "kernel_available", lambda op, dev: op != "pairwise_logsumexp" and real_available(op, dev)
    )
    x = rng.normal(size=(150, 9))
    u = ivf.uniformity(torch.from_numpy(x), t=2.0, block_rows=block)
    u32 = ivf.uniformity(torch.from_numpy(x).float(), t=2.0, block_rows=block)
    assert len(calls) == 2
    ref = _uniformity_np(x, 2.0)
    assert float(u) == pytest.approx(ref, rel=1e-10)
    assert float(u32) == pytest.approx(ref, rel=1e-5)
    with backend.use("reference"):  # where the table does not pick the per-row kernel: the reference
        assert float(ivf.uniformity(torch.from_numpy(x), t=2.0)) == pytest.approx(ref, rel=1e-10)
    assert len(calls) == 2


def test_uniformity_large_scale_is_stable(rng):
    # t large enough that naive exp underflows for every pair: the log-sum-exp must stay finite
    x = torch.from_numpy(rng.normal(size=(60, 3)))
    u = ivf.uniformity(x, t=500.0)
    ref = _uniformity_np(x.numpy(), 500.0)
    assert np.isfinite(float(u)) and float(u) == pytest.approx(ref, rel=1e-9)
    with pytest.raises(ValueError, match="at least 2 samples"):
        ivf.uniformity(torch.randn(1, 3))


def _near_duplicates(rng, n: int = 120, d: int = 32) -> np.ndarray:
    """float32 rows with exact duplicates and near-duplicates (relative offsets 1e-6..1e-3, squared distances
    down to ~1e-12 after normalisation): there ||a||^2 + ||b||^2 - 2 a.b cancels in float32."""
    q = n // 4
    base = rng.normal(size=(q, d))
    near = base + 10.0 ** rng.uniform(-6, -3, size=(q, 1)) * rng.normal(size=(q, d))
    x = np.concatenate([base, base, near, rng.normal(size=(n - 3 * q, d))])
    return x[rng.permutation(n)].astype(np.float32)


def _float64_sqdist(x: np.ndarray) -> np.ndarray:
    """Exact float64 squared distances of the L2-normalised rows, from the differences (no cancellation)."""
    f = x.astype(np.float64)
    f = f / np.linalg.norm(f, axis=1, keepdims=True)
    return ((f[:, None] - f[None]) ** 2).sum(-1)


@pytest.mark.parametrize("t", [2.0, 7.0])
def test_uniformity_float32_within_the_stated_bound(rng, t):
    """float32 input: the GEMM's error bound 2 t gamma_D against float64 scipy, D large enough to matter."""
    n, d = 400, 96
    x = rng.normal(size=(n, d)).astype(np.float32) + 0.3
    u = float(ivf.uniformity(torch.from_numpy(x), t=t))
    ref = _uniformity_np(x.astype(np.float64), t)
    gamma = d * 2.0**-24 / (1 - d * 2.0**-24)
    assert abs(u - ref) <= 2 * t * gamma
    assert abs(u - ref) <= 2e-6 * abs(ref)  # typical: far inside the worst-case bound


@pytest.mark.parametrize("mode", ["auto", "reference"])
def test_uniformity_near_duplicates_is_exact(rng, mode):
    """Large t: the near-duplicate pairs dominate the log-sum-exp, and their squared distances (~1e-12..1e-6)
    must be exact, not the float32 cancellation noise (~1e-7) of the GEMM identity."""
    x = _near_duplicates(rng)
    n = x.shape[0]
    d2 = _float64_sqdist(x)[np.triu_indices(n, 1)]
    t = 1e4
    v = -t * d2
    ref = v.max() + np.log(np.exp(v - v.max()).sum() * 2 / (n * (n - 1)))
    with backend.use(mode):
        u = float(ivf.uniformity(torch.from_numpy(x), t=t, block_rows=17))
    assert u == pytest.approx(ref, abs=1e-9)


def test_pair_block_rows_keep_memory_linear():
    """N = 100 000, D = 8: the block of inner products is O(block_rows * N) bytes, never N^2."""
    from invfast.metrics import pair_block_rows

    n = 100_000
    for itemsize in (4, 8):
        rows = pair_block_rows(n, itemsize)
        assert 1 <= rows <= 256 and rows * n * itemsize <= 32 << 20
    assert pair_block_rows(2000, 4) == 256 and pair_block_rows(10, 4) == 10 and pair_block_rows(10**9, 8) == 1


@needs_core
def test_uniformity_kernel_allocates_one_block(rng):
    """The compiled uniformity's tiles (the profiler's per-op memory records; one per thread, each a share of
    block_rows) hold at most one [block_rows, N] tile together, and all allocations stay far below the N x N
    matrix, whatever the thread count."""
    n, d, block = 3000, 8, 40
    x = torch.from_numpy(rng.normal(size=(n, d)).astype(np.float32))
    with (
        backend.use("compiled"),
        torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        ivf.uniformity(x, block_rows=block)
    allocs = [e.self_cpu_memory_usage for e in prof.events() if e.self_cpu_memory_usage > 0]
    share = (block // torch.get_num_threads()) * n * 4  # one thread's tile
    tiles = [a for a in allocs if a >= share]
    assert tiles and max(allocs) <= block * n * 4  # the tiles were seen, none above block_rows x N
    assert sum(tiles) <= block * n * 4
    assert sum(allocs) <= block * n * 4 + 4 * n * d * 8 < n * n * 4 / 20


@pytest.mark.parametrize("mode", ["auto", "reference"])
def test_knn_is_exact_on_near_duplicates(rng, mode):
    """The k nearest rows equal a float64 numpy search (stable sort: ties to the lower index), with exact
    duplicates and near-duplicates whose float32 GEMM distances would be cancellation noise."""
    from invfast.ops.invariance import knn_sqdist

    x = _near_duplicates(rng)
    d2 = _float64_sqdist(x)
    np.fill_diagonal(d2, np.inf)
    want = np.argsort(d2, axis=1, kind="stable")[:, :5]
    with backend.use(mode):
        dist, idx = knn_sqdist(torch.from_numpy(x), 5, True, 13)
    assert np.array_equal(idx.numpy(), want)
    np.testing.assert_allclose(dist.numpy(), np.take_along_axis(d2, want, 1), rtol=1e-9, atol=1e-15)


def test_acr_near_duplicate_views(rng):
    """Views of different images closer than float32 cancellation noise: ACR still equals float64 numpy."""
    n, c, d = 30, 3, 24
    centres = rng.normal(size=(n, 1, d))
    spread = 10.0 ** rng.uniform(-6, -4, size=(n, c, 1))
    v = (centres + spread * rng.normal(size=(n, c, d))).astype(np.float32)
    v[1::2] = v[0::2] + 1e-5 * rng.normal(size=v[0::2].shape).astype(np.float32)  # image pairs nearly coincide
    for k in (1, 2, 4):
        assert ivf.acr(torch.from_numpy(v), k=k) == pytest.approx(_acr_np(v.astype(np.float64), k))
    with pytest.raises(ValueError, match="block_rows"):
        ivf.acr(torch.from_numpy(v), k=1, block_rows=0)


@needs_core
def test_opcheck_all_pairs_ops(rng):
    x = torch.from_numpy(rng.normal(size=(23, 5)).astype(np.float32))
    torch.library.opcheck(torch.ops.invfast.pairwise_logsumexp.default, (x, 2.0, True, 4))
    torch.library.opcheck(torch.ops.invfast.knn_sqdist.default, (x.double(), 3, False, 5))
    for bad, msg in (
        (torch.zeros(3, 2, 2), r"\[N, D\]"),
        (torch.zeros(4, 2, dtype=torch.int64), "float32 or float64"),
        (torch.full((4, 2), float("nan")), "NaN"),
    ):
        with pytest.raises(RuntimeError, match=msg):
            torch.ops.invfast.pairwise_logsumexp(bad, 2.0, True, 4)
    with pytest.raises(RuntimeError, match="k must be in"):
        torch.ops.invfast.knn_sqdist(x, 23, True, 4)


@needs_core
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_all_pairs_ops_refuse_one_nonfinite_value_anywhere(rng, dtype, threads):
    """The kernels' own check (in their row pass, no torch op): one NaN / +Inf / -Inf at a random place of a
    matrix whose rows the row pass splits over threads is named; huge finite float64 values are not refused."""
    n, d = int(rng.integers(9000, 12000)), int(rng.integers(2, 6))  # above the row pass's one-thread grain
    x = torch.from_numpy(rng.normal(size=(n, d))).to(dtype)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for bad in (float("nan"), float("inf"), float("-inf")):
            y = x.clone()
            y[int(rng.integers(n)), int(rng.integers(d))] = bad
            with pytest.raises(RuntimeError, match="pairwise_logsumexp: x contains NaN/Inf"):
                torch.ops.invfast.pairwise_logsumexp(y, 2.0, True, 64)
            with pytest.raises(RuntimeError, match="knn_sqdist: x contains NaN/Inf"):
                torch.ops.invfast.knn_sqdist(y, 3, False, 64)  # refused in the row pass, before any block
        if dtype == torch.float64:  # squares overflow, values finite: accepted as before (the sum is inf)
            huge = torch.from_numpy(rng.normal(size=(50, d))) * 1e200
            assert torch.ops.invfast.pairwise_logsumexp(huge, 2.0, True, 8).isfinite()
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("normalize", [True, False])
def test_all_pairs_kernel_equals_float64_reference(rng, normalize):
    """The compiled all-pairs ops (where the table runs them) against their float64 torch references on float64
    input, several block sizes: the log-sum-exp to 1e-12, the neighbours exactly."""
    from invfast.ops.invariance import knn_sqdist, pairwise_logsumexp

    x = torch.from_numpy(rng.normal(size=(int(rng.integers(40, 90)), int(rng.integers(2, 40)))))
    t = float(rng.uniform(0.5, 5.0)) / (1.0 if normalize else x.shape[1])
    with backend.use("reference"):
        want = pairwise_logsumexp(x, t, normalize, 11)
        wd, wi = knn_sqdist(x, 4, normalize, 11)
    for block in (1, 16, 1000):
        assert float(pairwise_logsumexp(x, t, normalize, block)) == pytest.approx(float(want), rel=1e-12)
        d, i = knn_sqdist(x, 4, normalize, block)
        assert torch.equal(i, wi)
        torch.testing.assert_close(d, wd, rtol=1e-12, atol=1e-14)


def test_uniformity_gradient_flows_through_the_reference(rng):
    """Inputs that require grad take the float64 torch reference (the kernel has no backward)."""
    x = torch.from_numpy(rng.normal(size=(12, 4))).requires_grad_()
    assert torch.autograd.gradcheck(lambda a: ivf.uniformity(a, t=1.5, block_rows=5), (x,))


def test_alignment(rng):
    a, b = rng.normal(size=(40, 6)), rng.normal(size=(40, 6))
    an = a / np.linalg.norm(a, axis=1, keepdims=True)
    bn = b / np.linalg.norm(b, axis=1, keepdims=True)
    for alpha in (1.0, 2.0):
        ref = (np.linalg.norm(an - bn, axis=1) ** alpha).mean()
        assert float(ivf.alignment(torch.from_numpy(a), torch.from_numpy(b), alpha)) == pytest.approx(ref, rel=1e-12)
    with pytest.raises(ValueError, match="same shape"):
        ivf.alignment(torch.randn(3, 2), torch.randn(4, 2))


def _acr_np(v, k):
    n, c, d = v.shape
    f = v.reshape(n * c, d)
    f = f / np.linalg.norm(f, axis=1, keepdims=True)
    owner = np.repeat(np.arange(n), c)
    dist = np.linalg.norm(f[:, None] - f[None], axis=-1)
    np.fill_diagonal(dist, np.inf)
    nn = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return (owner[nn] != owner[:, None]).mean()


@pytest.mark.statistical
def test_acr(rng):
    v = rng.normal(size=(20, 4, 8))
    for k in (1, 3):
        assert ivf.acr(torch.from_numpy(v), k=k, block_rows=13) == pytest.approx(_acr_np(v, k))
    centres = rng.normal(size=(10, 1, 16)) * 10
    tight = centres + 0.01 * rng.normal(size=(10, 5, 16))
    assert ivf.acr(torch.from_numpy(tight), k=4) == 0.0
    with pytest.raises(ValueError, match="k must be"):
        ivf.acr(torch.from_numpy(tight), k=50)


@pytest.mark.statistical
def test_sensitivity_ratio(rng):
    x = torch.from_numpy(rng.normal(size=(300, 5)))
    assert ivf.sensitivity_ratio(x, x.clone(), n_pairs=500) == 0.0
    noisy = x + 0.1 * torch.randn_like(x)
    r = ivf.sensitivity_ratio(x, noisy, n_pairs=5000, seed=3)
    assert r == ivf.sensitivity_ratio(x, noisy, n_pairs=5000, seed=3)
    # E‖ε‖ with ε ~ N(0, 0.01 I_5) over E‖x_a − x_b‖ with x ~ N(0, I_5): ratio ≈ 0.1 / sqrt(2)
    assert r == pytest.approx(0.1 / np.sqrt(2), rel=0.1)
    shuffled = x[torch.randperm(300)]
    assert ivf.sensitivity_ratio(x, shuffled, n_pairs=5000) == pytest.approx(1.0, rel=0.1)
    with pytest.raises(ValueError, match="at least 2 samples"):
        ivf.sensitivity_ratio(x[:1], x[:1])


def test_sensitivity_pairs_are_a_derangement():
    # a constant-per-row feature equal to the row index: the denominator is E|a - b| with b != a
    n = 7
    x = torch.arange(n, dtype=torch.float64)[:, None]
    for seed in range(20):
        r = ivf.sensitivity_ratio(x, x + 1.0, n_pairs=50, seed=seed)
        assert np.isfinite(r) and r <= 1.0 / 1.0  # denominator >= 1 when every pair is distinct


@pytest.mark.statistical
def test_class_distance_ratio(rng):
    x = rng.normal(size=(40, 3))
    y = rng.integers(0, 3, size=40)
    d = np.linalg.norm(x[:, None] - x[None], axis=-1)
    same = (y[:, None] == y[None]) & ~np.eye(40, dtype=bool)
    diff = y[:, None] != y[None]
    ref = d[diff].mean() / d[same].mean()
    assert ivf.class_distance_ratio(torch.from_numpy(x), torch.from_numpy(y), block_rows=9) == pytest.approx(
        ref, rel=1e-12
    )
    with pytest.raises(ValueError, match="at least 2 classes"):
        ivf.class_distance_ratio(torch.from_numpy(x), torch.zeros(40, dtype=torch.long))
    with pytest.raises(ValueError, match="labels but there are"):
        ivf.class_distance_ratio(torch.from_numpy(x), torch.zeros(4, dtype=torch.long))
