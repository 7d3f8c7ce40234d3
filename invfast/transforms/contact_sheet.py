"""A contact sheet: every test transform applied across its grid to one image, one row per transform,
labelled with the parameter values, so a person can check that e.g. "rotation 90" rotates by 90 degrees."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from invfast.transforms._checks import as_images
from invfast.transforms.builtin import TEST_TRANSFORMS
from invfast.transforms.registry import get


def _pick(grid: torch.Tensor, k: int) -> torch.Tensor:
    """``k`` evenly spaced rows of ``grid`` (all of them when it has fewer)."""
    n = grid.shape[0]
    if n <= k:
        return grid
    idx = torch.round(torch.linspace(0, n - 1, k)).to(torch.int64) if k > 1 else torch.zeros(1, dtype=torch.int64)
    return grid[idx]


def _label(p: torch.Tensor) -> str:
    vals = p.flatten().tolist()
    return ",".join(f"{v:.2g}" if len(vals) > 2 else f"{v:.3g}" for v in vals)


def contact_sheet(
    image: torch.Tensor, names: Sequence[str] | None = None, k: int = 8, tile: int = 96, label: bool = True
) -> np.ndarray:
    """Render ``names`` (default: all 18) across ``k`` evenly spaced points of their default grids.

    Scalar transforms show their k-point grid (rotation, k = 8: 0, 45, 90, ..., 315 degrees); vector
    ones (crop, shear, translation) k evenly spaced points of their 256-point grid.

    Args:
        image: one RGB image [3, H, W] or [1, 3, H, W], uint8 or float in [0, 1].
        names: transform names (``TEST_TRANSFORMS`` or registered ones).
        k: columns per row (grid points shown).
        tile: side of each thumbnail in pixels (the image is resized to tile x tile first).
        label: write the transform name and parameter values (needs Pillow).

    Returns:
        uint8 array [rows * (tile + text), (k + 1) * tile ..., 3] (H, W, RGB), ready for PIL/matplotlib.
    """
    if isinstance(image, torch.Tensor) and image.dim() == 3:
        image = image.unsqueeze(0)
    image = as_images(image, "image")
    if image.shape[0] != 1:
        raise ValueError(f"image must be a single image, got a batch of {image.shape[0]}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    names = list(TEST_TRANSFORMS if names is None else names)
    if not names:
        raise ValueError("names is empty; pass at least one transform name")
    from invfast.transforms.preprocess import center_crop, resize

    img = center_crop(resize(image, tile), tile)
    if img.dtype != torch.uint8:
        img = img.float().mul(255).round().clamp(0, 255).to(torch.uint8)
    text_h = 14 if label else 0
    name_w = 84 if label else 0
    cell_h = tile + text_h
    sheet = np.full((len(names) * cell_h, name_w + k * (tile + 2), 3), 255, dtype=np.uint8)
    labels = []
    for r, name in enumerate(names):
        t = get(name)
        # scalar grids: the k-point grid itself (rotation k=8: 0, 45, 90, ...); vector grids: k of the 256
        params = t.grid(k) if t.param_dim == 1 else _pick(t.grid(256), k)
        params = _pick(params, k)
        views = t.apply(img, params)[0]  # [P, 3, tile, tile]
        for c in range(views.shape[0]):
            y0 = r * cell_h
            x0 = name_w + c * (tile + 2)
            sheet[y0 : y0 + tile, x0 : x0 + tile] = views[c].permute(1, 2, 0).numpy()
            labels.append((x0, y0 + tile, _label(params[c])))
        labels.append((2, r * cell_h + tile // 2 - 6, name))
    if label:
        from PIL import Image, ImageDraw

        pil = Image.fromarray(sheet)
        draw = ImageDraw.Draw(pil)
        for x, y, s in labels:
            draw.text((x + 1, y + 1), s, fill=(0, 0, 0))
        sheet = np.asarray(pil).copy()
    return sheet


def save_contact_sheet(
    path: str, image: torch.Tensor, names: Sequence[str] | None = None, k: int = 8, tile: int = 96
) -> np.ndarray:
    """Render :func:`contact_sheet` and write it to ``path`` (atomically), in the image format its extension
    names (``.png``, ``.jpg`` ...; ValueError for another)."""
    from PIL import Image

    from invfast.io import atomic_write

    fmt = Image.registered_extensions().get(os.path.splitext(os.fspath(path))[1].lower())
    if fmt is None:
        raise ValueError(f"the contact sheet's file name must end in an image extension such as .png, got {path!r}")
    sheet = contact_sheet(image, names, k, tile)
    with atomic_write(path) as f:
        Image.fromarray(sheet).save(f, format=fmt)
    return sheet
