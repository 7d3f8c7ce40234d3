"""InfoNCE and NT-Xent against float64 numpy references written from the formulas."""

import numpy as np
import pytest
import torch

from invfast.pretrain import infonce, nt_xent
from invfast.pretrain.losses import contrastive_rows


def _unit(a):
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def infonce_ref(q, k, queue, tau):
    q, k, queue = _unit(q.astype(np.float64)), _unit(k.astype(np.float64)), _unit(queue.astype(np.float64))
    out = []
    for b in range(q.shape[0]):
        logits = np.concatenate([[q[b] @ k[b]], queue @ q[b]]) / tau
        m = logits.max()
        out.append(-(logits[0] - m - np.log(np.exp(logits - m).sum())))
    return float(np.mean(out))


def nt_xent_ref(z1, z2, tau):
    z = _unit(np.concatenate([z1, z2]).astype(np.float64))
    n = z.shape[0]
    b = n // 2
    total = 0.0
    for a in range(n):
        p = (a + b) % n
        denom = sum(np.exp(z[a] @ z[c] / tau) for c in range(n) if c != a)
        total += -np.log(np.exp(z[a] @ z[p] / tau) / denom)
    return total / n


@pytest.mark.parametrize("tau", [0.07, 0.2, 1.0])
@pytest.mark.parametrize("b,d,kq", [(1, 3, 5), (8, 16, 32), (5, 7, 0)])
def test_infonce_matches_float64_reference(tau, b, d, kq):
    rng = np.random.default_rng(b * 100 + kq)
    q, k, queue = rng.normal(size=(b, d)), rng.normal(size=(b, d)), rng.normal(size=(max(kq, 1), d))
    queue = queue[:kq]
    ref = infonce_ref(q, k, queue, tau)
    got64 = infonce(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(queue), tau)
    got32 = infonce(torch.from_numpy(q).float(), torch.from_numpy(k).float(), torch.from_numpy(queue).float(), tau)
    assert got64.dtype == torch.float64
    np.testing.assert_allclose(got64.item(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got32.item(), ref, rtol=1e-5, atol=1e-5)


def test_infonce_without_queue_is_zero_and_scale_invariant():
    q = torch.randn(4, 6, dtype=torch.float64)
    assert infonce(q, torch.randn(4, 6, dtype=torch.float64), None, 0.2).item() == 0.0
    k, queue = torch.randn(4, 6, dtype=torch.float64), torch.randn(9, 6, dtype=torch.float64)
    a = infonce(q, k, queue, 0.2)
    b = infonce(3 * q, 0.5 * k, 7 * queue, 0.2)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("tau", [0.1, 0.5])
@pytest.mark.parametrize("b,d", [(1, 4), (6, 8), (13, 3)])
def test_nt_xent_matches_float64_reference(tau, b, d):
    rng = np.random.default_rng(b + d)
    z1, z2 = rng.normal(size=(b, d)), rng.normal(size=(b, d))
    ref = nt_xent_ref(z1, z2, tau)
    np.testing.assert_allclose(nt_xent(torch.from_numpy(z1), torch.from_numpy(z2), tau).item(), ref, rtol=1e-12)
    np.testing.assert_allclose(
        nt_xent(torch.from_numpy(z1).float(), torch.from_numpy(z2).float(), tau).item(), ref, rtol=1e-5
    )


def test_losses_gradcheck():
    q = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    queue = torch.randn(5, 4, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda a, b: infonce(a, b, queue, 0.3), (q, k))
    assert torch.autograd.gradcheck(lambda a, b: nt_xent(a, b, 0.3), (q, k))


def test_contrastive_rows_on_gathered_candidates_equals_nt_xent_share():
    # the multi-process form: anchors of one "rank" against candidates of all ranks
    z1, z2 = torch.randn(8, 5, dtype=torch.float64), torch.randn(8, 5, dtype=torch.float64)
    full = nt_xent(z1, z2, 0.2)
    cand = torch.cat([z1, z2])
    parts = []
    for r in range(2):
        own = torch.arange(4) + 4 * r
        parts.append(
            contrastive_rows(
                torch.cat([z1[own], z2[own]]), cand, torch.cat([own + 8, own]), torch.cat([own, own + 8]), 0.2
            )
        )
    torch.testing.assert_close(full, (parts[0] + parts[1]) / 2, rtol=1e-12, atol=1e-12)


def test_loss_bad_input():
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match="tau"):
        infonce(x, x, None, 0.0)
    with pytest.raises(ValueError, match="same shape"):
        infonce(x, torch.randn(5, 3), None)
    with pytest.raises(ValueError, match="queue has D=4"):
        infonce(x, x, torch.randn(6, 4))
    with pytest.raises(ValueError, match=r"q must be \[N, D\]"):
        infonce(torch.randn(4), torch.randn(4), None)
    with pytest.raises(TypeError, match="z1 must be a torch.Tensor"):
        nt_xent(np.zeros((2, 2)), x)
    with pytest.raises(ValueError, match="same shape"):
        nt_xent(x, torch.randn(3, 3))
    with pytest.raises(ValueError, match="tau"):
        nt_xent(x, x, -1.0)
