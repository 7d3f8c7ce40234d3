"""Every device-sensitive path on every device: "cpu", "guard" (CPU data under the device guard,
tests/device_guard.py: catches tensors created off the data's device without a GPU) and "cuda"
(`pytest -m cuda`, where a GPU exists). Results on the guard must equal the plain CPU ones exactly;
CUDA results are compared with the CPU ones (transforms within 1 grey level or 1e-5 on floats)."""

from __future__ import annotations

import pytest
import torch

from invfast import transforms as T

NAMES = T.TEST_TRANSFORMS


@pytest.fixture(autouse=True)
def _no_tf32(monkeypatch):
    """CUDA comparisons in full float32: cuDNN convolutions default to TF32 (10-bit mantissa) on Ampere+,
    which alone moves a blur or a feature by ~1e-3. Users who enable TF32 get results that are only close."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(old)


def _images(dtype: torch.dtype, seed: int, b: int = 3, h: int = 20, w: int = 24) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u8 = torch.randint(0, 256, (b, 3, h, w), generator=g, dtype=torch.uint8)
    return u8 if dtype == torch.uint8 else u8.to(dtype) / 255.0


def _params(name: str) -> torch.Tensor:
    grid = T.get(name).grid(8)
    return grid[: min(len(grid), 5)]


def _assert_close_images(got: torch.Tensor, want: torch.Tensor, exact: bool) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    got, want = got.cpu(), want.cpu()
    if exact:
        assert torch.equal(got, want)
    elif want.dtype == torch.uint8:
        assert (got.to(torch.int16) - want.to(torch.int16)).abs().max() <= 1
    else:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=["u8", "f32"])
@pytest.mark.parametrize("name", NAMES)
def test_transform_on_device(device, name, dtype):
    x = _images(dtype, seed=len(name))
    p = _params(name)
    want = T.get(name).apply(x, p)
    xd = x.to(device.device)
    for pd in {p.device: p, device.device: p.to(device.device)}.values():  # params on either device
        with device.run():
            out = T.get(name).apply(xd, pd)
        device.check(out)
        _assert_close_images(out, want, exact=device.name != "cuda")


# ----------------------------------------------------------------------------------------------
# pretraining policies (incl. the amortised switches): the same CPU-generator seed gives the same
# parameters and views on every device; a generator on the data's device also works

POLICIES = ["default", "spatial", "appearance", "solarize-default", ["crop", "jitter", "blur"], ["flip", "grayscale"]]


@pytest.mark.parametrize("name", POLICIES, ids=lambda n: n if isinstance(n, str) else "+".join(n))
def test_policy_on_device(device, name):
    from invfast.transforms import policy

    pol = policy(name, size=16, p_blur=0.5)
    x = _images(torch.uint8, seed=7, b=6, h=20, w=22)
    want1, want2 = pol(x, torch.Generator().manual_seed(3))
    with device.run():
        got1, got2 = pol(x.to(device.device), device.generator(3, on="cpu"))
    device.check(got1, got2)
    for got, want in ((got1, want1), (got2, want2)):
        if device.name == "cuda":
            torch.testing.assert_close(got.cpu(), want, atol=2e-4, rtol=0)
        else:
            assert torch.equal(got, want)
    with device.run():  # a generator on the data's device: valid views, its own random stream
        v = pol.view(x.to(device.device), device.generator(3, on="data"))
    device.check(v)
    assert v.shape == (6, 3, 16, 16) and bool(torch.isfinite(v).all())


@pytest.mark.parametrize("descriptor", [[1, 0], [0, 1], [1, 1, 0, 1, 1], [0, 1, 1, 1, 1]])
def test_amortised_policy_on_device(device, descriptor):
    from invfast.transforms import policy_from_descriptor

    pol = policy_from_descriptor(descriptor, size=16)
    x = _images(torch.float32, seed=11, b=5, h=18, w=18)
    want = pol.view(x, torch.Generator().manual_seed(5))
    with device.run():
        got = pol.view(x.to(device.device), device.generator(5))
    device.check(got)
    if device.name == "cuda":
        torch.testing.assert_close(got.cpu(), want, atol=2e-4, rtol=0)
    else:
        assert torch.equal(got, want)


def test_policy_parameters_identical_across_generator_placement(device):
    """The sampled parameters depend only on the CPU generator's seed, never on the data's device."""
    from invfast.transforms import policy

    pol = policy("default", size=16)
    want = pol.sample(8, (20, 24), torch.Generator().manual_seed(9))
    with device.run():
        got = pol.sample(8, (20, 24), device.generator(9))
    for k in want:
        assert torch.equal(got[k].cpu(), want[k]), k


# ----------------------------------------------------------------------------------------------
# measurement maths: FeatureStats, metrics, significance on the data's device, equal to the CPU


def _metric_values(f, ft, y, s_a, s_b):
    import invfast as ivf
    from invfast.metrics import acr

    st = ivf.FeatureStats(f.shape[1], device=f.device).update(f).finalize()
    sc = ivf.invariance_scores(f, ft, st)
    out = {
        "whiten": st.whiten(f),
        "distance": sc["distance"],
        "cosine": sc["cosine"],
        "mahalanobis": ivf.mahalanobis(f, ft[:, 0], st),
        "std_cos": ivf.standardized_cosine(f, ft[:, 0], st),
        "alignment": ivf.alignment(f, ft[:, 0]),
        "uniformity": ivf.uniformity(f),
    }
    scalars = {
        "acr": acr(ft, k=3, block_rows=7),
        "sensitivity": ivf.sensitivity_ratio(f, ft[:, 1], n_pairs=50),
        "cdr": ivf.class_distance_ratio(f, y, block_rows=9),
        "hoeffding": ivf.hoeffding_test(s_a, s_b).mean_diff,
    }
    return out, scalars


def test_metrics_on_device(device, rng):
    n, p, d = 24, 3, 6
    f = torch.from_numpy(rng.normal(size=(n, d))).float()
    ft = f.unsqueeze(1) + 0.3 * torch.from_numpy(rng.normal(size=(n, p, d))).float()
    y = torch.from_numpy(rng.integers(0, 3, size=n))
    s_a, s_b = torch.rand(n) * 0.5, torch.rand(n) * 0.5
    want, want_s = _metric_values(f, ft, y, s_a, s_b)
    dev = device.device
    with device.run():
        got, got_s = _metric_values(f.to(dev), ft.to(dev), y.to(dev), s_a.to(dev), s_b.to(dev))
    for k in want:
        device.check(got[k])
        torch.testing.assert_close(got[k].cpu(), want[k], rtol=1e-5, atol=1e-5, msg=k)
    for k in want_s:
        assert got_s[k] == pytest.approx(want_s[k], rel=1e-6, abs=1e-9), k


# ----------------------------------------------------------------------------------------------
# models


def test_prompt_vit_on_device(device):
    from invfast.models import PromptViT

    torch.manual_seed(0)
    m = PromptViT(dim=16, depth=1, heads=2).eval()
    x = torch.randn(3, 3, 32, 32)
    i = torch.tensor([[0.2, 0.9], [1.0, 0.0], [0.5, 0.5]])
    with torch.no_grad():
        want = m(x, i)
        md = m.to(device.device)
        with device.run():
            got = md(x.to(device.device), i)  # the descriptor may stay on the CPU
    device.check(got)
    torch.testing.assert_close(got.cpu(), want, atol=1e-4 if device.name == "cuda" else 0, rtol=0)


# ----------------------------------------------------------------------------------------------
# pretraining: one MoCo-v2 / SimCLR / AI-MoCo step on the device equals the CPU step (loss within 1e-3
# on CUDA, exactly under the guard), with real policies drawing on a CPU generator


def _method(kind: str):
    from test_pretrain_fixtures import TinyEncoder

    from invfast.pretrain import AmortisedMoCo, MoCoV2, SimCLR
    from invfast.transforms import policy

    torch.manual_seed(0)
    if kind == "mocov2":
        return MoCoV2(TinyEncoder(bn=True), policy("default", size=16), queue_size=16, proj_dim=8)
    if kind == "simclr":
        return SimCLR(TinyEncoder(bn=True), policy("default", size=16), proj_dim=8)
    return AmortisedMoCo(TinyEncoder(k=5, bn=True), descriptors="individual", size=16, queue_size=16, proj_dim=8)


def _step(m, images, seed):
    g = torch.Generator().manual_seed(seed)
    d = m.sample_descriptor(g)
    v1, v2 = m.make_views(images, d, g)
    loss = m.training_loss(v1, v2, d, generator=g)
    loss.backward()
    return loss.detach(), v1


@pytest.mark.parametrize("kind", ["mocov2", "simclr", "ai-moco"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_pretrain_step_on_device(device, kind, channels_last):
    images = _images(torch.uint8, seed=2, b=8, h=20, w=20)
    ref = _method(kind)
    want, _ = _step(ref, images, seed=4)
    m = _method(kind).to(device.device)
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
    with device.run():
        got, v1 = _step(m, images.to(device.device), seed=4)
    tol = 1e-3 if device.name == "cuda" else 1e-5
    assert float(got) == pytest.approx(float(want), abs=tol)
    for (name, p), (_, q) in zip(ref.named_parameters(), m.named_parameters()):
        if p.grad is not None:
            torch.testing.assert_close(q.grad.cpu(), p.grad, atol=tol, rtol=1e-3, msg=name)
    want2, _ = _step(ref, images, seed=5)
    with device.run():
        got2, _ = _step(m, images.to(device.device), seed=5)  # reads the queue written on the device
    device.check(got, v1, got2)
    assert float(got2) == pytest.approx(float(want2), abs=tol)


@pytest.mark.parametrize("kind", ["mocov2", "ai-moco"])
def test_bf16_autocast_step_on_device(device, kind):
    images = _images(torch.uint8, seed=3, b=8, h=20, w=20)
    m = _method(kind).to(device.device)
    with device.run(), torch.autocast(device.device.type, dtype=torch.bfloat16):
        loss, _ = _step(m, images.to(device.device), seed=1)
    device.check(loss)
    assert bool(torch.isfinite(loss))


# ----------------------------------------------------------------------------------------------
# measurement: measure_invariance / measure_real_world with device= give the CPU means (1e-4 on CUDA)


def _measure_net():
    from measure_helpers import small_net

    return small_net(seed=3, dim=6)


@pytest.mark.parametrize("names", [("rotation", "hflip", "blur"), ("crop", "equalize", "hue")], ids=["a", "b"])
def test_measure_invariance_on_device(device, names):
    from invfast import measure_invariance

    x = _images(torch.uint8, seed=5, b=10, h=24, w=24)
    kw = dict(transforms=list(names), grid_size=4, batch_size=4, resize=24, crop=16)
    want = measure_invariance(_measure_net(), x, device="cpu", **kw)
    net = _measure_net()
    with device.run():
        got = measure_invariance(net, x, device=device.device, **kw)
    tol = 1e-4 if device.name == "cuda" else 1e-9
    # distances are O(100-1000) (whitened by a rank-deficient covariance): float32 sums in another order on the
    # GPU move them by ~1e-6 relative (seen on an H200: 471.2316 vs 471.2320), so compare them relatively there
    dist_tol = {"rel": 2e-5} if device.name == "cuda" else {"abs": tol}
    assert list(got.transforms) == list(want.transforms) == list(names)
    for a, b in zip(got.transforms.values(), want.transforms.values()):
        assert a.mean_distance == pytest.approx(b.mean_distance, **dist_tol)
        assert a.mean_cosine == pytest.approx(b.mean_cosine, abs=tol)


def test_measure_equivariance_on_device(device):
    """The per-unit moments, the streamed linear-equivariance sums and the same-equivariance's mapped-back maps
    (a [C, H, W] layer, every element a unit) on the data's device."""
    from invfast import measure_invariance

    x = _images(torch.uint8, seed=7, b=12, h=16, w=16)
    kw = dict(
        transforms=["rotation", "hflip"],
        grid_size=4,
        batch_size=4,
        resize=16,
        layers="0,output",
        units="elements",
        equivariance=True,
    )
    want = measure_invariance(_measure_net(), x, device="cpu", **kw)
    net = _measure_net()
    with device.run():
        got = measure_invariance(net, x, device=device.device, **kw)
    tol = 1e-4 if device.name == "cuda" else 1e-9
    for ly in ("0", "output"):
        for name in ("rotation", "hflip"):
            a, b = got.layers[ly][name], want.layers[ly][name]
            torch.testing.assert_close(a.linear_equivariance, b.linear_equivariance, rtol=tol, atol=tol, equal_nan=True)
            torch.testing.assert_close(
                a.unit_normalized_variance, b.unit_normalized_variance, rtol=tol, atol=tol, equal_nan=True
            )
    assert want.layers["0"]["rotation"].same_equivariance is not None  # conv maps: measured
    torch.testing.assert_close(
        got.layers["0"]["rotation"].unit_same_equivariance,
        want.layers["0"]["rotation"].unit_same_equivariance,
        rtol=tol,
        atol=tol,
        equal_nan=True,
    )


