"""The fused policy-view op (csrc/augment: CPU kernel, the CUDA kernels' per-pixel maths) against the torch
policy path, its torch reference and a float64 numpy implementation (colorsys for the hue), on fresh random
parameters; FusedPolicy against Policy; the CUDA tier against the reference where a GPU exists."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest
import torch

import invfast.backend as backend
from invfast import dispatch
from invfast.constants import LUMA_WEIGHTS
from invfast.ops import augment as aug
from invfast.transforms import functional as Fn
from invfast.transforms.fused import FusedPolicy, view_matrix
from invfast.transforms.policies import policy

compiled = pytest.mark.skipif(
    "augment_views" not in backend.compiled_ops(), reason="compiled core without augment_views"
)
GREY = 1.0 / 255.0


def _random_params(rng, B: int):
    """Random masks/factors/orders of the op, with the torchvision ranges of the Default policy."""
    t = lambda a: torch.from_numpy(np.asarray(a))  # noqa: E731
    f = np.column_stack([rng.uniform(0.6, 1.4, (B, 3)), rng.uniform(-0.1, 0.1, B)])
    return dict(
        jitter=t(rng.random(B) < 0.8),
        factors=t(f),
        order=t(np.argsort(rng.random((B, 4)), axis=1)),
        grayscale=t(rng.random(B) < 0.3),
        blur=t(rng.random(B) < 0.6),
        sigma=t(rng.uniform(0.1, 2.0, B)),
        solarize=t(rng.random(B) < 0.5),
    )


def _random_matrix(rng, B: int, H: int, W: int, S: int) -> torch.Tensor:
    m = np.zeros((B, 2, 3))
    m[:, 0, 0] = rng.uniform(0.3, 2.0, B) * rng.choice([-1, 1], B)
    m[:, 1, 1] = rng.uniform(0.3, 2.0, B)
    m[:, 0, 1] = rng.normal(0, 0.1, B)
    m[:, 0, 2] = np.where(m[:, 0, 0] < 0, W - 1, 0) + rng.uniform(-3, 3, B)
    m[:, 1, 2] = rng.uniform(-3, H / 2, B)
    return torch.from_numpy(m)


# ----------------------------------------------------------------------------------------------
# float64 numpy reference of the op (independent: loops, colorsys, np.pad reflect)


def _np_view(img: np.ndarray, m: np.ndarray, S: int, p: dict, b: int, thr: float, mean, std) -> np.ndarray:
    C, H, W = img.shape
    x = np.zeros((3, S, S))
    for yy in range(S):
        for xx in range(S):
            sx, sy = m[0, 0] * xx + m[0, 1] * yy + m[0, 2], m[1, 0] * xx + m[1, 1] * yy + m[1, 2]
            x0, y0 = int(np.floor(sx)), int(np.floor(sy))
            fx, fy = sx - x0, sy - y0
            for ny, wy in ((y0, 1 - fy), (y0 + 1, fy)):
                for nx, wx in ((x0, 1 - fx), (x0 + 1, fx)):
                    if 0 <= nx < W and 0 <= ny < H:
                        x[:, yy, xx] += wx * wy * img[:, ny, nx]
    lw = np.asarray(LUMA_WEIGHTS).reshape(3, 1, 1)
    if bool(p["jitter"][b]):
        f = p["factors"][b].numpy()
        for op in p["order"][b].tolist():
            if op == 0:
                x = np.clip(x * f[0], 0, 1)
            elif op == 1:
                x = np.clip(f[1] * x + (1 - f[1]) * (x * lw).sum(0).mean(), 0, 1)
            elif op == 2:
                x = np.clip(f[2] * x + (1 - f[2]) * (x * lw).sum(0, keepdims=True), 0, 1)
            else:
                for yy in range(S):
                    for xx in range(S):
                        h, s, v = colorsys.rgb_to_hsv(*x[:, yy, xx])
                        x[:, yy, xx] = colorsys.hsv_to_rgb((h + f[3]) % 1.0, s, v)
    if bool(p["grayscale"][b]):
        x = np.repeat((x * lw).sum(0, keepdims=True), 3, axis=0)
    if bool(p["blur"][b]):
        sig = float(p["sigma"][b])
        R = min(int(3 * sig + 0.5), S - 1)
        k = np.exp(-0.5 * (np.arange(-R, R + 1) / sig) ** 2)
        k /= k.sum()
        pad = np.pad(x, ((0, 0), (R, R), (R, R)), mode="reflect")
        h = sum(k[i] * pad[:, :, i : i + S] for i in range(2 * R + 1))
        x = sum(k[i] * h[:, i : i + S, :] for i in range(2 * R + 1))
    if bool(p["solarize"][b]):
        x = np.where(x >= thr, 1 - x, x)
    return (x - np.asarray(mean).reshape(3, 1, 1)) / np.asarray(std).reshape(3, 1, 1)


@compiled
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_compiled_views_match_numpy_float64(dtype, rng):
    B, H, W, S = 5, 13, 17, 9
    img = torch.from_numpy(rng.integers(0, 256, (B, 3, H, W)).astype(np.uint8))
    x = img if dtype == torch.uint8 else img.float() / 255
    p = _random_params(rng, B)
    m = _random_matrix(rng, B, H, W, S)
    mean, std = tuple(rng.uniform(0.3, 0.6, 3)), tuple(rng.uniform(0.2, 0.3, 3))
    with backend.use("compiled"):
        y = aug.augment_views(x, m, (S, S), threshold=0.5, mean=mean, std=std, **p)
    assert y.shape == (B, 3, S, S) and y.dtype == torch.float32
    std_min = min(std)
    for b in range(B):
        ref = _np_view(img[b].double().numpy() / 255, m[b].numpy(), S, p, b, 0.5, mean, std)
        err = np.abs(y[b].double().numpy() - ref).max() * std_min  # back in [0, 1] units
        assert err < 1e-4, (b, err)


@compiled
@pytest.mark.parametrize(
    "out_dtype,channels_last", [(torch.float32, True), (torch.bfloat16, False), (torch.bfloat16, True)]
)
def test_compiled_views_match_reference_in_every_layout(out_dtype, channels_last, rng):
    B, H, W, S = 7, 31, 26, 20
    img = torch.from_numpy(rng.integers(0, 256, (B, 3, H, W)).astype(np.uint8))
    p = _random_params(rng, B)
    m = _random_matrix(rng, B, H, W, S)
    kw = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), dtype=out_dtype, channels_last=channels_last)
    with backend.use("compiled"):
        y = aug.augment_views(img, m, (S, S), **p, **kw)
    with backend.use("reference"):
        r = aug.augment_views(img, m, (S, S), **p, **kw)
    assert y.dtype == out_dtype and y.shape == (B, 3, S, S)
    assert y.is_contiguous(memory_format=torch.channels_last) == channels_last
    tol = 1e-4 if out_dtype == torch.float32 else 2.0**-7 * 10  # bf16: one rounding of values up to ~2.6
    assert (y.float() - r.float()).abs().max() <= tol


@compiled
def test_opcheck_augment_views():
    B = 3
    img = (torch.rand(B, 3, 12, 14) * 255).to(torch.uint8)
    m = torch.tensor([[1.1, 0.1, 0.5], [0.0, 0.9, 1.0]], dtype=torch.float64).repeat(B, 1, 1)
    mask = torch.tensor([True, False, True])
    args = (
        img,
        m,
        8,
        9,
        mask,
        torch.rand(B, 4) + 0.5,
        torch.argsort(torch.rand(B, 4), 1),
        mask,
        mask,
        torch.rand(B, dtype=torch.float64) + 0.2,
        mask,
        0.5,
        torch.zeros(3),
        torch.ones(3),
        torch.float32,
        True,
    )
    torch.library.opcheck(torch.ops.invfast.augment_views, args)


@compiled
def test_order_must_be_a_permutation():
    img = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    m = torch.tensor([[1.0, 0, 0], [0, 1.0, 0]]).repeat(2, 1, 1)
    with pytest.raises(RuntimeError, match="permutation"):
        aug.augment_views(
            img,
            m,
            (8, 8),
            jitter=torch.ones(2, dtype=torch.bool),
            factors=torch.ones(2, 4),
            order=torch.zeros(2, 4, dtype=torch.int64),
        )


def test_bad_inputs_name_the_problem():
    img = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"matrix must be \[B, 2, 3\]"):
        aug.augment_views(img, torch.zeros(1, 2, 3), (4, 4))
    with pytest.raises(TypeError, match="bfloat16"):
        aug.augment_views(img, torch.zeros(2, 2, 3), (4, 4), dtype=torch.float16)
    with pytest.raises(ValueError, match="sigma"):
        aug.augment_views(img, torch.zeros(2, 2, 3), (4, 4), blur=torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError, match="RGB"):
        aug.augment_views(img[:, :1], torch.zeros(2, 2, 3), (4, 4))


# ----------------------------------------------------------------------------------------------
# FusedPolicy against the torch Policy (same parameters), within one grey level before normalisation

POLICY_NAMES = ["default", "spatial", "appearance", "solarize-default", ["flip", "jitter", "blur"]]


@pytest.mark.parametrize("name", POLICY_NAMES, ids=lambda n: n if isinstance(n, str) else "+".join(n))
@pytest.mark.parametrize("in_dtype", [torch.uint8, torch.float32])
def test_fused_policy_matches_torch_policy(name, in_dtype, rng):
    B, H, W, S = 12, int(rng.integers(30, 60)), int(rng.integers(30, 60)), 24
    img = torch.from_numpy(rng.integers(0, 256, (B, 3, H, W)).astype(np.uint8))
    if in_dtype == torch.float32:
        img = img.float() / 255
    tp = policy(name, size=S, normalize=False, p_solarize=0.5)
    fp = FusedPolicy(tp)
    g = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    params = tp.sample(B, (H, W), g)
    with backend.use("reference"):  # the torch ops (under auto the Policy itself runs the fused kernel on CPU)
        want = tp.apply(Fn.to_float(img), params)
    got = fp.apply(img, params)
    assert got.shape == want.shape == (B, 3, S, S)
    assert (got - want).abs().max() <= GREY
    with backend.use("reference"):
        ref = fp.apply(img, params)
    assert (ref - want).abs().max() <= GREY


def test_fused_policy_normalised_views_and_sampling_match(rng):
    """Same seed, same views as the torch Policy (its sampler), normalised, bf16 channels_last output."""
    B, H, W = 6, 40, 48
    img = torch.from_numpy(rng.integers(0, 256, (B, 3, H, W)).astype(np.uint8))
    tp = policy("default", size=16)
    fp = FusedPolicy(policy("default", size=16), dtype=torch.bfloat16, channels_last=True)
    seed = int(rng.integers(1 << 30))
    with backend.use("reference"):
        t1, t2 = tp(img, torch.Generator().manual_seed(seed))
    f1, f2 = fp(img, torch.Generator().manual_seed(seed))
    assert f1.dtype == torch.bfloat16 and f1.is_contiguous(memory_format=torch.channels_last)
    std = torch.tensor(tp.config.std).view(1, 3, 1, 1)
    for t, f in ((t1, f1), (t2, f2)):
        # bf16 keeps 8 bits: compare in [0, 1] units with its rounding on top of the grey level
        assert ((f.float() - t) * std).abs().max() <= GREY + 2.0**-8 * 2.7 * std.max()


def test_view_matrix_is_the_policy_crop_map():
    """The [B, 2, 3] map sends each output pixel to the source point the torch policy samples."""
    tp = policy("spatial", size=10)
    params = tp.sample(4, (30, 40), torch.Generator().manual_seed(0))
    params["flip"] = torch.tensor([True, False, True, False])
    m = view_matrix(tp.config, params, (30, 40))
    box = params["crop"]
    A, b = Fn.crop_box_affine(box[:, 0], box[:, 1], box[:, 2], box[:, 3], (10, 10))
    A[:, 0, 0] = torch.where(params["flip"], -A[:, 0, 0], A[:, 0, 0])
    want = Fn.affine_coords(A, b, (10, 10)).double()  # [B, 10, 10, 2]
    u = torch.arange(10, dtype=torch.float64)
    sx = m[:, 0, 0, None, None] * u.view(1, 1, 10) + m[:, 0, 1, None, None] * u.view(1, 10, 1) + m[:, 0, 2, None, None]
    sy = m[:, 1, 0, None, None] * u.view(1, 1, 10) + m[:, 1, 1, None, None] * u.view(1, 10, 1) + m[:, 1, 2, None, None]
    assert torch.allclose(torch.stack([sx, sy], -1), want, atol=1e-4)


def test_cuda_kernels_serve_where_measured_faster(monkeypatch):
    """The augment family's CUDA rows are defaults because a GPU run measured them faster than the references
    (the evidence file's cuda records); auto takes them exactly where a CUDA kernel is built."""
    ops = ("warp_affine", "warp_coords", "augment_views")
    monkeypatch.delenv(dispatch.CUDA_KERNELS_ENV, raising=False)
    with backend.use("auto"):
        for op in ops:
            e = dispatch.entry(op, "cuda")
            assert e.default and "NVIDIA H200" in e.evidence, e.evidence
            assert e.auto == e.available
        monkeypatch.setenv(dispatch.CUDA_KERNELS_ENV, "1")
        assert all(dispatch.entry(op, "cuda").opted_in for op in ops)
    with backend.use("reference"):
        assert not any(dispatch.use_kernel(op, "cuda", backend.mode()) for op in ops)


def test_fused_policy_rejects_other_dtypes():
    with pytest.raises(TypeError, match="bfloat16"):
        FusedPolicy(policy("default"), dtype=torch.float16)
    with pytest.raises(TypeError, match="wraps a torch policy"):
        FusedPolicy(policy("default").config)


# ----------------------------------------------------------------------------------------------
# CUDA tier: the compiled kernels (opted in) against the torch reference on the GPU


@pytest.mark.cuda
def test_cuda_views_match_reference(cuda_device, rng, monkeypatch):
    if (
        "augment_views" not in backend.compiled_ops()
        or not torch.ops.invfast.augment_views.default.has_kernel_for_dispatch_key("CUDA")
    ):
        pytest.skip("core built without the CUDA augment kernels")
    monkeypatch.setenv(dispatch.CUDA_KERNELS_ENV, "1")
    B, H, W, S = 16, 70, 90, 56
    img = torch.from_numpy(rng.integers(0, 256, (B, 3, H, W)).astype(np.uint8)).to(cuda_device)
    p = {k: v.to(cuda_device) for k, v in _random_params(rng, B).items()}
    m = _random_matrix(rng, B, H, W, S).to(cuda_device)
    for out_dtype, cl in ((torch.float32, False), (torch.bfloat16, True)):
        y = aug.augment_views(img, m, (S, S), **p, dtype=out_dtype, channels_last=cl)
        with backend.use("reference"):
            r = aug.augment_views(img, m, (S, S), **p, dtype=out_dtype, channels_last=cl)
        tol = 1e-4 if out_dtype == torch.float32 else 2.0**-8 * 2
        assert y.device == img.device and (y.float() - r.float()).abs().max() <= tol
    x = torch.from_numpy(rng.integers(0, 256, (3, 3, 20, 24)).astype(np.uint8)).to(cuda_device)
    mats = torch.tensor([[[-1.0, 0, 23], [0, 1, 0]], [[0.9, 0.2, 1.3], [-0.1, 1.1, -0.7]]], dtype=torch.float64)
    fill = torch.tensor([10.0, 20.0, 30.0])
    y = aug.warp_affine(x, mats.to(cuda_device), 20, 24, fill)
    with backend.use("reference"):
        r = aug.warp_affine(x, mats.to(cuda_device), 20, 24, fill)
    assert torch.equal(y[:, 0], x.flip(-1)) and (y.int() - r.int()).abs().max() <= 1


def test_policy_backend_fused_is_the_fused_policy():
    p = policy("spatial", size=12, backend="fused")
    assert isinstance(p, FusedPolicy) and p.config == policy("spatial", size=12).config
    with pytest.raises(ValueError, match="'fused'"):
        policy("spatial", backend="nope")


@pytest.mark.parametrize("mode", ["auto", "reference"])
@pytest.mark.parametrize("name", ["default", "appearance", "solarize-default"])
def test_fused_policy_runs_on_the_images_device(name, mode, device):
    """Every tensor the fused path (kernel or reference) creates lands on the images' device (cpu, the
    device guard, cuda)."""
    img = (torch.rand(4, 3, 40, 36, generator=torch.Generator().manual_seed(0)) * 255).to(torch.uint8).to(device.device)
    fp = FusedPolicy(policy(name, size=16))
    with device.run(), backend.use(mode):
        v1, v2 = fp(img, generator=device.generator(0))
    device.check(v1, v2)
    assert v1.shape == (4, 3, 16, 16) and torch.isfinite(v1).all()
