"""Hyper-ResNet: generated kernels vs naive per-kernel hypernetworks, per-sample descriptors,
frozen weights, gradients to the descriptor, descriptor errors."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from invfast import backend
from invfast.models import HyperResNet, create


def _small(depth=18, k=2, stem="cifar", seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return HyperResNet(depth, inv_dim=k, stem=stem, width=8).to(dtype)


def _naive_weights(model, i):
    """Per-kernel modules as the paper writes them: block emb Linear(K->16, no bias), then
    Linear(16->32) . ReLU . Linear(32->out*in*kh*kw) for every kernel, called one after another
    (nn.Linear modules run on the model's parameter slices, so gradients reach the packed tensors)."""
    out, j = [], 0
    emb = nn.Linear(model.inv_dim, model.emb_dim, bias=False)
    for b, blk in enumerate(model.blocks):
        e = functional_call(emb, {"weight": model.embed[b]}, (i,))
        for spec in blk.specs:
            lin1 = nn.Linear(model.emb_dim, model.hidden_dim)
            lin2 = nn.Linear(model.hidden_dim, spec.numel, device="meta")
            a, z = model.offsets[j], model.offsets[j + 1]
            h = F.relu(functional_call(lin1, {"weight": model.hid_weight[j], "bias": model.hid_bias[j]}, (e,)))
            w = functional_call(lin2, {"weight": model.out_weight[a:z], "bias": model.out_bias[a:z]}, (h,))
            out.append(w.reshape(*i.shape[:-1], spec.out_ch, spec.in_ch, spec.k, spec.k))
            j += 1
    return out


@pytest.mark.parametrize("depth", [18, 50])
@pytest.mark.parametrize("shape", [(2,), (1, 2), (3, 2)])
def test_generated_kernels_match_naive(depth, shape, rng):
    model = _small(depth)
    i = torch.from_numpy(rng.random(shape)).float()
    got = model.generate_weights(i)
    ref = _naive_weights(model, i)
    assert len(got) == len(ref) == model.num_kernels
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["auto", "reference"])
def test_generated_kernel_gradients_match_naive(mode, rng):
    model = _small(18, dtype=torch.float64)
    i_a = torch.from_numpy(rng.random((3, 2))).requires_grad_(True)
    i_b = i_a.detach().clone().requires_grad_(True)
    probes = [torch.randn(w.shape, dtype=torch.float64) for w in _naive_weights(model, i_b.detach())]
    with backend.use(mode):
        loss_a = sum((w * p).sum() for w, p in zip(model.generate_weights(i_a), probes))
    params = [model.embed, model.hid_weight, model.hid_bias, model.out_weight, model.out_bias]
    grads_a = torch.autograd.grad(loss_a, params + [i_a])
    loss_b = sum((w * p).sum() for w, p in zip(_naive_weights(model, i_b), probes))
    grads_b = torch.autograd.grad(loss_b, params + [i_b])
    for ga, gb in zip(grads_a, grads_b):
        torch.testing.assert_close(ga, gb, atol=1e-9, rtol=1e-9)


def test_counts_resnet50_layout():
    m = HyperResNet(50, inv_dim=2, stem="imagenet", width=8)
    assert m.num_kernels == 52  # 16 bottlenecks x 3 + 4 downsamples
    # at width 64 this is 23.45M generated weights; at width 8 the channel counts scale by 1/8
    assert m.num_generated == sum(c.numel for c in m.specs)
    assert m.out_weight.shape == (m.num_generated, 32)
    assert m.feature_dim == 8 * 8 * 4


def test_per_sample_descriptors_equal_each_sample_alone(rng):
    model = _small(18).eval()
    x = torch.randn(4, 3, 16, 16)
    i = torch.from_numpy(rng.random((4, 2))).float()
    i[3] = i[1]  # a repeated descriptor takes the dedupe path
    with torch.no_grad():
        batched = model(x, i)
        alone = torch.cat([model(x[b : b + 1], i[b]) for b in range(4)])
    torch.testing.assert_close(batched, alone, atol=1e-4, rtol=1e-4)


