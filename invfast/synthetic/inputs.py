"""What :class:`~invfast.synthetic.Transforms2D` accepts, validated once: objects, backgrounds, sample
indices, split names and orders of the transformation types."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from invfast.synthetic.banks import ObjectBank, builtin_backgrounds, builtin_objects, load_backgrounds, load_objects
from invfast.synthetic.recipe import ALIASES

__all__ = [
    "DEFAULT_SIZES",
    "RANDOM_BACKGROUNDS",
    "SPLITS",
    "ORDERS",
    "LIMITS",
    "check_int",
    "as_objects",
    "as_backgrounds",
    "as_indices",
    "check_split",
    "as_order",
]

DEFAULT_SIZES = {"train": 50_000, "val": 10_000, "test": 10_000}
RANDOM_BACKGROUNDS = "uniform-random"
#: the split names with a default size; ``invfast.synthetic.check_split`` accepts only these
SPLITS: tuple[str, ...] = tuple(DEFAULT_SIZES)
#: per-sample orders of the transformation types (see ``Transforms2D``)
ORDERS: tuple[str, ...] = ("canonical", "random")
#: inclusive ranges of the integer options of a data set. ``size``: the background bank is held in memory
#: (867 x 3 x size² bytes, 680 MB at 512 px); ``n``: sample indices are int32-sized; ``objects``: built-in
#: objects are drawn procedurally, 1000 of them in about a second; ``seed``: int64 (distinct 64-bit keys)
LIMITS: dict[str, tuple[int, int]] = {
    "objects": (1, 1000),
    "n": (1, 2**31 - 1),
    "size": (8, 512),
    "seed": (-(2**63), 2**63 - 1),
    "view": (0, 2**31 - 1),
}


def check_int(name: str, value: Any, key: str | None = None) -> int:
    """``value`` as an int if it is an integer (not a bool, not a float, not a string) inside ``LIMITS[key]``
    (``key`` defaults to ``name``); else one ValueError naming ``name`` and the accepted range."""
    lo, hi = LIMITS[key or name]
    ok = not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, np.integer)) and lo <= int(value) <= hi
    if not ok:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:30] + "..." + shown[-6:]
        raise ValueError(f"{name} must be an integer from {_power(lo)} to {_power(hi)}, got {shown}")
    return int(value)


def _power(v: int) -> str:
    """``v`` as ``2^k - 1`` / ``-2^k`` where it is one of those (large range ends), else in digits."""
    k = (abs(v) + (v > 0)).bit_length() - 1
    if abs(v) > 10**6 and abs(v) + (v > 0) == 2**k:
        return f"2^{k} - 1" if v > 0 else f"-2^{k}"
    return str(v)


def as_objects(objects: Any, n_classes: int | None) -> ObjectBank:
    """The object bank (one object per class) of ``objects`` (see ``Transforms2D``), cut to ``n_classes``."""
    if isinstance(objects, ObjectBank):
        bank = objects
    elif isinstance(objects, (int, np.integer)) and not isinstance(objects, bool):
        objects = check_int("objects", objects)
        bank = builtin_objects(max(61, objects)).subset(range(objects))
    elif isinstance(objects, (str, os.PathLike)):
        bank = load_objects(objects)
    elif isinstance(objects, (list, tuple, range, np.ndarray, torch.Tensor)):
        idx = [int(i) for i in objects]
        if not idx:
            raise ValueError("objects: empty list of object indices")
        if len(set(idx)) != len(idx):
            raise ValueError("objects: object indices must be distinct (one class per object)")
        if min(idx) < 0 or max(idx) >= LIMITS["objects"][1]:
            raise ValueError(
                f"objects: built-in object indices must be from 0 to {LIMITS['objects'][1] - 1}, got "
                f"{min(idx) if min(idx) < 0 else max(idx)}"
            )
        bank = builtin_objects(max(61, max(idx) + 1)).subset(idx)
    else:
        raise TypeError(
            "objects must be an int (that many built-in objects), a list of built-in object "
            "indices, an ObjectBank, or a folder path in the SI-score layout; "
            f"got {type(objects).__name__}"
        )
    if n_classes is not None:
        if n_classes < 1:
            raise ValueError(f"n_classes must be >= 1, got {n_classes}")
        if len(bank) < n_classes:
            raise ValueError(
                f"{n_classes} classes requested but the object bank holds only {len(bank)} objects "
                "(one object per class); pass more objects or fewer classes"
            )
        bank = bank.subset(range(n_classes))
    return bank


def as_backgrounds(backgrounds: Any, size: int) -> torch.Tensor | str:
    """uint8 [N, 3, size, size] background images of ``backgrounds`` (see ``Transforms2D``), or
    :data:`RANDOM_BACKGROUNDS`."""
    if backgrounds is None:
        return builtin_backgrounds(867, size)
    if isinstance(backgrounds, str) and backgrounds == RANDOM_BACKGROUNDS:
        return RANDOM_BACKGROUNDS
    if isinstance(backgrounds, (str, os.PathLike)):
        return load_backgrounds(backgrounds, size=size)
    if isinstance(backgrounds, np.ndarray):
        backgrounds = torch.from_numpy(np.ascontiguousarray(backgrounds))
    if isinstance(backgrounds, torch.Tensor):
        t = backgrounds
        if t.dim() == 4 and t.shape[-1] == 3 and t.shape[1] != 3:
            t = t.permute(0, 3, 1, 2)
        if t.dim() != 4 or t.shape[1] != 3:
            raise ValueError(f"backgrounds must be [N, 3, H, W] or [N, H, W, 3], got {tuple(backgrounds.shape)}")
        if t.dtype != torch.uint8:
            if not t.is_floating_point():
                raise TypeError(f"backgrounds must be uint8 (0..255) or float (0..1), got {t.dtype}")
            t = (t.float().clamp(0, 1) * 255).round().to(torch.uint8)
        if t.shape[0] < 1:
            raise ValueError("backgrounds: need at least one background image")
        if tuple(t.shape[2:]) != (size, size):
            t = (
                torch.nn.functional.interpolate(
                    t.float(), size=(size, size), mode="bilinear", align_corners=False, antialias=True
                )
                .round()
                .clamp(0, 255)
                .to(torch.uint8)
            )
        return t.contiguous()
    raise TypeError(
        f"backgrounds must be None (built-in), {RANDOM_BACKGROUNDS!r}, a folder path or an image "
        f"tensor/array, got {type(backgrounds).__name__}"
    )


def as_indices(indices: Any, n: int) -> np.ndarray:
    """int64 [B] sample indices, each in [0, n) (IndexError otherwise)."""
    if isinstance(indices, torch.Tensor):
        indices = indices.cpu().numpy()
    if isinstance(indices, range):
        idx = np.arange(indices.start, indices.stop, indices.step, dtype=np.int64)
    else:
        idx = np.asarray(indices)
        if idx.dtype == bool or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise TypeError(f"indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx[(idx < 0) | (idx >= n)][0]
        raise IndexError(f"index {int(bad)} out of range for a dataset of {n} samples")
    return idx


def check_split(split: str) -> str:
    """``split`` if it is one of :data:`SPLITS` (``train``, ``val``, ``test``), else ValueError naming them.

    For spec parsers (``synthetic:...,split=NAME``); :class:`Transforms2D` itself also takes other names
    with an explicit ``n`` (each name keys an independent stream)."""
    if not isinstance(split, str) or split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split


def as_order(order: Any, transforms: tuple[str, ...]) -> str | tuple[str, ...]:
    """``'canonical'``, ``'random'``, or a validated tuple naming every type of ``transforms`` once."""
    if isinstance(order, str) and order in ORDERS:
        return order
    if isinstance(order, str):
        order = [t.strip() for t in order.split(",") if t.strip()]
    if isinstance(order, (list, tuple)) and all(isinstance(t, str) for t in order):
        names = tuple(ALIASES.get(t.lower(), t.lower()) for t in order)
        if sorted(names) == sorted(transforms) and len(set(names)) == len(names):
            return names
    raise ValueError(
        f"order must be one of {', '.join(ORDERS)}, or name each of the dataset's types once "
        f"({', '.join(transforms) or 'none'}), got {order!r}"
    )
