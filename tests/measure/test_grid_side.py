"""``grid_side``: the built-in grids given in pixels for 224-px images (translation, blur σ, deform σ) scaled to the
measured images' side; every other grid unchanged; the identity mask that of the scaled grid."""

from __future__ import annotations

import pytest
import torch
from measure_helpers import small_net

from invfast import transforms as T
from invfast.measure import measure_invariance
from invfast.measure.core import transform_grids
from invfast.measure.protocol import get_protocol

PIXEL = {"translation", "blur", "deform"}


@pytest.mark.parametrize("side", [32, 112, 448])
def test_pixel_grids_scale_by_side_over_224_and_nothing_else_changes(side):
    proto = get_protocol("invfast")
    plain = {t.name: (p, i) for t, p, i in transform_grids("all", 8, proto, 0)}
    scaled = {t.name: (p, i) for t, p, i in transform_grids("all", 8, proto, 0, side)}
    assert {n for n in plain if T.get(n).pixel_reference} == PIXEL
    for name, (p, ident) in plain.items():
        q, ident_q = scaled[name]
        if name in PIXEL:
            torch.testing.assert_close(q, p * (side / 224), rtol=0, atol=0)
            assert bool(ident_q.eq(torch.as_tensor(T.get(name).is_identity(q))).all())
        else:
            assert torch.equal(q, p) and torch.equal(ident_q, ident), name


def test_at_32_px_translation_stays_inside_the_image_and_blur_stops_erasing_it():
    proto = get_protocol("invfast")
    grids = {t.name: p for t, p, _ in transform_grids("translation,blur", 16, proto, 0, 32)}
    assert float(grids["translation"].abs().max()) == pytest.approx(16 * 32 / 224)  # 2.3 px, not 16 (half the image)
    assert float(grids["blur"].max()) == pytest.approx(20 * 32 / 224, rel=1e-6)  # sigma 2.9 px, not 20


def test_a_measurement_records_the_side_and_scores_the_scaled_views(rng):
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    coarse = torch.rand(64, 3, 6, 6, generator=g)  # smooth images: a small shift keeps most of each one
    images = (torch.nn.functional.interpolate(coarse, size=32, mode="bilinear") * 255).round().to(torch.uint8)
    kw = dict(grid_size=4, batch_size=16, device="cpu", normalize=False, shrinkage="ledoit-wolf")
    plain = measure_invariance(small_net(), images, "translation,rotation", **kw)
    scaled = measure_invariance(small_net(), images, "translation,rotation", grid_side=32, **kw)
    assert scaled.meta["grid_side"] == 32 and plain.meta["grid_side"] is None
    torch.testing.assert_close(scaled["translation"].params, plain["translation"].params * (32 / 224))
    assert scaled["rotation"].mean_cosine == plain["rotation"].mean_cosine  # not a pixel grid: the same numbers
    # smaller shifts keep more of the image: the views stay closer to the originals
    assert scaled["translation"].mean_cosine > plain["translation"].mean_cosine
