"""Rotation and shear matrices, the one home of invfast's geometric conventions.

**Convention.** Image coordinates: x to the right, y **down**, about the point the map is centred on.
Angles are degrees. A positive rotation turns the image **counter-clockwise as displayed** (PIL
``Image.rotate``, torchvision ``rotate``); a positive shear is torchvision's ``affine(shear=(sx, sy))``
(x-shear ``x' = x - tan(sx) y`` first, then y-shear ``y' = y - tan(sy) x'``: the usual shear of y-up
maths coordinates, as the counter-clockwise rotation is the usual rotation there).

Each function gives the **forward** map (where a point of the input lands) or, with ``inverse=True``, its
closed-form inverse (the source of an output point, what a warp samples). Both are [..., 2, 2] and act
on column vectors (x, y).

Arrays in, arrays out: numpy arrays are computed with numpy, torch tensors with torch in float64, so every
caller keeps the arithmetic (and the bits) it had. Callers:

- the rotation and shear test transforms (:mod:`invfast.transforms.builtin`): ``inverse=True``;
- the Ericsson protocol's 1-degree shear (:mod:`invfast.transforms.ericsson`): ``inverse=True``;
- Transforms-2D's rotate and shear types (:mod:`invfast.synthetic.placement`): forward maps; its shear
  angles have the opposite sign to torchvision's, so it passes ``-shear_x, -shear_y``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["compose", "rotation_matrix", "shear_matrix"]


def _is_numpy(*xs: Any) -> bool:
    return not any(isinstance(x, torch.Tensor) for x in xs)


def _matrix(a: Any, b: Any, c: Any, d: Any, numpy: bool) -> Any:
    """[[a, b], [c, d]] stacked over the leading shape."""
    if numpy:
        return np.stack([np.stack([a, b], -1), np.stack([c, d], -1)], -2)
    return torch.stack([torch.stack([a, b], -1), torch.stack([c, d], -1)], -2)


def _cos_sin(degrees: Any, numpy: bool) -> tuple[Any, Any]:
    """cos and sin of ``degrees`` in float64, numpy or torch."""
    if numpy:
        t = np.deg2rad(np.asarray(degrees, dtype=np.float64))
        return np.cos(t), np.sin(t)
    r = torch.deg2rad(degrees.to(torch.float64))
    return torch.cos(r), torch.sin(r)


def _tan(degrees: Any, numpy: bool) -> Any:
    """tan of ``degrees`` in float64, numpy or torch."""
    if numpy:
        return np.tan(np.deg2rad(np.asarray(degrees, dtype=np.float64)))
    return torch.tan(torch.deg2rad(degrees.to(torch.float64)))


def rotation_matrix(degrees: Any, *, inverse: bool = False) -> Any:
    """Rotation by ``degrees`` counter-clockwise as displayed (y down): ``[[cos, sin], [-sin, cos]]``.

    Args:
        degrees: [...] numpy array (or scalar) or torch tensor (computed in float64).
        inverse: the inverse map ``[[cos, -sin], [sin, cos]]`` (the transpose; the rotation by -degrees).

    Returns:
        [..., 2, 2] float64, numpy or torch like ``degrees``.
    """
    numpy = _is_numpy(degrees)
    c, s = _cos_sin(degrees, numpy)
    return _matrix(c, -s, s, c, numpy) if inverse else _matrix(c, s, -s, c, numpy)


def shear_matrix(sx_degrees: Any, sy_degrees: Any, *, inverse: bool = False) -> Any:
    """torchvision's shear ``(sx, sy)`` (x-shear, then y-shear; determinant 1), ``tx = tan(sx)``, ``ty = tan(sy)``:
    forward ``[[1, -tx], [-ty, 1 + tx ty]]``; ``inverse=True`` gives ``[[1 + tx ty, tx], [ty, 1]]``
    (the y-shear undone, then the x-shear).

    Args:
        sx_degrees, sy_degrees: [...] numpy arrays (or scalars) or torch tensors, same shape; +-90 degrees
            (mod 180) is an infinite shear.

    Returns:
        [..., 2, 2] float64, numpy or torch like the angles.
    """
    numpy = _is_numpy(sx_degrees, sy_degrees)
    tx, ty = _tan(sx_degrees, numpy), _tan(sy_degrees, numpy)
    one = np.ones_like(tx) if numpy else torch.ones_like(tx)
    if inverse:
        return _matrix(1 + tx * ty, tx, ty, one, numpy)
    return _matrix(one, -tx, -ty, 1 + tx * ty, numpy)


def compose(a: Any, b: Any) -> Any:
    """The 2x2 product ``a @ b`` [..., 2, 2] written out entry by entry (``a_i0 b_0j + a_i1 b_1j``), so the
    rounding is the same on every machine (no BLAS, no fused multiply-add); numpy or torch like ``a``."""
    numpy = _is_numpy(a, b)

    def entry(i: int, j: int) -> Any:
        return a[..., i, 0] * b[..., 0, j] + a[..., i, 1] * b[..., 1, j]

    return _matrix(entry(0, 0), entry(0, 1), entry(1, 0), entry(1, 1), numpy)
