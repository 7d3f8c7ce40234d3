"""NCHW max-pooling through torch's channels-last kernel (invfast.measure.cpu_pooling): the same bits as the plain
pool, NaN and infinities included, against a float64 numpy max-pool too; only where it applies; hooks that the
measurement removes again; safe from several threads at once."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch import nn

from invfast.measure.cpu_pooling import nhwc_max_pools, pools_through_nhwc
from invfast.measure.extractor import FeatureExtractor
from invfast.models import create

POOLS = [
    dict(kernel_size=3, stride=2, padding=1),  # ResNet's stem
    dict(kernel_size=2, stride=2),  # VGG's
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True),
    dict(kernel_size=3, stride=1, padding=1, dilation=2),
    dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=5, stride=3, padding=2, ceil_mode=True),
]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _awkward(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Random values with a NaN, +-inf, a channel of -inf, signed zeros and ties."""
    x = torch.randn(shape, generator=gen).round(decimals=1).to(dtype)  # rounding makes ties
    x[0, 0, 3, 4] = float("nan")
    x[1, 2] = float("-inf")
    x[-1, 1, 5, 5] = float("inf")
    x[-1, -1, :2] = -0.0
    x[0, 1, :, :3] = 0.0
    return x


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns (NaN payloads and the sign of zero compared too)."""
    ints = {8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()]
    return t.contiguous().view(ints)


def _numpy_max_pool(x: np.ndarray, k, s, p, d, ceil_mode: bool) -> np.ndarray:
    """Plain float64 max-pool of x [B, C, H, W] (padding = -inf; NaN wins, as in torch), written out in loops."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = ((v, v) if isinstance(v, int) else v for v in (k, s, p, d))
    b, c, h, w = x.shape

    def out_size(n: int, k_: int, s_: int, p_: int, d_: int) -> int:
        span = n + 2 * p_ - d_ * (k_ - 1) - 1
        o = (-(-span // s_) if ceil_mode else span // s_) + 1
        if ceil_mode and (o - 1) * s_ >= n + p_:  # the last window must start inside the image or left padding
            o -= 1
        return o

    oh, ow = out_size(h, kh, sh, ph, dh), out_size(w, kw, sw, pw, dw)
    out = np.full((b, c, oh, ow), -np.inf)
    for i in range(oh):
        for j in range(ow):
            for a in range(kh):
                for e in range(kw):
                    r, q = i * sh - ph + a * dh, j * sw - pw + e * dw
                    if 0 <= r < h and 0 <= q < w:
                        v = x[:, :, r, q]
                        cur = out[:, :, i, j]
                        out[:, :, i, j] = np.where(np.isnan(v) | (v > cur), v, cur)
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cfg", POOLS, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_same_bits_as_the_plain_pool_and_a_float64_numpy_pool(cfg, dtype):
    gen = torch.Generator().manual_seed(hash((str(dtype), str(cfg))) % 2**31)
    x = _awkward((3, 5, 17, 20), dtype, gen)
    plain = nn.MaxPool2d(**cfg)
    hooked = nn.MaxPool2d(**cfg)
    handles = nhwc_max_pools(hooked)
    assert len(handles) == 2
    with torch.inference_mode():
        want, got = plain(x), hooked(x)
    assert got.is_contiguous() and got.shape == want.shape
    assert torch.equal(_bits(got), _bits(want))
    ref = _numpy_max_pool(x.double().numpy(), cfg["kernel_size"], cfg["stride"], cfg.get("padding", 0),
                          cfg.get("dilation", 1), cfg.get("ceil_mode", False))  # fmt: skip
    np.testing.assert_array_equal(got.double().numpy(), ref)


def test_applies_only_to_nchw_cpu_floats_that_autograd_does_not_record():
    x = torch.rand(2, 3, 8, 8)
    assert pools_through_nhwc(x)
    assert not pools_through_nhwc(x.contiguous(memory_format=torch.channels_last))  # converted already
    assert not pools_through_nhwc(x[0])  # unbatched
    assert not pools_through_nhwc(x[..., ::2])  # not contiguous
    assert not pools_through_nhwc((x * 255).to(torch.uint8))
    assert not pools_through_nhwc(torch.rand(2, 1, 1, 1))  # NCHW and channels-last at once: nothing to gain
    assert not pools_through_nhwc(x.clone().requires_grad_())
    with torch.no_grad():
        assert pools_through_nhwc(x.clone().requires_grad_())


def test_training_pools_and_channels_last_inputs_keep_their_own_path():
    """A pool that autograd records keeps torch's path (same gradients, routed to the first maximum); a
    channels-last input comes out channels-last as it would without the hooks."""
    gen = torch.Generator().manual_seed(1)
    x = torch.relu(torch.randn(2, 4, 9, 9, generator=gen))  # zeros: ties
    plain, hooked = nn.MaxPool2d(3, 2, 1), nn.MaxPool2d(3, 2, 1)
    nhwc_max_pools(hooked)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = torch.randn(2, 4, 5, 5, generator=gen)
    (plain(a) * g).sum().backward()
    (hooked(b) * g).sum().backward()
    assert torch.equal(a.grad, b.grad)
    xc = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        out = hooked(xc)
        assert out.is_contiguous(memory_format=torch.channels_last) == plain(xc).is_contiguous(
            memory_format=torch.channels_last
        )


def test_pools_that_return_indices_are_left_alone_and_hooks_come_off():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2, return_indices=True))
    assert nhwc_max_pools(model) == []
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.MaxPool2d(2), nn.ReLU(), nn.MaxPool2d(2))
    handles = nhwc_max_pools(model)
    assert len(handles) == 4
    for h in handles:
        h.remove()
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_hooks_run_before_the_models_own_so_those_see_nchw():
    pool = nn.MaxPool2d(2)
    seen = []
    pool.register_forward_hook(lambda m, a, out: seen.append(out.is_contiguous()))
    nhwc_max_pools(pool)
    with torch.inference_mode():
        pool(torch.rand(2, 3, 8, 8))
    assert seen == [True]


