"""Which test transforms a measurement runs: names, families or transform objects -> transform objects."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from invfast.transforms.transform import FAMILIES

__all__ = ["resolve_transforms"]


def resolve_transforms(transforms: Any) -> list[Any]:
    """Transform objects from 'all' | 'spatial' | 'appearance' | 'rotation,hue' | a list of names/objects.

    A transform is any object with ``.name``, ``.family``, ``.grid(k)``, ``.is_identity(params)`` and
    ``.apply(images, params)`` (the :mod:`invfast.transforms` interface).
    """
    if isinstance(transforms, str):
        items: list[Any] = [s.strip() for s in transforms.split(",") if s.strip()]
        if not items:
            raise ValueError("transforms is empty; give 'all', 'spatial', 'appearance' or names like 'rotation,hue'")
    elif isinstance(transforms, Iterable):
        items = list(transforms)
        if not items:
            raise ValueError("transforms is empty; give at least one transform")
    else:
        items = [transforms]
    out: list[Any] = []
    for it in items:
        if isinstance(it, str):
            out.extend(_named_transforms(it))
        else:
            missing = [a for a in ("name", "family", "grid", "is_identity", "apply") if not hasattr(it, a)]
            if missing:
                raise TypeError(
                    f"transform {it!r} lacks {missing}; a transform needs .name, .family, .grid(k), "
                    ".is_identity(params) and .apply(images, params)"
                )
            out.append(it)
    names = [t.name for t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"transforms {dup} are listed more than once")
    return out


def _named_transforms(name: str) -> list[Any]:
    from invfast import transforms as T

    names = list(T.TEST_TRANSFORMS)  # 'all' and the families select the 18 built-ins; others by name
    if name == "all":
        return [T.get(n) for n in names]
    if name in FAMILIES:
        return [t for t in (T.get(n) for n in names) if t.family == name]
    try:
        return [T.get(name)]
    except (KeyError, ValueError) as e:
        raise ValueError(
            f"unknown transform {name!r}; choose 'all', 'spatial', 'appearance' or names from "
            f"{list(T.names())} (invfast.transforms.register adds your own)"
        ) from e
