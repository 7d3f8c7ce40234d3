"""Per-unit measures (invfast.measure.units): tmeasures's normalized variance (a ratio of standard deviations,
ddof 1) and invfast's variance ratio, streamed through measure_invariance, against a float64 numpy
re-implementation of tmeasures's formula to 1e-12 on the very activations the measurement saw (a pointwise
network, whose activations do not depend on how the views are batched), and against tmeasures itself when
it is importable."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from measure_helpers import Brightness, Rot90

from invfast.measure import InvarianceResult, measure_invariance
from invfast.measure.units import normalized_variance, variance_ratio
from invfast.ops.invariance import merge_moments, moments

pytestmark = pytest.mark.usefixtures("one_thread")


def tmeasures_nv_numpy(a: np.ndarray) -> np.ndarray:
    """tmeasures 1.2.11's NormalizedVarianceInvariance per unit, re-implemented in float64 numpy from its
    source: numerator ``Variance`` over the (sample x transformation) matrix = mean over samples of the std
    over transformations, denominator the same over the transposed matrix, both ``ddof = 1`` (0 for a
    single value); invfast's convention for a zero denominator (NaN) instead of tmeasures's 1 / inf."""
    n, v = a.shape[:2]
    num = a.std(axis=1, ddof=1).mean(axis=0) if v > 1 else np.zeros(a.shape[2:])
    den = a.std(axis=0, ddof=1).mean(axis=0) if n > 1 else np.zeros(a.shape[2:])
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


class Body(torch.nn.Module):
    """Pointwise maps of the pixels: every activation is a function of one input value, so it is the same
    however the views are batched (no reduction inside the layer). Channel 9 is constant: a dead unit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x * x - 0.3, torch.tanh(2 * x - 1), torch.full_like(x[:, :1], 0.5)], 1)


class Pointwise(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = Body()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x).mean((2, 3))


class Rot90NoIdentity(Rot90):
    """Rotations by 90, 180, 270 degrees: no identity in the grid, so the untransformed view joins once."""

    name = "rot90x"

    def grid(self, k: int = 256) -> torch.Tensor:
        return torch.arange(1, 4, dtype=torch.float64)


def _activations(x: torch.Tensor, t: Any, k: int) -> np.ndarray:
    """The pooled activations ``[N, V, C]`` of the pointwise body over the views of ``t`` (its grid of size
    ``k``, the untransformed image first when the grid has no identity), float64."""
    params = t.grid(k)
    views = t.apply(x, params)
    if not bool(t.is_identity(params).any()):
        views = torch.cat([x[:, None], views], 1)
    with torch.no_grad():
        a = torch.stack([Body()(views[:, v].float() / 255.0).mean((2, 3)) for v in range(views.shape[1])], 1)
    return a.double().numpy()


def test_numpy_reference_formula_matches_the_pure_function(rng):
    a = rng.normal(size=(23, 7, 11)) * rng.uniform(0.1, 5, size=11) + rng.normal(size=11) * 3
    a[:, :, 3] = 2.0  # dead unit: NaN
    a[:, :, 4] = rng.normal(size=(23, 1))  # constant over views: 0
    got = normalized_variance(torch.from_numpy(a)).numpy()
    want = tmeasures_nv_numpy(a)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.nanmax(np.abs(got - want)) < 1e-12
    assert abs(got[4]) < 1e-12 and np.isnan(got[3])
    vr = variance_ratio(torch.from_numpy(a)).numpy()
    live = np.arange(11) != 3
    want_vr = a.var(axis=1).mean(0)[live] / a.var(axis=0).mean(0)[live]
    np.testing.assert_allclose(vr[live], want_vr, rtol=1e-12, atol=1e-15)
    assert np.isnan(vr[3])