def test_several_threads_at_once():
    """Two threads pool at once through the same hooks, each its own inputs: every output is right."""
    pool = nn.MaxPool2d(3, 2, 1)
    nhwc_max_pools(pool)
    gen = torch.Generator().manual_seed(2)
    xs = [torch.randn(4, 8, 16, 16, generator=gen) for _ in range(8)]
    want = [torch.nn.functional.max_pool2d(x, 3, 2, 1) for x in xs]
    got: list = [None] * len(xs)

    def work(i0: int) -> None:
        with torch.inference_mode():
            for _ in range(20):
                for i in range(i0, len(xs), 2):
                    got[i] = pool(xs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(torch.equal(g, w) and g.is_contiguous() for g, w in zip(got, want))


@pytest.mark.parametrize("layers", [None, ["stem.pool", "layer1"]], ids=["output", "pool-tapped"])
def test_the_extractor_gives_the_models_own_bits_and_gives_the_model_back(layers):
    """On the CPU the measurement's extractor pools through the hooks: features equal to the plain model's bit
    for bit (a tapped pool included), and close() leaves the user's model without them."""
    torch.manual_seed(0)
    model = create("resnet18", width=8).eval()
    x = torch.rand(6, 3, 48, 48)
    with torch.inference_mode():
        want = model(x)
        stem = model.stem(x)
    ex = FeatureExtractor(model, torch.device("cpu"), normalize=False, layers=layers, split_forward=False)
    assert model.stem.pool._forward_pre_hooks
    with torch.inference_mode():
        got = ex.features(x)
    ex.close()
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    if layers is None:
        assert torch.equal(got["output"], want)
    else:
        assert torch.equal(got["stem.pool"], stem.mean((2, 3)))
