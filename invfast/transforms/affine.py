"""The affine built-in test transforms (crop, flips, scale, shear, rotation, translation) as sampling maps:
each transform's map from an output pixel to the source pixel it samples, ``A @ (out - centre) + c``, the
[P, 2, 3] matrices the batched warp reads (the last few grids' kept: a measurement applies one grid to batch
after batch), and the warp itself.

>>> A, c = rotation(torch.tensor([30.0], dtype=torch.float64), 32, 32)   # A [1, 2, 2], c [1, 2]
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from invfast.ops import transforms_u8
from invfast.ops.augment import fill_vector
from invfast.ops.geometry import rotation_matrix, shear_matrix
from invfast.transforms import functional as Fn
from invfast.transforms._checks import require

__all__ = [
    "Affine",
    "crop",
    "flip",
    "scale",
    "rotation",
    "shear",
    "translation",
    "affine_matrix",
    "affine_maps",
    "affine_apply",
]

#: ``(params float64 [P] or [P, m], H, W) -> (A [P, 2, 2], c [P, 2])``
Affine = Callable[[torch.Tensor, int, int], tuple[torch.Tensor, torch.Tensor]]

_CPU = torch.device("cpu")


def _eye(pd: torch.Tensor) -> torch.Tensor:
    return torch.eye(2, dtype=torch.float64, device=pd.device).expand(pd.shape[0], 2, 2)


def _centre(pd: torch.Tensor, H: int, W: int) -> torch.Tensor:
    return Fn.centre(H, W, device=pd.device).expand(pd.shape[0], 2)


def crop(pd: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    return Fn.crop_box_affine(pd[:, 0] * H, pd[:, 1] * W, pd[:, 2] * H, pd[:, 3] * W, (H, W))


def flip(axis: int) -> Callable[[torch.Tensor, int, int], tuple[torch.Tensor, torch.Tensor]]:
    def affine(pd: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
        A = _eye(pd).clone()
        A[:, axis, axis] = torch.where(pd > 0.5, -1.0, 1.0)
        return A, _centre(pd, H, W)

    return affine


def scale(pd: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _eye(pd) / pd.view(-1, 1, 1), _centre(pd, H, W)


def rotation(pd: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    return rotation_matrix(pd, inverse=True), _centre(pd, H, W)  # the warp samples the source: the inverse map


def shear(pd: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    return shear_matrix(pd[:, 0], pd[:, 1], inverse=True), _centre(pd, H, W)


def translation(pd: torch.Tensor, H: int, W: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _eye(pd), _centre(pd, H, W) - pd


_MATRICES: dict[tuple, torch.Tensor] = {}  # (name, H, W, dtype, shape, parameter bytes) -> [P, 2, 3] float64
_MATRICES_MAX = 64
_MATRICES_LOCK = threading.Lock()


def affine_matrix(name: str, affine: Affine, p: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """The [P, 2, 3] sampling maps of the parameters ``p`` of the transform ``name`` (whose map is
    ``affine``), computed in float64 on the CPU
    (bit-identical for every data device). A measurement applies one grid to batch after batch, so the maps
    of the last few (transform, size, grid) are kept: the dozen small torch ops that build them cost more
    than a flip of a 224-px batch."""
    pc = p.detach().to("cpu").contiguous()
    if torch.compiler.is_compiling():  # a traced graph computes the maps (the kept ones are keyed by bytes)
        return affine_maps(affine, pc, H, W)
    key = (name, H, W, pc.dtype, tuple(pc.shape), pc.numpy().tobytes())
    with _MATRICES_LOCK:  # the measure loop makes views on a producer thread
        matrix = _MATRICES.get(key)
    if matrix is None:
        matrix = affine_maps(affine, pc, H, W)
        with _MATRICES_LOCK:
            if len(_MATRICES) >= _MATRICES_MAX:
                _MATRICES.pop(next(iter(_MATRICES)))
            _MATRICES[key] = matrix
    return matrix


def affine_maps(affine: Affine, pc: torch.Tensor, H: int, W: int) -> torch.Tensor:
    """[P, 2, 3] float64 sampling maps of the CPU parameters ``pc`` at size H x W."""
    A, b = affine(pc.to(torch.float64), H, W)
    A = Fn._snap(A.to(torch.float64))
    offset = Fn._snap(b.to(torch.float64) - (A @ Fn.centre(H, W).view(2, 1)).squeeze(-1))
    return torch.cat([A, offset.unsqueeze(-1)], dim=-1).contiguous()


def affine_apply(name: str, affine: Affine, images: torch.Tensor, p: torch.Tensor, fill: Any) -> torch.Tensor:
    """The affine transform ``name`` (map ``affine``) on checked ``images`` [B, C, H, W] under params ``p``:
    [B, P, C, H, W] in their dtype, from one call of the batched warp (compiled on CPU when built)."""
    from invfast.ops.augment import warp_affine

    B, C, H, W = images.shape
    if isinstance(fill, (int, float)) and not isinstance(fill, bool):  # one number: checked without torch ops
        if not 0.0 <= fill <= 1.0:
            raise ValueError(f"fill must be in [0, 1] (image units), got {[float(fill)] * C}")
        fillv = torch.full((C,), float(fill), dtype=torch.float64, device=_CPU)
    else:
        fillv = fill_vector(fill, C).to(torch.float64)  # on the CPU: the warp reads it as numbers
        require((fillv >= 0) & (fillv <= 1), "fill must be in [0, 1] (image units)", lambda: f", got {fillv.tolist()}")
    matrix = affine_matrix(name, affine, p, H, W).to(images.device)
    if images.dtype == torch.uint8:
        return transforms_u8.warp_u8(images, matrix, fillv * 255.0)
    x = images if images.dtype in (torch.float32, torch.float64) else images.to(torch.float32)
    return warp_affine(x.contiguous(), matrix, H, W, fillv).to(images.dtype)
