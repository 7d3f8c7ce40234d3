"""scripts/background_check.py (issue 56): its top-1 instance discrimination against numpy, and its three inputs
(the image, its background alone, its object over a fresh background per view)."""

import importlib.util
import os

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def bc():
    spec = importlib.util.spec_from_file_location(
        "background_check", os.path.join(HERE, "..", "..", "scripts", "background_check.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Flat(torch.nn.Module):
    def forward(self, x):
        return x.flatten(1)


class _Same:
    """A policy whose view is the image as float."""

    def view(self, images, generator=None):
        return images.to(torch.float32)


def test_top1_matches_numpy(bc, rng):
    n, d = int(rng.integers(5, 60)), int(rng.integers(2, 9))
    v1 = rng.standard_normal((n, d))
    v2 = v1 + rng.normal(0, float(rng.uniform(0.1, 2.0)), (n, d))
    got = bc.top1(_Flat(), torch.tensor(v1, dtype=torch.float32), torch.tensor(v2, dtype=torch.float32))
    a = v1 / np.linalg.norm(v1, axis=1, keepdims=True)
    b = v2 / np.linalg.norm(v2, axis=1, keepdims=True)
    assert got == pytest.approx(float(np.mean(np.argmax(a @ b.T, axis=1) == np.arange(n))))


def test_the_three_inputs(bc, rng):
    from invfast.ops.synth import composite
    from invfast.synthetic import Transforms2D

    n = 24
    ds = Transforms2D(objects=3, transforms=("translate",), size=16, n=n, seed=int(rng.integers(0, 2**31 - 1)))
    objects, backgrounds, _, _ = ds.generate_layers(range(n))
    g = torch.Generator().manual_seed(0)
    image = bc.views(_Same(), "image", objects, backgrounds, g)
    assert torch.equal(image[0], image[1])
    assert torch.equal(image[0], composite(objects, backgrounds, torch.arange(n)).float())
    bg = bc.views(_Same(), "background", objects, backgrounds, g)
    assert torch.equal(bg[0], backgrounds.float())
    obj = bc.views(_Same(), "object", objects, backgrounds, g)
    uncovered = (objects[:, 3:4] == 0).expand(-1, 3, -1, -1)
    covered = (objects[:, 3:4] == 1).expand(-1, 3, -1, -1)
    assert (obj[0][uncovered] != obj[1][uncovered]).float().mean() > 0.9
    assert torch.equal(obj[0][covered], obj[1][covered])
    assert bc.top1(_Flat(), *image) == 1.0
