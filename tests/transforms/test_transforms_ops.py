"""The compiled batched affine warp (csrc/augment) against its torch reference and a float64 numpy
bilinear sampler, on fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import invfast.backend as backend
import invfast.transforms as T
from invfast.ops.augment import warp_affine

compiled = pytest.mark.skipif("warp_affine" not in backend.compiled_ops(), reason="compiled core without warp_affine")


def _numpy_warp(img: np.ndarray, m: np.ndarray, oh: int, ow: int, fill: np.ndarray) -> np.ndarray:
    """Naive float64 bilinear sampling with per-neighbour fill: img [C, H, W], m [2, 3] -> [C, oh, ow]."""
    C, H, W = img.shape
    out = np.zeros((C, oh, ow))
    for y in range(oh):
        for x in range(ow):
            sx, sy = m[0, 0] * x + m[0, 1] * y + m[0, 2], m[1, 0] * x + m[1, 1] * y + m[1, 2]
            x0, y0 = int(np.floor(sx)), int(np.floor(sy))
            fx, fy = sx - x0, sy - y0
            acc = np.zeros(C)
            for yy, wy in ((y0, 1 - fy), (y0 + 1, fy)):
                for xx, wx in ((x0, 1 - fx), (x0 + 1, fx)):
                    v = img[:, yy, xx] if (0 <= xx < W and 0 <= yy < H) else fill
                    acc += wx * wy * v
            out[:, y, x] = acc
    return out


@compiled
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
def test_compiled_warp_matches_reference_and_numpy(dtype, rng):
    B, C, H, W, P, oh, ow = 2, 3, 11, 13, 3, 9, 12
    x = torch.from_numpy(rng.integers(0, 256, (B, C, H, W)).astype(np.uint8))
    if dtype != torch.uint8:
        x = x.to(dtype) / 255
    m = torch.from_numpy(rng.normal(size=(P, 2, 3)) * [[0.7, 0.7, 3.0], [0.7, 0.7, 3.0]] + [[1, 0, 5], [0, 1, 4]])
    m[0] = torch.tensor([[-1.0, 0.0, W - 1.0], [0.0, 1.0, 0.0]])  # an exact flip
    scale = 255.0 if dtype == torch.uint8 else 1.0
    fill = torch.from_numpy(rng.uniform(0, 1, C)) * scale
    with backend.use("compiled"):
        y = warp_affine(x, m, oh, ow, fill)
    with backend.use("reference"):
        yr = warp_affine(x, m, oh, ow, fill)
    assert y.dtype == dtype and y.shape == (B, P, C, oh, ow)
    tol = 1 if dtype == torch.uint8 else 1e-5
    assert (y.double() - yr.double()).abs().max() <= tol
    for b in range(B):
        for p in range(P):
            ref = _numpy_warp(x[b].double().numpy(), m[p].numpy(), oh, ow, fill.numpy())
            if dtype == torch.uint8:
                ref = np.floor(np.clip(ref + 0.5, 0, 255))
            assert np.abs(y[b, p].double().numpy() - ref).max() <= tol
    assert torch.equal(y[:, 0], x[:, :, :oh].flip(-1)[..., :ow])  # integer coordinates: exact copy


@compiled
def test_opcheck_and_transforms_agree_across_backends():
    x = (torch.rand(2, 3, 20, 24) * 255).to(torch.uint8)
    m = torch.tensor([[[0.9, 0.2, 1.3], [-0.1, 1.1, -0.7]]], dtype=torch.float64)
    torch.library.opcheck(torch.ops.invfast.warp_affine, (x, m, 18, 22, torch.tensor([1.0, 2.0, 3.0])))
    for name in ("crop", "hflip", "vflip", "scale", "shear", "rotation", "translation"):
        t = T.get(name)
        g = t.grid(16)
        y = t.apply(x, g, fill=0.3)
        with backend.use("reference"):
            yr = t.apply(x, g, fill=0.3)
        assert (y.int() - yr.int()).abs().max() <= 1, name


@pytest.mark.skipif("warp_coords" not in backend.compiled_ops(), reason="compiled core without warp_coords")
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
def test_compiled_warp_coords_matches_reference_and_numpy(dtype, rng):
    """The displacement-field warp (the elastic deform's sampler) at random source points."""
    from invfast.ops.augment import warp_coords

    B, C, H, W, P, oh, ow = 2, 3, 9, 11, 2, 7, 8
    x = torch.from_numpy(rng.integers(0, 256, (B, C, H, W)).astype(np.uint8))
    if dtype != torch.uint8:
        x = x.to(dtype) / 255
    coords = torch.from_numpy(rng.uniform(-2, 12, (P, oh, ow, 2)))
    coords[1] = torch.from_numpy(np.stack(np.meshgrid(np.arange(ow), np.arange(oh)), -1).astype(np.float64))  # identity
    scale = 255.0 if dtype == torch.uint8 else 1.0
    fill = torch.from_numpy(rng.uniform(0, 1, C)) * scale
    with backend.use("compiled"):
        y = warp_coords(x, coords, fill)
    with backend.use("reference"):
        yr = warp_coords(x, coords, fill)
    tol = 1 if dtype == torch.uint8 else 1e-5
    assert y.shape == (B, P, C, oh, ow) and y.dtype == dtype
    assert (y.double() - yr.double()).abs().max() <= tol
    for b in range(B):
        for yy in range(oh):
            for xx in range(ow):
                sx, sy = coords[0, yy, xx].tolist()
                m = np.array([[0.0, 0.0, sx], [0.0, 0.0, sy]])
                ref = _numpy_warp(x[b].double().numpy(), m, 1, 1, fill.numpy())[:, 0, 0]
                if dtype == torch.uint8:
                    ref = np.floor(np.clip(ref + 0.5, 0, 255))
                assert np.abs(y[b, 0, :, yy, xx].double().numpy() - ref).max() <= tol
    assert torch.equal(y[:, 1], x[:, :, :oh, :ow])  # integer points: exact copies


@pytest.mark.skipif("warp_coords" not in backend.compiled_ops(), reason="compiled core without warp_coords")
def test_opcheck_warp_coords():
    x = (torch.rand(2, 3, 9, 11) * 255).to(torch.uint8)
    coords = torch.rand(3, 7, 8, 2, dtype=torch.float64) * 14 - 2
    fill = torch.tensor([10.0, 20.0, 30.0])
    torch.library.opcheck(torch.ops.invfast.warp_coords, (x, coords, fill))
    torch.library.opcheck(torch.ops.invfast.warp_coords, (x.float() / 255, coords.float(), fill / 255))


@compiled
@pytest.mark.parametrize("mode", ["auto", "compiled"])
def test_uint8_warp_without_its_kernel_takes_the_general_warp(monkeypatch, rng, mode):
    """Where warp_affine_u8 has no kernel (a GPU; here the table is told so) the uint8 test transforms' warp
    goes through warp_affine's kernel, under 'auto' and under 'compiled' (which must not refuse the missing
    uint8 kernel): the same images within one level of the uint8 kernel, integral maps exact."""
    from invfast import dispatch
    from invfast.ops import transforms_u8

    x = torch.from_numpy(rng.integers(0, 256, (2, 3, 15, 17)).astype(np.uint8))
    m = torch.tensor([[[-1.0, 0, 16], [0, 1, 0]], [[0.9, 0.2, 1.3], [-0.1, 1.1, -0.7]]], dtype=torch.float64)
    fill = torch.tensor([10.0, 200.0, 30.0], dtype=torch.float64)
    want = transforms_u8.warp_u8(x, m, fill)
    calls = []
    real = backend.compiled_for

    def spy(name, *args):
        fn = real(name, *args)
        return None if fn is None else (lambda *a: calls.append(name) or fn(*a))

    monkeypatch.setitem(dispatch._available_cache, ("warp_affine_u8", "cpu"), False)
    monkeypatch.setattr(backend, "compiled_for", spy)
    with backend.use(mode):
        got = transforms_u8.warp_u8(x, m, fill)
    assert calls == ["warp_affine"] and got.dtype == torch.uint8 and got.shape == want.shape
    assert torch.equal(got[:, 0], x.flip(-1)) and (got.int() - want.int()).abs().max() <= 1


@compiled
def test_auto_keeps_the_torch_gather_for_integral_maps_on_cpu(monkeypatch):
    """Under auto on CPU a pure pixel-copy map skips the kernel (the gather is faster); others use it."""
    from invfast.ops import augment

    calls = []
    real = backend.compiled_for

    def spy(name, *args):
        fn = real(name, *args)
        return None if fn is None else (lambda *a: calls.append(name) or fn(*a))

    monkeypatch.setattr(backend, "compiled_for", spy)
    x = (torch.rand(2, 3, 10, 12) * 255).to(torch.uint8)
    flip = torch.tensor([[[-1.0, 0.0, 11.0], [0.0, 1.0, 0.0]]], dtype=torch.float64)
    y = augment.warp_affine(x, flip, 10, 12, torch.zeros(3))
    assert calls == [] and torch.equal(y[:, 0], x.flip(-1))
    augment.warp_affine(x, flip + 0.25, 10, 12, torch.zeros(3))
    assert calls == ["warp_affine"]
    with backend.use("compiled"):
        assert torch.equal(augment.warp_affine(x, flip, 10, 12, torch.zeros(3))[:, 0], x.flip(-1))
    assert calls == ["warp_affine", "warp_affine"]
