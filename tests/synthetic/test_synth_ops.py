"""The synthetic-data compiled ops (csrc/synth): torch.library.opcheck (schema, fake/meta, torch.compile
dispatch) like the other op families, each kernel forced against its torch reference and an independent
float64 computation, and their dispatch (CPU kernels only: every other device runs the reference)."""

import numpy as np
import pytest
import torch

from invfast import backend, dispatch
from invfast.ops import synth

SYNTH_OPS = ("synth_color", "synth_blur", "synth_warp", "synth_composite")
compiled = pytest.mark.skipif(
    not set(SYNTH_OPS) <= set(backend.compiled_ops()), reason="compiled core without synth ops"
)


def _inputs(rng, b=5, h=9, w=11):
    a = torch.from_numpy(rng.uniform(0, 1, (b, 1, h, w)).astype(np.float32))
    a[a < 0.3] = 0
    pm = torch.cat([torch.from_numpy(rng.uniform(0, 1, (b, 3, h, w)).astype(np.float32)) * a, a], 1)
    f32 = lambda *s: torch.from_numpy(rng.uniform(0, 1, s).astype(np.float32))  # noqa: E731
    k = f32(b, 5) + 0.1
    taps = (k + k.flip(1)) / (k + k.flip(1)).sum(1, keepdim=True)  # symmetric, normalised
    ang = torch.from_numpy(rng.uniform(0, 6.3, b))
    inv = torch.stack([torch.stack([ang.cos(), -ang.sin()], 1), torch.stack([ang.sin(), ang.cos()], 1)], 1)
    inv = (inv * torch.from_numpy(rng.uniform(0.7, 1.3, (b, 1, 1)))).float()
    off = torch.from_numpy(rng.normal(0, 0.3, (b, 2)).astype(np.float32))
    bgs = torch.from_numpy(rng.integers(0, 256, (4, 3, h, w)).astype(np.uint8))
    idx = torch.from_numpy(rng.integers(0, 4, b))
    color = (f32(b) - 0.5, f32(b) * 2, f32(b) * 2, torch.from_numpy(rng.integers(0, 64, b)))
    return pm, taps, inv, off, bgs, idx, color


@compiled
def test_opcheck_synth_ops(rng):
    pm, taps, inv, off, bgs, idx, (hue, br, co, fl) = _inputs(rng)
    torch.library.opcheck(torch.ops.invfast.synth_color.default, (pm, hue, br, co, fl, 3))
    torch.library.opcheck(torch.ops.invfast.synth_blur.default, (pm, taps))
    torch.library.opcheck(torch.ops.invfast.synth_warp.default, (pm, inv, off, True))
    torch.library.opcheck(torch.ops.invfast.synth_warp.default, (pm[:, :3].contiguous(), inv, off, False))
    torch.library.opcheck(torch.ops.invfast.synth_composite.default, (pm, bgs, idx))


@compiled
def test_forced_kernels_match_references_and_float64(rng):
    """Each kernel under backend 'compiled' (whatever auto's default) against the reference; the warp and
    the composite also against float64 computations of their own."""
    pm, taps, inv, off, bgs, idx, (hue, br, co, fl) = _inputs(rng)
    with backend.use("compiled"):
        got = (
            synth.color(pm, hue, br, co, fl, 3),
            synth.blur(pm, taps),
            synth.warp_rgba(pm, inv, off, True),
            synth.composite(pm, bgs, idx),
        )
    with backend.use("reference"):
        ref = (
            synth.color(pm, hue, br, co, fl, 3),
            synth.blur(pm, taps),
            synth.warp_rgba(pm, inv, off, True),
            synth.composite(pm, bgs, idx),
        )
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1]) and torch.equal(got[3], ref[3])
    torch.testing.assert_close(got[2], ref[2], atol=1e-5, rtol=0)
    b, _, h, w = pm.shape
    theta = torch.cat([inv.double(), -inv.double() @ off.double().unsqueeze(-1)], 2)
    grid = torch.nn.functional.affine_grid(theta, (b, 4, h, w), align_corners=False)
    want = torch.nn.functional.grid_sample(pm.double(), grid, align_corners=False)
    torch.testing.assert_close(got[2].double(), want, atol=1e-5, rtol=0)
    a = pm[:, 3:].double().numpy()
    exp = np.clip(bgs[idx].double().numpy() * (1 - a) + pm[:, :3].double().numpy() * 255, 0, 255)
    assert np.abs(got[3].numpy().astype(np.float64) - exp).max() <= 0.5 + 1e-4


def test_synth_ops_have_no_kernel_off_the_cpu(rng):
    """No CUDA synth kernels: auto runs the reference on other devices by table lookup; 'compiled' refuses."""
    for op in SYNTH_OPS:
        assert not dispatch.entry(op, "cuda").available and not dispatch.entry(op, "cuda").auto
    pm = torch.rand(2, 4, 6, 6, device="meta")
    assert synth.blur(pm, torch.full((2, 3), 1 / 3, device="meta")).device.type == "meta"
    with backend.use("compiled"), pytest.raises(RuntimeError, match="'synth_blur' has no compiled kernel.*'meta'"):
        synth.blur(pm, torch.full((2, 3), 1 / 3, device="meta"))


def test_an_out_of_range_background_index_is_refused_without_a_host_read_off_the_cpu():
    from invfast.ops.synth import composite

    obj = torch.zeros(2, 4, 8, 8)
    bgs = torch.zeros(3, 3, 8, 8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="bg_index out of range for 3 backgrounds"):
        composite(obj, bgs, torch.tensor([0, 3]))
    assert composite(obj, bgs, torch.tensor([0, 2])).shape == (2, 3, 8, 8)
    # on a device (meta stands in: no values to read) the range check is a device assertion, not a host read
    meta = composite(obj.to("meta"), bgs.to("meta"), torch.tensor([0, 3], device="meta"))
    assert meta.shape == (2, 3, 8, 8)
