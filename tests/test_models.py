"""ResNets, Prompt-ViT, the registry, input checks and checkpoints."""

import pytest
import torch
import torch.nn.functional as F

from invfast.models import ARCHITECTURES, PromptViT, ResNet, create, resnet18, resnet50


def test_parameter_counts_match_the_standard_nets():
    # torchvision resnet18/50 have 11,689,512 / 25,557,032 parameters including the fc head
    # (512*1000+1000 / 2048*1000+1000); the CIFAR stem swaps 7x7x3x64 for 3x3x3x64.
    r18 = resnet18(stem="imagenet")
    assert sum(p.numel() for p in r18.parameters()) == 11_689_512 - 513_000
    assert r18.feature_dim == 512
    r18c = resnet18(stem="cifar")
    assert sum(p.numel() for p in r18c.parameters()) == 11_689_512 - 513_000 - (49 - 9) * 3 * 64
    r50 = resnet50(stem="imagenet")
    assert sum(p.numel() for p in r50.parameters()) == 25_557_032 - 2_049_000
    assert r50.feature_dim == 2048


@pytest.mark.parametrize(
    "depth,stem,size",
    [(18, "cifar", 32), (18, "imagenet", 64), (50, "cifar", 32), (50, "imagenet", 32), (34, "cifar", 16)],
)
def test_forward_shapes(depth, stem, size):
    m = ResNet(depth, stem=stem, width=8)
    x = torch.randn(2, 3, size, size)
    f = m(x)
    assert f.shape == (2, m.feature_dim)
    torch.testing.assert_close(m.forward_features(x), f)


def test_resnet_block_against_functional_definition():
    """One BasicBlock written out with F.conv2d / F.batch_norm (train-mode batch statistics)."""
    torch.manual_seed(0)
    m = ResNet(18, stem="cifar", width=4)
    blk = m.blocks[2]  # first block of stage 2: stride 2 with a downsample conv
    x = torch.randn(3, 4, 8, 8)

    def bn(y, mod):
        return F.batch_norm(y, None, None, mod.weight, mod.bias, training=True, eps=mod.eps)

    y = F.relu(bn(F.conv2d(x, blk.conv1.weight, stride=2, padding=1), blk.bn_conv1))
    y = bn(F.conv2d(y, blk.conv2.weight, padding=1), blk.bn_conv2)
    s = bn(F.conv2d(x, blk.downsample.weight, stride=2), blk.bn_downsample)
    torch.testing.assert_close(blk(x), F.relu(y + s))