def test_per_sample_with_grad_equals_no_grad(rng):
    model = _small(18).eval()
    x = torch.randn(3, 3, 16, 16)
    i = torch.from_numpy(rng.random((3, 2))).float()
    i[2] = i[0]
    with torch.no_grad():
        ref = model(x, i)
    ig = i.clone().requires_grad_(True)
    out = model(x, ig)
    torch.testing.assert_close(out.detach(), ref, atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert ig.grad is not None and bool(torch.isfinite(ig.grad).all()) and float(ig.grad.abs().sum()) > 0


def test_shared_descriptor_equals_repeated_rows(rng):
    model = _small(18).eval()
    x = torch.randn(3, 3, 16, 16)
    i = torch.from_numpy(rng.random(2)).float()
    with torch.no_grad():
        torch.testing.assert_close(model(x, i), model(x, i.expand(3, 2).clone()), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("stem,size", [("cifar", 32), ("imagenet", 64)])
def test_frozen_forward_equals_dynamic(stem, size, rng):
    model = _small(18, stem=stem).eval()
    x = torch.randn(2, 3, size, size)
    i = torch.from_numpy(rng.random(2)).float()
    with torch.no_grad():
        dyn = model(x, i)
        model.freeze_weights(i)
        frozen = model(x)
    torch.testing.assert_close(frozen, dyn, atol=0, rtol=0)
    assert torch.equal(model.frozen_descriptor, i)
    model.unfreeze()
    with pytest.raises(ValueError, match="freeze_weights"):
        model(x)


def test_gradient_reaches_descriptor_and_hypernetwork():
    model = _small(18)
    i = torch.tensor([0.3, 0.7], requires_grad=True)
    model(torch.randn(2, 3, 16, 16), i).pow(2).mean().backward()
    assert float(i.grad.abs().sum()) > 0
    assert float(model.out_weight.grad.abs().sum()) > 0 and float(model.embed.grad.abs().sum()) > 0


def test_descriptor_errors():
    model = _small(18)
    x = torch.randn(2, 3, 16, 16)
    with pytest.raises(ValueError, match=r"K=2"):
        model(x, torch.tensor([0.5, 0.5, 0.5]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        model(x, torch.tensor([1.5, 0.5]))
    with pytest.raises(ValueError, match="descriptors but the image batch"):
        model(x, torch.rand(3, 2))
    with pytest.raises(ValueError, match="one descriptor"):
        model.freeze_weights(torch.rand(2, 2))
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x, torch.tensor([1.5, -0.2]), clamp=True), model(x, torch.tensor([1.0, 0.0])))


def test_state_dict_roundtrip_weights_only(tmp_path, rng):
    model = create("hyper-resnet18-cifar", width=8).eval()
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    other = create("hyper-resnet18-cifar", width=8).eval()
    other.load_state_dict(torch.load(path, weights_only=True))
    x, i = torch.randn(2, 3, 16, 16), torch.from_numpy(rng.random(2)).float()
    with torch.no_grad():
        torch.testing.assert_close(other(x, i), model(x, i), atol=0, rtol=0)
    model.freeze_weights(i)
    assert not any("frozen" in k for k in model.state_dict())


def _loop_over_samples(model, x, i):
    return torch.cat([model(x[b : b + 1], i[b]) for b in range(x.shape[0])])


@pytest.mark.parametrize("per_sample", ["generate", "affine"])
@pytest.mark.parametrize("pattern", ["distinct", "few-groups", "many-groups", "one-group"])
def test_per_sample_formulations_equal_loop_over_samples(per_sample, pattern, rng):
    """Every per-sample path (grouped conv, segments sorted by descriptor, affine) = one sample at a time."""
    model = _small(18).eval()
    model.per_sample = per_sample
    x = torch.randn(6, 3, 16, 16)
    base = torch.from_numpy(rng.random((6, 2))).float()
    rows = {
        "distinct": [0, 1, 2, 3, 4, 5],
        "few-groups": [0, 1, 0, 1, 1, 0],
        "many-groups": [0, 1, 2, 3, 0, 1],
        "one-group": [2] * 6,
    }[pattern]
    i = base[rows]
    with torch.no_grad():
        got = model(x, i)
        ref = _loop_over_samples(model, x, i)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("per_sample", ["generate", "affine"])
def test_per_sample_training_gradients_match_loop(per_sample, rng):
    """Train mode (batch-statistics BatchNorm): gradients to the parameters and to i equal those of
    the per-sample grouped path, for every formulation."""
    x = torch.randn(4, 3, 16, 16)
    i0 = torch.from_numpy(rng.random((4, 2))).float()
    grads = []
    for mode in ("generate", per_sample):
        model = _small(18, dtype=torch.float64).train()
        model.per_sample = mode
        i = i0.double().requires_grad_(True)
        model(x.double(), i).pow(2).mean().backward()
        grads.append([i.grad, model.out_weight.grad, model.embed.grad])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-8, rtol=1e-6)


def test_per_sample_mode_is_checked():
    with pytest.raises(ValueError, match="per_sample"):
        HyperResNet(18, stem="cifar", width=8, per_sample="nope")


def test_frozen_descriptor_serves_eval_without_generating(rng, monkeypatch):
    """In eval under no_grad, forward(x, i) with the frozen descriptor (shared or repeated per sample)
    uses the cache; another descriptor, or a parameter changed in place, regenerates."""
    model = _small(18).eval()
    x = torch.randn(2, 3, 16, 16)
    i = torch.from_numpy(rng.random(2)).float()
    with torch.no_grad():
        model.freeze_weights(i)
        calls = []
        real = model.generate_flat
        monkeypatch.setattr(model, "generate_flat", lambda d: calls.append(d) or real(d))
        ref = model(x)
        torch.testing.assert_close(model(x, i), ref, atol=0, rtol=0)
        torch.testing.assert_close(model(x, i.expand(2, 2).clone()), ref, atol=0, rtol=0)
        assert calls == []
        model(x, 1 - i)
        assert len(calls) == 1
        model.out_bias.add_(1.0)
        model(x, i)
        assert len(calls) == 2
    model(x, i)  # autograd on and trainable parameters: never the detached cache
    assert len(calls) == 3


@pytest.mark.parametrize("per_sample", ["generate", "affine"])
def test_bf16_autocast_end_to_end_cpu(per_sample, rng):
    """bf16 autocast on CPU: forward and backward run, generation stays in the parameters' dtype,
    features are close to float32."""
    model = _small(18).train()
    model.per_sample = per_sample
    x = torch.randn(3, 3, 16, 16)
    i = torch.from_numpy(rng.random((3, 2))).float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x, i)
        out_shared = model(x, i[0])
    assert out.dtype == torch.bfloat16 and out_shared.dtype == torch.bfloat16
    (out.float().pow(2).mean() + out_shared.float().pow(2).mean()).backward()
    assert model.out_weight.grad is not None and model.out_weight.grad.dtype == torch.float32
    assert bool(torch.isfinite(model.out_weight.grad).all())
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(x, i).float()
    with torch.no_grad():
        full = model(x, i)
    torch.testing.assert_close(low, full, atol=0.1 * float(full.abs().max()), rtol=0.05)


