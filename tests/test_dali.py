"""DALI backend (skipped without nvidia-dali): deterministic test transforms agree with the torch path,
policies run from memory and from folders, are deterministic given the seed, and yield torch tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import invfast.transforms as T

pytest.importorskip("nvidia.dali")
D = pytest.importorskip("invfast.transforms.dali")
skimage_data = pytest.importorskip("skimage.data")


@pytest.fixture(scope="module")
def photos() -> torch.Tensor:
    x = [
        torch.from_numpy(np.ascontiguousarray(getattr(skimage_data, n)()[..., :3])).permute(2, 0, 1)[None]
        for n in ("astronaut", "chelsea", "coffee")
    ]
    return torch.cat([T.preprocess(a, resize=64, crop=64) for a in x])


# exact: flips, 90-degree rotations, integer translations, brightness, invert; otherwise at most one level
# on a few pixels (DALI's warp/blur/grey arithmetic rounds differently), mean abs error stated per case
CASES = [
    ("hflip", [0.0, 1.0], 0.0),
    ("vflip", [0.0, 1.0], 0.0),
    ("rotation", [90.0, 180.0, 270.0], 0.0),
    ("translation", [[3.0, -2.0], [-5.0, 7.0]], 0.0),
    ("brightness", [0.5, 1.5, 3.0], 0.0),
    ("invert", [0.0, 1.0], 0.0),
    ("rotation", [30.0, 137.0], 0.01),
    ("scale", [0.5, 1.7], 0.01),
    ("shear", [[20.0, -10.0], [-140.0, 40.0]], 0.01),
    ("translation", [[2.5, 1.5]], 0.01),
    ("crop", [[0.0, 1 / 12, 0.75, 0.5], [0.25, 0.25, 0.25, 0.75]], 0.01),
    ("grayscale", [0.0, 1.0], 0.6),
    ("blur", [0.5, 2.0, 6.0], 0.05),
]


@pytest.mark.parametrize("name,params,mae", CASES)
def test_dali_test_transforms_agree_with_torch(name, params, mae, photos):
    yd = D.apply_test_transform(name, photos, params)
    yt = T.get(name).apply(photos, params)
    assert yd.shape == yt.shape and yd.dtype == torch.uint8
    diff = (yd.int() - yt.int()).abs()
    if mae == 0.0:
        assert torch.equal(yd, yt)
    else:
        assert diff.max() <= (2 if name == "grayscale" else 1) and diff.double().mean() <= mae


def test_routed_to_torch(photos):
    assert set(D.DALI_TRANSFORMS) < set(T.TEST_TRANSFORMS)
    assert torch.equal(D.apply_test_transform("equalize", photos, [1.0]), T.get("equalize").apply(photos, [1.0]))


@pytest.mark.parametrize("name", T.POLICIES)
def test_dali_policy_views(name, photos):
    pol = T.policy(name, size=32, backend="dali")
    v1, v2 = pol(photos)
    assert v1.shape == v2.shape == (3, 3, 32, 32) and v1.dtype == torch.float32
    assert not torch.equal(v1, v2)
    w1, _ = T.policy(name, size=32, backend="dali")(photos)
    assert torch.equal(v1, w1)  # same seed, same views
    g1, _ = pol(photos, generator=torch.Generator().manual_seed(5))
    g2, _ = pol(photos, generator=torch.Generator().manual_seed(5))
    assert torch.equal(g1, g2)
    m = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    s = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    d = v1 * s + m
    assert d.min() >= -1e-4 and d.max() <= 1 + 1e-4


def test_dali_appearance_without_randomness_matches_torch(photos):
    kw = dict(p_jitter=0.0, p_grayscale=0.0, p_blur=0.0, normalize=False)
    vd, _ = T.policy("appearance", size=32, backend="dali", **kw)(photos)
    r = T.resize(photos.float() / 255, 37)  # 64 -> 37, both antialiased (different filters)
    # DALI rounds the centre-crop offset 2.5 up (3); torchvision/invfast round half to even (2)
    assert (vd - r[..., 3:35, 3:35]).abs().mean() * 255 < 0.6
    vt, _ = T.policy("appearance", size=32, **kw)(photos, torch.Generator().manual_seed(0))
    torch.testing.assert_close(vt, r[..., 2:34, 2:34], atol=1e-6, rtol=0)


def test_dali_policy_consecutive_calls_return_their_own_images(photos):
    """Each call's views come from that call's images (DALI's default prefetch depth of 2 made every call
    after the first return the previous call's images). The appearance policy without randomness is a
    resize + centre crop; resize_ratio 36/32 makes the crop margin even, so DALI and torch crop alike."""
    kw = dict(p_jitter=0.0, p_grayscale=0.0, p_blur=0.0, normalize=False, resize_ratio=36 / 32)
    dali_pol = T.policy("appearance", size=32, backend="dali", **kw)
    torch_pol = T.policy("appearance", size=32, **kw)
    inputs = [photos, photos[[1, 2, 0]], photos.flip(-1), photos]  # same batch size: one pipeline reused
    want = [torch_pol(x, torch.Generator().manual_seed(0))[0] for x in inputs]

    def mae(a, b):
        return float((a - b).abs().mean()) * 255

    for k, x in enumerate(inputs):
        v1, v2 = dali_pol(x)
        assert mae(v1, want[k]) < 0.6 and mae(v2, want[k]) < 0.6, f"call {k + 1} is not of its own images"
        if k:
            assert mae(v1, want[k - 1]) > 5.0  # the previous call's images are far from these
    assert mae(want[0], want[1]) > 5.0


def test_dali_loader_from_arrays_and_folder(photos, tmp_path):
    loader = D.DaliLoader.from_arrays(photos, "default", batch_size=2, labels=[3, 4, 5])
    batches = list(loader)
    assert len(batches) == 1
    v1, v2, lab = batches[0]
    assert v1.shape == (2, 3, 224, 224) and lab.tolist() == [3, 4]
    for c in range(2):
        (tmp_path / f"class{c}").mkdir()
        for i in range(3):
            Image.fromarray(photos[i].permute(1, 2, 0).numpy()).save(tmp_path / f"class{c}" / f"{i}.png")
    loader = D.DaliLoader.from_folder(tmp_path, T.policy("spatial", size=32), batch_size=3, shuffle=False)
    seen = []
    for v1, _v2, lab in loader:
        assert v1.shape == (3, 3, 32, 32) and v1.dtype == torch.float32
        seen += lab.tolist()
    assert sorted(seen) == [0, 0, 0, 1, 1, 1]
    with pytest.raises(ValueError, match="not a directory"):
        D.DaliLoader.from_folder(tmp_path / "missing", "default", batch_size=2)
    with pytest.raises(ValueError, match="labels must have one entry"):
        D.DaliLoader.from_arrays(photos, "default", batch_size=2, labels=[1])
