"""Supervised pretraining through the Trainer (LabelledSource, Supervised) and the periodic held-out
probe (HeldoutProbe, knn_accuracy), against scikit-learn and float64 numpy references."""

import json

import numpy as np
import pytest
import torch
from test_pretrain_fixtures import RandomAug, TinyEncoder, blob_images

from invfast.data import ArraySource
from invfast.pretrain import (
    HeldoutProbe,
    LabelledSource,
    MoCoV2,
    Supervised,
    TrainConfig,
    Trainer,
    knn_accuracy,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def cfg(**kw):
    base = dict(
        batch_size=16, epochs=3, size=16, lr=0.05, checkpoint_every=4, log_every=2, progress=False, device="cpu"
    )
    base.update(kw)
    return TrainConfig(**base)


def labelled(n=96, seed=0):
    """Blob images labelled by whether the blob's red channel exceeds one half (the background stays below)."""
    x = blob_images(n, seed=seed)
    y = (x[:, 0].float().amax((1, 2)) > 127).long()
    return x, y


def test_knn_accuracy_matches_sklearn(rng):
    from sklearn.neighbors import KNeighborsClassifier

    for _ in range(3):
        fit, test = rng.normal(size=(80, 6)), rng.normal(size=(50, 6))
        y_fit = rng.integers(0, 4, 80)
        y_test = (test[:, 0] > 0).astype(int) + 2 * (test[:, 1] > 0)
        T = 0.1
        ref = KNeighborsClassifier(7, metric="cosine", weights=lambda d, T=T: np.exp((1.0 - d) / T), algorithm="brute")
        ref.fit(fit, y_fit)
        got = knn_accuracy(
            torch.from_numpy(fit),
            torch.from_numpy(y_fit),
            torch.from_numpy(test),
            torch.from_numpy(y_test),
            k=7,
            temperature=T,
        )
        assert got == pytest.approx(ref.score(test, y_test), abs=1e-12)


def test_heldout_probe_against_sklearn(rng):
    from sklearn.linear_model import LogisticRegression

    n, d, c = 120, 5, 3
    y = np.repeat(np.arange(c), n // c)
    centres = rng.normal(size=(c, d)) * 1.5
    f = centres[y] + rng.normal(size=(n, d)) * np.array([1, 2, 0.5, 3, 1])
    probe = HeldoutProbe(
        torch.zeros(n, 3, 4, 4, dtype=torch.uint8), y, fit_fraction=0.5, alphas=(0.1, 10.0), max_iter=500
    )
    fi, ti = probe.fit_index.numpy(), probe.test_index.numpy()
    # stratified: half of each class fits, the rest is scored
    assert np.bincount(y[fi]).tolist() == [20, 20, 20] and not set(fi) & set(ti) and len(fi) + len(ti) == n
    got = probe.scores(torch.from_numpy(f))
    z = (f - f[fi].mean(0)) / f[fi].std(0, ddof=1)
    best = max(
        LogisticRegression(C=1 / a, max_iter=2000, tol=1e-8).fit(z[fi], y[fi]).score(z[ti], y[ti]) for a in (0.1, 10.0)
    )
    assert abs(got["probe/linear"] - best) <= 1.5 / len(ti)  # at most one test point apart
    std = f.std(0, ddof=1)
    assert got["probe/feature_std_min"] == pytest.approx(std.min()) and got[
        "probe/feature_std_median"
    ] == pytest.approx(np.median(std))
    s = np.linalg.svd(f - f.mean(0), compute_uv=False)
    p = s**2 / (s**2).sum()
    assert got["probe/effective_rank"] == pytest.approx(np.exp(-(p * np.log(p)).sum()))
    # features on one line: effective rank 1, and a constant dimension shows as std 0
    line = np.outer(rng.normal(size=n), rng.normal(size=d))
    line[:, 2] = 3.0
    low = probe.scores(torch.from_numpy(line))
    assert low["probe/effective_rank"] == pytest.approx(1.0, abs=1e-6) and low["probe/feature_std_min"] == 0.0


def test_supervised_loss_is_cross_entropy(rng):
    torch.manual_seed(0)
    m = Supervised(TinyEncoder(dim=8), num_classes=3)
    x, y = blob_images(6), torch.tensor([0, 1, 2, 2, 1, 0])
    inputs = m.make_views((x, y), 0, torch.Generator().manual_seed(0))
    loss = m.training_loss(*inputs).detach()
    logits = m.online(inputs[0]).detach().double().numpy()
    ref = np.mean(np.log(np.exp(logits).sum(1)) - logits[np.arange(6), y.numpy()])
    assert float(loss) == pytest.approx(ref, rel=1e-5)
    # no augmentation: the input is the image, ImageNet-normalised
    mean, std = (
        torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1),
        torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1),
    )
    torch.testing.assert_close(inputs[0], (x.float() / 255 - mean) / std)