def test_bad_images():
    m = resnet18(stem="cifar", width=8)
    with pytest.raises(ValueError, match="stem='imagenet'"):
        m(torch.randn(1, 3, 224, 224))
    with pytest.raises(ValueError, match=r"\[B, 3, H, W\]"):
        m(torch.randn(3, 32, 32))
    with pytest.raises(TypeError, match="floating"):
        m(torch.zeros(1, 3, 32, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="stem='cifar'"):
        resnet18(stem="imagenet", width=8)(torch.randn(1, 3, 16, 16))
    with pytest.raises(ValueError, match="stem must be"):
        resnet18(stem="tiny")
    with pytest.raises(ValueError, match="depth"):
        ResNet(20)


def test_registry():
    assert set(ARCHITECTURES) == {
        "resnet18-cifar",
        "resnet18",
        "resnet34-cifar",
        "resnet34",
        "resnet50-cifar",
        "resnet50",
        "resnet18-cifar-solo",
        "resnet34-cifar-solo",
        "resnet50-cifar-solo",
        "hyper-resnet18-cifar",
        "hyper-resnet18",
        "hyper-resnet50",
        "prompt-vit",
        "vgg11-cifar",
        "vit",
    }
    for name in ARCHITECTURES:
        kw = {"dim": 16, "depth": 1, "heads": 2} if "vit" in name else {"width": 4}
        m = create(name, **kw)
        assert m.arch == name
        size = 32 if ("cifar" in name or "vit" in name) else 64
        x = torch.randn(2, 3, size, size)
        f = m(x, torch.tensor([0.0, 1.0])) if name.startswith(("hyper", "prompt")) else m(x)
        assert f.shape == (2, m.feature_dim)
    with pytest.raises(ValueError, match="choose one of"):
        create("vgg16")


def test_state_dict_weights_only_roundtrip(tmp_path):
    m = create("resnet18-cifar", width=8).eval()
    torch.save(m.state_dict(), tmp_path / "r.pt")
    m2 = create("resnet18-cifar", width=8).eval()
    m2.load_state_dict(torch.load(tmp_path / "r.pt", weights_only=True))
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(m2(x), m(x), atol=0, rtol=0)


def test_checkpoint_of_another_architecture_names_keys(tmp_path):
    torch.save(create("resnet18-cifar", width=8).state_dict(), tmp_path / "r18.pt")
    sd = torch.load(tmp_path / "r18.pt", weights_only=True)
    with pytest.raises(ValueError, match=r"'resnet50-cifar'.*missing keys: .*conv3"):
        create("resnet50-cifar", width=8).load_state_dict(sd)
    with pytest.raises(ValueError, match=r"unexpected keys: .*blocks\.0\.conv1\.weight"):
        create("hyper-resnet18-cifar", width=8).load_state_dict(sd)
    with pytest.raises(ValueError, match=r"shape mismatches: stem\.conv\.weight: checkpoint \(8, 3, 3, 3\)"):
        create("resnet18", width=8).load_state_dict(sd)
    with pytest.raises(ValueError, match="shape mismatches"):
        create("resnet18-cifar", width=16).load_state_dict(sd)


def test_prompt_vit_prompt_and_descriptors(rng):
    torch.manual_seed(0)
    m = PromptViT(dim=32, depth=2, heads=4, inv_dim=3, n_projectors=5).eval()
    x = torch.randn(3, 3, 32, 32)
    i = torch.from_numpy(rng.random((3, 3))).float()
    # l_prompt = mean over projectors of Linear . ReLU . Linear, checked one projector at a time
    ref = torch.stack(
        [
            F.linear(F.relu(F.linear(i, m.prompt_w1[p], m.prompt_b1[p])), m.prompt_w2[p], m.prompt_b2[p])
            for p in range(5)
        ]
    ).mean(0)
    torch.testing.assert_close(m.prompt(i), ref)
    with torch.no_grad():
        batched = m(x, i)
        alone = torch.cat([m(x[b : b + 1], i[b]) for b in range(3)])
        torch.testing.assert_close(batched, alone, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(m(x, torch.zeros(3)), m(x, torch.ones(3)))
    with pytest.raises(ValueError, match="img_size"):
        m(torch.randn(1, 3, 64, 64), i[0])
    with pytest.raises(ValueError, match=r"K=3"):
        m(x, torch.rand(2))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        m(x, torch.tensor([0.0, 2.0, 0.5]))
    with pytest.raises(ValueError, match="multiple"):
        PromptViT(img_size=30, patch=4)


def test_prompt_vit_token_order():
    """Position embeddings cover CLS + patches only (the prompt is appended after them), and the
    CLS features depend on i through attention to the prompt token."""
    m = PromptViT(dim=16, depth=1, heads=2)
    assert m.pos_embed.shape == (1, 65, 16)  # CLS + 8x8 patches; the prompt token carries no position
    # not .sum(): the final LayerNorm's outputs sum to its bias (0) for every input, so the gradient of
    # a plain sum is rounding noise (exactly 0 under torch 2.11); project on fixed random weights and
    # compare with central differences in float64
    m = m.double()
    x, w = torch.randn(2, 3, 32, 32, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    i = torch.tensor([0.2, 0.9], dtype=torch.float64, requires_grad=True)
    (m(x, i) @ w).sum().backward()
    h = 1e-6
    fd = torch.stack(
        [
            ((m(x, i.detach() + h * e) @ w).sum() - (m(x, i.detach() - h * e) @ w).sum()) / (2 * h)
            for e in torch.eye(2, dtype=torch.float64)
        ]
    )
    assert float(i.grad.abs().max()) > 1e-6
    torch.testing.assert_close(i.grad, fd.detach(), rtol=1e-5, atol=1e-9)


def test_default_stem_is_imagenet_as_in_torchvision():
    """resnet18()/resnet50() and create("resnet18") build the same ImageNet-stem net and take 224 px
    inputs; the CIFAR stem is asked for by name or stem="cifar"."""
    for fn, name in ((resnet18, "resnet18"), (resnet50, "resnet50")):
        torch.manual_seed(0)
        a = fn(width=4).eval()
        torch.manual_seed(0)
        b = create(name, width=4).eval()
        assert a.stem_kind == b.stem_kind == "imagenet" and a.stem.conv.weight.shape[-1] == 7
        x = torch.randn(1, 3, 224, 224)
        torch.testing.assert_close(a(x), b(x), atol=0, rtol=0)
    assert ResNet(18, width=4).stem_kind == "imagenet"
    assert resnet18(stem="cifar", width=4).stem_kind == create("resnet18-cifar", width=4).stem_kind == "cifar"


def test_create_from_module_factory(tmp_path, monkeypatch):
    (tmp_path / "my_models_pkg.py").write_text(
        "import torch\ndef build(width=3):\n    return torch.nn.Linear(4, width)\nNOT_CALLABLE = 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    m = create("my_models_pkg:build", width=5)
    assert isinstance(m, torch.nn.Linear) and m.out_features == 5 and m.arch == "my_models_pkg:build"
    with pytest.raises(ValueError, match="cannot load model factory"):
        create("my_models_pkg:nope")
    with pytest.raises(ValueError, match="cannot load model factory"):
        create("no_such_module_xyz:build")
    with pytest.raises(TypeError, match="not callable"):
        create("my_models_pkg:NOT_CALLABLE")


# ---------------------------------------------------------------------------------------------- torchvision's API
def test_constructors_take_torchvision_arguments(tmp_path):
    from invfast.models import list_models

    m = resnet50(weights=None, num_classes=0, width=4)
    assert m.fc is None and m.num_classes == 0 and m.stem_kind == "imagenet"
    h = resnet50(num_classes=10, width=4, pretrained=False, progress=False).eval()
    x = torch.randn(2, 3, 64, 64)
    assert h(x).shape == (2, 10) and h.forward_features(x).shape == (2, h.feature_dim)
    with pytest.raises(ValueError, match="downloads no weights"):
        resnet18(pretrained=True)
    with pytest.raises(FileNotFoundError, match="no such checkpoint file"):
        resnet18(weights="IMAGENET1K_V2")
    with pytest.raises(TypeError, match=r"stem='cifar'"):
        resnet18("cifar")
    with pytest.raises(ValueError, match="num_classes"):
        resnet18(num_classes=-1)
    torch.save(h.state_dict(), tmp_path / "h.pt")  # weights= a file: the head and the width come back
    back = resnet50(weights=tmp_path / "h.pt", num_classes=10).eval()
    with torch.no_grad():
        torch.testing.assert_close(back(x), h(x), atol=0, rtol=0)
    assert list_models() == sorted(ARCHITECTURES)
    assert list_models("resnet*-cifar*") == [
        "resnet18-cifar",
        "resnet18-cifar-solo",
        "resnet34-cifar",
        "resnet34-cifar-solo",
        "resnet50-cifar",
        "resnet50-cifar-solo",
    ]
    assert all(
        create(n, **({"dim": 16, "depth": 1, "heads": 2} if "vit" in n else {"width": 4}))
        for n in list_models("*vit*") + list_models("hyper-resnet18-cifar")
    )


def test_head_gives_logits_of_the_pooled_features(rng):
    torch.manual_seed(0)
    m = ResNet(18, stem="cifar", width=4, num_classes=7).eval()
    x = torch.from_numpy(rng.normal(size=(3, 3, 16, 16))).float()
    with torch.no_grad():
        feats = m.blocks(m.stem(x)).mean((2, 3))  # the pooled features, by hand
        torch.testing.assert_close(m.forward_features(x), feats, atol=0, rtol=0)
        want = feats.double() @ m.fc.weight.double().T + m.fc.bias.double()
        torch.testing.assert_close(m(x).double(), want, rtol=1e-5, atol=1e-6)
    assert [k for k in m.state_dict() if not k.startswith(("stem.", "blocks."))] == ["fc.weight", "fc.bias"]


@pytest.mark.parametrize("depth", [18, 50])
def test_default_model_keeps_the_state_dict_of_earlier_versions(depth):
    """Without num_classes the state dict has exactly the invfast names of torchvision's tensors minus fc (the
    names earlier invfast versions saved), in order, and avgpool adds nothing."""
    from invfast.models.checkpoints import torchvision_resnet_keys, torchvision_to_invfast

    tv = {k: torch.zeros(s) for k, s in torchvision_resnet_keys(depth, width=4, fc=None)}
    want, dropped = torchvision_to_invfast(tv)
    m = create(f"resnet{depth}", width=4)
    assert not dropped and list(m.state_dict()) == list(want)
    assert {k: tuple(v.shape) for k, v in m.state_dict().items()} == {k: tuple(v.shape) for k, v in want.items()}
    assert "fc" not in dict(m.named_modules()) and "avgpool" in dict(m.named_modules())


def test_measure_at_the_pooled_features_and_the_logits(rng):
    """layers='avgpool,fc' measures both in one pass; the per-unit variances against float64 numpy on
    features and logits computed by hand."""
    import numpy as np

    import invfast
    import invfast.transforms as T

    torch.manual_seed(1)
    m = create("resnet18-cifar", width=4, num_classes=5).eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
    x = torch.from_numpy(rng.integers(0, 256, (24, 3, 16, 16), dtype=np.uint8))
    t = T.get("hflip")
    r = invfast.measure_invariance(m, x, [t], grid_size=2, batch_size=8, normalize=False, layers="avgpool,fc")
    assert list(r.layers) == ["avgpool", "fc"]
    with torch.no_grad():
        views = t.apply(x, t.grid(2))  # [N, 2, C, H, W]: identity and flipped
        feats = torch.stack([m.blocks(m.stem(views[:, v].float() / 255)).mean((2, 3)) for v in range(2)], 1)
    f = feats.double().numpy()
    logits = f @ m.fc.weight.detach().double().numpy().T + m.fc.bias.detach().double().numpy()
    for name, a in (("avgpool", f), ("fc", logits)):
        tr = r.layers[name]["hflip"]
        assert tr.unit_transform_variance.shape == (a.shape[-1],)
        np.testing.assert_allclose(
            tr.unit_transform_variance.numpy(), a.var(axis=1).mean(axis=0), rtol=1e-4, atol=1e-10
        )
        np.testing.assert_allclose(tr.unit_sample_variance.numpy(), a.var(axis=0).mean(axis=0), rtol=1e-4, atol=1e-10)
    out = invfast.measure_invariance(m, x, [t], grid_size=2, batch_size=8, normalize=False)  # output = the logits
    assert out["hflip"].mean_distance == pytest.approx(r.layers["fc"]["hflip"].mean_distance, rel=1e-5)
    with pytest.raises(ValueError, match="no layer 'fc'"):
        invfast.measure_invariance(create("resnet18-cifar", width=4), x, [t], grid_size=2, layers="avgpool,fc")


def test_vgg11_is_the_cifar_vgg11_without_conv_biases(rng):
    """kuangliu/pytorch-cifar's VGG('VGG11') has 9,231,114 parameters: its 10-class classifier (5,130)
    and conv biases (2,752) aside, 9,223,232 remain; the forward pass is the stack written out."""
    from invfast.models import VGG

    m = VGG(width=64)
    assert sum(p.numel() for p in m.parameters()) == 9_231_114 - 5_130 - 2_752 and m.feature_dim == 512
    small = VGG(width=2).eval()
    x = torch.from_numpy(rng.normal(size=(2, 3, 32, 32))).float()
    y = x
    for layer in small.features:
        if isinstance(layer, torch.nn.Conv2d):
            y = F.conv2d(y, layer.weight, padding=1)
        elif isinstance(layer, torch.nn.BatchNorm2d):
            y = F.batch_norm(y, layer.running_mean, layer.running_var, layer.weight, layer.bias, eps=layer.eps)
        elif isinstance(layer, torch.nn.ReLU):
            y = F.relu(y)
        else:
            y = F.max_pool2d(y, 2)
    torch.testing.assert_close(small(x), y.flatten(1), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="32-64 px"):
        small(torch.randn(1, 3, 16, 16))


def test_vit_is_prompt_vit_without_the_prompt(rng):
    """Speicher et al.'s ViT (patch 8, 7 blocks, 384 units, MLP 384, 8 heads) has the count of its
    pieces; a PromptViT's image path is the plain ViT's (same weights, the prompt token removed)."""
    from invfast.models import ViT

    m = ViT(img_size=32, patch=8, dim=384, depth=7, heads=8, mlp_ratio=1.0)
    block = 2 * 2 * 384 + 384 * 3 * 384 + 3 * 384 + 384 * 384 + 384 + 2 * (384 * 384 + 384)
    want = (3 * 64 * 384 + 384) + 384 + 17 * 384 + 7 * block + 2 * 384
    assert sum(p.numel() for p in m.parameters()) == want
    torch.manual_seed(0)
    p = PromptViT(dim=16, depth=2, heads=2).eval()
    plain = ViT(dim=16, depth=2, heads=2, mlp_ratio=4.0).eval()
    plain.load_state_dict({k: v for k, v in p.state_dict().items() if not k.startswith("prompt_")})
    x = torch.from_numpy(rng.normal(size=(2, 3, 32, 32))).float()
    with torch.no_grad():
        torch.testing.assert_close(plain(x), plain.encode(plain.tokens(x)))
        torch.testing.assert_close(p.encode(p.tokens(x)), plain(x))
