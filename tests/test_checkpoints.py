"""Checkpoint layouts: torchvision / MoCo / solo-learn ResNet state dicts load into invfast's ResNet,
and invfast's ResNet exports torchvision's names. The reference is a ResNet forward written out with
F.conv2d / F.batch_norm directly on the torchvision-named tensors, so a renaming bug shows up as
different features."""
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from invfast.models import create, load_checkpoint, to_torchvision_state_dict
from invfast.models.checkpoints import detect_layout, torchvision_resnet_keys
from invfast.models.resnet import LAYOUTS

SEED = int(np.random.SeedSequence().entropy % 2**31)


def random_torchvision_state_dict(depth, width, stem="imagenet", fc=10, seed=SEED):
    """A state dict in torchvision's layout with random weights and BN statistics (eval-mode BN matters)."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, shape in torchvision_resnet_keys(depth, width=width, stem=stem, fc=fc):
        if name.endswith("num_batches_tracked"):
            sd[name] = torch.tensor(7)
        elif name.endswith("running_var"):
            sd[name] = 0.5 + torch.rand(shape, generator=g)
        elif name.endswith(".weight") and len(shape) == 1:  # BN scale
            sd[name] = 0.5 + torch.rand(shape, generator=g)
        else:
            fan = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            sd[name] = torch.randn(shape, generator=g) / fan ** 0.5
    return sd


def torchvision_forward(sd, depth, x, stem="imagenet"):
    """Pooled features of torchvision's ResNet (eval mode) computed from its state dict by formula."""
    def bn(y, p):
        return F.batch_norm(y, sd[p + ".running_mean"], sd[p + ".running_var"], sd[p + ".weight"], sd[p + ".bias"],
                            training=False, eps=1e-5)

    if stem == "imagenet":
        y = F.max_pool2d(F.relu(bn(F.conv2d(x, sd["conv1.weight"], stride=2, padding=3), "bn1")), 3, 2, 1)
    else:
        y = F.relu(bn(F.conv2d(x, sd["conv1.weight"], stride=1, padding=1), "bn1"))
    kind, counts = LAYOUTS[depth]
    for s, n in enumerate(counts):
        for i in range(n):
            p = f"layer{s + 1}.{i}"
            stride = 2 if (s > 0 and i == 0) else 1
            if kind == "basic":
                h = F.relu(bn(F.conv2d(y, sd[p + ".conv1.weight"], stride=stride, padding=1), p + ".bn1"))
                h = bn(F.conv2d(h, sd[p + ".conv2.weight"], padding=1), p + ".bn2")
            else:
                h = F.relu(bn(F.conv2d(y, sd[p + ".conv1.weight"]), p + ".bn1"))
                h = F.relu(bn(F.conv2d(h, sd[p + ".conv2.weight"], stride=stride, padding=1), p + ".bn2"))
                h = bn(F.conv2d(h, sd[p + ".conv3.weight"]), p + ".bn3")
            short = y
            if p + ".downsample.0.weight" in sd:
                short = bn(F.conv2d(y, sd[p + ".downsample.0.weight"], stride=stride), p + ".downsample.1")
            y = F.relu(h + short)
    return y.mean((2, 3))


@pytest.mark.parametrize("depth", [18, 50])
def test_torchvision_layout_loads_and_matches_the_formula(depth):
    torch.manual_seed(SEED)
    sd = random_torchvision_state_dict(depth, width=4)
    x = torch.randn(2, 3, 64, 64)
    with pytest.warns(UserWarning, match=r"fc\.weight"):
        m = load_checkpoint(f"resnet{depth}", sd)  # width read from the checkpoint
    assert m.width == 4
    with torch.no_grad():
        torch.testing.assert_close(m.eval()(x), torchvision_forward(sd, depth, x), atol=1e-4, rtol=1e-4,
                                   msg=f"seed {SEED}")


@pytest.mark.parametrize("wrap", ["moco", "solo-learn", "torchvision-file"])
def test_published_layouts_load(wrap, tmp_path):
    depth = 18
    stem = "cifar" if wrap == "solo-learn" else "imagenet"
    sd = random_torchvision_state_dict(depth, width=4, stem=stem, fc=None)
    other = random_torchvision_state_dict(depth, width=4, stem=stem, fc=None, seed=SEED + 1)
    if wrap == "moco":  # MoCo v2's main_moco.py: DataParallel query + key encoders, an MLP fc head, a queue
        ck = {"epoch": 200, "arch": "resnet18", "state_dict": {
            **{f"module.encoder_q.{k}": v for k, v in sd.items()},
            "module.encoder_q.fc.0.weight": torch.randn(4, 512), "module.encoder_q.fc.0.bias": torch.randn(4),
            "module.encoder_q.fc.2.weight": torch.randn(2, 4), "module.encoder_q.fc.2.bias": torch.randn(2),
            **{f"module.encoder_k.{k}": v for k, v in other.items()},
            "module.queue": torch.randn(2, 16), "module.queue_ptr": torch.zeros(1, dtype=torch.long)}}
        name = "resnet18"
    elif wrap == "solo-learn":  # solo-learn: backbone., momentum_backbone., projector., classifier.
        ck = {"state_dict": {**{f"backbone.{k}": v for k, v in sd.items()},
                             **{f"momentum_backbone.{k}": v for k, v in other.items()},
                             "projector.0.weight": torch.randn(8, 512), "classifier.weight": torch.randn(10, 512)}}
        name = "resnet18-cifar"
    else:
        ck = dict(sd)
        name = "resnet18"
    torch.save(ck, tmp_path / "ck.pth")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = load_checkpoint(name, tmp_path / "ck.pth").eval()
    size = 32 if stem == "cifar" else 64
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        torch.testing.assert_close(m(x), torchvision_forward(sd, depth, x, stem=stem), atol=1e-4, rtol=1e-4)