def test_merged_moments_equal_two_pass_moments(rng):
    x = torch.from_numpy(rng.normal(size=(50, 6)) + 1e3)
    mean, m2 = torch.zeros(6, dtype=torch.float64), torch.zeros(6, dtype=torch.float64)
    n = 0
    for s, e in ((0, 1), (1, 8), (8, 9), (9, 33), (33, 50)):
        merge_moments(n, mean, m2, e - s, *moments(x[s:e], 0))
        n += e - s
    m_ref, q_ref = moments(x, 0)
    torch.testing.assert_close(mean, m_ref, rtol=1e-15, atol=0)
    torch.testing.assert_close(m2, q_ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "t", [Rot90(), Rot90NoIdentity(), Brightness()], ids=["identity-in-grid", "reference-view-added", "brightness"]
)
def test_streamed_normalized_variance_equals_tmeasures_formula(rng, t):
    """Through measure_invariance with uneven batches and chunks: per unit within 1e-12 of float64 numpy."""
    x = torch.from_numpy(rng.integers(0, 256, (29, 3, 6, 6), dtype=np.uint8))
    r = measure_invariance(
        Pointwise(), x, [t], grid_size=5, batch_size=5, forward_batch=7, normalize=False, shrinkage="ledoit-wolf"
    )
    tr = r[t.name]
    a = _activations(x, t, 5)
    assert tr.n_views == a.shape[1] == len(t.grid(5)) + (t.name != "rot90") and tr.n_images == 29
    want = tmeasures_nv_numpy(a)
    got = tr.unit_normalized_variance.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[9])  # the dead unit
    delta = float(np.nanmax(np.abs(got - want)))
    assert delta < 1e-12, delta
    assert tr.normalized_variance == pytest.approx(float(np.nanmean(want)), abs=1e-12)
    np.testing.assert_allclose(tr.unit_view_std_sum.numpy(), a.std(axis=1, ddof=1).sum(0), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tr.unit_image_std_sum.numpy(), a.std(axis=0, ddof=1).sum(0), rtol=1e-12, atol=1e-13)
    # the variance ratio, ddof 0
    np.testing.assert_allclose(tr.unit_transform_variance.numpy(), a.var(axis=1).mean(0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(tr.unit_sample_variance.numpy(), a.var(axis=0).mean(0), rtol=1e-12, atol=1e-15)
    assert tr.variance_ratio == pytest.approx(float(np.nanmean(variance_ratio(torch.from_numpy(a)).numpy())))


def test_json_round_trip_and_old_results_without_the_new_fields(rng):
    x = torch.from_numpy(rng.integers(0, 256, (12, 3, 6, 6), dtype=np.uint8))
    r = measure_invariance(Pointwise(), x, [Rot90()], grid_size=4, normalize=False, shrinkage="ledoit-wolf")
    back = InvarianceResult.from_json(r.to_json())
    a, b = r["rot90"], back["rot90"]
    assert b.n_views == 4
    torch.testing.assert_close(a.unit_normalized_variance, b.unit_normalized_variance, equal_nan=True)
    assert b.normalized_variance == pytest.approx(a.normalized_variance)
    d = json.loads(r.to_json())
    for key in ("unit_view_std_sum", "unit_image_std_sum", "n_views", "variance_ratio"):
        d["transforms"][0].pop(key)  # a result.json written before these fields existed
    old = InvarianceResult.from_dict(d)["rot90"]
    assert old.unit_normalized_variance is None and old.normalized_variance is None
    assert old.variance_ratio == pytest.approx(a.variance_ratio)
    d["transforms"][0]["unit_view_std_sum"] = [-1.0] * 10
    with pytest.raises(ValueError, match="unit_view_std_sum"):
        InvarianceResult.from_dict(d)


def _tmeasures():
    try:
        from tmeasures.pytorch.layer_measures import Variance
        from tmeasures.pytorch.quotient import safe_divide
    except Exception as e:  # not installed, or its import chain (statsmodels, cv2, ...) is missing
        pytest.skip(
            f"tmeasures is not importable ({type(e).__name__}: {e}); install it beside invfast with "
            "`pip install --no-deps tmeasures==1.2.11 statsmodels patsy` to compare with it"
        )
    return Variance, safe_divide


def test_against_tmeasures_itself(rng):
    """tmeasures's own Variance layer measure and safe_divide on the activations the measurement saw."""
    Variance, safe_divide = _tmeasures()
    t = Brightness()  # tmeasures's running variance is float64 Welford: accurate where the variance is not
    # tiny against the mean (rotations barely move pooled channels: there it is off by 1e-3 relative)
    x = torch.from_numpy(rng.integers(0, 256, (21, 3, 6, 6), dtype=np.uint8))
    r = measure_invariance(Pointwise(), x, [t], grid_size=6, batch_size=4, normalize=False, shrinkage="ledoit-wolf")
    a = torch.from_numpy(_activations(x, t, 6))  # [N, V, U]

    def matrix(m: torch.Tensor, batch: int) -> list[list[torch.Tensor]]:  # rows of batches, as its iterator
        return [[row[s : s + batch] for s in range(0, row.shape[0], batch)] for row in m]

    num = Variance().eval(matrix(a, 3), "body")  # rows: samples, columns: transformations
    den = Variance().eval(matrix(a.transpose(0, 1), 5), "body")  # rows: transformations, columns: samples
    theirs = safe_divide(num, den).numpy()
    ours = r["brightness"].unit_normalized_variance.numpy()
    live = den.numpy() > 0
    assert np.abs(ours[live] - theirs[live]).max() < 1e-12
    assert np.isnan(ours[~live]).all() and (theirs[~live] == 1).all()  # the dead unit: NaN here, 1 there


def _element_activations(x: torch.Tensor, t: Any, k: int) -> np.ndarray:
    """Every activation of the pointwise body ``[N, V, C*H*W]`` over the views of ``t``, float64."""
    params = t.grid(k)
    views = t.apply(x, params)
    if not bool(t.is_identity(params).any()):
        views = torch.cat([x[:, None], views], 1)
    with torch.no_grad():
        a = torch.stack([Body()(views[:, v].float() / 255.0).flatten(1) for v in range(views.shape[1])], 1)
    return a.double().numpy()


@pytest.mark.parametrize("t", [Rot90(), Brightness()], ids=["rot90", "brightness-reference-view-added"])
def test_elements_units_equal_tmeasures_formula(rng, t):
    """units='elements': every C x H x W activation its own unit, streamed; per unit within 1e-12 of numpy;
    the model's pooled output has the same units either way; the whitened scores do not change."""
    x = torch.from_numpy(rng.integers(0, 256, (17, 3, 5, 5), dtype=np.uint8))
    kw = dict(
        grid_size=4, batch_size=3, forward_batch=5, normalize=False, shrinkage="ledoit-wolf", layers="body,output"
    )
    r = measure_invariance(Pointwise(), x, [t], units="elements", **kw)
    tr = r.layers["body"][t.name]
    a = _element_activations(x, t, 4)
    assert tr.unit_normalized_variance.shape == (10 * 5 * 5,) and tr.n_views == a.shape[1]
    want = tmeasures_nv_numpy(a)
    got = tr.unit_normalized_variance.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[9 * 25 :]).all()  # the constant channel's elements
    delta = float(np.nanmax(np.abs(got - want)))
    assert delta < 1e-12, delta
    np.testing.assert_allclose(tr.unit_transform_variance.numpy(), a.var(axis=1).mean(0), rtol=1e-12, atol=1e-15)
    channels = measure_invariance(Pointwise(), x, [t], units="channels", **kw)
    assert channels.layers["body"][t.name].unit_normalized_variance.shape == (10,)
    torch.testing.assert_close(
        r.layers["output"][t.name].unit_normalized_variance,
        channels.layers["output"][t.name].unit_normalized_variance,
        equal_nan=True,
    )
    assert tr.mean_cosine == channels.layers["body"][t.name].mean_cosine
    assert r.meta["config"]["units"] == "elements"


def test_units_is_validated_once_and_reaches_the_cli():
    import argparse

    from invfast.measure import MeasureConfig
    from invfast.measure.cli import add_arguments
    from invfast.measure.options import config_from_args

    with pytest.raises(ValueError, match="units must be one of channels, elements, got 'pixels'"):
        MeasureConfig(units="pixels")
    with pytest.raises(ValueError, match="units must be"):
        MeasureConfig().replace(units=None)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--model", "m", "--data", "d", "--out", "o", "--units", "elements"])
    assert config_from_args(args, torch.device("cpu"), "state").units == "elements"
    assert parser.parse_args(["--model", "m", "--data", "d", "--out", "o"]).units == "channels"
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["--model", "m", "--data", "d", "--out", "o", "--units", "pixels"])
    assert e.value.code == 2