def test_measure_real_world_on_device(device):
    from invfast import measure_real_world

    x = _images(torch.uint8, seed=6, b=12, h=20, w=20)
    groups = torch.arange(12) // 3
    kw = dict(groups=groups, batch_size=5, resize=20, crop=16, pair_block=2)
    want = measure_real_world(_measure_net(), x, device="cpu", **kw)
    net = _measure_net()
    with device.run():
        got = measure_real_world(net, x, device=device.device, **kw)
    tol = 1e-4 if device.name == "cuda" else 1e-9
    (a,), (b,) = got.transforms.values(), want.transforms.values()
    assert a.mean_distance == pytest.approx(b.mean_distance, abs=tol)
    assert a.mean_cosine == pytest.approx(b.mean_cosine, abs=tol)


# ----------------------------------------------------------------------------------------------
# the Trainer on the device: a run stopped after step 5 and resumed from its step-4 checkpoint equals the
# uninterrupted run on the same device (bit-identical; cuDNN asked for deterministic kernels on CUDA)


@pytest.mark.parametrize("kind", ["mocov2", "ai-moco"])
def test_trainer_resume_on_device(device, kind, tmp_path, monkeypatch):
    from invfast.data import ArraySource
    from invfast.pretrain import TrainConfig, Trainer

    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    data = ArraySource(_images(torch.uint8, seed=8, b=32, h=18, w=18))

    def cfg():
        return TrainConfig(
            batch_size=8,
            steps=8,
            size=16,
            lr=0.05,
            checkpoint_every=4,
            log_every=2,
            progress=False,
            device=str(device.device),
        )

    ref, first, resumed = _method(kind), _method(kind), _method(kind)
    with device.run():
        Trainer(ref, data, cfg(), out=tmp_path / "ref").fit()
        Trainer(first, data, cfg(), out=tmp_path / "run").fit(until_step=5)
        t = Trainer(resumed, data, cfg(), out=tmp_path / "run")
        t.fit(resume=True)
    assert t.step == 8
    a, b = ref.state_dict(), resumed.state_dict()
    for k in a:
        device.check(b[k])
        assert torch.equal(a[k], b[k]), k


