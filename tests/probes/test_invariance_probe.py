"""InvarianceProbe: recovers the descriptor that generated a synthetic target."""

import pytest
import torch
from torch import nn

from invfast.models import HyperResNet
from invfast.probes import NotFittedError
from invfast.probes.invariance_probe import InvarianceProbe, quantize


class MixtureExtractor(nn.Module):
    """Toy amortised extractor: feature group k mixes two input groups with weight i_k, so the
    target y = w . f(x, i*) is fit exactly by a linear head only at i = i*."""

    inv_dim = 2

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward_features(self, x, i):
        a, b, c, d = x.split(x.shape[1] // 4, 1)
        return self.scale * torch.cat([i[..., :1] * a + (1 - i[..., :1]) * b, i[..., 1:] * c + (1 - i[..., 1:]) * d], 1)


def _toy(rng, target_i, n=512):
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(8, generator=g)
    with torch.no_grad():
        y = MixtureExtractor().forward_features(x, torch.tensor(target_i)) @ w
    return x, y


@pytest.mark.parametrize("constraint", ["project", "sigmoid"])
def test_recovers_generating_descriptor_regression(constraint, rng):
    target = [float(v) for v in rng.uniform(0.1, 0.9, size=2)]
    x, y = _toy(rng, target)
    probe = InvarianceProbe(
        MixtureExtractor(),
        task="regression",
        epochs=60,
        batch_size=128,
        constraint=constraint,
        lr_i=0.05 if constraint == "project" else 0.1,
    ).fit(x, y)
    torch.testing.assert_close(probe.i_, torch.tensor(target), atol=0.02, rtol=0)
    assert probe.score(x, y) > 0.999
    assert probe.i_history_.shape == (60, 2)
    assert bool(((probe.i_history_ >= 0) & (probe.i_history_ <= 1)).all())
    # the history is the path from the initialisation to the learned i, not 60 views of the final i
    torch.testing.assert_close(probe.i_history_[-1], probe.i_continuous_)
    assert int((probe.i_history_ != probe.i_continuous_).any(dim=1).sum()) > 10
    assert probe.i_history_.unique(dim=0).shape[0] > 10


def test_recovers_corner_descriptor_classification(rng):
    x, y = _toy(rng, [1.0, 0.0], n=768)
    labels = (y > y.median()).long()
    probe = InvarianceProbe(MixtureExtractor(), task="classification", epochs=40, batch_size=128, lr_i=0.05).fit(
        x, labels
    )
    assert float(probe.i_[0]) > 0.8 and float(probe.i_[1]) < 0.2
    assert probe.score(x, labels) > 0.95
    assert set(probe.predict(x).unique().tolist()) <= {0, 1}


@pytest.mark.parametrize("bits,target", [(2, [2 / 3, 1 / 3]), (3, [6 / 7, 2 / 7])])
def test_quantisation_straight_through(bits, target, rng):
    """A target generated at a quantisation level is recovered exactly through Q(i; b)."""
    x, y = _toy(rng, target)
    probe = InvarianceProbe(MixtureExtractor(), task="regression", epochs=40, batch_size=128, quantize_bits=bits).fit(
        x, y
    )
    torch.testing.assert_close(probe.i_, torch.tensor(target))
    torch.testing.assert_close(quantize(probe.i_continuous_, bits), probe.i_)


def test_quantize_levels():
    torch.testing.assert_close(
        quantize(torch.tensor([0.0, 0.3, 0.5, 0.8, 1.0]), 2), torch.tensor([0.0, 1 / 3, 2 / 3, 2 / 3, 1.0])
    )
    with pytest.raises(ValueError, match="bits"):
        quantize(torch.tensor([0.5]), 0)


def test_model_left_unchanged_and_on_hyper_resnet():
    torch.manual_seed(0)
    model = HyperResNet(18, inv_dim=2, stem="cifar", width=4).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(24, 3, 8, 8)
    y = torch.randint(0, 3, (24,))
    probe = InvarianceProbe(model, epochs=2, batch_size=12).fit(x, y)
    assert model.training and all(p.requires_grad for p in model.parameters())
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert probe.i_.shape == (2,) and bool(((probe.i_ >= 0) & (probe.i_ <= 1)).all())
    assert probe.transform(x).shape == (24, model.feature_dim)


def test_bad_configuration():
    x, y = torch.randn(8, 16), torch.randn(8)
    with pytest.raises(ValueError, match="task"):
        InvarianceProbe(MixtureExtractor(), task="ranking").fit(x, y)
    with pytest.raises(ValueError, match="init"):
        InvarianceProbe(MixtureExtractor(), task="regression", init=1.5).fit(x, y)
    with pytest.raises(ValueError, match="inv_dim"):
        InvarianceProbe(nn.Linear(2, 2), task="regression").fit(x, y)
    with pytest.raises(NotFittedError, match="not fitted"):
        InvarianceProbe(MixtureExtractor()).predict(x)
    with pytest.raises(ValueError, match="rows"):
        InvarianceProbe(MixtureExtractor(), task="regression").fit(x, torch.randn(7))