def test_bf16_model_generates_in_bf16(rng):
    model = _small(18).to(torch.bfloat16).eval()
    i = torch.from_numpy(rng.random((2, 2))).float()
    flat = model.generate_flat(i.to(torch.bfloat16))
    assert flat.dtype == torch.bfloat16
    ref = model.float().generate_flat(i)
    torch.testing.assert_close(flat.float(), ref, atol=0.05, rtol=0.05)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("per_sample", ["generate", "affine"])
def test_cuda_model_matches_cpu(per_sample, rng):
    model = _small(18).eval()
    model.per_sample = per_sample
    x = torch.randn(4, 3, 16, 16)
    i = torch.from_numpy(rng.random((4, 2))).float()
    with torch.no_grad():
        ref = model(x, i)
        cuda = model.cuda()
        for mode in ("auto", "compiled"):
            with backend.use(mode):
                got = cuda(x.cuda(), i.cuda()).cpu()
            torch.testing.assert_close(got, ref, atol=1e-3, rtol=1e-3)


def test_descriptor_checks_off_the_cpu_never_read_the_device():
    """On a device (meta stands in: it has no values to read) the descriptor checks are device assertions, not a
    host read at every forward; on the CPU the same bad values are one ValueError."""
    from invfast.models._checks import check_descriptor

    for bad in (torch.tensor([1.5, 0.5]), torch.tensor([float("nan"), 0.5])):
        with pytest.raises(ValueError, match=r"\[0, 1\]|NaN"):
            check_descriptor(bad, 2)
        check_descriptor(bad.to("meta"), 2)  # a bool() of a meta tensor would raise here
