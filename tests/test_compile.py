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