def test_elements_units_on_a_resnet_stage(rng):
    """A ResNet stage (channels_last on, hooks): every C x H x W activation against numpy on recomputed
    activations (float32 rounding of another batching: rtol 1e-4)."""
    from invfast.models import create

    torch.manual_seed(0)
    model = create("resnet18-cifar", width=4).eval()
    x = torch.from_numpy(rng.integers(0, 256, (14, 3, 8, 8), dtype=np.uint8))
    t = Rot90()
    r = measure_invariance(
        model, x, [t], grid_size=4, batch_size=5, normalize=False, layers="layer2", units="elements", channels_last=True
    )
    caught = []
    handle = model.blocks[3].register_forward_hook(lambda m, i, o: caught.append(o.flatten(1)))  # layer2's end
    with torch.no_grad():
        views = t.apply(x, t.grid(4))
        for v in range(4):
            model(views[:, v].float() / 255.0)
    handle.remove()
    a = torch.stack(caught, 1).double().numpy()  # [N, V, C*H*W]
    tr = r["rot90"]
    assert tr.unit_normalized_variance.shape == (a.shape[2],) == (8 * 4 * 4,)
    np.testing.assert_allclose(tr.unit_normalized_variance.numpy(), tmeasures_nv_numpy(a), rtol=1e-4, atol=1e-7)


