"""The pretraining policies' colour jitter against torchvision's ``ColorJitter`` semantics, written out
independently in float64 numpy and ``colorsys`` (torchvision itself cannot be installed here):

- ``ColorJitter.get_params``: ``fn_idx = randperm(4)``; brightness, contrast, saturation factors
  uniform in ``[max(0, 1 - s), 1 + s]``, hue uniform in ``[-h, h]``; the four ops in ``fn_idx`` order;
- brightness ``clamp(f·x)``; contrast: blend with the mean of the grayscale image (0.2989, 0.587,
  0.114); saturation: blend with the grayscale image; every blend clamped to [0, 1];
- hue on float images: RGB -> HSV (hexcone), ``h = (h + f) mod 1``, back to RGB.

Issue 26 asked whether Default fails to learn because the jitter differs from torchvision's; these
tests say it does not (same ops, order and strengths, MoCo-v2's 0.4/0.4/0.4/0.1 with p = 0.8)."""

import colorsys
import itertools
import math

import numpy as np
import pytest
import torch

import invfast.transforms as T

GRAY = np.array([0.2989, 0.587, 0.114])


def _blend(a, b, f):
    return np.clip(f * a + (1 - f) * b, 0.0, 1.0)


def tv_colour_jitter(img, factors, order):
    """torchvision's tensor ColorJitter on one float image [3, H, W] (float64 numpy)."""
    x = img.copy()
    for op in order:
        f = factors[op]
        if op == 0:
            x = _blend(x, np.zeros_like(x), f)
        elif op == 1:
            mean = np.tensordot(GRAY, x, axes=1).mean()
            x = _blend(x, np.full_like(x, mean), f)
        elif op == 2:
            x = _blend(x, np.broadcast_to(np.tensordot(GRAY, x, axes=1), x.shape), f)
        else:
            out = np.empty_like(x)
            for i, j in itertools.product(range(x.shape[1]), range(x.shape[2])):
                h, s, v = colorsys.rgb_to_hsv(*x[:, i, j])
                out[:, i, j] = colorsys.hsv_to_rgb((h + f) % 1.0, s, v)
            x = out
    return x


def test_jitter_matches_torchvision_semantics(rng):
    pol = T.policy("appearance", size=12, p_grayscale=0.0, p_blur=0.0, normalize=False)
    images = torch.from_numpy(rng.integers(0, 256, (6, 3, 12, 12), dtype=np.uint8))
    params = pol.sample(6, (12, 12), torch.Generator().manual_seed(int(rng.integers(1 << 30))))
    params["jitter"][:] = True
    params["order"][0] = torch.tensor([3, 2, 1, 0])  # hue first, brightness last: order matters
    params["order"][1] = torch.tensor([0, 1, 2, 3])
    # the Appearance policy resizes to round(12·256/224) = 14 and centre-crops 12 before the jitter
    base = T.preprocess(images.float() / 255, resize=14, crop=12).double().numpy()
    got = pol.apply(images.float() / 255, params).double().numpy()
    for i in range(6):
        f = params["factors"][i].double().numpy()
        ref = tv_colour_jitter(base[i], f, params["order"][i].tolist())
        np.testing.assert_allclose(got[i], ref, atol=2e-5, err_msg=f"image {i}, order {params['order'][i].tolist()}")
    # the order is not a detail: hue-first and brightness-first differ on saturated pixels
    f = params["factors"][0].double().numpy()
    assert np.abs(tv_colour_jitter(base[0], f, [3, 2, 1, 0]) - tv_colour_jitter(base[0], f, [0, 1, 2, 3])).max() > 1e-3


@pytest.mark.statistical
def test_jitter_factors_and_order_are_drawn_as_torchvision(rng):
    from scipy import stats

    pol = T.policy("default", size=32)
    assert pol.config.jitter_strength == (0.4, 0.4, 0.4, 0.1) and pol.config.p_jitter == 0.8
    n = 24000
    p = pol.sample(n, (32, 32), torch.Generator().manual_seed(int(rng.integers(1 << 30))))
    f = p["factors"].numpy()
    for k, (lo, hi) in enumerate([(0.6, 1.4), (0.6, 1.4), (0.6, 1.4), (-0.1, 0.1)]):
        assert lo <= f[:, k].min() and f[:, k].max() <= hi
        assert stats.kstest(f[:, k], stats.uniform(lo, hi - lo).cdf).pvalue > 1e-4, k
    # randperm(4): all 24 orders equally likely
    codes = [tuple(r) for r in p["order"].tolist()]
    counts = np.array([codes.count(perm) for perm in itertools.permutations(range(4))])
    assert counts.sum() == n and stats.chisquare(counts).pvalue > 1e-4
    on = p["jitter"].double().mean().item()
    assert abs(on - 0.8) < 4 * math.sqrt(0.16 / n)
