"""The batched weight-generation op against a naive per-kernel nn.Linear loop, the torch
reference and float64; dispatch rules; a CUDA tier (``-m cuda``, skipped without a GPU)."""

import pytest
import torch
from torch import nn

from invfast import _loader, backend, dispatch
from invfast.ops import hyper


def _cuda_built() -> bool:
    mod = _loader.load()
    return mod is not None and bool(mod.built_with_cuda())


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
    return torch.cat([lin(hidden[:, j]) for j, lin in enumerate(linears)], 1)


SIZES = [9, 64 * 3 * 9, 5000, 1, 64 * 64, 0, 700]


@pytest.mark.parametrize("mode", ["auto", "reference"])
@pytest.mark.parametrize("b,h", [(1, 32), (4, 32), (1, 7), (2, 7)])
def test_forward_matches_per_kernel_linear(mode, b, h, rng):
    hidden, weight, bias, offs, linears = _problem(SIZES, b, h=h, seed=int(rng.integers(2**31)))
    with backend.use(mode):
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
    with backend.use(mode):
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
    with backend.use(mode):
        assert torch.autograd.gradcheck(lambda h, w, b: hyper.generate(h, w, b, offs), args)


@compiled
def test_opcheck():
    hidden, weight, bias, offs, _ = _problem([2, 7, 3], 2, h=4, dtype=torch.float64, seed=6)
    for t in (hidden, weight, bias):
        t.requires_grad_(True)
    torch.library.opcheck(torch.ops.invfast.hyper_generate.default, (hidden, weight, bias, offs))
    g = torch.randn(2, 12, dtype=torch.float64)
    torch.library.opcheck(
        torch.ops.invfast.hyper_generate_backward.default, (g, hidden.detach(), weight.detach(), offs)
    )


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


_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}


