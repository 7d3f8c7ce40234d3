"""Views over fresh backgrounds (issue 56): Transforms-2D's layers give its images byte for byte, and the two
views of FreshBackgrounds share the object and nothing of the background."""

import numpy as np
import pytest
import torch

from invfast.ops.synth import composite
from invfast.pretrain.backgrounds import FreshBackgrounds, as_layers
from invfast.synthetic import Transforms2D


class _Identity:
    """A policy whose view is the image itself, as float 0..255 (so the compositing is read directly)."""

    def view(self, images, generator=None):
        return images.to(torch.float64)


@pytest.mark.parametrize("backgrounds", ["uniform-random", "bank"])
@pytest.mark.parametrize("view", [0, 3])
def test_layers_composite_to_the_images(rng, backgrounds, view):
    seed, n = int(rng.integers(0, 2**31 - 1)), int(rng.integers(1, 40))
    kw = {} if backgrounds == "bank" else {"backgrounds": backgrounds}
    ds = Transforms2D(objects=5, transforms=("translate", "rotate", "hue"), size=16, n=n, seed=seed, **kw)
    images, labels, params = ds.generate(range(n), view=view)
    objects, bgs, labels2, params2 = ds.generate_layers(range(n), view=view)
    assert objects.dtype == torch.float32 and objects.shape == (n, 4, 16, 16)
    assert float(objects[:, 3].min()) >= 0 and float(objects[:, 3].max()) <= 1
    assert torch.equal(composite(objects, bgs, torch.arange(n)), images)
    assert torch.equal(labels, labels2)
    assert all(torch.equal(params[k], params2[k]) for k in params)


def test_layers_are_the_same_in_chunks():
    ds = Transforms2D(objects=3, transforms=("translate", "scale"), size=8, n=5000, seed=7)
    whole = ds.generate_layers(range(5000))
    parts = [ds.generate_layers(range(s, min(s + 700, 5000))) for s in range(0, 5000, 700)]
    for j in (0, 1, 2):
        assert torch.equal(whole[j], torch.cat([p[j] for p in parts]))


def test_views_share_the_object_and_not_the_background(rng):
    n, S = 64, 24
    ds = Transforms2D(objects=4, transforms=("translate",), size=S, n=n, seed=int(rng.integers(0, 2**31 - 1)))
    layers = ds.generate_layers(range(n))[0]
    g = torch.Generator().manual_seed(int(rng.integers(0, 2**31 - 1)))
    v1, v2 = FreshBackgrounds(_Identity())(layers, generator=g)
    alpha = layers[:, 3:4].expand(-1, 3, -1, -1)
    obj = alpha == 1
    bg = alpha == 0
    assert obj.any() and bg.any()
    # where the object covers the pixel both views show it exactly (rounded as the compositing rounds)
    want = (layers[:, :3] * 255).clamp(0, 255).round().to(torch.float64)
    assert torch.equal(v1[obj], want[obj]) and torch.equal(v2[obj], want[obj])
    # where nothing covers it each view shows its own uniform noise: independent, mean 127.5, variance 5461
    a, b = v1[bg].numpy(), v2[bg].numpy()
    k = a.size
    assert abs(a.mean() - 127.5) < 6 * 73.9 / np.sqrt(k)
    assert abs(a.var() / (256**2 - 1) * 12 - 1) < 0.05
    assert abs(np.corrcoef(a, b)[0, 1]) < 6 / np.sqrt(k)
    assert (a == b).mean() < 0.02


def test_views_follow_the_generator(rng):
    layers = torch.rand(6, 4, 10, 10, generator=torch.Generator().manual_seed(1))
    layers[:, :3] *= layers[:, 3:]
    s = int(rng.integers(0, 2**31 - 1))
    aug = FreshBackgrounds(_Identity())
    first = aug(layers, generator=torch.Generator().manual_seed(s))
    again = aug(layers, generator=torch.Generator().manual_seed(s))
    other = aug(layers, generator=torch.Generator().manual_seed(s + 1))
    assert all(torch.equal(x, y) for x, y in zip(first, again))
    assert not torch.equal(first[0], other[0])
    assert not torch.equal(first[0], first[1])


def test_uint8_layers_are_read_as_0_to_255():
    x = torch.randint(0, 256, (2, 4, 5, 5), dtype=torch.uint8)
    assert torch.allclose(as_layers(x), x.float() / 255)


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.zeros(2, 3, 8, 8), r"premultiplied RGBA \[B, 4, H, W\], got \(2, 3, 8, 8\)"),
        (torch.zeros(4, 8, 8), r"got \(4, 8, 8\)"),
        (torch.zeros(2, 4, 8, 8, dtype=torch.float64), "uint8 .* or float32 .*, got torch.float64"),
    ],
)
def test_bad_layers_are_refused_in_one_line(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        FreshBackgrounds(_Identity())(bad, generator=torch.Generator())


def test_a_policy_without_views_is_refused():
    with pytest.raises(TypeError, match="view\\(images, generator\\)"):
        FreshBackgrounds(lambda x, generator=None: (x, x))


def test_a_real_policy_runs_on_layers():
    from invfast import transforms as T

    layers = Transforms2D(objects=3, transforms=("translate",), size=16, n=8, seed=2).generate_layers(range(8))[0]
    v1, v2 = FreshBackgrounds(T.policy("appearance", size=16))(layers, generator=torch.Generator().manual_seed(0))
    assert v1.shape == v2.shape == (8, 3, 16, 16) and v1.dtype == torch.float32
    assert not torch.equal(v1, v2)
