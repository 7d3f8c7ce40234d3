"""S1's and S8's supervised models train until their own-data accuracy reaches the rules' level, at most
``criterion_epochs`` epochs (``invfast.reproduce.stages.supervised.fit_supervised``)."""

import dataclasses
import os

import pytest
import torch

from invfast.reproduce.presets import preset
from invfast.reproduce.rules.speicher import TRAINED_LEVEL
from invfast.reproduce.stages import supervised as S
from invfast.reproduce.stages.context import Context
from invfast.reproduce.stages.pretraining import train_config


def _trainer(ctx, key, epochs, n=64):
    from invfast.models import create
    from invfast.pretrain import LabelledSource, Supervised, Trainer

    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8, generator=g)
    labels = torch.arange(n) % 4
    data = LabelledSource(images, labels, spec=f"test:{key}")
    torch.manual_seed(0)
    method = Supervised(create("resnet18-cifar", width=4), num_classes=4)
    tc = train_config(ctx, key, epochs, n, lr=0.05)
    spe = n // ctx.cfg.pretrain.batch_size
    tc = dataclasses.replace(tc, log_every=spe, checkpoint_every=spe, progress=False)
    return Trainer(method, data, tc, out=os.path.join(ctx.cache, key))


def _ctx(tmp_path, criterion_epochs):
    cfg = preset("tiny", {"pretrain.batch_size": 16, "speicher.criterion_epochs": criterion_epochs})
    return Context(cfg, str(tmp_path), progress=False)


def _scripted(monkeypatch, accuracies, calls):
    """own_data_accuracy returning the scripted accuracies, one per check, in order."""

    def make(ctx, data, n):
        def accuracy(model):
            calls.append(1)
            return accuracies[len(calls) - 1]

        return accuracy

    monkeypatch.setattr(S, "own_data_accuracy", make)


def test_stops_at_the_first_epoch_that_reaches_the_level(tmp_path, monkeypatch):
    ctx, calls = _ctx(tmp_path, criterion_epochs=6), []
    _scripted(monkeypatch, [0.5, 0.8, 0.95, 0.99, 0.99], calls)
    trainer = _trainer(ctx, "m", 6)
    out = S.fit_supervised(ctx, trainer, None, 64, TRAINED_LEVEL)
    assert out == {"stopped": "criterion", "epochs_trained": 3, "level": TRAINED_LEVEL} and len(calls) == 3
    assert trainer.step == 3 * trainer.steps_per_epoch < trainer.total_steps
    assert os.path.exists(os.path.join(ctx.cache, "m", "model.pt"))
    # a rerun reads where it stopped: no training, no check, the same record
    again = S.fit_supervised(ctx, _trainer(ctx, "m", 6), None, 64, TRAINED_LEVEL)
    assert again == out and len(calls) == 3


def test_the_cap_ends_training_that_never_reaches_the_level(tmp_path, monkeypatch):
    ctx, calls = _ctx(tmp_path, criterion_epochs=3), []
    _scripted(monkeypatch, [0.1] * 10, calls)
    trainer = _trainer(ctx, "m", 3)
    out = S.fit_supervised(ctx, trainer, None, 64, TRAINED_LEVEL)
    assert out == {"stopped": "cap", "epochs_trained": 3, "level": TRAINED_LEVEL}
    assert len(calls) == 2  # after epochs 1 and 2; the last epoch is the cap's


