"""scripts/imagenet_rehearsal.py in its small mode: the JPEG folder it writes (ImageNet-like sizes, no
downloads, reproducible from the seed) and the timing mode over it on the CPU with a tiny model."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np
import pytest
from PIL import Image

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rehearsal():
    spec = importlib.util.spec_from_file_location("imagenet_rehearsal", ROOT / "scripts" / "imagenet_rehearsal.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # the process pool pickles its functions by module name
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def test_write_small_folder_is_imagenet_like_and_reproducible(rehearsal, tmp_path):
    a = rehearsal.write(str(tmp_path / "a"), 12, workers=2, seed=5)
    b = rehearsal.write(str(tmp_path / "b"), 12, workers=1, seed=5)
    assert len(a) == 12 and len(set(a)) == 12
    sizes = []
    for pa, pb in zip(sorted(a), sorted(b)):
        assert pathlib.Path(pa).relative_to(tmp_path / "a") == pathlib.Path(pb).relative_to(tmp_path / "b")
        ia, ib = Image.open(pa), Image.open(pb)
        assert ia.format == "JPEG" and ia.mode == "RGB"
        assert np.array_equal(np.asarray(ia), np.asarray(ib))  # workers do not change the images
        sizes.append(ia.size)
    shorter = [min(s) for s in sizes]
    assert 200 <= min(shorter) and max(shorter) <= 500
    assert len(set(sizes)) > 1
    with pytest.raises(ValueError, match="--n"):
        rehearsal.write(str(tmp_path / "c"), 0, workers=1, seed=0)


def test_time_mode_reports_shares_and_projection(rehearsal, tmp_path, one_thread, capsys):
    rehearsal.write(str(tmp_path / "d"), 6, workers=1, seed=1)
    names = "crop,rotation,brightness,posterize"
    r = rehearsal.timing(
        str(tmp_path / "d"), "resnet18-cifar", 4, "cpu", None, 3, 2, names, 32, None, 0, 64, [16, 256], 50_000
    )
    assert r["images"] == 6 and r["transforms"] == 4
    from invfast.transforms import get

    assert r["pairs"] == 6 * sum(get(n).grid(2).shape[0] for n in names.split(","))
    assert abs(sum(r["shares"].values()) - 1.0) < 1e-9 and all(v >= 0 for v in r["shares"].values())
    # the projection counts each transform's real grid (posterize keeps 8 levels: not 4 x 256 views per image),
    # each image decoded once, each transform at its own measured cost per view
    views = {n: get(n).grid(256).shape[0] for n in names.split(",")}
    assert r["projected_views_per_image"][256] == sum(views.values()) == 3 * 256 + 8
    want = 50_000 * (r["decode_ms_per_image"] + sum(views[n] * r["per_view_ms"][n] for n in views)) / 1e3
    assert r["projected_s"][256] == pytest.approx(want)
    assert r["seconds"]["decode"] == pytest.approx(6 * r["decode_ms_per_image"] / 1e3)
    text = rehearsal._format(r)
    assert "pairs/s" in text and "decode" in text and "k=256" in text
