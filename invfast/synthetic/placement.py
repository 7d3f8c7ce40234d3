"""Where the Transforms-2D object goes: its alpha box, the linear map of its geometric types and its
placement in the image. Coordinates are normalised (-1 .. 1 across the image, y down), about the object's
centre; rotation and shear matrices come from :mod:`invfast.ops.geometry` (one angle convention for invfast).
"""

from __future__ import annotations

import numpy as np
import torch

from invfast.ops.geometry import compose, rotation_matrix, shear_matrix

#: geometric types that are linear maps about the object's centre (translate is the placement)
LINEAR_GEOMETRIC: tuple[str, ...] = ("rotate", "scale", "shear", "vflip", "hflip")


def alpha_box(pm: torch.Tensor) -> tuple[np.ndarray, ...]:
    """Per-sample inclusive pixel box (y0, y1, x0, x1) of alpha > 0, float64 [B] each
    (the whole canvas for an empty alpha)."""
    S_h, S_w = pm.shape[-2:]
    a = pm[:, 3] > 0
    rows = a.any(dim=2).numpy()
    cols = a.any(dim=1).numpy()
    empty = ~rows.any(1)

    def first_last(m: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        first = np.argmax(m, axis=1).astype(np.float64)
        last = (n - 1 - np.argmax(m[:, ::-1], axis=1)).astype(np.float64)
        return np.where(empty, 0.0, first), np.where(empty, n - 1.0, last)

    y0, y1 = first_last(rows, S_h)
    x0, x1 = first_last(cols, S_w)
    return y0, y1, x0, x1


def box_corners(box: tuple[np.ndarray, ...], m: np.ndarray, S: int) -> tuple[np.ndarray, np.ndarray]:
    """Corners (X, Y) [B, 4] of the pixel ``box`` (y0, y1, x0, x1 of :func:`alpha_box`) mapped by ``m``
    [B, 2, 2], normalised coordinates relative to the canvas centre."""
    y0, y1, x0, x1 = box
    # box edges in normalised coordinates, widened by half a pixel for bilinear support
    ex0, ex1 = (x0 - 0.5) * 2.0 / S - 1.0, (x1 + 1.5) * 2.0 / S - 1.0
    ey0, ey1 = (y0 - 0.5) * 2.0 / S - 1.0, (y1 + 1.5) * 2.0 / S - 1.0
    cx = np.stack([ex0, ex1, ex0, ex1], 1)
    cy = np.stack([ey0, ey0, ey1, ey1], 1)
    return m[:, 0, 0, None] * cx + m[:, 0, 1, None] * cy, m[:, 1, 0, None] * cx + m[:, 1, 1, None] * cy


def placement(X: np.ndarray, Y: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Where the object goes: offsets float64 [B, 2] (x, y) of its centre, normalised (−1, 1 = image edges).

    ``X``, ``Y`` [B, 4]: corners of the object's (transformed) bounding box relative to its centre, in the
    same units; ``u`` [B, 2]: uniforms in [0, 1). Per axis, a box that fits is placed uniformly inside the
    image. A box longer than the image (a sheared/scaled object) is placed uniformly among the positions
    where it covers the image *and* its centre lies inside the image, so the centre never leaves the
    image (the original pastes into an image-sized canvas, which clips the object the same way).
    """
    out = np.empty((X.shape[0], 2))
    for j, C in enumerate((X, Y)):
        lo, hi = -1.0 - C.min(1), 1.0 - C.max(1)  # fits: lo <= hi; covers the image: hi <= offset <= lo
        # offset = a + u (b - a) with a = lo, b = hi when it fits; when it does not, [b, a] = [hi, lo]
        # (the covering positions) cut to the image [-1, 1]
        big = lo > hi
        a = np.where(big, np.minimum(lo, 1.0), lo)
        b = np.where(big, np.maximum(hi, -1.0), hi)
        # a centre outside its own box (never for the centred base layout): the nearest point inside
        bad = big & (b > a)
        mid = np.clip(0.5 * (lo + hi), -1.0, 1.0)
        a, b = np.where(bad, mid, a), np.where(bad, mid, b)
        out[:, j] = np.clip(a + u[:, j] * (b - a), -1.0, 1.0)
    return out


def canonical_linear(p: dict[str, np.ndarray]) -> np.ndarray:
    """The canonical order's linear map [B, 2, 2]: flip, then shear, scale, rotate (normalised coordinates).

    ``M = R(angle) @ Sh @ diag(fx, fy) * scale``; R rotates counter-clockwise as displayed and Transforms-2D's
    shear angles turn the opposite way to torchvision's, so ``Sh = shear_matrix(-shear_x, -shear_y)`` =
    ``[[1, tx], [ty, 1 + tx ty]]`` (x-shear then y-shear, det 1).
    """
    sh = shear_matrix(-p["shear_x"], -p["shear_y"])
    flips = np.stack([1.0 - 2.0 * p["hflip"], 1.0 - 2.0 * p["vflip"]], -1)[:, None, :]  # column j times f_j
    return compose(rotation_matrix(p["angle"]), p["scale"][:, None, None] * sh * flips)


def type_matrix(t: str, p: dict[str, np.ndarray], sel: np.ndarray) -> np.ndarray:
    """The linear map [n, 2, 2] of one geometric type for the samples ``sel`` (same conventions as
    :func:`canonical_linear`)."""
    n = int(sel.sum())
    one, zero = np.ones(n), np.zeros(n)
    if t == "rotate":
        return rotation_matrix(p["angle"][sel])
    if t == "shear":  # Transforms-2D's shear sign (see canonical_linear)
        return shear_matrix(-p["shear_x"][sel], -p["shear_y"][sel])
    if t == "scale":
        sc = p["scale"][sel]
        rows = ((sc, zero), (zero, sc))
    elif t == "hflip":
        rows = ((1.0 - 2.0 * p["hflip"][sel], zero), (zero, one))
    elif t == "vflip":
        rows = ((one, zero), (zero, 1.0 - 2.0 * p["vflip"][sel]))
    else:
        raise ValueError(f"{t!r} is not a linear geometric type")
    return np.stack([np.stack(r, -1) for r in rows], -2)
