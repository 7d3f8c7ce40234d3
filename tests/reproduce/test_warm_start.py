"""C7's Prompt-ViT starts from the trained Default ViT (issue 56): every shared weight copied, the prompt network
left at its initialisation, a source that does not fit refused."""

import pytest
import torch

from invfast.models import create
from invfast.reproduce.presets import preset
from invfast.reproduce.stages.context import Context
from invfast.reproduce.stages.pretraining import warm_start

SHAPE = dict(img_size=16, patch=8, dim=16, depth=1, heads=2, mlp_ratio=2.0)


class _Ctx(Context):
    def __init__(self, cfg, source):
        super().__init__(cfg, "/nonexistent", progress=False)
        self._source = source

    def model(self, key):
        assert key == "vit-default"
        return self._source


def test_the_prompt_vit_starts_from_the_default_vit(rng):
    torch.manual_seed(int(rng.integers(0, 2**31 - 1)))
    vit, prompt = create("vit", **SHAPE), create("prompt-vit", inv_dim=2, **SHAPE)
    before = {k: v.clone() for k, v in prompt.state_dict().items()}
    assert warm_start(_Ctx(preset("tiny"), vit), "vit-amortised", prompt) == "vit-default"
    after = prompt.state_dict()
    for k, v in vit.state_dict().items():
        assert torch.equal(after[k], v), k
    prompt_keys = [k for k in after if k.startswith("prompt_")]
    assert prompt_keys and all(torch.equal(after[k], before[k]) for k in prompt_keys)


def test_no_warm_start_when_off_or_for_other_models():
    vit, prompt = create("vit", **SHAPE), create("prompt-vit", inv_dim=2, **SHAPE)
    off = preset("tiny").with_values({"vit.warm_start": False})
    before = {k: v.clone() for k, v in prompt.state_dict().items()}
    assert warm_start(_Ctx(off, vit), "vit-amortised", prompt) is None
    assert warm_start(_Ctx(preset("tiny"), vit), "amortised", prompt) is None
    assert all(torch.equal(prompt.state_dict()[k], v) for k, v in before.items())


def test_a_source_of_another_shape_is_refused():
    other = create("vit", **{**SHAPE, "dim": 32})
    prompt = create("prompt-vit", inv_dim=2, **SHAPE)
    with pytest.raises((ValueError, RuntimeError), match="does not match architecture|does not fit the Prompt-ViT"):
        warm_start(_Ctx(preset("tiny"), other), "vit-amortised", prompt)