def test_a_killed_run_resumes_to_the_same_stop_and_weights(tmp_path, monkeypatch):
    """Stopped after epoch 2 (as a kill would leave it: a checkpoint, no model file), the rerun continues and stops
    at the same epoch with the same weights as an uninterrupted run."""
    script = [0.2, 0.4, 0.93]
    ctx_a, calls = _ctx(tmp_path / "a", criterion_epochs=6), []
    _scripted(monkeypatch, script, calls)
    whole = _trainer(ctx_a, "m", 6)
    S.fit_supervised(ctx_a, whole, None, 64, TRAINED_LEVEL)
    ctx_b = _ctx(tmp_path / "b", criterion_epochs=6)
    part = _trainer(ctx_b, "m", 6)
    part.fit(until_step=2 * part.steps_per_epoch)  # the 'killed' run: two epochs, checkpointed
    calls.clear()
    _scripted(monkeypatch, script[1:], calls)  # the check after epoch 2 comes first on resume
    out = S.fit_supervised(ctx_b, _trainer(ctx_b, "m", 6), None, 64, TRAINED_LEVEL)
    assert out == {"stopped": "criterion", "epochs_trained": 3, "level": TRAINED_LEVEL}
    a = torch.load(os.path.join(ctx_a.cache, "m", "model.pt"), weights_only=False)["encoder"]
    b = torch.load(os.path.join(ctx_b.cache, "m", "model.pt"), weights_only=False)["encoder"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_without_a_criterion_the_run_trains_its_epochs(tmp_path, monkeypatch):
    ctx, calls = _ctx(tmp_path, criterion_epochs=0), []
    _scripted(monkeypatch, [1.0] * 5, calls)
    trainer = _trainer(ctx, "m", 2)
    assert S.fit_supervised(ctx, trainer, None, 64, TRAINED_LEVEL) == {"stopped": "epochs", "epochs_trained": 2}
    assert not calls and trainer.step == trainer.total_steps


def test_the_real_check_is_nearest_class_mean_on_held_out_images(tmp_path):
    """own_data_accuracy: the model's NCM accuracy on held-out images of its data, class means from training ones."""
    import numpy as np

    from invfast.reproduce.stages.context import extract
    from invfast.reproduce.stages.transfer import transfer_dataset

    ctx = _ctx(tmp_path, preset("tiny").speicher.criterion_epochs)
    cfg = ctx.cfg
    torch.manual_seed(0)
    from invfast.models import create

    model = create("resnet18-cifar", width=4).eval()
    got = S.own_data_accuracy(ctx, transfer_dataset, 64)(model)
    fx, fy, _ = transfer_dataset(cfg, "train", 64).generate(range(min(64, 4 * cfg.speicher.transfer_n_target)))
    tx, ty, _ = transfer_dataset(cfg, "test", cfg.speicher.transfer_n_target).generate(
        range(cfg.speicher.transfer_n_target)
    )
    a, b = extract(model, fx).astype(np.float64), extract(model, tx).astype(np.float64)
    means = np.stack([a[fy.numpy() == c].mean(0) for c in np.unique(fy.numpy())])
    pred = np.unique(fy.numpy())[((b[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)]
    assert got == pytest.approx(float((pred == ty.numpy()).mean()))


def test_criterion_epochs_is_validated():
    with pytest.raises(ValueError, match=r"criterion_epochs must be an integer in \[0, 100000\]"):
        preset("tiny", {"speicher.criterion_epochs": -1})
    with pytest.raises(ValueError, match=r"criterion_epochs must be an integer in \[0, 100000\], got 1000000"):
        preset("tiny", {"speicher.criterion_epochs": 10**6})


def test_the_report_says_which_models_reached_the_criterion_and_which_the_cap():
    from invfast.reproduce.sections.learning import criterion_summary, under_trained

    def rec(stopped, epochs, own):
        return {
            "ratio": 2.0,
            "learned": True,
            "stopped": stopped,
            "epochs_trained": epochs,
            "ncm_trained": own,
            "level": 0.9,
            "source": "same",
        }

    results = {
        "transfer-train-same": rec("criterion", 4, 0.93),
        "s8-train": {
            "models": {
                "s8-first-1": rec("criterion", 9, 0.91),
                "s8-first-6": rec("cap", 30, 0.55),
                "s8-first-9": rec("cap", 30, 0.92),  # reached in its last allowed epoch: it counts as reached
            }
        },
        "s3-train": {"models": {"s3-C-C": {"ratio": 1.5, "learned": True, "ncm_trained": 0.6}}},
    }
    rows = under_trained(results)
    assert rows["s3-C-C"] == {"ratio": 1.5, "learned": True}  # no criterion: nothing to say
    text = criterion_summary(list(rows.values()))
    assert text == (
        "3 of 4 reached own-data accuracy 0.9 (after 4–30 epochs); "
        "1 ended at their epoch cap below it (own-data 0.55–0.55)"
    )
    assert criterion_summary([rows["s3-C-C"]]) == ""