def test_export_to_torchvision_round_trip():
    torch.manual_seed(SEED)
    m = create("resnet50", width=4)
    with torch.no_grad():  # non-trivial BN statistics, so eval-mode outputs depend on every tensor
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.normal_()
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.normal_()
    m.eval()
    tv = to_torchvision_state_dict(m)
    assert list(tv) == [k for k, _ in torchvision_resnet_keys(50, width=4, fc=None)]
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(torchvision_forward(tv, 50, x), m(x), atol=1e-4, rtol=1e-4)
        back = load_checkpoint(create("resnet50", width=4), tv).eval()
        torch.testing.assert_close(back(x), m(x), atol=0, rtol=0)


def test_torchvision_key_list_matches_the_published_parameter_count():
    # torchvision resnet18 / resnet50 have 11,689,512 / 25,557,032 parameters (BN running stats excluded)
    for depth, total in ((18, 11_689_512), (50, 25_557_032)):
        n = sum(int(np.prod(s)) for k, s in torchvision_resnet_keys(depth)
                if not k.endswith(("running_mean", "running_var", "num_batches_tracked")))
        assert n == total


def test_invfast_layouts_and_mismatches(tmp_path):
    m = create("resnet18-cifar", width=4).eval()
    torch.save({"format": "invfast.pretrained/1", "encoder": m.state_dict()}, tmp_path / "model.pt")
    m2 = load_checkpoint("resnet18-cifar", tmp_path / "model.pt").eval()
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(m2(x), m(x), atol=0, rtol=0)
    assert detect_layout({f"module.{k}": v for k, v in m.state_dict().items()}) == ("invfast", "module.")
    with pytest.raises(ValueError, match=r"does not match.*wrong shape stem\.conv\.weight"):
        load_checkpoint(create("resnet18", width=4), tmp_path / "model.pt")
    with pytest.raises(ValueError, match=r"does not match.*missing .*conv3"):
        load_checkpoint(create("resnet50-cifar", width=4), tmp_path / "model.pt")
    with pytest.raises(FileNotFoundError):
        load_checkpoint("resnet18", tmp_path / "nope.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot read the checkpoint"):
        load_checkpoint("resnet18", tmp_path / "junk.pt")
    with pytest.raises(ValueError, match="no state dict"):
        load_checkpoint("resnet18", {"epoch": 3})


def _tiny_encoder(seed: int) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(), torch.nn.LazyLinear(5))
    m(torch.zeros(1, 3, 6, 6))
    with torch.no_grad():
        for p in m.state_dict().values():
            if p.is_floating_point():
                p.copy_(torch.rand(p.shape, generator=g))
    return m


@pytest.mark.parametrize("wrapper", [None, "encoder", "state_dict", "model", "backbone", "network"])
@pytest.mark.parametrize("prefix", ["", "module.", "backbone.", "encoder_q.", "encoder.", "module.encoder_q."])
def test_models_load_checkpoint_reads_every_layout_measure_accepted(tmp_path, wrapper, prefix):
    """invfast.models.load_checkpoint is the one loader: every layout invfast.measure's load_checkpoint /
    load_model documented (a state dict, bare or under 'encoder' / 'state_dict' / 'model' / 'backbone', keys
    prefixed 'module.', 'backbone.', 'encoder_q.' or 'encoder.'), for a model of any architecture, from a
    file or a dict, strictly; and measure's name gives exactly the same weights."""
    from invfast import measure

    src = _tiny_encoder(1)
    sd = {prefix + k: v for k, v in src.state_dict().items()}
    if prefix:  # what MoCo/solo-learn keep besides the encoder, under other prefixes
        sd["queue"] = torch.zeros(3)
    ck = sd if wrapper is None else {wrapper: sd, "epoch": 7}
    torch.save(ck, tmp_path / "ck.pt")
    for source in (tmp_path / "ck.pt", ck):
        dst = _tiny_encoder(2)
        assert load_checkpoint(dst, source) is dst
        for k, v in src.state_dict().items():
            assert torch.equal(dst.state_dict()[k], v), k
    via_measure = _tiny_encoder(3)
    measure.load_checkpoint(via_measure, tmp_path / "ck.pt")
    assert all(torch.equal(via_measure.state_dict()[k], v) for k, v in src.state_dict().items())
    partial = {k: v for k, v in sd.items() if "running_var" not in k}
    with pytest.raises(ValueError, match="missing 1.running_var"):
        load_checkpoint(_tiny_encoder(4), partial)
