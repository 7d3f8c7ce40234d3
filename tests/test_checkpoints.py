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
            sd[name] = torch.randn(shape, generator=g) / fan**0.5
    return sd


def torchvision_forward(sd, depth, x, stem="imagenet", with_fc=False):
    """Pooled features of torchvision's ResNet (eval mode) computed from its state dict by formula (the logits
    of its ``fc`` with ``with_fc``)."""

    def bn(y, p):
        return F.batch_norm(
            y,
            sd[p + ".running_mean"],
            sd[p + ".running_var"],
            sd[p + ".weight"],
            sd[p + ".bias"],
            training=False,
            eps=1e-5,
        )

    if stem == "imagenet":
        y = F.max_pool2d(F.relu(bn(F.conv2d(x, sd["conv1.weight"], stride=2, padding=3), "bn1")), 3, 2, 1)
    else:  # CIFAR: padding 1, or 2 as solo-learn builds it; no max-pool
        y = F.relu(bn(F.conv2d(x, sd["conv1.weight"], stride=1, padding=2 if stem == "cifar-solo" else 1), "bn1"))
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
    y = y.mean((2, 3))
    return F.linear(y, sd["fc.weight"], sd["fc.bias"]) if with_fc else y


@pytest.mark.parametrize("depth", [18, 50])
def test_torchvision_layout_loads_and_matches_the_formula(depth):
    torch.manual_seed(SEED)
    sd = random_torchvision_state_dict(depth, width=4)
    x = torch.randn(2, 3, 64, 64)
    with pytest.warns(UserWarning, match=r"fc\.weight"):
        m = load_checkpoint(f"resnet{depth}", sd)  # width read from the checkpoint
    assert m.width == 4
    with torch.no_grad():
        torch.testing.assert_close(
            m.eval()(x), torchvision_forward(sd, depth, x), atol=1e-4, rtol=1e-4, msg=f"seed {SEED}"
        )


@pytest.mark.parametrize("wrap", ["moco", "solo-learn", "torchvision-file"])
def test_published_layouts_load(wrap, tmp_path):
    depth = 18
    stem = "cifar-solo" if wrap == "solo-learn" else "imagenet"
    sd = random_torchvision_state_dict(depth, width=4, stem=stem, fc=None)
    other = random_torchvision_state_dict(depth, width=4, stem=stem, fc=None, seed=SEED + 1)
    if wrap == "moco":  # MoCo v2's main_moco.py: DataParallel query + key encoders, an MLP fc head, a queue
        ck = {
            "epoch": 200,
            "arch": "resnet18",
            "state_dict": {
                **{f"module.encoder_q.{k}": v for k, v in sd.items()},
                "module.encoder_q.fc.0.weight": torch.randn(4, 512),
                "module.encoder_q.fc.0.bias": torch.randn(4),
                "module.encoder_q.fc.2.weight": torch.randn(2, 4),
                "module.encoder_q.fc.2.bias": torch.randn(2),
                **{f"module.encoder_k.{k}": v for k, v in other.items()},
                "module.queue": torch.randn(2, 16),
                "module.queue_ptr": torch.zeros(1, dtype=torch.long),
            },
        }
        name = "resnet18"
    elif wrap == "solo-learn":  # solo-learn: backbone., momentum_backbone., projector., classifier.
        ck = {
            "state_dict": {
                **{f"backbone.{k}": v for k, v in sd.items()},
                **{f"momentum_backbone.{k}": v for k, v in other.items()},
                "projector.0.weight": torch.randn(8, 512),
                "classifier.weight": torch.randn(10, 512),
            }
        }
        name = "resnet18-cifar-solo"
    else:
        ck = dict(sd)
        name = "resnet18"
    torch.save(ck, tmp_path / "ck.pth")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = load_checkpoint(name, tmp_path / "ck.pth").eval()
    size = 32 if stem.startswith("cifar") else 64
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
        n = sum(
            int(np.prod(s))
            for k, s in torchvision_resnet_keys(depth)
            if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))
        )
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
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(), torch.nn.LazyLinear(5)
    )
    m(torch.zeros(1, 3, 6, 6))
    with torch.no_grad():
        for p in m.state_dict().values():
            if p.is_floating_point():
                p.copy_(torch.rand(p.shape, generator=g))
    return m


