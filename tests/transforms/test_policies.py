"""Pretraining policies (SPEC §2.2): sampling statistics, determinism, per-sample application against a
per-image loop built from PIL and the single-image ops, descriptors, bad input."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from PIL import Image

import invfast.backend as backend
import invfast.transforms as T
from invfast.ops.color import adjust_hue, luma
from invfast.transforms import functional as Fn
from invfast.transforms.policy_config import IMAGENET_MEAN, IMAGENET_STD

skimage_data = pytest.importorskip("skimage.data")


@pytest.fixture(scope="module")
def batch() -> torch.Tensor:
    imgs = [
        np.asarray(Image.fromarray(getattr(skimage_data, n)()[..., :3]).resize((72, 64), Image.BILINEAR))
        for n in ("astronaut", "chelsea", "coffee", "rocket")
    ]
    return torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).contiguous()


def _denorm(v: torch.Tensor) -> torch.Tensor:
    m = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    s = torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    return v * s + m


@pytest.mark.parametrize("name", T.POLICIES)
@pytest.mark.parametrize("size", [32, 48])
def test_shapes_determinism_and_independent_views(name, size, batch):
    pol = T.policy(name, size=size)
    v1, v2 = pol(batch, generator=torch.Generator().manual_seed(3))
    assert v1.shape == v2.shape == (4, 3, size, size) and v1.dtype == torch.float32
    w1, w2 = pol(batch, generator=torch.Generator().manual_seed(3))
    assert torch.equal(v1, w1) and torch.equal(v2, w2)
    assert not torch.equal(v1, v2)
    u1, _ = pol(batch, generator=torch.Generator().manual_seed(4))
    assert not torch.equal(u1, v1)
    # uint8 and float input give the same views
    f1, _ = pol(batch.float() / 255, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(f1, v1, atol=1e-5, rtol=0)
    d = _denorm(v1)
    assert d.min() >= -1e-5 and d.max() <= 1 + 1e-5


def test_sampling_statistics_over_10000_draws():
    pol = T.policy("solarize-default", size=224)
    n = 10_000
    p = pol.sample(n, (256, 320), torch.Generator().manual_seed(0))
    tol = 4 * np.sqrt(0.25 / n)  # 4 standard errors of a proportion
    for key, prob in (("jitter", 0.8), ("grayscale", 0.2), ("blur", 0.5), ("flip", 0.5), ("solarize", 0.5)):
        assert abs(p[key].double().mean().item() - prob) < tol, key
    f = p["factors"]
    for j, (lo, hi) in enumerate(((0.6, 1.4), (0.6, 1.4), (0.6, 1.4), (-0.1, 0.1))):
        assert f[:, j].min() >= lo and f[:, j].max() <= hi
        assert abs(f[:, j].mean().item() - (lo + hi) / 2) < 0.01
    assert torch.equal(torch.sort(p["order"], dim=1).values, torch.arange(4).expand(n, 4))
    # each op comes first about a quarter of the time
    first = torch.bincount(p["order"][:, 0], minlength=4).double() / n
    assert (first - 0.25).abs().max() < 0.02
    s = p["sigma"]
    assert s.min() >= 0.1 and s.max() <= 2.0 and abs(s.mean().item() - 1.05) < 0.02
    top, left, h, w = p["crop"].unbind(1)
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= 256).all() and (left + w <= 320).all()
    area = h * w / (256 * 320)
    ratio = w / h
    assert area.min() >= 0.19 and area.max() <= 1.0
    assert ratio.min() >= 0.74 and ratio.max() <= 1.34
    # torchvision's rejection sampling (naive per-sample loop) gives the same area and ratio distribution
    ref = np.array([_torchvision_rrc(random.Random(i), 256, 320) for i in range(n)])
    ref_area = ref[:, 2] * ref[:, 3] / (256 * 320)
    assert abs(area.mean().item() - ref_area.mean()) < 0.01
    assert abs(area.std().item() - ref_area.std()) < 0.01
    assert abs(torch.log(ratio).mean().item() - np.log(ref[:, 3] / ref[:, 2]).mean()) < 0.01
    # the spatial policy switches colour off; the appearance policy switches crop/flip off
    ps = T.policy("spatial").sample(1000, (64, 64), torch.Generator().manual_seed(0))
    assert not ps["jitter"].any() and not ps["grayscale"].any() and not ps["blur"].any() and ps["flip"].any()
    pa = T.policy("appearance").sample(1000, (64, 64), torch.Generator().manual_seed(0))
    assert not pa["flip"].any() and pa["jitter"].any()


def _torchvision_rrc(rng: random.Random, height: int, width: int, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision.transforms.RandomResizedCrop.get_params, one sample at a time."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return (height - height) // 2, (width - width) // 2, height, width


def test_blur_sigma_scales_with_size():
    p = T.policy("default", size=32).sample(2000, (32, 32), torch.Generator().manual_seed(0))
    assert p["sigma"].max() <= 2.0 * 32 / 224 + 1e-9 and p["sigma"].min() >= 0.1 * 32 / 224 - 1e-9


@pytest.mark.parametrize("mode", ["auto", "reference"])
def test_policy_matches_per_image_reference(batch, mode):
    """Sampled params applied per image with PIL (crop+resize, flip) and the single-image colour ops in
    the sampled order, against the batched policy: under auto the fused kernel where the dispatch table runs
    it (CPU with the core built), under 'reference' the torch ops."""
    pol = T.policy("solarize-default", size=40)
    x = batch.float() / 255
    params = pol.sample(4, x.shape[-2:], torch.Generator().manual_seed(11))
    # force every branch on for some images
    params["jitter"][:] = True
    params["blur"][:2] = True
    params["grayscale"][1] = True
    params["solarize"][2] = True
    params["flip"][0] = True
    with backend.use(mode):
        out = _denorm(pol.apply(x, params))
    for i in range(4):
        top, left, h, w = params["crop"][i].tolist()
        img = Image.fromarray(batch[i].permute(1, 2, 0).numpy())
        img = img.resize((40, 40), Image.BILINEAR, box=(left, top, left + w, top + h))
        if params["flip"][i]:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        ref = torch.from_numpy(np.array(img)).permute(2, 0, 1).float().unsqueeze(0) / 255
        f = params["factors"][i].float()
        for op in params["order"][i].tolist():
            if op == 0:
                ref = Fn.adjust_brightness(ref, f[0])
            elif op == 1:
                ref = Fn.adjust_contrast(ref, f[1])
            elif op == 2:
                ref = Fn.adjust_saturation(ref, f[2])
            else:
                ref = adjust_hue(ref, f[3])
        if params["grayscale"][i]:
            ref = luma(ref).expand(1, 3, 40, 40)
        if params["blur"][i]:
            ref = T.get("blur").apply(ref, [float(params["sigma"][i])])[:, 0]
        if params["solarize"][i]:
            ref = torch.where(ref >= 0.5, 1 - ref, ref)
        # PIL's uint8 crop-resize vs our float warp: < 1.5 levels mean abs difference
        assert (out[i] - ref[0]).abs().mean().item() * 255 < 1.5, i


def test_spatial_keeps_colours_and_appearance_keeps_geometry(batch):
    const = torch.zeros(2, 3, 50, 60)
    const[:, 0], const[:, 1], const[:, 2] = 0.2, 0.5, 0.9
    v, _ = T.policy("spatial", size=32)(const, torch.Generator().manual_seed(0))
    torch.testing.assert_close(_denorm(v), const[:, :, :32, :32], atol=1e-5, rtol=0)
    pol = T.policy("appearance", size=32, p_jitter=0.0, p_grayscale=0.0, p_blur=0.0)
    v, _ = pol(batch, torch.Generator().manual_seed(0))
    ref = T.preprocess(batch.float() / 255, resize=37, crop=32)
    torch.testing.assert_close(_denorm(v), ref, atol=1e-5, rtol=0)


def test_descriptors():
    assert len(T.VALID_DESCRIPTORS) == 26 and len(set(T.VALID_DESCRIPTORS)) == 26
    assert all(sum(d) >= 2 and len(d) == 5 for d in T.VALID_DESCRIPTORS)
    assert T.policy_from_descriptor([1, 1]).config == T.policy("default").config
    assert T.policy_from_descriptor([1, 0]).config == T.policy("spatial").config
    assert T.policy_from_descriptor([0, 1]).config == T.policy("appearance").config
    p = T.policy_from_descriptor([1, 0, 0, 0, 1], size=32)
    assert p.config.augmentations == ("crop", "blur") and p.config.size == 32
    assert T.policy_from_descriptor(25).config.augmentations == ("crop", "flip", "jitter", "grayscale", "blur")
    for i in range(26):
        assert len(T.policy_from_descriptor(i).config.augmentations) >= 2
    with pytest.raises(ValueError, match="fewer than two"):
        T.policy_from_descriptor([0, 0, 1, 0, 0])
    with pytest.raises(ValueError, match=r"\[0, 0\]"):
        T.policy_from_descriptor([0, 0])
    with pytest.raises(ValueError, match="0 or 1"):
        T.policy_from_descriptor([0.5, 1])
    with pytest.raises(ValueError, match="2 .spatial, appearance. or 5"):
        T.policy_from_descriptor([1, 1, 1])
    with pytest.raises(ValueError, match="0..25"):
        T.policy_from_descriptor(26)


def test_custom_list_and_bad_input(batch):
    p = T.policy(["crop", "solarize"], size=32)
    assert p.config.augmentations == ("crop", "solarize")
    with pytest.raises(ValueError, match="valid names: default, spatial, appearance, solarize-default"):
        T.policy("moco")
    with pytest.raises(ValueError, match="valid augmentations"):
        T.policy(["crop", "mixup"])
    with pytest.raises(ValueError, match="unknown policy option"):
        T.policy("default", p_jiter=0.5)
    with pytest.raises(ValueError, match="probability"):
        T.policy("default", p_blur=1.5)
    with pytest.raises(ValueError, match="size must be an int"):
        T.policy("default", size=0)
    with pytest.raises(ValueError, match="valid backends"):
        T.policy("default", backend="jax")
    pol = T.policy("default", size=32)
    with pytest.raises(ValueError, match="empty batch"):
        pol(batch[:0])
    with pytest.raises(ValueError, match="3 channels"):
        pol(batch[:, :1])
    with pytest.raises(ValueError, match="uint8"):
        pol(batch.to(torch.int16))


def test_policy_runs_the_fused_kernel_where_the_table_says(batch, monkeypatch):
    """Policy.apply goes through the fused augment_views op exactly where the dispatch table runs that kernel for
    the images' device, and through the torch ops under 'reference'; both give the same views within one grey
    level (before normalisation)."""
    from invfast.transforms import policies

    calls = []
    real = policies.fused_apply
    monkeypatch.setattr(policies, "fused_apply", lambda *a, **k: calls.append(1) or real(*a, **k))
    pol = T.policy("default", size=24, normalize=False)
    params = pol.sample(4, batch.shape[-2:], torch.Generator().manual_seed(5))
    params["jitter"][:] = True
    params["blur"][:2] = True
    with backend.use("reference"):
        ref = pol.apply(batch.float() / 255, params)
    assert calls == []
    got = pol.apply(batch, params)  # uint8 straight into the kernel where it serves
    assert len(calls) == int(backend.uses_kernel("augment_views", "cpu"))
    assert got.shape == ref.shape == (4, 3, 24, 24)
    assert (got - ref).abs().max() <= 1 / 255 + 1e-6
