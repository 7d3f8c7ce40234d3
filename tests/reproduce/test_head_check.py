"""scripts/head_check.py: the projection head's collapse statistics of a MoCo checkpoint, against numpy."""

import importlib.util
import os

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def hc():
    spec = importlib.util.spec_from_file_location(
        "head_check", os.path.join(HERE, "..", "..", "scripts", "head_check.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _checkpoint(path, collapse: bool):
    from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
    from invfast.models import registry

    torch.manual_seed(0)
    enc = registry.create("resnet18-cifar", width=4).eval()
    d = enc(torch.zeros(1, 3, 32, 32)).shape[1]
    w1, b1 = torch.randn(8, d), torch.randn(8)
    w2, b2 = torch.randn(5, 8) * (0.01 if collapse else 1.0), torch.randn(5) * (10.0 if collapse else 0.1)
    sd = {f"online.encoder.{k}": v for k, v in enc.state_dict().items()}
    sd.update({"online.heads.0.0.weight": w1, "online.heads.0.0.bias": b1})
    sd.update({"online.heads.0.2.weight": w2, "online.heads.0.2.bias": b2})
    cfg = {"arch": "resnet18-cifar", "width": 4, "method.queue_size": 16}
    torch.save({"config": cfg, "model": sd}, path)
    images = np.random.default_rng(1).integers(0, 256, (12, 3, 32, 32), dtype=np.uint8)
    mean, std = np.array(IMAGENET_MEAN).reshape(1, 3, 1, 1), np.array(IMAGENET_STD).reshape(1, 3, 1, 1)
    with torch.no_grad():
        f = enc(torch.from_numpy((images / 255.0 - mean) / std).float()).double().numpy()
    h = f @ w1.double().numpy().T + b1.double().numpy()
    z = np.maximum(h, 0) @ w2.double().numpy().T + b2.double().numpy()
    return images, h, z


@pytest.mark.parametrize("collapse", [False, True])
def test_head_statistics_are_the_outputs_pairwise_cosine_mean_share_and_live_units(hc, tmp_path, collapse):
    images, h, z = _checkpoint(tmp_path / "c.pt", collapse)
    got = hc.head_outputs(str(tmp_path / "c.pt"), images)
    zn = z / np.linalg.norm(z, axis=1, keepdims=True)
    cos = zn @ zn.T
    want_cos = cos[~np.eye(len(z), dtype=bool)].mean()
    assert got["cos"] == pytest.approx(want_cos, abs=1e-4)
    assert got["mean_share"] == pytest.approx(np.sum(z.mean(0) ** 2) / np.mean(np.sum(z**2, 1)), abs=1e-4)
    assert got["alive"] == int((h > 0).any(0).sum()) and got["hidden"] == 8 and got["queue"] == 16
    assert (got["cos"] > 0.99) == collapse  # a head whose bias dwarfs its weights maps every image one way