def _random_problem(b, h, dtype, seed, device="cpu"):
    """Random odd kernel sizes (some tiny, some not a multiple of the 16-row tile), values ~ N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    sizes = [
        int(s) * 2 + 1 for s in torch.randint(0, 1500, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g)
    ]
    offs = [0]
    for s in sizes:
        offs.append(offs[-1] + s)
    mk = lambda *shape: torch.randn(*shape, generator=g).to(dtype).to(device)  # noqa: E731
    return mk(b, len(sizes), h), mk(offs[-1], h), mk(offs[-1]), offs


def _close_to_float64(out, hidden, weight, bias, offs, dtype):
    exact = hyper.hyper_generate_reference(hidden.double().cpu(), weight.double().cpu(), bias.double().cpu(), offs)
    scale = float(exact.abs().max()) if exact.numel() else 1.0
    torch.testing.assert_close(out.double().cpu(), exact, atol=_TOL[dtype] * scale, rtol=_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b", [1, 2, 5, 8, 13, 64])
@pytest.mark.parametrize("h", [32, 16, 48, 7])
def test_random_shapes_op_and_reference_vs_float64(dtype, b, h):
    """Compiled op (row tiles or the BLAS fallback) and torch reference both match float64."""
    hidden, weight, bias, offs = _random_problem(b, h, dtype, seed=1000 * b + h)
    with backend.use("auto"):
        out = hyper.generate(hidden, weight, bias, offs)
    assert out.dtype == dtype and out.shape == (b, offs[-1])
    _close_to_float64(out, hidden, weight, bias, offs, dtype)
    with backend.use("reference"):
        _close_to_float64(hyper.generate(hidden, weight, bias, offs), hidden, weight, bias, offs, dtype)


@compiled
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("b", [1, 8])
def test_backward_reduced_precision_vs_float64(dtype, b):
    hidden, weight, bias, offs = _random_problem(b, 32, dtype, seed=b)
    g = torch.randn(b, offs[-1]).to(dtype)
    got = torch.ops.invfast.hyper_generate_backward(g, hidden, weight, offs)
    exact = hyper.hyper_generate_backward_reference(g.double(), hidden.double(), weight.double(), offs)
    for a, e in zip(got, exact):
        scale = float(e.abs().max())
        torch.testing.assert_close(a.double(), e, atol=2e-2 * scale, rtol=2e-2)


def test_non_contiguous_and_sliced_inputs():
    """Views (sliced weight rows, transposed hidden) give the same result as contiguous copies."""
    hidden, weight, bias, offs = _random_problem(3, 32, torch.float32, seed=7)
    big = torch.randn(weight.shape[0] + 1, 32)
    big[1:] = weight
    hid_t = hidden.transpose(0, 1).contiguous().transpose(0, 1)
    out = hyper.generate(hid_t, big[1:], bias, offs)
    torch.testing.assert_close(out, hyper.generate(hidden, weight, bias, offs), atol=1e-6, rtol=1e-6)


def test_dispatch_rules(monkeypatch):
    """implementation() is the dispatch table's answer: auto runs the compiled op where one is built (CPU, and
    CUDA, measured faster on an H200); 'reference' is always honoured; 'compiled' on a device without the kernel
    raises. On CUDA the forward kernel serves at most HYPER_KERNEL_MAX_B descriptors under auto (measured slower
    at 64), every batch under 'compiled'."""
    monkeypatch.delenv(dispatch.CUDA_KERNELS_ENV, raising=False)
    built = "hyper_generate" in backend.compiled_ops()
    with backend.use("auto"):
        assert hyper.implementation("cpu") == ("compiled" if built else "reference")
        assert hyper.implementation("cuda") == ("compiled" if built and _cuda_built() else "reference")
        assert hyper.implementation("mps") == "reference"
    small, large = torch.zeros(dispatch.HYPER_KERNEL_MAX_B, 2, 3), torch.zeros(dispatch.HYPER_KERNEL_MAX_B + 1, 2, 3)
    assert dispatch.serves("hyper_generate", "cuda", "auto", (small,))
    assert not dispatch.serves("hyper_generate", "cuda", "auto", (large,))
    assert dispatch.serves("hyper_generate", "cuda", "compiled", (large,))
    assert dispatch.serves("hyper_generate", "cpu", "auto", (large,))  # the CPU kernel has no such limit
    with backend.use("reference"):
        assert hyper.implementation("cpu") == "reference"
    with backend.use("compiled"):
        if not (built and _cuda_built()):
            with pytest.raises(RuntimeError, match="'hyper_generate' has no compiled kernel for device 'cuda'"):
                hyper.implementation("cuda")


def test_mixed_devices_refused():
    hidden, weight, bias, offs, _ = _problem([3, 4], 2, h=5)
    with pytest.raises(ValueError, match="one device"):
        hyper.generate(hidden, weight, bias.to("meta"), offs)


cuda_op = pytest.mark.skipif(
    not torch.cuda.is_available() or "hyper_generate" not in backend.compiled_ops() or not _cuda_built(),
    reason="needs a GPU and invfast built with CUDA",
)


@pytest.mark.cuda
@cuda_op
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("b", [1, 3, 8, 15, 16, 64])
@pytest.mark.parametrize("h", [32, 7])
def test_cuda_op_vs_reference_and_float64(dtype, b, h):
    """Both CUDA paths (row kernel for B < 16, cuBLAS from 16; vectorised for H = 32) vs float64."""
    hidden, weight, bias, offs = _random_problem(b, h, dtype, seed=b * 100 + h, device="cuda")
    tol_dtype = torch.float32 if dtype == torch.float64 else dtype
    out = torch.ops.invfast.hyper_generate(hidden, weight, bias, offs)
    _close_to_float64(out, hidden, weight, bias, offs, tol_dtype)
    ref = hyper.hyper_generate_reference(hidden, weight, bias, offs)
    _close_to_float64(ref, hidden, weight, bias, offs, tol_dtype)
    g = torch.randn(b, offs[-1], device="cuda").to(dtype)
    got = torch.ops.invfast.hyper_generate_backward(g, hidden, weight, offs)
    exact = hyper.hyper_generate_backward_reference(g.double(), hidden.double(), weight.double(), offs)
    for a, e in zip(got, exact):
        scale = float(e.abs().max()) if e.numel() else 1.0
        torch.testing.assert_close(a.double(), e, atol=2e-2 * scale, rtol=2e-2)


@pytest.mark.cuda
@cuda_op
@pytest.mark.parametrize("b", [2, 16])
def test_cuda_opcheck_and_gradcheck(b):
    hidden, weight, bias, offs, _ = _problem([2, 7, 3, 0, 32], b, h=32, dtype=torch.float64, seed=8)
    hidden, weight, bias = (t.cuda().requires_grad_(True) for t in (hidden, weight, bias))
    torch.library.opcheck(torch.ops.invfast.hyper_generate.default, (hidden, weight, bias, offs))
    g = torch.randn(b, offs[-1], dtype=torch.float64, device="cuda")
    torch.library.opcheck(
        torch.ops.invfast.hyper_generate_backward.default, (g, hidden.detach(), weight.detach(), offs)
    )
    with backend.use("compiled"):
        assert torch.autograd.gradcheck(lambda h, w, bb: hyper.generate(h, w, bb, offs), (hidden, weight, bias))


@pytest.mark.parametrize("b", [1, 8])
def test_large_output_streaming_path_vs_float64(b):
    """Outputs >= 32 MB take the huge-page path: aligned kernels of 16-row
    multiples plus a ragged last kernel."""
    sizes = [16 * 4000, 16 * (1_200_000 // b), 5]
    offs = [0, sizes[0], sizes[0] + sizes[1], sum(sizes)]
    g = torch.Generator().manual_seed(b)
    hidden, weight, bias = (
        torch.randn(b, 3, 32, generator=g),
        torch.randn(offs[-1], 32, generator=g),
        torch.randn(offs[-1], generator=g),
    )
    out = hyper.generate(hidden, weight, bias, offs)
    assert out.nbytes >= 32 << 20
    _close_to_float64(out, hidden, weight, bias, offs, torch.float32)
