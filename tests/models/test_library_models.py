"""Other libraries' models by name (``timm:``, ``torchvision:``, ``hf:``, ``open_clip:``): each library's real
model where the package is installed (skipped with the reason where not), and invfast's side of each (input
geometry, head removal, normalisation re-map, exact checkpoints) against stand-in modules that follow the
libraries' documented APIs, so the glue is tested on every machine."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest
import torch
from torch import nn

from invfast.constants import IMAGENET_MEAN, IMAGENET_STD
from invfast.models import InputSpec, LibraryModel, create, load_checkpoint
from invfast.models.library import is_library_spec


def _normalised(u: torch.Tensor, mean, std) -> torch.Tensor:
    return (u - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)


class _TvLike(nn.Module):
    """A model with torchvision ResNet's parameter names (conv1, bn1, layer1.0.conv1, ..., fc)."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        block = nn.Module()
        block.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        block.bn1 = nn.BatchNorm2d(4)
        self.layer1 = nn.Sequential(block)
        self.fc = nn.Linear(4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.layer1[0]
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(b.bn1(b.conv1(x))).mean((2, 3))
        return self.fc(x)


class _TimmLike(_TvLike):
    pretrained_cfg = {"input_size": (3, 40, 40), "crop_pct": 0.8, "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}

    def get_classifier(self) -> nn.Module:
        return self.fc

    def reset_classifier(self, num_classes: int) -> None:
        assert num_classes == 0
        self.fc = nn.Identity()


def _fake_timm() -> types.ModuleType:
    timm = types.ModuleType("timm")
    made: dict[str, object] = {}

    def create_model(name: str, pretrained: bool = False, **kw):
        if name != "tiny":
            raise RuntimeError(f"Unknown model ({name})")  # what timm raises
        made["pretrained"] = pretrained
        return _TimmLike(**kw)

    timm.create_model = create_model
    timm.made = made
    timm.data = types.SimpleNamespace(resolve_model_data_config=lambda m: dict(m.pretrained_cfg))
    return timm


def _fake_torchvision() -> types.ModuleType:
    tv = types.ModuleType("torchvision")
    weights = types.SimpleNamespace(
        DEFAULT=types.SimpleNamespace(
            transforms=lambda: types.SimpleNamespace(
                crop_size=[48], resize_size=[56], mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD)
            )
        )
    )
    tv.models = types.SimpleNamespace(
        get_model=lambda name, weights=None, **kw: _TvLike(**kw), get_model_weights=lambda name: weights
    )
    return tv


def test_library_specs_are_told_from_factories():
    assert is_library_spec("timm:resnet18") and is_library_spec("hf:facebook/dinov2-small")
    assert not is_library_spec("torchvision.models:resnet50")  # a module:callable factory
    assert not is_library_spec("timm:") and not is_library_spec("resnet18")


def test_missing_library_is_one_line_naming_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)  # import fails as for a package not installed
    with pytest.raises(ImportError, match=r"needs the 'open_clip_torch' package.*pip install open_clip_torch"):
        create("open_clip:ViT-B-32")


