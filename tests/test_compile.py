"""torch.compile(fullgraph=True) on the public metrics: validation stays at the boundary, the data-dependent
checks run inside the graph (a device assert), and the compiled call equals the eager one."""

from __future__ import annotations

import pytest
import torch

import invfast as ivf

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_invariance_scores_compiles_fullgraph(rng):
    ref = torch.from_numpy(rng.normal(size=(40, 6))).float()
    ft = ref[:, None] + 0.3 * torch.from_numpy(rng.normal(size=(40, 3, 6))).float()
    st = ivf.FeatureStats().update(ref).finalize()
    f = torch.compile(ivf.invariance_scores, fullgraph=True)
    got, want = f(ref, ft, st), ivf.invariance_scores(ref, ft, st)
    for k in ("distance", "cosine"):
        torch.testing.assert_close(got[k], want[k], rtol=1e-5, atol=1e-6)
    bad = ft.clone()
    bad[3, 1, 2] = float("nan")
    with pytest.raises(RuntimeError, match="NaN/Inf"):
        f(ref, bad, st)


def test_uniformity_compiles_fullgraph(rng):
    x = torch.from_numpy(rng.normal(size=(60, 5))).float()
    u = torch.compile(ivf.uniformity, fullgraph=True)
    torch.testing.assert_close(u(x), ivf.uniformity(x), rtol=1e-6, atol=1e-9)
    x[0, 0] = float("inf")
    with pytest.raises(RuntimeError, match="NaN/Inf"):
        u(x)


def test_eager_errors_stay_value_errors():
    with pytest.raises(ValueError, match="contains 1 NaN/Inf values"):
        ivf.uniformity(torch.tensor([[0.0, float("nan")], [1.0, 0.0]]))
    st = ivf.FeatureStats().update(torch.randn(10, 3)).finalize()
    with pytest.raises(ValueError, match="N=0 images"):
        ivf.invariance_scores(torch.zeros(0, 3), torch.zeros(0, 2, 3), st)


# ------------------------------------------------------------------------------------------- transform apply
#: a fast subset (a flip, a sampled warp, a colour op, a discrete one); the slow test compiles all 18
_QUICK_TRANSFORMS = ("hflip", "rotation", "brightness", "posterize")


def _compiled_equals_eager(name: str, images: torch.Tensor) -> None:
    import invfast.transforms as T

    t = T.get(name)
    p = t.grid(3)
    f = torch.compile(t.apply, fullgraph=True)  # fullgraph: a graph break raises instead of falling back
    got, want = f(images, p), t.apply(images, p)
    assert got.dtype == want.dtype == images.dtype and got.shape == want.shape
    tol = 0 if images.dtype == torch.uint8 else 1e-6  # uint8: the same rounding, so the same bytes
    torch.testing.assert_close(got, want, rtol=0, atol=tol)


@pytest.mark.parametrize("name", _QUICK_TRANSFORMS)
def test_transform_apply_compiles_fullgraph(name, rng):
    _compiled_equals_eager(name, torch.from_numpy(rng.random((2, 3, 12, 12))).float())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_every_transform_apply_compiles_fullgraph(dtype, rng):
    import invfast.transforms as T

    x = torch.from_numpy(rng.integers(0, 256, (2, 3, 12, 12), dtype="uint8"))
    images = x if dtype == torch.uint8 else x.float() / 255
    for name in T.TEST_TRANSFORMS:
        torch._dynamo.reset()
        _compiled_equals_eager(name, images)


def test_compiled_transform_keeps_its_value_checks(rng):
    """The data-dependent checks run inside the graph: bad parameters or out-of-range images fail when the
    compiled call runs (RuntimeError naming the problem), the same shapes with good data still pass."""
    import invfast.transforms as T

    x = torch.from_numpy(rng.random((2, 3, 12, 12))).float()
    t = T.get("brightness")
    f = torch.compile(t.apply, fullgraph=True)
    good = torch.tensor([0.5, 2.0])
    torch.testing.assert_close(f(x, good), t.apply(x, good), rtol=0, atol=1e-6)
    with pytest.raises(RuntimeError, match="brightness: the factor must be >= 0"):
        f(x, torch.tensor([0.5, -1.0]))
    with pytest.raises(RuntimeError, match="params contain NaN/Inf"):
        f(x, torch.tensor([0.5, float("nan")]))
    with pytest.raises(RuntimeError, match=r"floating images must be in \[0, 1\]"):
        f(x * 255, good)
    with pytest.raises(ValueError, match=r"brightness: the factor must be >= 0\.0, got -1"):  # eager: a ValueError
        t.apply(x, torch.tensor([0.5, -1.0]))
