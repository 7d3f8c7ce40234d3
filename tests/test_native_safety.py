"""No crash in native code: every model invfast builds trains channels-last on the CPU, on the
instruction sets oneDNN picks on AVX2-only and AVX-512 machines; the strided 1x1 workaround
(:mod:`invfast.models.convolution`) equals ``F.conv2d``.

The channels-last runs go in subprocesses: the bug they guard against (uxlfoundation/oneDNN#6035)
segfaults, aborts or hangs the process instead of raising. ``ONEDNN_MAX_CPU_ISA=AVX2`` makes oneDNN
behave as on an AVX2-only CPU (where the tiny preset crashed) on any x86 machine.
"""

import os
import platform
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from invfast.models import list_models
from invfast.models.convolution import Conv2d, channels_last_hazards, conv2d, onednn_rtus_hazard
from invfast.pretrain.memory_layout import use_channels_last

CPU = torch.device("cpu")

#: every model at its smallest preset width (the tiny preset's 4; Prompt-ViT at its smallest useful
#: size), the largest input its stem takes: the out-of-bounds write grows with the image
_TRAIN_EVERY_MODEL = textwrap.dedent(
    """
    import sys, torch
    from invfast.models import create, list_models
    torch.manual_seed(0)
    for name in list_models():
        kw = dict(img_size=32, patch=4, dim=12, depth=1, heads=3) if "vit" in name else dict(width=4)
        if name.startswith("hyper-resnet50"):
            kw["width"] = 2  # bottleneck expansion: 8 channels into the first downsample, still under the block
        size = 32 if "vit" in name else (64 if "cifar" in name else 128)
        print(name, end=" ", flush=True)
        m = create(name, **kw).eval()  # BatchNorm on running statistics: well-conditioned gradients
        x = torch.rand(8, 3, size, size)
        r = torch.randn(8, m.feature_dim)
        amortised = name.startswith(("hyper", "prompt"))
        i = torch.tensor([1.0, 0.0]) if amortised else None

        def grads(model, inp):
            model.zero_grad(set_to_none=True)
            out = model(inp, i) if amortised else model(inp)
            (out * r).sum().backward()
            return [p.grad.clone() for p in model.parameters() if p.grad is not None]

        ref = grads(m, x)
        m = m.to(memory_format=torch.channels_last)
        xc = x.contiguous(memory_format=torch.channels_last)
        for _ in range(3):
            got = grads(m, xc)
        worst = max(float((g - r).abs().max() / r.abs().max().clamp_min(1e-12)) for g, r in zip(got, ref))
        print(f"{worst:.1e}", flush=True)
        assert worst < 1e-3, f"{name}: channels-last gradients differ from contiguous ones by {worst:.1e}"
    print("done")
    """
)


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


@pytest.mark.parametrize("isa", ["default", "AVX2"])
def test_every_model_trains_channels_last_on_the_cpu(isa):
    if isa != "default" and not _x86():
        pytest.skip("ONEDNN_MAX_CPU_ISA=AVX2 exists on x86 only")
    env = dict(os.environ, OMP_NUM_THREADS="2")
    if isa != "default":
        env["ONEDNN_MAX_CPU_ISA"] = isa
    try:
        run = subprocess.run(
            [sys.executable, "-c", _TRAIN_EVERY_MODEL], env=env, capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired as exc:
        done = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"hung (ISA {isa}) after:\n{done}")
    last = run.stdout.strip().splitlines()[-1:] or ["(none)"]
    assert run.returncode == 0 and last == ["done"], (
        f"ISA {isa}: exit {run.returncode} at the model line {last[0]!r}\n{run.stdout}\n{run.stderr[-3000:]}"
    )
    assert len(run.stdout.strip().splitlines()) == len(list_models()) + 1


def _rand(*shape, rng, cl=False):
    t = torch.from_numpy(rng.random(shape))
    return t.contiguous(memory_format=torch.channels_last) if cl and t.dim() == 4 else t