# ----------------------------------------------------------------------------------------------
# host round trips in the hot loop (CUDA only: torch reports synchronising calls)


def test_key_queue_enqueue_never_syncs(cuda_device):
    from invfast.pretrain.key_queue import KeyQueue

    q = KeyQueue(16, 4, n_queues=2, generator=torch.Generator().manual_seed(0)).to(cuda_device)
    keys = torch.randn(4, 4, device=cuda_device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            q.enqueue(keys, 1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert q.ptr.tolist() == [0, 4]
    torch.testing.assert_close(q.keys[1, 0:4], torch.nn.functional.normalize(keys, dim=1))


@pytest.mark.parametrize("kind", ["mocov2", "ai-moco"])
def test_training_steps_never_sync(cuda_device, kind):
    """Between log records a training step never waits for the GPU: the loss and the view timings are read one
    step late (invfast.pretrain.step_reads), through pinned memory and events, which torch does not report."""
    from invfast.data import ArraySource
    from invfast.pretrain import TrainConfig, Trainer

    data = ArraySource(_images(torch.uint8, seed=9, b=32, h=18, w=18))
    config = TrainConfig(
        batch_size=8, steps=8, size=16, lr=0.05, checkpoint_every=0, log_every=0, progress=False, device="cuda"
    )
    t = Trainer(_method(kind), data, config)
    t.fit(until_step=2)  # warm-up: cuDNN's plans, the allocator's first blocks
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        t.fit(until_step=7)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert t.step == 7 and t._window.n == 7