def test_timm_glue_head_input_and_normalisation(monkeypatch):
    timm = _fake_timm()
    monkeypatch.setitem(sys.modules, "timm", timm)
    torch.manual_seed(0)
    m = create("timm:tiny", classes=7)
    assert isinstance(m, LibraryModel) and m.arch == "timm:tiny" and m.head == "fc"
    assert timm.made["pretrained"] is False  # random weights unless asked
    assert m.input == InputSpec(40, 50, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))  # floor(40 / 0.8)
    u = torch.rand(2, 3, 40, 40)
    got = m(_normalised(u, IMAGENET_MEAN, IMAGENET_STD))  # what invfast feeds a model
    inner = m.model
    assert got.shape == (2, 4)
    torch.testing.assert_close(got, inner(_normalised(u, (0.5,) * 3, (0.5,) * 3)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"cannot build 'timm:nope'.*Unknown model"):
        create("timm:nope")


def test_torchvision_checkpoint_loads_under_its_own_names(monkeypatch, tmp_path):
    """The bug of issue 62: torchvision's names were renamed to invfast's although the target is torchvision's."""
    monkeypatch.setitem(sys.modules, "torchvision", _fake_torchvision())
    torch.manual_seed(1)
    trained = _TvLike().eval()
    for bn in (trained.bn1, trained.layer1[0].bn1):
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    path = tmp_path / "r.pth"
    torch.save({"module." + k: v for k, v in trained.state_dict().items()}, path)  # DDP-prefixed, as saved
    m = create("torchvision:resnet_like")
    assert m.head == "fc" and m.input == InputSpec(48, 56)
    with pytest.warns(UserWarning, match="dropped the removed head"):
        load_checkpoint(m, path)
    u = torch.rand(3, 3, 48, 48)
    x = _normalised(u, IMAGENET_MEAN, IMAGENET_STD)
    trained.fc = nn.Identity()
    torch.testing.assert_close(m.eval()(x), trained(x))
    # and through the name, the checkpoint loaded before the head is removed (no warning)
    m2 = load_checkpoint("torchvision:resnet_like", path).eval()
    torch.testing.assert_close(m2(x), trained(x))


def test_wrong_checkpoint_for_a_library_model_names_the_keys(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", _fake_torchvision())
    m = create("torchvision:resnet_like")
    with pytest.raises(ValueError, match=r"does not match the model 'torchvision:resnet_like'.*missing"):
        load_checkpoint(m, {"something.weight": torch.zeros(3)})


def test_input_spec_is_validated():
    with pytest.raises(ValueError, match="resize"):
        InputSpec(224, 200)
    with pytest.raises(ValueError, match="std must be > 0"):
        InputSpec(224, 256, std=(0.2, 0.0, 0.2))
    with pytest.raises(ValueError, match="size must be an int"):
        InputSpec(0, 256)


_HF = importlib.util.find_spec("transformers") is not None


@pytest.mark.skipif(not _HF, reason="transformers is not installed (pip install transformers to run)")
def test_hf_model_by_local_name_pools_and_normalises_as_its_processor(tmp_path):
    from transformers import AutoModel, ViTConfig, ViTImageProcessor

    torch.manual_seed(2)
    cfg = ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8
    )
    ref = AutoModel.from_config(cfg).eval()
    ref.save_pretrained(tmp_path)
    ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.25] * 3).save_pretrained(
        tmp_path
    )
    m = create(f"hf:{tmp_path}").eval()
    assert m.input == InputSpec(32, 32, (0.5,) * 3, (0.25,) * 3) and m.head is None
    u = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        want = ref(pixel_values=_normalised(u, (0.5,) * 3, (0.25,) * 3)).pooler_output
        got = m(_normalised(u, IMAGENET_MEAN, IMAGENET_STD))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # a state dict of another model of the same architecture, loaded exactly
    other = AutoModel.from_config(cfg).eval()
    load_checkpoint(m, other.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(
            m(_normalised(u, IMAGENET_MEAN, IMAGENET_STD)),
            other(pixel_values=_normalised(u, (0.5,) * 3, (0.25,) * 3)).pooler_output,
            rtol=1e-4,
            atol=1e-5,
        )


@pytest.mark.skipif(not _HF, reason="transformers is not installed (pip install transformers to run)")
def test_hf_clip_uses_its_image_tower(tmp_path):
    from transformers import AutoModel, CLIPConfig

    cfg = CLIPConfig(
        text_config=dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32),
        vision_config=dict(
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=8,
    )
    AutoModel.from_config(cfg).save_pretrained(tmp_path)
    m = create(f"hf:{tmp_path}").eval()
    with torch.no_grad():
        out = m(torch.randn(2, 3, 32, 32))
    assert out.shape == (2, 16) and m.input.size == 32


@pytest.mark.skipif(importlib.util.find_spec("timm") is None, reason="timm is not installed (pip install timm)")
def test_real_timm_model_gives_pooled_features():
    m = create("timm:resnet18").eval()
    assert m.head == "fc" and m.input.size == 224
    with torch.no_grad():
        assert m(torch.randn(1, 3, 64, 64)).shape == (1, 512)


@pytest.mark.skipif(
    importlib.util.find_spec("torchvision") is None, reason="torchvision is not installed (pip install torchvision)"
)
def test_real_torchvision_model_takes_its_own_checkpoint():
    import torchvision

    ref = torchvision.models.resnet18().eval()
    m = load_checkpoint("torchvision:resnet18", ref.state_dict()).eval()
    assert m.input == InputSpec(224, 256)
    x = torch.randn(1, 3, 64, 64)
    ref.fc = nn.Identity()
    with torch.no_grad():
        torch.testing.assert_close(m(x), ref(x))


def test_model_args_read_literals_and_refuse_malformed_pairs():
    from invfast.models.library import model_args

    assert model_args(["pretrained=True", "width=16", "drop=0.1", "name=abc", "size=(1, 2)"]) == {
        "pretrained": True,
        "width": 16,
        "drop": 0.1,
        "name": "abc",
        "size": (1, 2),
    }
    assert model_args(None) == {}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        model_args(["pretrained"])
    with pytest.raises(ValueError, match="given twice"):
        model_args(["a=1", "a=2"])


def test_measure_uses_a_library_models_eval_transform_on_folders(monkeypatch, tmp_path, capsys):
    import argparse

    from invfast.measure.cli import build_model, default_input

    monkeypatch.setitem(sys.modules, "torchvision", _fake_torchvision())
    model = build_model("torchvision:resnet_like", None, kwargs={"classes": 5})
    args = argparse.Namespace(data=f"folder:{tmp_path}", resize=None, crop=None, model="torchvision:resnet_like")
    default_input(args, model)
    assert (args.resize, args.crop) == (56, 48) and "centre-cropped to 48 px" in capsys.readouterr().err
    args = argparse.Namespace(data=f"folder:{tmp_path}", resize=300, crop=None, model="torchvision:resnet_like")
    default_input(args, model)
    assert (args.resize, args.crop) == (300, 48)  # what the user gave is kept
    args = argparse.Namespace(data="synthetic:n=8", resize=None, crop=None, model="torchvision:resnet_like")
    default_input(args, model)
    assert (args.resize, args.crop) == (256, None)  # not a folder: nothing of the model's applied
    own = create("resnet18-cifar", width=8)
    args = argparse.Namespace(data=f"folder:{tmp_path}", resize=None, crop=None, model="resnet18-cifar")
    default_input(args, own)
    assert (args.resize, args.crop) == (256, None)