@pytest.mark.parametrize("wrapper", [None, "encoder", "state_dict", "model", "backbone", "network"])
@pytest.mark.parametrize("prefix", ["", "module.", "backbone.", "encoder_q.", "encoder.", "module.encoder_q."])
def test_models_load_checkpoint_reads_every_layout_measure_accepted(tmp_path, wrapper, prefix):
    """invfast.models.load_checkpoint is the one loader: every layout invfast.measure's load_model documented
    (a state dict, bare or under 'encoder' / 'state_dict' / 'model' / 'backbone', keys prefixed 'module.',
    'backbone.', 'encoder_q.' or 'encoder.'), for a model of any architecture, from a file or a dict, strictly."""
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
    partial = {k: v for k, v in sd.items() if "running_var" not in k}
    with pytest.raises(ValueError, match="missing 1.running_var"):
        load_checkpoint(_tiny_encoder(4), partial)


# ------------------------------------------------------------------------------ the classifier head, exported
def handwritten_torchvision_resnet18(num_classes):
    """``torchvision.models.resnet18(num_classes=N).state_dict()``: names and shapes in order, written out
    from torchvision's source (BasicBlock: conv1, bn1, conv2, bn2, then downsample.0/.1 in the first block of
    layer2-4; avgpool has no tensors; fc last), independent of invfast's key generator."""

    def bn(p, c):
        return [
            (f"{p}.weight", (c,)),
            (f"{p}.bias", (c,)),
            (f"{p}.running_mean", (c,)),
            (f"{p}.running_var", (c,)),
            (f"{p}.num_batches_tracked", ()),
        ]

    keys = [("conv1.weight", (64, 3, 7, 7)), *bn("bn1", 64)]
    cin = 64
    for layer, c in ((1, 64), (2, 128), (3, 256), (4, 512)):
        for b in (0, 1):
            p = f"layer{layer}.{b}"
            keys += [
                (f"{p}.conv1.weight", (c, cin if b == 0 else c, 3, 3)),
                *bn(f"{p}.bn1", c),
                (f"{p}.conv2.weight", (c, c, 3, 3)),
                *bn(f"{p}.bn2", c),
            ]
            if b == 0 and layer > 1:
                keys += [(f"{p}.downsample.0.weight", (c, cin, 1, 1)), *bn(f"{p}.downsample.1", c)]
        cin = c
    return keys + [("fc.weight", (num_classes, 512)), ("fc.bias", (num_classes,))]


def test_export_with_head_is_torchvisions_state_dict():
    """What torchvision's load_state_dict(strict=True) checks: exactly its names (in its order) and shapes;
    ResNet-18 with 1000 classes has torchvision's published 11,689,512 parameters."""
    from invfast.models import resnet18

    want = handwritten_torchvision_resnet18(1000)
    sd = to_torchvision_state_dict(resnet18(num_classes=1000))
    assert [(k, tuple(v.shape)) for k, v in sd.items()] == want
    assert sum(int(np.prod(s)) for k, s in want if "running" not in k and "batches" not in k) == 11_689_512
    no_head = to_torchvision_state_dict(resnet18())
    assert [(k, tuple(v.shape)) for k, v in no_head.items()] == want[:-2]  # strict=False: fc is missing


def test_exported_head_gives_the_logits_and_loads_back(tmp_path):
    from invfast.models import resnet18, resnet50

    torch.manual_seed(SEED)
    m = resnet50(num_classes=7, width=4)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.normal_()
                mod.running_var.uniform_(0.5, 1.5)
    m.eval()
    tv = to_torchvision_state_dict(m)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(torchvision_forward(tv, 50, x, with_fc=True), m(x), atol=1e-4, rtol=1e-4)
    torch.save(tv, tmp_path / "tv.pth")  # a torchvision file with its fc: weights= keeps the head
    back = resnet50(weights=tmp_path / "tv.pth", num_classes=7).eval()
    assert back.width == 4
    with torch.no_grad():
        torch.testing.assert_close(back(x), m(x), atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"wrong shape fc\.bias.*has 7 classes: pass num_classes=7"):
        resnet50(weights=tmp_path / "tv.pth", num_classes=3)
    headless = random_torchvision_state_dict(18, width=4, fc=None)
    with pytest.raises(ValueError, match="has no classifier head: build the model without num_classes"):
        resnet18(weights=headless, num_classes=10)


