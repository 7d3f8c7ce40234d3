"""Invariance measured during training: exact cases, and the paper's finding on synthetic data
(a Spatial-pretrained model is more rotation-invariant than an Appearance-pretrained one)."""

import pytest
import torch
from test_pretrain_fixtures import TinyEncoder, blob_images

from invfast.pretrain import MoCoV2, TrainConfig, Trainer
from invfast.pretrain import invariance as inv


def test_exactly_invariant_features_score_one():
    images = blob_images(40, size=16)

    def pooled(x):  # per-channel mean and mean square: invariant to rot90 and flips, not to grayscale
        return torch.cat([x.mean((2, 3)), (x * x).mean((2, 3))], dim=1)

    s = inv.measure_while_training(pooled, images, size=16, transforms=("rot90", "hflip", "grayscale", "brightness"))
    assert s["rot90"] == pytest.approx(1.0, abs=1e-6)
    assert s["hflip"] == pytest.approx(1.0, abs=1e-6)
    assert s["grayscale"] < 0.9 and s["brightness"] < 0.99


def test_measure_matches_direct_computation():
    import invfast as ivf

    images = blob_images(30, size=16)
    torch.manual_seed(0)
    enc = TinyEncoder(dim=8).eval()
    got = inv.measure_while_training(enc, images, size=16, transforms=("rot90",))["rot90"]
    x = images.float() / 255
    with torch.no_grad():
        f = enc(inv.to_input(x, 16)).double()
        ft = torch.stack([enc(inv.to_input(torch.rot90(x, k, dims=(2, 3)), 16)).double() for k in (1, 2, 3)], 1)
    stats = ivf.FeatureStats().update(f).finalize(shrinkage="ledoit-wolf")
    z = stats.whiten(f)
    zt = stats.whiten(ft)
    cos = torch.nn.functional.cosine_similarity(z.unsqueeze(1), zt, dim=2)
    assert got == pytest.approx(cos.mean().item(), abs=1e-6)


def test_unknown_transform_is_named():
    with pytest.raises(ValueError, match="unknown invariance transform 'twirl'"):
        inv.measure_while_training(lambda x: x.mean((2, 3)), blob_images(8, size=16), 16, transforms=("twirl",))


@pytest.mark.usefixtures("one_thread")
def test_spatial_model_more_rotation_invariant_than_appearance():
    from invfast import transforms as T
    from invfast.data import heldout_source
    from invfast.pretrain.data import open_training_source

    spec = "synthetic:objects=10,transforms=none,n=512,size=32"
    src = open_training_source(spec)
    held = heldout_source(spec, src)
    scores = {}
    for pol in ("spatial", "appearance"):
        torch.manual_seed(0)
        m = MoCoV2(TinyEncoder(dim=64, bn=True), T.policy(pol, size=32), proj_dim=32, queue_size=256, key_momentum=0.99)
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
    assert sp["invariance/rotation"] > ap["invariance/rotation"] + 0.03, msg
    assert sp["invariance/rot90"] > ap["invariance/rot90"], msg
    assert (ap["invariance/grayscale"] + ap["invariance/hue"]) > (sp["invariance/grayscale"] + sp["invariance/hue"]), (
        msg
    )


def test_transforms_are_the_registry_ones():
    """'brightness' and 'grayscale' in a training log mean what invfast measure calls them: the
    registry's brightness grid (factors 0.25..5) and its grayscale, checked against the formulas."""
    import numpy as np

    from invfast.constants import LUMA_WEIGHTS

    images = blob_images(30, size=16)
    x = images.double().numpy() / 255
    t, p = inv.views("brightness")
    np.testing.assert_allclose(p.numpy(), np.linspace(0.25, 5.0, 8), rtol=1e-6)
    got = inv._variants("brightness", images.float() / 255).double().numpy()
    ref = np.clip(x[:, None] * np.linspace(0.25, 5.0, 8)[None, :, None, None, None], 0, 1)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    g = inv._variants("grayscale", images.float() / 255).double().numpy()
    assert g.shape[1] == 1
    luma = np.einsum("c,bchw->bhw", np.asarray(LUMA_WEIGHTS), x)
    np.testing.assert_allclose(g[:, 0], np.repeat(luma[:, None], 3, 1), atol=2e-3)
    xf = images.float() / 255
    r = inv._variants("rot90", xf)
    for j, k in enumerate((1, 2, 3)):
        torch.testing.assert_close(r[:, j], torch.rot90(xf, k, dims=(2, 3)), atol=1e-6, rtol=0)
