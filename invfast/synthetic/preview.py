"""Contact sheets of Transforms-2D samples: one row per transformation type."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from invfast.synthetic.recipe import TRANSFORMATION_TYPES, canonical


def preview_grid(
    transforms: Sequence[str] | str = TRANSFORMATION_TYPES,
    objects: Any = 61,
    n_cols: int = 10,
    size: int = 32,
    seed: int = 0,
    zoom: int = 3,
    combined: bool = True,
    backgrounds: Any = None,
):
    """A PIL image: row 0 untransformed, then one row per transformation type (same samples in each
    column, so a row shows exactly what its type changes), and a last row with all types combined.
    """
    from PIL import Image, ImageDraw

    from invfast.synthetic.transforms2d import Transforms2D

    types = canonical(transforms)
    rows: list[tuple[str, tuple[str, ...]]] = [("none", ())] + [(t, (t,)) for t in types]
    if combined and len(types) > 1:
        rows.append(("all", types))
    label_w = 80
    cell = size * zoom
    sheet = Image.new("RGB", (label_w + n_cols * cell, len(rows) * cell), "white")
    draw = ImageDraw.Draw(sheet)
    for r, (name, ts) in enumerate(rows):
        ds = Transforms2D(objects, ts, size=size, n=max(n_cols, 1), seed=seed, backgrounds=backgrounds)
        images, _, _ = ds.generate(range(n_cols))
        strip = torch.cat(list(images), dim=2).permute(1, 2, 0).numpy()
        img = Image.fromarray(np.ascontiguousarray(strip)).resize((n_cols * cell, cell), Image.Resampling.NEAREST)
        sheet.paste(img, (label_w, r * cell))
        draw.text((4, r * cell + cell // 2 - 6), name, fill="black")
    return sheet