@pytest.mark.parametrize(
    "cin,groups,stride,k,pad", [(4, 1, 2, 1, 0), (6, 2, (2, 3), 1, 0), (8, 1, 1, 1, 0), (4, 1, 2, 3, 1)]
)
@pytest.mark.parametrize("channels_last", [False, True])
def test_conv2d_equals_torch_in_float64(cin, groups, stride, k, pad, channels_last, rng):
    x = _rand(3, cin, 11, 13, rng=rng, cl=channels_last).requires_grad_()
    w = _rand(10, cin // groups, k, k, rng=rng, cl=channels_last).requires_grad_()
    b = _rand(10, rng=rng).requires_grad_()
    got = conv2d(x, w, b, stride, pad, groups)
    want = F.conv2d(x, w, b, stride, pad, 1, groups)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    go = _rand(*want.shape, rng=rng)
    g_got = torch.autograd.grad(got, (x, w, b), go)
    g_want = torch.autograd.grad(want, (x, w, b), go)
    for a, e in zip(g_got, g_want):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


def test_conv2d_matches_a_numpy_pointwise_product(rng):
    """The strided 1x1 case written out: out[b, o, i, j] = sum_c w[o, c] x[b, c, s*i, s*j] + bias[o]."""
    x = _rand(2, 5, 9, 8, rng=rng, cl=True)
    w = _rand(7, 5, 1, 1, rng=rng)
    b = _rand(7, rng=rng)
    xs = x.numpy()[:, :, ::2, ::2]
    want = np.einsum("oc,bcij->boij", w.numpy()[:, :, 0, 0], xs) + b.numpy()[None, :, None, None]
    np.testing.assert_allclose(conv2d(x, w, b, 2).numpy(), want, rtol=1e-12, atol=1e-12)


def test_the_hazard_rule():
    assert onednn_rtus_hazard(4, 1, 2, 0, CPU)
    assert onednn_rtus_hazard(15, (1, 1), (1, 2), (0, 0), CPU)
    assert not onednn_rtus_hazard(16, 1, 2, 0, CPU)  # a whole AVX-512 channel block
    assert not onednn_rtus_hazard(4, 1, 1, 0, CPU)  # stride 1: no reduce-to-unit-stride copy
    assert not onednn_rtus_hazard(4, 3, 2, 1, CPU)  # not a 1x1 kernel
    assert not onednn_rtus_hazard(4, 1, 2, 0, torch.device("meta"))


class _Foreign(nn.Module):
    def __init__(self, conv=nn.Conv2d):
        super().__init__()
        self.stem = conv(3, 4, 3, padding=1)
        self.down = conv(4, 8, 1, stride=2)

    def forward(self, x):
        return self.down(self.stem(x)).mean((2, 3))


def test_a_users_model_with_the_hazard_trains_contiguous_with_a_warning():
    assert channels_last_hazards(_Foreign(), CPU) == ["down"]
    assert channels_last_hazards(_Foreign(Conv2d), CPU) == []
    with pytest.warns(RuntimeWarning, match=r"layer 'down'.*oneDNN#6035"):
        assert use_channels_last(None, CPU, _Foreign()) is False
    with pytest.raises(ValueError, match=r"channels_last=True: layer 'down'"):
        use_channels_last(True, CPU, _Foreign())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert use_channels_last(None, CPU, _Foreign(Conv2d)) is True
        assert use_channels_last(False, CPU, _Foreign()) is False


def test_invfast_models_have_no_hazard():
    from invfast.models import create

    for name in list_models():
        kw = dict(img_size=32, patch=4, dim=12, depth=1, heads=3) if "vit" in name else dict(width=4)
        assert channels_last_hazards(create(name, **kw), CPU) == [], name


def test_conv2d_subclass_keeps_the_state_dict_and_repr():
    torch.manual_seed(0)
    plain = nn.Conv2d(4, 8, 1, stride=2, bias=False)
    ours = Conv2d(4, 8, 1, stride=2, bias=False)
    ours.load_state_dict(plain.state_dict())
    assert repr(ours) == repr(plain)
    x = torch.rand(2, 4, 16, 16).contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(ours(x), plain(x.contiguous()))


def test_the_tiny_preset_runs_where_it_crashed(tmp_path):
    """``invfast reproduce --preset tiny`` end to end as on an AVX2-only CPU (where it died of SIGSEGV in
    ``loss.backward()``), with its stages in worker processes."""
    if not _x86():
        pytest.skip("ONEDNN_MAX_CPU_ISA=AVX2 exists on x86 only")
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "invfast", "reproduce", "--preset", "tiny", "--out", str(tmp_path / "t")]
    run = subprocess.run(
        [*cmd, "--no-progress", "--workers", "2"], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stderr[-3000:]}"
    assert (tmp_path / "t" / "report.md").exists()
