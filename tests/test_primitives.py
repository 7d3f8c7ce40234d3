"""The one home of each maths primitive (DESIGN: luma weights, hue rotation, Gaussian taps, rotation and shear
matrices with one angle convention): each against an independent float64 reference (numpy, colorsys, scipy,
torchvision's published formulas, Pillow); every call site's result against the same references."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from PIL import Image

from invfast.constants import LUMA_WEIGHTS
from invfast.ops.color import adjust_hue, hsv_to_rgb, luma, rgb_to_hsv
from invfast.ops.geometry import compose, rotation_matrix, shear_matrix
from invfast.ops.kernels import gaussian_taps


def _images(rng, shape=(4, 3, 9, 11)) -> torch.Tensor:
    x = torch.from_numpy(rng.random(shape, dtype=np.float32))
    x[0, :, 0, :] = x[0, 0:1, 0, :]  # grey pixels (hue undefined) and saturated ones
    x[1, 1:, 1, :] = 0.0
    return x


# ---------------------------------------------------------------------------------------------- luma


def test_luma_is_the_itu601_weights_and_every_user_shares_it(rng):
    from invfast import demo
    from invfast.ops import synth_reference

    x = _images(rng)
    ref = np.einsum("c,bchw->bhw", np.asarray(LUMA_WEIGHTS, dtype=np.float64), x.double().numpy())
    np.testing.assert_allclose(luma(x)[:, 0].double().numpy(), ref, atol=1e-6, rtol=0)
    assert LUMA_WEIGHTS == (0.2989, 0.587, 0.114)  # torchvision's rgb_to_grayscale
    assert torch.equal(synth_reference.gray(x), luma(x))
    # the demo's grayscale used 0.299 (PIL's L); it now uses the same weights as everything else
    assert torch.equal(demo.EXACT_TRANSFORMS["grayscale"](x), luma(x).expand_as(x))


# ---------------------------------------------------------------------------------------------- hue


def _torchvision_hsv2rgb(img: torch.Tensor) -> torch.Tensor:
    """torchvision.transforms._functional_tensor._hsv2rgb, as published (torchvision 0.17)."""
    h, s, v = img.unbind(dim=-3)
    i = torch.floor(h * 6.0)
    f = (h * 6.0) - i
    i = i.to(dtype=torch.int32)
    p = torch.clamp((v * (1.0 - s)), 0.0, 1.0)
    q = torch.clamp((v * (1.0 - s * f)), 0.0, 1.0)
    t = torch.clamp((v * (1.0 - s * (1.0 - f))), 0.0, 1.0)
    i = i % 6
    mask = i.unsqueeze(dim=-3) == torch.arange(6, device=i.device).view(-1, 1, 1)
    a1 = torch.stack((v, q, p, p, t, v), dim=-3)
    a2 = torch.stack((t, v, v, q, p, p), dim=-3)
    a3 = torch.stack((p, p, t, v, v, q), dim=-3)
    a4 = torch.stack((a1, a2, a3), dim=-4)
    return torch.einsum("...ijk, ...xijk -> ...xjk", mask.to(dtype=img.dtype), a4)


def test_hue_rotation_matches_colorsys_and_torchvision(rng):
    x = _images(rng)
    shift = torch.from_numpy(rng.uniform(-0.5, 0.5, 4).astype(np.float32)).view(-1, 1, 1)
    ref = np.empty(x.shape)
    xn = x.double().numpy()
    for b in range(4):
        for i in range(x.shape[2]):
            for j in range(x.shape[3]):
                h, s, v = colorsys.rgb_to_hsv(*xn[b, :, i, j])
                ref[b, :, i, j] = colorsys.hsv_to_rgb((h + float(shift[b])) % 1.0, s, v)
    for sectors in (False, True):
        np.testing.assert_allclose(adjust_hue(x, shift, sectors=sectors).double().numpy(), ref, atol=2e-6, rtol=0)
    # the sector evaluation is torchvision's own, bit for bit; the closed form agrees to float32 rounding
    hsv = rgb_to_hsv(x)
    assert torch.equal(hsv_to_rgb(hsv, sectors=True), _torchvision_hsv2rgb(hsv))
    torch.testing.assert_close(hsv_to_rgb(hsv), _torchvision_hsv2rgb(hsv), atol=1e-6, rtol=0)


def test_both_hue_kernels_are_torchvisions_formulas(rng):
    """ops.synth_reference.hue_shift (the Transforms-2D colour kernel's reference) is torchvision's sector
    _hsv2rgb at (h + shift) mod 1, bit for bit; the fused views' form is the closed one (adjust_hue)."""
    from invfast.ops import synth_reference

    x = _images(rng)
    shift = torch.from_numpy(rng.uniform(-0.5, 0.5, 4).astype(np.float32))
    h, s, v = rgb_to_hsv(x).unbind(dim=1)
    rotated = torch.stack((torch.remainder(h + shift.view(-1, 1, 1), 1.0), s, v), dim=1)
    assert torch.equal(synth_reference.hue_shift(x, shift), _torchvision_hsv2rgb(rotated))
    assert torch.equal(adjust_hue(x, shift.view(-1, 1, 1)), hsv_to_rgb(rotated))


# ---------------------------------------------------------------------------------------------- Gaussian taps


def _scipy_taps(sigma: float, truncate: float) -> np.ndarray:
    """scipy.ndimage's Gaussian weights, read off the filter's response to a unit impulse."""
    r = int(truncate * sigma + 0.5)
    impulse = np.zeros(2 * r + 1)
    impulse[r] = 1.0
    return ndi.gaussian_filter1d(impulse, sigma, truncate=truncate, mode="constant")[::-1]


def test_truncated_taps_match_scipy(rng):
    sigma = np.concatenate([rng.uniform(0.2, 6.0, 6), [0.0, 1e-7]])
    for truncate in (3.0, 4.0):
        k = gaussian_taps(torch.from_numpy(sigma), truncate=truncate).numpy()
        R = (k.shape[1] - 1) // 2
        assert R == int(truncate * sigma.max() + 0.5)
        for row, s in zip(k, sigma):
            ref = _scipy_taps(s, truncate) if s > 0 else np.array([1.0])
            r = (len(ref) - 1) // 2
            np.testing.assert_allclose(row[R - r : R + r + 1], ref, atol=1e-12, rtol=0)
            assert np.all(row[: R - r] == 0) and np.all(row[R + r + 1 :] == 0)
    cut = gaussian_taps(torch.tensor([10.0, 0.5]), max_radius=4)
    assert cut.shape == (2, 9) and cut[0].min() > 0 and torch.allclose(cut.sum(1), torch.ones(2, dtype=torch.float64))


def test_fixed_size_taps_match_torchvision_formula(rng):
    sigma = rng.uniform(0.1, 8.0, 5)
    for size in (7, 23, 4):
        xs = np.linspace(-(size - 1) / 2, (size - 1) / 2, size)
        ref = np.exp(-0.5 * (xs[None] / sigma[:, None]) ** 2)
        ref /= ref.sum(1, keepdims=True)
        np.testing.assert_allclose(gaussian_taps(torch.from_numpy(sigma), size=size).numpy(), ref, atol=1e-15, rtol=0)
    with pytest.raises(ValueError, match="size"):
        gaussian_taps(torch.ones(2), size=0)
    with pytest.raises(ValueError, match="not both"):
        gaussian_taps(torch.ones(2), size=7, max_radius=3)


def test_degenerate_and_capped_taps_follow_the_formula(rng):
    """Every blur (the blur transform, the fused views with their off-mask as sigma 0, Transforms-2D's fixed
    size, the Ericsson protocol's 23 linspace taps) calls gaussian_taps: a sigma too small to reach the next
    tap is a delta in each form, and a capped radius renormalises over the cut support (float64 numpy)."""
    from invfast.transforms import ericsson_ops

    tiny = torch.tensor([0.0, 1e-9, 3e-7], dtype=torch.float64)
    for kw in ({}, {"max_radius": 5}, {"size": 7}, {"size": 23}):
        k = gaussian_taps(tiny, **kw)
        delta = torch.zeros_like(k)
        delta[:, (k.shape[1] - 1) // 2] = 1.0
        assert torch.equal(k, delta), kw
    sigma = np.concatenate([rng.uniform(0.5, 9.0, 6), [0.7, 1.2, 9.0]])  # 0.7, 1.2: radius under a cap of 5
    for cap in (2, 5):
        radius = np.minimum(np.floor(3.0 * sigma + 0.5), cap)  # truncated at 3 sigma, then capped
        xs = np.arange(-cap, cap + 1)
        ref = np.exp(-0.5 * (xs[None] / sigma[:, None]) ** 2) * (np.abs(xs)[None] <= radius[:, None])
        got = gaussian_taps(torch.from_numpy(sigma), max_radius=cap).numpy()
        np.testing.assert_allclose(got, ref / ref.sum(1, keepdims=True), atol=1e-15, rtol=0)
    xs = np.linspace(-11, 11, 23)
    ref = np.exp(-0.5 * (xs[None] / sigma[:, None]) ** 2)
    got = ericsson_ops.blur_kernels(torch.from_numpy(sigma)).numpy()
    np.testing.assert_allclose(got, ref / ref.sum(1, keepdims=True), atol=1e-15, rtol=0)


def _correlate_mirror(x: np.ndarray, taps: np.ndarray, axis: int) -> np.ndarray:
    return ndi.correlate1d(x, taps, axis=axis, mode="mirror")  # scipy's mirror = torch's reflect padding


def test_separable_filter_is_scipys_mirror_correlation(rng):
    """Every image through every row of taps along both axes (asymmetric taps: a correlation, not a convolution),
    radius up to one less than the shorter side, against scipy's float64 correlate1d with mirror padding; the
    per-image form gives image n filter n."""
    from invfast.ops.kernels import separable_filter, separable_filter_per_image

    H, W = 7, 12
    x = torch.from_numpy(rng.random((3, 2, H, W)))
    for R in (1, 3, H - 1):
        taps = torch.from_numpy(rng.normal(size=(4, 2 * R + 1)))
        got = separable_filter(x, taps).numpy()
        assert got.shape == (3, 4, 2, H, W)
        for p in range(4):
            t = taps[p].numpy()
            ref = _correlate_mirror(_correlate_mirror(x.numpy(), t, 2), t, 3)
            np.testing.assert_allclose(got[:, p], ref, atol=1e-12, rtol=0)
        per_t = separable_filter_per_image(x, taps[:3])
        per = per_t.numpy()
        assert per_t.is_contiguous()  # as the fused-view kernel's output, which callers may .view()
        for n in range(3):
            t = taps[n].numpy()
            ref = _correlate_mirror(_correlate_mirror(x[n].numpy(), t, 1), t, 2)
            np.testing.assert_allclose(per[n], ref, atol=1e-12, rtol=0)


def test_reflect_filter_matrix_sums_every_tap_where_it_reflects(rng):
    """Each row against a loop that adds tap k of row i at the reflected index of sample i + k - R (float64),
    every radius up to n - 1 (where a row's taps land on one sample up to three times), n down to 2."""
    from invfast.ops.kernels import reflect_filter_matrix

    for n in (2, 3, 5, 8):
        for R in range(n):
            taps = rng.normal(size=(3, 2 * R + 1))
            want = np.zeros((3, n, n))
            for i in range(n):
                for k in range(2 * R + 1):
                    q = i + k - R
                    q = -q if q < 0 else (2 * (n - 1) - q if q > n - 1 else q)
                    want[:, i, q] += taps[:, k]
            got = reflect_filter_matrix(torch.from_numpy(taps), n)
            assert got.dtype == torch.float64 and got.shape == (3, n, n)
            np.testing.assert_allclose(got.numpy(), want, atol=1e-14, rtol=0)


def test_reflect_filter_matrix_refuses_a_radius_past_one_reflection():
    from invfast.ops.kernels import reflect_filter_matrix

    with pytest.raises(ValueError, match="radius 4 must be smaller than the length 4"):
        reflect_filter_matrix(torch.ones(1, 9), 4)


# ---------------------------------------------------------------------------------------------- matrices


def test_rotation_convention_forward_inverse_numpy_and_torch(rng):
    deg = rng.uniform(-720, 720, 50)
    t = np.deg2rad(deg)
    fwd = np.stack([np.stack([np.cos(t), np.sin(t)], -1), np.stack([-np.sin(t), np.cos(t)], -1)], -2)
    np.testing.assert_allclose(rotation_matrix(deg), fwd, atol=1e-15, rtol=0)
    inv = rotation_matrix(deg, inverse=True)
    assert np.array_equal(inv, np.swapaxes(rotation_matrix(deg), -1, -2))
    np.testing.assert_allclose(inv, np.linalg.inv(fwd), atol=1e-12, rtol=0)
    torch.testing.assert_close(rotation_matrix(torch.from_numpy(deg)), torch.from_numpy(fwd), atol=1e-15, rtol=0)
    # counter-clockwise as displayed (y down): the point to the right of the centre goes up at +90 degrees
    np.testing.assert_allclose(rotation_matrix(np.array(90.0)) @ np.array([1.0, 0.0]), [0.0, -1.0], atol=1e-15)
    assert rotation_matrix(torch.tensor([30.0])).dtype == torch.float64


def test_shear_is_torchvisions_and_inverse_is_exact(rng):
    sx, sy = rng.uniform(-80, 80, 40), rng.uniform(-80, 80, 40)
    # torchvision _get_inverse_affine_matrix with angle 0, scale 1: RSS = SHy(sy) SHx(sx), published formula
    a = np.cos(-np.deg2rad(sy)) / np.cos(np.deg2rad(sy))
    b = -np.cos(-np.deg2rad(sy)) * np.tan(np.deg2rad(sx)) / np.cos(np.deg2rad(sy))
    c = np.sin(-np.deg2rad(sy)) / np.cos(np.deg2rad(sy))
    d = -np.sin(-np.deg2rad(sy)) * np.tan(np.deg2rad(sx)) / np.cos(np.deg2rad(sy)) + 1.0
    fwd = np.stack([np.stack([a, b], -1), np.stack([c, d], -1)], -2)
    np.testing.assert_allclose(shear_matrix(sx, sy), fwd, rtol=1e-12, atol=1e-12)
    inv = shear_matrix(sx, sy, inverse=True)
    np.testing.assert_allclose(np.einsum("bij,bjk->bik", inv, fwd), np.broadcast_to(np.eye(2), (40, 2, 2)), atol=1e-9)
    torch.testing.assert_close(
        shear_matrix(torch.from_numpy(sx), torch.from_numpy(sy), inverse=True),
        torch.from_numpy(inv),
        atol=1e-12,
        rtol=0,
    )
    A, B = rng.normal(size=(7, 2, 2)), rng.normal(size=(7, 2, 2))
    np.testing.assert_allclose(compose(A, B), A @ B, atol=1e-14, rtol=0)


def test_rotation_and_shear_call_sites_follow_their_conventions(rng):
    """The rotation test transform samples the source through the inverse map [[c, -s], [s, c]]; Transforms-2D
    places objects by the forward map [[c, s], [-s, c]] composed with shear, flips and scale: each call site's
    matrices against those formulas written out in float64, bit for bit."""
    from invfast.synthetic import placement
    from invfast.transforms import builtin, get

    deg = torch.from_numpy(rng.uniform(-720, 720, 64))
    t = torch.deg2rad(deg)
    inverse = torch.stack(
        [torch.stack([torch.cos(t), -torch.sin(t)], -1), torch.stack([torch.sin(t), torch.cos(t)], -1)], -2
    )
    A, _ = builtin.affine_params(get("rotation"), deg.float(), 30, 40)
    tf = torch.deg2rad(deg.float().double())
    assert torch.equal(
        A,
        torch.stack(
            [torch.stack([torch.cos(tf), -torch.sin(tf)], -1), torch.stack([torch.sin(tf), torch.cos(tf)], -1)], -2
        ),
    )
    assert torch.equal(rotation_matrix(deg, inverse=True), inverse)
    sh = torch.from_numpy(rng.uniform(-85, 85, (64, 2))).float()
    tx, ty = torch.tan(torch.deg2rad(sh[:, 0].double())), torch.tan(torch.deg2rad(sh[:, 1].double()))
    A, _ = builtin.affine_params(get("shear"), sh, 30, 40)
    assert torch.equal(
        A, torch.stack([torch.stack([1 + tx * ty, tx], -1), torch.stack([ty, torch.ones_like(tx)], -1)], -2)
    )

    n = 200
    p = {
        "angle": rng.uniform(0, 360, n),
        "shear_x": rng.uniform(-50, 50, n),
        "shear_y": rng.uniform(-50, 50, n),
        "hflip": (rng.random(n) < 0.5).astype(np.float64),
        "vflip": (rng.random(n) < 0.5).astype(np.float64),
        "scale": rng.uniform(0.4, 1.0, n),
    }
    th = np.deg2rad(p["angle"])
    c, s = np.cos(th), np.sin(th)
    tx, ty = np.tan(np.deg2rad(p["shear_x"])), np.tan(np.deg2rad(p["shear_y"]))
    fx, fy, sc = 1.0 - 2.0 * p["hflip"], 1.0 - 2.0 * p["vflip"], p["scale"]
    l00, l01, l10, l11 = sc * fx, sc * tx * fy, sc * ty * fx, sc * (1.0 + tx * ty) * fy
    forward = np.stack(
        [np.stack([c * l00 + s * l10, c * l01 + s * l11], -1), np.stack([-s * l00 + c * l10, -s * l01 + c * l11], -1)],
        -2,
    )
    assert np.array_equal(placement.canonical_linear(p), forward)
    sel = rng.random(n) < 0.5
    ths = np.deg2rad(p["angle"][sel])
    rot = np.stack([np.stack([np.cos(ths), np.sin(ths)], -1), np.stack([-np.sin(ths), np.cos(ths)], -1)], -2)
    assert np.array_equal(placement.type_matrix("rotate", p, sel), rot)
    txs, tys = tx[sel], ty[sel]
    sh_ref = np.stack([np.stack([np.ones_like(txs), txs], -1), np.stack([tys, 1.0 + txs * tys], -1)], -2)
    assert np.array_equal(placement.type_matrix("shear", p, sel), sh_ref)


def _object_image(size: int = 48) -> np.ndarray:
    """An asymmetric RGB test card: a bar to the right of the centre, a dot above it."""
    img = np.zeros((size, size, 3), np.uint8)
    c = size // 2
    img[c - 2 : c + 2, c + 4 : c + 18] = (250, 60, 20)
    img[c - 16 : c - 10, c - 3 : c + 3] = (30, 200, 90)
    return img


def test_rotation_test_transform_turns_like_pillow(rng):
    import invfast.transforms as T

    img = _object_image()
    x = torch.from_numpy(img).permute(2, 0, 1).unsqueeze(0).contiguous()
    for angle in rng.uniform(10, 350, 4):
        got = T.get("rotation").apply(x, [float(angle)])[0, 0].permute(1, 2, 0).numpy().astype(np.float64)
        ref = np.asarray(Image.fromarray(img).rotate(float(angle), resample=Image.BILINEAR), np.float64)
        opp = np.asarray(Image.fromarray(img).rotate(-float(angle), resample=Image.BILINEAR), np.float64)
        err, wrong = np.abs(got - ref).mean(), np.abs(got - opp).mean()
        assert err < 1.5 and wrong > 4 * err, (angle, err, wrong)


def test_transforms2d_rotate_turns_like_pillow():
    """A Transforms-2D sample with angle a is its unrotated sample turned by Image.rotate(a) (an asymmetric
    'F' object, centred, on one grey background): the synthetic data and the test transform share the
    direction."""
    from invfast.synthetic import ObjectBank, Transforms2D

    f = np.zeros((40, 28, 4), np.uint8)
    f[:, :8] = f[:8, :] = f[16:23, :20] = (220, 40, 40, 255)
    bank = ObjectBank([f], ["F"])
    grey = torch.full((1, 3, 48, 48), 128, dtype=torch.uint8)
    plain = Transforms2D(objects=bank, transforms=(), size=48, n=12, seed=1, backgrounds=grey)
    turned = Transforms2D(objects=bank, transforms="rotate", size=48, n=12, seed=1, backgrounds=grey)
    base = Image.fromarray(plain.generate([0])[0][0].permute(1, 2, 0).numpy())
    x1, _, p1 = turned.generate(range(12))
    checked = 0
    for i in range(12):
        a = float(p1["angle"][i])
        got = x1[i].permute(1, 2, 0).numpy().astype(np.float64)
        ref = np.asarray(base.rotate(a, resample=Image.BILINEAR, fillcolor=(128, 128, 128)), np.float64)
        opp = np.asarray(base.rotate(-a, resample=Image.BILINEAR, fillcolor=(128, 128, 128)), np.float64)
        err, wrong = np.abs(got - ref).mean(), np.abs(got - opp).mean()
        assert err < 0.5, (a, err)  # measured: 0.04 grey levels (bilinear both ways)
        if 20 < a % 180 < 160:  # +a and -a differ visibly
            assert wrong > 3 * err, (a, err, wrong)
            checked += 1
    assert checked >= 4


def test_no_private_copy_of_the_maths_is_left():
    """A source scan of invfast/: the luma weights, the HSV hue arithmetic, the Gaussian tap formula and the
    rotation/shear matrix builders appear only in their homes."""
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1] / "invfast"
    homes = {"constants.py", "ops/color.py", "ops/kernels.py", "ops/geometry.py"}
    patterns = {
        "luma weights": re.compile(r"0\.2989|0\.299\b|0\.587\b|0\.114\b"),
        "HSV hue arithmetic": re.compile(
            r"\bh\s*\*\s*6\.0|remainder\(\s*h\s*\+|def \w*(rgb_?to_?hsv|hsv_?to_?rgb|rgb2hsv|hsv2rgb)"
        ),
        "Gaussian taps": re.compile(r"exp\(\s*-0\.5\s*\*"),
        "rotation/shear matrices": re.compile(
            r"def \w*(rotation|shear)_matrix|=\s*(np|torch)\.cos\([^)]*\)\)?,\s*"
            r"(np|torch)\.sin\(|=\s*(np|torch)\.tan\("
        ),
    }
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in homes:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for what, pat in patterns.items():
                if pat.search(line.split("#")[0]):
                    found.append(f"{rel}:{i}: {what}: {line.strip()}")
    assert not found, "maths written outside its home:\n" + "\n".join(found)


def test_compiled_luma_weights_are_the_constants_in_one_place():
    """csrc/common/color.h holds the compiled kernels' luma weights: invfast.constants.LUMA_WEIGHTS in float32;
    no other source under csrc/ writes them out again."""
    import pathlib
    import re

    csrc = pathlib.Path(__file__).resolve().parents[1] / "csrc"
    header = (csrc / "common" / "color.h").read_text()
    found = dict(re.findall(r"kLuma([RGB]) = ([0-9.]+)f", header))
    assert [np.float32(float(found[c])) for c in "RGB"] == [np.float32(w) for w in LUMA_WEIGHTS]
    sources = [p for p in csrc.rglob("*") if p.suffix in (".cpp", ".h", ".cu", ".cuh") and p.name != "color.h"]
    code = {p: re.sub(r"//[^\n]*", "", p.read_text()) for p in sources}  # comments may name the weights
    copies = [str(p.relative_to(csrc)) for p, text in code.items() if re.search(r"0\.2989|0\.587f?\b", text)]
    assert not copies, f"luma weights written out again in {copies}; include common/color.h"


def test_compiled_colour_maths_lives_in_color_h():
    """Luma, RGB -> HSV and HSV -> RGB of every compiled kernel (CPU and CUDA) are csrc/common/color.h's:
    no other source under csrc/ computes a max - min chroma, a hue sector or a luma from the weights."""
    import pathlib
    import re

    csrc = pathlib.Path(__file__).resolve().parents[1] / "csrc"
    patterns = {
        "RGB -> HSV": re.compile(r"\bmax\w*\s*-\s*min\w*|/\s*6\.0f?\s*\+\s*1\.0f?"),
        "HSV -> RGB": re.compile(r"4\.0f?\s*-\s*k\b|1\.0f?\s*-\s*s\s*\*|\bh\w*\s*\*\s*6\.0f?"),
        "luma": re.compile(r"\bkLuma[RGB]\b"),
    }
    sources = [p for p in csrc.rglob("*") if p.suffix in (".cpp", ".h", ".cu", ".cuh") and p.name != "color.h"]
    found = []
    for path in sources:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for what, pat in patterns.items():
                if pat.search(line.split("//")[0]):
                    found.append(f"{path.relative_to(csrc)}:{i}: {what}: {line.strip()}")
    assert not found, "colour maths written outside csrc/common/color.h:\n" + "\n".join(found)