# ---------------------------------------------------------------------------------- the merge_unit_moments_ op
def _numpy_moments(a: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    a = a.astype(np.float64)
    m = a.mean(axis=axis, keepdims=True)
    return m.squeeze(axis), ((a - m) ** 2).sum(axis=axis)


def _running(b: int, v: int, n: int) -> list[torch.Tensor]:
    return [torch.zeros(s, n, dtype=torch.float64) for s in (b, b, v, v)]


@pytest.mark.parametrize("shape", [(7, 5, 130), (1, 16, 64), (9, 1, 3), (3, 4, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_merged_unit_moments_against_numpy(rng, shape, dtype):
    """Compiled kernel (where built) and torch reference against float64 numpy: the running moments over views and
    over images after merging the views in two chunks and the images in two calls equal the moments of all of
    them, also for units far from 0 (an offset of 1e4, where one-pass sums of squares cancel)."""
    from invfast import backend
    from invfast.ops.invariance import merge_unit_moments_, merge_unit_moments_reference

    b, v, n = shape
    np_dtype = np.float32 if dtype == torch.float32 else np.float64
    a = (rng.normal(size=(2 * b, v, n)) * rng.uniform(0.01, 3, size=n) + 1e4).astype(np_dtype)
    x = torch.from_numpy(a)
    cut = max(1, v // 2)
    for fn in (merge_unit_moments_, merge_unit_moments_reference):
        for half in (slice(0, b), slice(b, 2 * b)):  # two calls over images (views in two chunks in each)
            mv, qv = torch.zeros(b, n, dtype=torch.float64), torch.zeros(b, n, dtype=torch.float64)
            if half.start == 0:
                running_b = [torch.zeros(v, n, dtype=torch.float64) for _ in range(2)]
            for vs, ve in ((0, cut), (cut, v)):
                if ve > vs:
                    fn(x[half, vs:ve], mv, qv, vs, running_b[0][vs:ve], running_b[1][vs:ve], half.start)
            want_m, want_q = _numpy_moments(a[half], 1)
            np.testing.assert_allclose(mv.numpy(), want_m, rtol=1e-12)
            np.testing.assert_allclose(qv.numpy(), want_q, rtol=1e-9, atol=1e-6)
        want_m, want_q = _numpy_moments(a, 0)
        np.testing.assert_allclose(running_b[0].numpy(), want_m, rtol=1e-12)
        np.testing.assert_allclose(running_b[1].numpy(), want_q, rtol=1e-9, atol=1e-6)
    if "merge_unit_moments_" in backend.compiled_ops():
        torch.library.opcheck(
            torch.ops.invfast.merge_unit_moments_.default, (x[:b], *_running(b, v, n)[:2], 3, *_running(b, v, n)[2:], 5)
        )


def test_merged_unit_moments_bad_inputs_and_half_precision(rng):
    from invfast import backend
    from invfast.ops.invariance import merge_unit_moments_, merge_unit_moments_reference

    x = torch.from_numpy(rng.normal(size=(4, 3, 10)).astype(np.float32))
    got, want = _running(4, 3, 10), _running(4, 3, 10)
    merge_unit_moments_(x.half(), got[0], got[1], 0, got[2], got[3], 0)  # read as float32
    merge_unit_moments_reference(x.half().float(), want[0], want[1], 0, want[2], want[3], 0)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    if "merge_unit_moments_" not in backend.compiled_ops():
        pytest.skip("no compiled core")
    op = torch.ops.invfast.merge_unit_moments_
    r = _running(4, 3, 10)
    with pytest.raises(RuntimeError, match=r"u must be \[B, V, U\]"):
        op(x[0], r[0], r[1], 0, r[2], r[3], 0)
    with pytest.raises(RuntimeError, match="u must be float32 or float64"):
        op(x.to(torch.int32), r[0], r[1], 0, r[2], r[3], 0)
    with pytest.raises(RuntimeError, match="at least one image and one view"):
        op(x[:0], r[0][:0], r[1][:0], 0, r[2], r[3], 0)
    with pytest.raises(RuntimeError, match=r"mean_b must be a contiguous float64 CPU tensor of shape \[3, 10\]"):
        op(x, r[0], r[1], 0, r[2].float(), r[3], 0)
    with pytest.raises(RuntimeError, match="the counts must be >= 0"):
        op(x, r[0], r[1], -1, r[2], r[3], 0)


_MOMENT_BITS = r"""
import hashlib, torch
from invfast.ops.invariance import merge_unit_moments_
g = torch.Generator().manual_seed(7)
for dtype in (torch.float32, torch.float64):
    for b, v, n in ((5, 7, 200), (16, 16, 1000), (3, 2, 1)):
        u = (torch.randn(b, v, n, generator=g, dtype=torch.float64) * 3 + 100).to(dtype)
        run = [torch.rand(r, n, generator=g, dtype=torch.float64) for r in (b, b, v, v)]
        merge_unit_moments_(u, run[0], run[1], 4, run[2], run[3], 9)
        print(hashlib.sha256(b"".join(t.numpy().tobytes() for t in run)).hexdigest())
"""


def test_merged_unit_moments_same_bits_from_the_vector_and_the_baseline_build():
    """The kernel's loops compiled for AVX-512 (taken where the CPU has it) and for the baseline ISA
    (``INVFAST_CPU_ISA=baseline``) give the same bits: each unit's sums in the same order, nothing contracted to
    an FMA. In two fresh processes; on a CPU without AVX-512 both take the baseline."""
    import os
    import subprocess
    import sys

    from invfast import backend

    if "merge_unit_moments_" not in backend.compiled_ops():
        pytest.skip("the compiled core is not built")
    outs = []
    for isa in ("", "baseline"):
        env = {**os.environ, "INVFAST_CPU_ISA": isa}
        done = subprocess.run([sys.executable, "-c", _MOMENT_BITS], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        outs.append(done.stdout.split())
    assert len(outs[0]) == 6 and outs[0] == outs[1]