# ------------------------------------------------------------------- solo-learn's CIFAR ResNet, Lightning files
def solo_learn_checkpoint(sd, other, hyper=None):
    """A solo-learn file as PyTorch Lightning writes it: the LightningModule's state dict (backbone,
    momentum backbone, projector, the online linear classifier) and the trainer's own keys."""
    d = sd["layer4.1.bn2.weight"].shape[0]  # ResNet-18's feature dim
    return {
        "epoch": 399,
        "global_step": 78000,
        "pytorch-lightning_version": "1.9.5",
        "state_dict": {
            **{f"backbone.{k}": v for k, v in sd.items()},
            **{f"momentum_backbone.{k}": v for k, v in other.items()},
            "projector.0.weight": torch.randn(8, 512),
            "projector.0.bias": torch.randn(8),
            "classifier.weight": torch.randn(10, d),
            "classifier.bias": torch.randn(10),
        },
        "loops": {"fit_loop": {"epoch_progress": {"total": {"ready": 400}}}},
        "callbacks": {"ModelCheckpoint{'monitor': None}": {"best_model_path": "", "best_model_score": None}},
        "optimizer_states": [{"state": {}, "param_groups": [{"lr": 0.3, "params": [0, 1]}]}],
        "lr_schedulers": [],
        "hparams_name": "kwargs",
        "hyper_parameters": hyper or {},
    }


