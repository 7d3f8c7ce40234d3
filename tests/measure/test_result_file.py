"""``result.json`` written in pieces: the same bytes as ``to_json``, in memory that does not grow with the
number of transforms (issue 59: at 50 000 images x 18 transforms the whole text and its lists took 111 MiB)."""

from __future__ import annotations

import dataclasses
import json
import tracemalloc

import pytest
import torch
from measure_helpers import Brightness, HFlip, Rot90, random_images, small_net

from invfast.measure import InvarianceResult, measure_invariance


@pytest.fixture(scope="module")
def measured() -> InvarianceResult:
    return measure_invariance(
        small_net(dim=6), random_images(40), [Rot90(), Brightness(), HFlip()], grid_size=3, layers="0,2"
    )


def _with_images(r: InvarianceResult, n_images: int, n_transforms: int) -> InvarianceResult:
    """``r``'s first transform copied ``n_transforms`` times with fresh per-image values for ``n_images``."""
    g = torch.Generator().manual_seed(n_transforms)
    first = next(iter(r.transforms.values()))
    copies = {
        f"t{i}": dataclasses.replace(
            first,
            name=f"t{i}",
            per_image_distance=torch.rand(n_images, generator=g, dtype=torch.float64),
            per_image_cosine=torch.rand(n_images, generator=g, dtype=torch.float64),
        )
        for i in range(n_transforms)
    }
    return dataclasses.replace(r, transforms=copies, layers={}, n_images=n_images)


@pytest.mark.parametrize("per_image", [True, False])
def test_the_file_is_to_json_byte_for_byte(measured, tmp_path, per_image):
    rot = measured.transforms["rot90"]
    cosine = rot.per_image_cosine.clone()
    cosine[3] = float("nan")  # written as null by both
    transforms = {
        **measured.transforms,
        "rot90": dataclasses.replace(rot, per_image_cosine=cosine, mean_cosine=float(cosine.nanmean())),
    }
    meta = {**measured.meta, "odd keys": {1: "an int key", "nested": {"a": [1, 2]}, "empty": {}}}
    r = dataclasses.replace(measured, transforms=transforms, meta=meta)
    r.write_json(tmp_path / "r.json", per_image=per_image)
    assert (tmp_path / "r.json").read_text() == r.to_json(per_image=per_image)
    back = InvarianceResult.from_json((tmp_path / "r.json").read_text())
    assert list(back.layers) == list(r.layers) and len(r.layers) == 2
    assert list(back.transforms) == list(r.transforms)


def _peak_bytes(write, path) -> int:
    tracemalloc.start()
    try:
        write(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_one_transforms_share_not_the_whole_text(measured, tmp_path):
    one = _with_images(measured, 20_000, 1)
    many = _with_images(measured, 20_000, 18)
    streamed_one = _peak_bytes(one.write_json, tmp_path / "one.json")
    streamed_many = _peak_bytes(many.write_json, tmp_path / "many.json")
    whole_many = _peak_bytes(many.to_json, tmp_path / "whole.json")
    assert streamed_many < 1.5 * streamed_one, (streamed_one, streamed_many)
    assert whole_many > 5 * streamed_many, (whole_many, streamed_many)  # the test can tell the two apart
    assert json.loads((tmp_path / "many.json").read_text())["transforms"][17]["name"] == "t17"
