"""Issue 62: models that return a Hugging Face style output (``pooler_output`` / ``last_hidden_state``) are
measured by their pooled features without a wrapper; an unknown model name says how to give any other model."""

from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from invfast.measure import measure_invariance
from invfast.measure.extractor import load_model
from invfast.models.outputs import pooled_output


class Output(OrderedDict):
    """transformers' ModelOutput: an ordered dict whose fields are also attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class TokenNet(nn.Module):
    """A tiny 'transformer': patches as tokens, a linear embedding, optionally a pooled token."""

    def __init__(self, pooled: bool):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Linear(3 * 4 * 4, 8)
        self.pool = nn.Linear(8, 8) if pooled else None

    def tokens(self, x):
        b = x.shape[0]
        p = x.unfold(2, 4, 4).unfold(3, 4, 4).permute(0, 2, 3, 1, 4, 5).reshape(b, -1, 3 * 16)
        return self.embed(p)  # [B, T, 8]

    def forward(self, x):
        h = self.tokens(x)
        out = Output(last_hidden_state=h)
        if self.pool is not None:
            out["pooler_output"] = torch.tanh(self.pool(h[:, 0]))
        return out


class Wrapped(nn.Module):
    def __init__(self, net, how):
        super().__init__()
        self.net, self.how = net, how

    def forward(self, x):
        h = self.net.tokens(x)
        return torch.tanh(self.net.pool(h[:, 0])) if self.how == "pooler" else h.mean(1)


@pytest.mark.parametrize("pooled", [True, False])
def test_a_model_output_is_measured_as_its_pooled_features(pooled, rng):
    images = torch.from_numpy(rng.integers(0, 256, (24, 3, 16, 16), dtype=np.uint8))
    net = TokenNet(pooled)
    kw = dict(transforms=["hflip", "rotation"], grid_size=3, batch_size=8, progress=False)
    got = measure_invariance(net, images, **kw)
    ref = measure_invariance(Wrapped(net, "pooler" if pooled else "mean"), images, **kw)
    for t in ("hflip", "rotation"):
        assert got.transforms[t].mean_cosine == pytest.approx(ref.transforms[t].mean_cosine, rel=1e-6)


def test_pooled_output_picks_the_pooled_field_then_the_token_mean():
    h = torch.randn(2, 5, 3)
    assert torch.equal(pooled_output(Output(last_hidden_state=h)), h.mean(1))
    p = torch.randn(2, 3)
    assert pooled_output(Output(last_hidden_state=h, pooler_output=p)) is p
    t = torch.randn(2, 3)
    assert pooled_output(t) is t
    odd = (t, t)
    assert pooled_output(odd) is odd  # refused by the caller, not guessed at


def test_an_unusable_output_is_one_clear_error(rng):
    images = torch.from_numpy(rng.integers(0, 256, (19, 3, 16, 16), dtype=np.uint8))

    class Maps(nn.Module):
        def forward(self, x):
            return x  # [B, 3, H, W]: not pooled

    with pytest.raises(ValueError, match=r"pooled features \[B, D\], one row per image .* got \(\d+, 3, 16, 16\)"):
        measure_invariance(Maps(), images, transforms=["hflip"], grid_size=2, progress=False)


def test_an_unknown_model_name_says_how_to_give_any_model():
    with pytest.raises(ValueError, match=r"unknown model 'vit_b_16': invfast's own are .*module:callable"):
        load_model("vit_b_16")
