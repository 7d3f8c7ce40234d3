"""MoCo machinery (queue, momentum update, queue sizing), descriptor sets and the methods' steps."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_pretrain_fixtures import RandomAug, TinyEncoder

from invfast.pretrain import (
    AmortisedMoCo,
    AmortisedSimCLR,
    KeyQueue,
    MoCoV2,
    SimCLR,
    default_queue_size,
    descriptor_set,
    momentum_update,
)
from invfast.pretrain.losses import infonce


def test_queue_holds_exactly_the_last_keys():
    g = torch.Generator().manual_seed(0)
    q = KeyQueue(size=12, dim=5, n_queues=2, generator=g)
    pushed = []
    for _ in range(11):
        keys = torch.randn(4, 5, generator=g)
        q.enqueue(keys, which=1)
        pushed.append(F.normalize(keys, dim=1))
        last = torch.cat(pushed)[-12:]
        if len(pushed) >= 3:
            # same set of rows, and the ring order: the oldest entry sits at the write pointer
            held = q.get(1)
            p = int(q.ptr[1])
            torch.testing.assert_close(torch.cat([held[p:], held[:p]]), last, rtol=0, atol=0)
    assert int(q.ptr[0]) == 0  # the other queue is untouched
    torch.testing.assert_close(q.get(0).norm(dim=1), torch.ones(12))


def test_queue_divisibility_and_shape_errors():
    q = KeyQueue(size=10, dim=3)
    with pytest.raises(ValueError, match="divisible by the number of keys"):
        q.enqueue(torch.randn(4, 3))
    with pytest.raises(ValueError, match=r"keys must be \[n, 3\]"):
        q.enqueue(torch.randn(5, 4))
    with pytest.raises(ValueError, match=">= 1"):
        KeyQueue(size=0, dim=3)


def test_queue_state_round_trips_through_state_dict():
    a = KeyQueue(8, 3, generator=torch.Generator().manual_seed(1))
    a.enqueue(torch.randn(4, 3))
    b = KeyQueue(8, 3, generator=torch.Generator().manual_seed(2))
    b.load_state_dict(a.state_dict())
    assert torch.equal(a.keys, b.keys) and torch.equal(a.ptr, b.ptr)


def test_default_queue_size_scales_to_data():
    assert default_queue_size(10**7, 256) == 65536
    assert default_queue_size(50_000, 256) == 6144  # largest multiple of 256 <= 50 000 / 8
    assert default_queue_size(2048, 64) == 256  # reproduce --quick
    assert default_queue_size(96, 32) == 32  # never less than one batch
    for n, b in ((5000, 256), (12_000, 256), (777, 13)):
        q = default_queue_size(n, b)
        assert q % b == 0 and b <= q and (q <= n // 8 or q == b)
    with pytest.raises(ValueError, match="at least two batches"):
        default_queue_size(300, 256)
    with pytest.raises(ValueError, match="batch size"):
        default_queue_size(300, 0)


def _own_key_rate(n: int, b: int, q: int, epochs: int = 6, seed: int = 0) -> float:
    """Share of queries (after the first epoch) whose image's previous key is still in a FIFO queue of
    q keys, with the data reshuffled every epoch (a simulation of the Trainer's order)."""
    rng = np.random.default_rng(seed)
    last = np.full(n, -(10**9))  # the step at which each image's key was last enqueued
    hits = total = 0
    steps = n // b
    for e in range(epochs):
        order = rng.permutation(n)
        for s in range(steps):
            t = e * steps + s
            idx = order[s * b : (s + 1) * b]
            if e:  # the queue holds the keys of the q / b steps before this one
                hits += int(np.sum(t - last[idx] <= q // b))
                total += idx.size
            last[idx] = t
    return hits / total


def test_default_queue_rarely_holds_a_querys_own_image():
    # all but one batch (the old default): about half the queries meet their own image as a negative
    assert 0.4 < _own_key_rate(2048, 64, 2048 - 64) < 0.6
    # the default (an eighth of the data): about (1/8)^2 / 2 < 1 %
    assert _own_key_rate(2048, 64, default_queue_size(2048, 64)) < 0.015
    assert _own_key_rate(12_000, 256, default_queue_size(12_000, 256)) < 0.015


@pytest.mark.parametrize("m", [0.0, 0.5, 0.9, 0.999, 1.0])
def test_momentum_update_exact(m):
    torch.manual_seed(0)
    query, key = TinyEncoder(), TinyEncoder()
    before = [p.detach().clone() for p in key.parameters()]
    momentum_update(key, query, m)
    for k0, k1, q in zip(before, key.parameters(), query.parameters()):
        a, b = m * k0.double(), (1 - m) * q.detach().double()
        # float32 rounding of one multiply and one (possibly fused) multiply-add: the error is at most
        # 2 units of float32 roundoff (2^-24) of each term's magnitude, which bounds it at ~1 ulp
        err = (k1.detach().double() - (a + b)).abs()
        assert bool((err <= 2 * 2.0**-24 * (a.abs() + b.abs()) + 2 * 2.0**-24 * (a + b).abs()).all())
        if m == 0.0:
            assert torch.equal(k1, q)
        if m == 1.0:
            assert torch.equal(k1, k0)


def test_momentum_update_closed_form_and_errors():
    torch.manual_seed(1)
    query, key = TinyEncoder(), TinyEncoder()
    k0 = [p.detach().double().clone() for p in key.parameters()]
    m, n = 0.9, 20
    for _ in range(n):
        momentum_update(key, query, m)
    for a, k, q in zip(key.parameters(), k0, query.parameters()):
        ref = m**n * k + (1 - m**n) * q.detach().double()
        torch.testing.assert_close(a.detach().double(), ref, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="momentum m"):
        momentum_update(key, query, 1.5)
    with pytest.raises(ValueError, match="differ"):
        momentum_update(key, TinyEncoder(dim=8), 0.5)


def test_descriptor_sets():
    g = descriptor_set("groups")
    assert g.tolist() == [[1, 1], [1, 0], [0, 1]]
    ind = descriptor_set("individual")
    assert ind.shape == (26, 5)
    assert bool((ind.sum(1) >= 2).all()) and len({tuple(r) for r in ind.tolist()}) == 26
    with pytest.raises(ValueError, match="unknown descriptor set"):
        descriptor_set("pairs")


def test_moco_step_matches_manual_computation():
    torch.manual_seed(0)
    m = MoCoV2(TinyEncoder(), RandomAug(), queue_size=16, proj_dim=6, key_momentum=0.9)
    online0, key0 = copy.deepcopy(m.online), copy.deepcopy(m.key)
    queue0 = m.queue.get(0).clone()
    v1, v2 = torch.randn(8, 3, 8, 8), torch.randn(8, 3, 8, 8)
    loss = m.training_loss(v1, v2)
    momentum_update(key0, online0, 0.9)
    k = F.normalize(key0(v2, 0), dim=1)
    torch.testing.assert_close(loss, infonce(online0(v1, 0), k, queue0, 0.2))
    torch.testing.assert_close(m.queue.get(0)[:8], k)  # enqueued at the old pointer
    torch.testing.assert_close(m.queue.get(0)[8:], queue0[8:])  # the rest untouched
    assert int(m.queue.ptr[0]) == 8
    loss.backward()
    assert all(p.grad is None for p in m.key.parameters())
    assert all(p.grad is not None for p in m.online.parameters())


def test_simclr_step_and_defaults():
    torch.manual_seed(0)
    s = SimCLR(TinyEncoder(), RandomAug())
    assert s.tau == 0.2 and s.online.heads[0].out_dim == 128 and s.online.heads[0].hidden == 16
    v1, v2 = torch.randn(5, 3, 8, 8), torch.randn(5, 3, 8, 8)
    loss = s.training_loss(v1, v2)
    assert torch.isfinite(loss) and loss.item() > 0
    m = MoCoV2(TinyEncoder(), RandomAug())
    assert (m.tau, m.key_momentum, m.queue.size) == (0.2, 0.999, 65536)


@pytest.mark.parametrize("cls", [AmortisedMoCo, AmortisedSimCLR])
def test_amortised_uses_one_policy_head_and_queue_per_descriptor(cls):
    torch.manual_seed(0)
    augs = [RandomAug() for _ in range(3)]
    kw = {"queue_size": 8} if cls is AmortisedMoCo else {}
    m = cls(TinyEncoder(k=2), augs, descriptors="groups", proj_dim=4, **kw)
    assert m.n_descriptors == 3 and len(m.online.heads) == 3
    assert m.descriptor_names == ["default", "spatial", "appearance"]
    g = torch.Generator().manual_seed(3)
    seen = [m.sample_descriptor(g) for _ in range(60)]
    assert set(seen) == {0, 1, 2}
    images = (torch.rand(4, 3, 8, 8) * 255).to(torch.uint8)
    v1, v2 = m.make_views(images, 2, g)
    assert [a.calls for a in augs] == [0, 0, 1]  # only the two views of the sampled descriptor
    heads_before = [copy.deepcopy(h.state_dict()) for h in m.online.heads]
    queues_before = m.queue.keys.clone() if cls is AmortisedMoCo else None
    loss = m.training_loss(v1, v2, 2)
    loss.backward()
    assert [all(p.grad is not None for p in h.parameters()) for h in m.online.heads] == [False, False, True]
    assert m.online.encoder.cond.weight.grad is not None
    if cls is AmortisedMoCo:
        assert torch.equal(m.queue.keys[:2], queues_before[:2]) and not torch.equal(m.queue.keys[2], queues_before[2])
    for h, sd in zip(m.online.heads, heads_before):
        assert all(torch.equal(v, sd[k]) for k, v in h.state_dict().items())


def test_individual_descriptors_need_26_policies():
    with pytest.raises(ValueError, match="26 descriptors, got 3"):
        AmortisedMoCo(TinyEncoder(k=5), [RandomAug()] * 3, descriptors="individual")
    m = AmortisedSimCLR(TinyEncoder(k=5), [RandomAug()] * 26, descriptors="individual")
    assert m.descriptor_names[-1] == "crop+flip+jitter+grayscale+blur"


def test_method_bad_input():
    with pytest.raises(TypeError, match="feature_dim"):
        MoCoV2(torch.nn.Conv2d(3, 3, 1), RandomAug())
    with pytest.raises(TypeError, match="callable"):
        SimCLR(TinyEncoder(), "spatial")
    with pytest.raises(ValueError, match="key_momentum"):
        MoCoV2(TinyEncoder(), RandomAug(), key_momentum=2.0)
    with pytest.raises(ValueError, match="tau"):
        SimCLR(TinyEncoder(), RandomAug(), tau=0)


def test_amortised_default_policies_come_from_transforms():
    from invfast import transforms as T

    m = AmortisedMoCo(TinyEncoder(k=5), descriptors="individual", size=16, queue_size=8)
    assert [tuple(int(v) for v in r) for r in m.online.descriptors.tolist()] == list(T.VALID_DESCRIPTORS)
    assert m.augments[0].config.size == 16
    g = AmortisedSimCLR(TinyEncoder(k=2), descriptors="groups", size=16)
    assert [p.name for p in g.augments] == ["default", "spatial", "appearance"]
    v1, v2 = g.make_views((torch.rand(4, 3, 16, 16) * 255).to(torch.uint8), 1, torch.Generator().manual_seed(0))
    assert v1.shape == v2.shape == (4, 3, 16, 16) and not torch.equal(v1, v2)


def test_batch_normalised_head_is_moco_v3s_and_centres_each_batch_of_outputs():
    """head_norm='bn': Linear (no bias) · BN · ReLU · Linear (no bias) · BN without affine, against its formula
    in float64; each training batch's outputs have mean 0 and variance 1 per dimension whatever the inputs (a
    common vector added to every feature does not reach the output). 'none' keeps MoCo-v2's three layers."""
    from invfast.pretrain.heads import ProjectionHead

    torch.manual_seed(0)
    plain = ProjectionHead(6, 5, 4)
    assert [type(m).__name__ for m in plain] == ["Linear", "ReLU", "Linear"] and plain[0].bias is not None
    head = ProjectionHead(6, 5, 4, norm="bn").double().train()
    x = torch.randn(32, 6, dtype=torch.float64) * 3 + 7.0  # features far from the origin, all sharing a vector
    z = head(x)
    w1, w2 = head[0].weight, head[3].weight
    g, b = head[1].weight, head[1].bias
    h = x @ w1.T
    h = (h - h.mean(0)) / torch.sqrt(h.var(0, unbiased=False) + head[1].eps) * g + b
    o = torch.relu(h) @ w2.T
    want = (o - o.mean(0)) / torch.sqrt(o.var(0, unbiased=False) + head[4].eps)
    torch.testing.assert_close(z, want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(z.mean(0), torch.zeros(4, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(head(x + 100.0), z, rtol=1e-6, atol=1e-6)  # the shared vector is gone
    with pytest.raises(ValueError, match="head norm must be one of none, bn, got 'layer'"):
        ProjectionHead(6, 5, 4, norm="layer")


def test_moco_with_a_batch_normalised_head_records_it_and_trains():
    enc = TinyEncoder()
    m = MoCoV2(enc, RandomAug(), queue_size=16, proj_dim=8, head_norm="bn")
    assert m.config()["head_norm"] == "bn" and "head_norm" not in MoCoV2(TinyEncoder(), RandomAug()).config()
    assert type(m.key.heads[0][-1]).__name__ == "BatchNorm1d"  # the key network is the same network
    g = torch.Generator().manual_seed(0)
    x = torch.rand(8, 3, 16, 16, generator=g)
    v1, v2 = m.make_views(x, 0, g)
    loss = m.training_loss(v1, v2, 0, generator=g)
    loss.backward()
    grad = enc.body[0].weight.grad
    assert torch.isfinite(loss) and grad is not None and grad.abs().sum() > 0