def test_supervised_training_learns_and_resumes_exactly(tmp_path):
    x, y = labelled()
    src = LabelledSource(x, y, spec="blobs")

    def make(seed=0):
        torch.manual_seed(seed)
        return Supervised(TinyEncoder(dim=16, bn=True), num_classes=2)

    ref = make()
    before = ref.accuracy(src)
    hist = Trainer(ref, src, cfg(epochs=12, lr=0.1, checkpoint_every=0), out=tmp_path / "ref").fit()
    assert hist[-1]["loss"] < hist[0]["loss"] - 0.2
    assert ref.accuracy(src) >= max(0.8, before + 0.2)
    first = make()
    Trainer(first, src, cfg(epochs=12, lr=0.1), out=tmp_path / "run").fit(until_step=10)
    resumed = make(seed=5)
    Trainer(resumed, src, cfg(epochs=12, lr=0.1), out=tmp_path / "run").fit(resume=True)
    for k, v in ref.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k]), k
    saved = torch.load(tmp_path / "run" / "model.pt", weights_only=False)
    assert saved["config"]["method.method"] == "supervised" and set(saved["encoder"]) == set(ref.encoder.state_dict())


def test_periodic_probe_is_logged_and_changes_nothing(tmp_path):
    x, y = labelled(64)
    probe = HeldoutProbe(x[:32], y[:32])

    def run(out, with_probe):
        torch.manual_seed(0)
        m = MoCoV2(TinyEncoder(bn=True), RandomAug(), queue_size=32, proj_dim=8, key_momentum=0.99)
        t = Trainer(
            m, ArraySource(x), cfg(probe_every=4 if with_probe else 0), out=out, probe=probe if with_probe else None
        )
        return m, t.fit()

    a, hist = run(tmp_path / "a", True)
    b, _ = run(tmp_path / "b", False)
    for k, v in a.state_dict().items():  # eval-mode probing touches no BN statistics, no RNG
        assert torch.equal(v, b.state_dict()[k]), k
    probed = [r for r in hist if "probe/knn" in r]
    assert [r["step"] for r in probed] == [0, 4, 8, 12]
    assert "loss" not in probed[0] and all(0.0 <= r["probe/linear"] <= 1.0 for r in probed)
    lines = [json.loads(s) for s in open(tmp_path / "a" / "metrics.jsonl")]
    assert [r["step"] for r in lines if "probe/knn" in r] == [0, 4, 8, 12]
    # the step-0 record scores the initialisation: the same as probing a fresh copy (stored channels-last
    # as the Trainer stores it on the CPU, so the float sums run in the same order)
    torch.manual_seed(0)
    fresh = MoCoV2(TinyEncoder(bn=True), RandomAug(), queue_size=32, proj_dim=8, key_momentum=0.99).eval()
    fresh.to(memory_format=torch.channels_last)
    assert probe(lambda v: fresh.features(v), 16) == {k: v for k, v in probed[0].items() if k.startswith("probe/")}


def test_bad_input():
    x, y = labelled(32)
    with pytest.raises(ValueError, match="one per image"):
        LabelledSource(x, y[:5])
    with pytest.raises(TypeError, match="integers"):
        LabelledSource(x, y.float())
    with pytest.raises(ValueError, match=">= 0"):
        LabelledSource(x, y - 1)
    with pytest.raises(ValueError, match="num_classes"):
        Supervised(TinyEncoder(), num_classes=1)
    with pytest.raises(TypeError, match="view"):
        Supervised(TinyEncoder(), num_classes=2, augment=RandomAug())
    with pytest.raises(TypeError, match="LabelledSource"):
        Trainer(Supervised(TinyEncoder(), num_classes=2), ArraySource(x), cfg())
    with pytest.raises(ValueError, match="too few"):
        HeldoutProbe(x[:3], [0, 0, 1])
    with pytest.raises(ValueError, match="probe_every"):
        cfg(probe_every=-1)
