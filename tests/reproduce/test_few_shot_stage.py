"""C4's few-shot settings with i learned per episode (``invfast.reproduce.stages.few_shot``): the same episodes and
splits as the fixed models', the same readout, and i learned on the support set only."""

import numpy as np
import pytest
import torch
from torch import nn

from invfast.measure import WithDescriptor
from invfast.probes import few_shot_classification, few_shot_regression
from invfast.reproduce.presets import preset
from invfast.reproduce.stages import few_shot as F
from invfast.reproduce.stages.context import extract


class BlindAmortised(nn.Module):
    """An 'amortised' extractor whose features do not depend on i (a fixed random projection of the pixels)."""

    inv_dim = 2

    def __init__(self, seed=0, dim=12):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.proj = nn.Parameter(torch.randn(3 * 8 * 8, dim, generator=g) / 8, requires_grad=False)

    def forward_features(self, x, i):
        return x.flatten(1) @ self.proj + 0.0 * i.sum()

    def forward(self, x, i):
        return self.forward_features(x, i)


class SeesI(BlindAmortised):
    """Features scaled per group by i: i changes the features, so a learned i can differ between episodes."""

    def forward_features(self, x, i):
        f = x.flatten(1) @ self.proj
        half = f.shape[1] // 2
        return torch.cat([f[:, :half] * (0.2 + i[..., :1]), f[:, half:] * (0.2 + i[..., 1:])], 1)


def _data(rng, n=90, classes=5):
    images = torch.from_numpy(rng.integers(0, 256, (n, 3, 8, 8), dtype=np.uint8))
    labels = np.repeat(np.arange(classes), n // classes)
    rng.shuffle(labels)
    targets = rng.normal(size=(n, 2)).astype(np.float32)
    return images, labels, targets


def _cfg():
    return preset(
        "tiny", {"data.objects": 5, "chavhan.fewshot_episodes": 6, "chavhan.fewshot_splits": 3, "chavhan.ip_epochs": 2}
    )


def test_blind_model_scores_exactly_as_its_fixed_features(rng):
    """Where i cannot change the features, learning it per episode changes nothing: every episode's and every
    split's score equals the fixed path's on the same features (same episodes, same readout)."""
    images, labels, targets = _data(rng)
    model, cfg = BlindAmortised(), _cfg()
    x = extract(WithDescriptor(model, [0.5, 0.5]).eval(), images)
    for kind, y in (("classification", labels), ("regression", targets)):
        fixed = F.few_shot_fixed(x, y, kind, cfg, seed=11)
        learned = F.few_shot_learned_i(model, images, y, kind, cfg, seed=11)
        assert fixed.keys() == learned.keys()
        for setting in fixed:
            np.testing.assert_allclose(learned[setting], fixed[setting], rtol=1e-4, atol=1e-4)


def test_fixed_path_is_the_librarys_few_shot(rng):
    images, labels, targets = _data(rng)
    x = rng.normal(size=(len(labels), 7)).astype(np.float32)
    cfg = _cfg()
    got = F.few_shot_fixed(x, labels, "classification", cfg, seed=3)
    ref = few_shot_classification(x, labels, n_way=5, k_shot=5, n_query=13, episodes=6, alpha=1.0, seed=3)
    np.testing.assert_allclose(got["5-way 5-shot"], ref.scores, rtol=1e-4)
    got = F.few_shot_fixed(x, targets, "regression", cfg, seed=3)
    ref = few_shot_regression(x, targets, fractions=(0.05, 0.2), splits=3, alpha=1.0, seed=3)
    np.testing.assert_allclose(got["few-shot s=0.2"], ref[0.2].scores, rtol=1e-4, atol=1e-6)


def test_i_is_learned_on_the_support_set_only(rng, monkeypatch):
    """Each episode's i is fitted on exactly its support images (never a query), each split's on its train part."""
    images, labels, targets = _data(rng)
    model, cfg = SeesI(), _cfg()
    seen = []
    real = F._learn_i

    def spy(model_, kind, x, y, cfg_, seed):
        seen.append((kind, x.shape[0], y.shape[0]))
        return real(model_, kind, x, y, cfg_, seed)

    monkeypatch.setattr(F, "_learn_i", spy)
    out = F.few_shot_learned_i(model, images, labels, "classification", cfg, seed=5)
    assert [len(v) for v in out.values()] == [6, 6]
    assert seen == [("classification", 5, 5)] * 6 + [("classification", 25, 25)] * 6
    assert all(0.0 <= v <= 1.0 for v in out["5-way 1-shot"])
    seen.clear()
    out = F.few_shot_learned_i(model, images, targets, "regression", cfg, seed=5)
    m1, m2 = round(0.05 * 90), round(0.2 * 90)
    assert seen == [("regression", m1, m1)] * 3 + [("regression", m2, m2)] * 3
    assert set(out) == {"few-shot s=0.05", "few-shot s=0.2"}


def test_too_few_samples_for_a_split_is_one_clear_error(rng):
    images, labels, targets = _data(rng, n=20)
    with pytest.raises(ValueError, match="train fraction 0.05 of 20 samples leaves 1 train"):
        F.few_shot_learned_i(SeesI(), images, targets, "regression", _cfg(), seed=0)