def test_solo_learn_cifar_builds_its_stem_and_matches_padding_2(tmp_path):
    """solo-learn's CIFAR ResNet: conv1 3x3, stride 1, padding 2, no max-pool. resnet18(weights=...) builds that
    stem from the file; its output is exactly that of a Conv2d(padding=2)-BN-ReLU holding the same weights, and
    the features those of torchvision's forward with padding 2 (not 1: the features differ)."""
    from invfast.models import resnet18

    sd = random_torchvision_state_dict(18, width=8, stem="cifar", fc=None)
    other = random_torchvision_state_dict(18, width=8, stem="cifar", fc=None, seed=SEED + 1)
    torch.save(solo_learn_checkpoint(sd, other), tmp_path / "solo.ckpt")
    m = resnet18(weights=tmp_path / "solo.ckpt").eval()  # (the projector and momentum backbone are not its keys)
    assert m.stem_kind == "cifar-solo" and m.width == 8 and m.fc is None
    x = torch.randn(2, 3, 32, 32)
    conv = torch.nn.Conv2d(3, 8, 3, stride=1, padding=2, bias=False)
    bn = torch.nn.BatchNorm2d(8).eval()
    with torch.no_grad():
        conv.weight.copy_(sd["conv1.weight"])
        for f in ("weight", "bias", "running_mean", "running_var"):
            getattr(bn, f).copy_(sd[f"bn1.{f}"])
        stem = m.stem(x)
        assert stem.shape == (2, 8, 34, 34)
        torch.testing.assert_close(stem, torch.relu(bn(conv(x))), atol=0, rtol=0)
        feats = m(x)
        torch.testing.assert_close(feats, torchvision_forward(sd, 18, x, stem="cifar-solo"), atol=1e-4, rtol=1e-4)
        assert not torch.allclose(feats, torchvision_forward(sd, 18, x, stem="cifar"), atol=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        head = resnet18(weights=tmp_path / "solo.ckpt", num_classes=10).eval()  # solo-learn's classifier as fc
        ck = torch.load(tmp_path / "solo.ckpt", weights_only=True)["state_dict"]
    with torch.no_grad():
        torch.testing.assert_close(
            head(x), F.linear(feats, ck["classifier.weight"], ck["classifier.bias"]), atol=1e-5, rtol=1e-5
        )


def test_solo_learn_cifar_never_loads_into_padding_1(tmp_path):
    sd = random_torchvision_state_dict(18, width=4, stem="cifar", fc=None)
    ck = solo_learn_checkpoint(sd, sd)
    for source in (ck, ck["state_dict"]):  # the file's dict, or its state dict alone (projector, classifier)
        with pytest.raises(
            ValueError,
            match=r"solo-learn CIFAR ResNet.*padding 1, not 3x3 conv, stride 1, "
            r"padding 2.*'resnet18-cifar-solo'",
        ):
            load_checkpoint("resnet18-cifar", source)
        with pytest.raises(ValueError, match="padding 1, not 3x3 conv, stride 1, padding 2"):
            load_checkpoint(create("resnet18-cifar", width=4), source)
        with pytest.raises(ValueError, match=r"stem is 'imagenet' \(7x7 conv.*'resnet18-cifar-solo'"):
            load_checkpoint("resnet18", source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert load_checkpoint("resnet18-cifar-solo", ck).stem_kind == "cifar-solo"
    bare = {k[len("backbone.") :]: v for k, v in ck["state_dict"].items() if k.startswith("backbone.")}
    assert load_checkpoint("resnet18-cifar", bare).stem_kind == "cifar"  # no sign of solo-learn: the name's stem


def test_lightning_namespace_hyper_parameters_load_with_weights_only(tmp_path):
    """Lightning keeps the run's arguments (an argparse.Namespace with pathlib paths) in hyper_parameters;
    they are allowed for that one load, never process-wide."""
    import argparse
    import pathlib

    from invfast.models import resnet18
    from invfast.models.checkpoints import read_checkpoint

    sd = random_torchvision_state_dict(18, width=4, stem="cifar", fc=None)
    args = argparse.Namespace(
        method="simclr",
        lr=0.4,
        data_dir=pathlib.Path("/data/cifar"),
        crop_size=[32],
        extra_optimizer_args={"momentum": 0.9},
    )
    torch.save(solo_learn_checkpoint(sd, sd, hyper={"args": args, "backbone": "resnet18"}), tmp_path / "pl.ckpt")
    with pytest.raises(Exception, match="weights_only|Unsupported global"):  # what torch alone does with it
        torch.load(tmp_path / "pl.ckpt", weights_only=True)
    _, top = read_checkpoint(tmp_path / "pl.ckpt")
    got = top["hyper_parameters"]["args"]
    assert isinstance(got, argparse.Namespace) and vars(got) == vars(args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = resnet18(weights=tmp_path / "pl.ckpt").eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(m(x), torchvision_forward(sd, 18, x, stem="cifar-solo"), atol=1e-4, rtol=1e-4)
    with pytest.raises(Exception, match="weights_only|Unsupported global"):  # still refused outside invfast's load
        torch.load(tmp_path / "pl.ckpt", weights_only=True)


class _RunsCode:
    """Unpickling this calls ``target`` (a function that writes a file): what a malicious checkpoint does."""

    def __init__(self, target, arg):
        self.target, self.arg = target, arg

    def __reduce__(self):
        return self.target, (self.arg,)


@pytest.mark.parametrize("attack", ["os.system", "allowed-class-method", "inside-namespace"])
def test_a_pickle_that_runs_code_is_still_refused(tmp_path, attack):
    import argparse
    import os
    import pathlib

    marker = tmp_path / "pwned"
    if attack == "os.system":
        payload = _RunsCode(os.system, f"touch {marker}")
    elif attack == "allowed-class-method":  # a method of an allow-listed class is not allowed
        payload = _RunsCode(pathlib.Path.touch, marker)
    else:  # an allowed Namespace holding a forbidden object
        payload = argparse.Namespace(lr=0.1, evil=_RunsCode(os.system, f"touch {marker}"))
    sd = random_torchvision_state_dict(18, width=4, stem="cifar", fc=None)
    torch.save(solo_learn_checkpoint(sd, sd, hyper={"args": payload}), tmp_path / "evil.ckpt")
    with pytest.raises(ValueError, match="only tensors and plain containers are loaded"):
        load_checkpoint("resnet18-cifar-solo", tmp_path / "evil.ckpt")
    assert not marker.exists()
