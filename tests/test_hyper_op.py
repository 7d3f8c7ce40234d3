"""The batched weight-generation op against a naive per-kernel nn.Linear loop."""
import pytest
import torch
from torch import nn

from invfast import backend
from invfast.ops import hyper

compiled = pytest.mark.skipif("hyper_generate" not in backend.compiled_ops(), reason="compiled core without hyper ops")


def _problem(sizes, b, h=32, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    offs = [0]
    for s in sizes:
        offs.append(offs[-1] + s)
    hidden = torch.randn(b, len(sizes), h, generator=g, dtype=dtype)
    linears = []
    for s in sizes:
        lin = nn.Linear(h, s).to(dtype)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(s, h, generator=g, dtype=dtype))
            lin.bias.copy_(torch.randn(s, generator=g, dtype=dtype))
        linears.append(lin)
    weight = torch.cat([lin.weight.detach() for lin in linears]).clone()
    bias = torch.cat([lin.bias.detach() for lin in linears]).clone()
    return hidden, weight, bias, offs, linears


def _naive(hidden, linears):
    return torch.cat([lin(hidden[:, l]) for l, lin in enumerate(linears)], 1)


SIZES = [9, 64 * 3 * 9, 5000, 1, 64 * 64, 0, 700]


@pytest.mark.parametrize("mode", ["auto", "reference"])
@pytest.mark.parametrize("b,h", [(1, 32), (4, 32), (1, 7), (2, 7)])
def test_forward_matches_per_kernel_linear(mode, b, h, rng):
    hidden, weight, bias, offs, linears = _problem(SIZES, b, h=h, seed=int(rng.integers(2**31)))
    with backend.using(mode):
        out = hyper.generate(hidden, weight, bias, offs)
    assert out.shape == (b, offs[-1])
    torch.testing.assert_close(out, _naive(hidden, linears).detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["auto", "reference"])
@pytest.mark.parametrize("b", [1, 3])
def test_gradients_match_per_kernel_linear(mode, b, rng):
    hidden, weight, bias, offs, linears = _problem(SIZES, b, dtype=torch.float64, seed=int(rng.integers(2**31)))
    hidden_a = hidden.clone().requires_grad_(True)
    hidden_b = hidden.clone().requires_grad_(True)
    weight = weight.requires_grad_(True)
    bias = bias.requires_grad_(True)
    g = torch.randn(b, offs[-1], dtype=torch.float64, generator=torch.Generator().manual_seed(int(rng.integers(2**31))))
    with backend.using(mode):
        (hyper.generate(hidden_a, weight, bias, offs) * g).sum().backward()
    (_naive(hidden_b, linears) * g).sum().backward()
    torch.testing.assert_close(hidden_a.grad, hidden_b.grad, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(weight.grad, torch.cat([lin.weight.grad for lin in linears]), atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(bias.grad, torch.cat([lin.bias.grad for lin in linears]), atol=1e-9, rtol=1e-9)


@compiled
def test_compiled_backward_op_matches_reference():
    hidden, weight, bias, offs, _ = _problem(SIZES, 3, dtype=torch.float64, seed=3)
    g = torch.randn(3, offs[-1], dtype=torch.float64)
    got = torch.ops.invfast.hyper_generate_backward(g, hidden, weight, offs)
    ref = hyper.hyper_generate_backward_reference(g, hidden, weight, offs)
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize("mode", ["auto", "reference"])
def test_gradcheck_float64(mode):
    hidden, weight, bias, offs, _ = _problem([2, 7, 0, 3], 2, h=3, dtype=torch.float64, seed=5)
    args = tuple(t.requires_grad_(True) for t in (hidden, weight, bias))
    with backend.using(mode):
        assert torch.autograd.gradcheck(lambda h, w, b: hyper.generate(h, w, b, offs), args)


@compiled
def test_opcheck():
    hidden, weight, bias, offs, _ = _problem([2, 7, 3], 2, h=4, dtype=torch.float64, seed=6)
    for t in (hidden, weight, bias):
        t.requires_grad_(True)
    torch.library.opcheck(torch.ops.invfast.hyper_generate.default, (hidden, weight, bias, offs))
    g = torch.randn(2, 12, dtype=torch.float64)
    torch.library.opcheck(torch.ops.invfast.hyper_generate_backward.default,
                          (g, hidden.detach(), weight.detach(), offs))


def test_bad_inputs():
    hidden, weight, bias, offs, _ = _problem([3, 4], 2, h=5)
    with pytest.raises(ValueError, match="hidden"):
        hyper.generate(hidden[0], weight, bias, offs)
    with pytest.raises(ValueError, match="weight"):
        hyper.generate(hidden, weight[:, :4], bias, offs)
    with pytest.raises(ValueError, match="bias"):
        hyper.generate(hidden, weight, bias[:-1], offs)
    with pytest.raises(ValueError, match="offsets"):
        hyper.generate(hidden, weight, bias, [0, 3])
    with pytest.raises(ValueError, match="offsets"):
        hyper.generate(hidden, weight, bias, [0, 5, 6])
    with pytest.raises(TypeError, match="dtype"):
        hyper.generate(hidden.double(), weight, bias, offs)
