"""Pretraining through the real pieces: invfast.models (ResNet, Hyper-ResNet), invfast.transforms
policies and invfast.synthetic data, via the Python API and the CLI."""

import json

import pytest
import torch

from invfast import models
from invfast import transforms as T
from invfast.cli import main
from invfast.data import heldout_source
from invfast.pretrain import AmortisedMoCo, MoCoV2, TrainConfig, Trainer
from invfast.pretrain.data import open_training_source

SYN = "synthetic:objects=6,transforms=rotate+hue,n=48,size=16"


pytestmark = pytest.mark.usefixtures("one_thread")


def test_cli_resnet18_cifar_on_synthetic_data_resumes(tmp_path):
    out = tmp_path / "r18"
    base = [
        "pretrain",
        "--method",
        "mocov2",
        "--policy",
        "spatial",
        "--data",
        SYN,
        "--arch",
        "resnet18-cifar",
        "--width",
        "8",
        "--steps",
        "4",
        "--batch-size",
        "8",
        "--out",
        str(out),
        "--no-progress",
        "--checkpoint-every",
        "2",
        "--log-every",
        "1",
        "--invariance-every",
        "4",
        "--invariance-images",
        "16",
    ]
    assert main(base) == 0
    ck = torch.load(out / "checkpoint.pt", weights_only=False)
    assert ck["config"]["arch"] == "resnet18-cifar" and ck["config"]["method.queue_size"] == 8  # one batch
    recs = [json.loads(x) for x in open(out / "metrics.jsonl")]
    assert recs[-1]["step"] == 4 and 0 < recs[-1]["invariance/rot90"] <= 1
    model = models.create("resnet18-cifar", width=8)
    model.load_state_dict(torch.load(out / "model.pt", weights_only=False)["encoder"])
    assert (
        main(base[: base.index("--width")] + ["--width", "16"] + base[base.index("--width") + 2 :] + ["--resume"]) == 2
    )


def test_amortised_moco_trains_a_hyper_resnet():
    torch.manual_seed(0)
    enc = models.create("hyper-resnet18-cifar", inv_dim=2, width=4)
    m = AmortisedMoCo(enc, descriptors="groups", size=16, queue_size=16, proj_dim=8)
    src = open_training_source(SYN)
    before = enc.out_weight.detach().clone()
    t = Trainer(
        m,
        src,
        TrainConfig(
            batch_size=8, steps=3, size=16, log_every=1, progress=False, invariance_every=3, invariance_images=16
        ),
        heldout=heldout_source(SYN, src),
    )
    hist = t.fit()
    assert not torch.equal(before, enc.out_weight)  # the hypernetwork learns
    assert {r["descriptor"] for r in hist} <= {"default", "spatial", "appearance"}
    assert {
        f"invariance/{d}/{t}"
        for d in ("default", "spatial", "appearance")
        for t in ("rot90", "hflip", "grayscale", "brightness")
    } <= set(hist[-1])
    f_s, f_a = m.features(torch.randn(2, 3, 16, 16), 1), m.features(torch.randn(2, 3, 16, 16), 2)
    assert f_s.shape == f_a.shape == (2, enc.feature_dim)


@pytest.mark.slow
def test_resnet18_spatial_more_rotation_invariant_than_appearance():
    spec = "synthetic:objects=10,transforms=none,n=512,size=32"
    src = open_training_source(spec)
    held = heldout_source(spec, src)
    scores = {}
    for pol in ("spatial", "appearance"):
        torch.manual_seed(0)
        m = MoCoV2(models.create("resnet18-cifar", width=16), T.policy(pol, size=32), queue_size=256, key_momentum=0.99)
        cfg = TrainConfig(
            batch_size=64,
            epochs=8,
            size=32,
            lr=0.06,
            checkpoint_every=0,
            log_every=8,
            progress=False,
            invariance_every=64,
            invariance_images=128,
            invariance_transforms=("rot90", "rotation", "grayscale", "hue"),
        )
        scores[pol] = Trainer(m, src, cfg, heldout=held).fit()[-1]
    sp, ap = scores["spatial"], scores["appearance"]
    msg = {k: (round(sp[k], 3), round(ap[k], 3)) for k in sp if k.startswith("invariance/")}
    assert sp["invariance/rotation"] > ap["invariance/rotation"], msg
