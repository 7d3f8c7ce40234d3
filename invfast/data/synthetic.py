"""The ``synthetic:`` data spec: one parser, one set of defaults, for measurement, pretraining and
``invfast generate``.

``synthetic:objects=61,transforms=all,n=5000,size=32,seed=0,split=train,order=canonical`` names a
Transforms-2D data set (:class:`invfast.synthetic.Transforms2D`); every key is optional:

========== ========= ==================================================================================
key        default   meaning
========== ========= ==================================================================================
objects    61        built-in objects (= classes), the first N (1 to 1000; the paper has 61)
transforms all       Transforms-2D types sampled into every image: ``all`` (the 18), ``none``, or names
                     joined by ``+`` (``rotate+hue``)
n          5000      images (1 to 2^31 - 1)
size       32        side in px (8 to 512)
seed       0         data set seed (a 64-bit signed integer)
split      train     ``train``, ``val`` or ``test`` (independent streams: splits never share images)
order      canonical order of the transformation types in each image: ``canonical`` or ``random`` (per image)
========== ========= ==================================================================================

The defaults are the data set of Speicher et al.'s Transforms-2D experiments (all 61 objects, all 18
transformation types sampled) at a CPU-sized n, and are the same whether the spec feeds ``invfast
pretrain``, ``invfast measure`` or ``invfast generate`` (whose options default to these values): a spec
names one data set. (Before invfast 0.2 measurement read ``synthetic:`` as 10 objects, no transforms,
n=1000, split=test; write those keys to get that data.) Measure held-out images with ``split=test``.
Every value is checked when the spec is parsed (:data:`invfast.synthetic.inputs.LIMITS`), before any
image is made.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from invfast.data.protocol import Source

#: the keys of a ``synthetic:`` spec and their defaults
SYNTHETIC_DEFAULTS: dict[str, Any] = {
    "objects": 61,
    "transforms": "all",
    "n": 5000,
    "size": 32,
    "seed": 0,
    "split": "train",
    "order": "canonical",
}
_INT_KEYS = ("objects", "n", "size", "seed")


def synthetic_help() -> str:
    """One line for a ``--data`` help text: the ``synthetic:`` spec with every key at its code default."""
    return (
        "synthetic[:" + ",".join(f"{k}={v}" for k, v in SYNTHETIC_DEFAULTS.items()) + "] (every key optional; "
        "these are the defaults)"
    )


def _spec_int(key: str, value: Any) -> int:
    """The integer value of spec key ``key``: an int, or a string of decimal digits; in range (one ValueError)."""
    from invfast.synthetic.inputs import check_int

    if isinstance(value, str):
        digits = re.fullmatch(r"\s*([+-]?\d{1,30})\s*", value)
        value = int(digits.group(1)) if digits else value  # longer than 30 digits: out of any range, said below
    return check_int(f"synthetic spec {key}", value, key)


@dataclass(frozen=True)
class SyntheticSpec:
    """A parsed ``synthetic:`` spec (see the module docstring); ``transforms`` resolved to names."""

    objects: int = SYNTHETIC_DEFAULTS["objects"]
    transforms: tuple[str, ...] | None = None  # None: all
    n: int = SYNTHETIC_DEFAULTS["n"]
    size: int = SYNTHETIC_DEFAULTS["size"]
    seed: int = SYNTHETIC_DEFAULTS["seed"]
    split: str = SYNTHETIC_DEFAULTS["split"]
    order: str = SYNTHETIC_DEFAULTS["order"]

    def __post_init__(self) -> None:
        from invfast.synthetic import TRANSFORMATION_TYPES
        from invfast.synthetic.recipe import canonical

        for k in _INT_KEYS:
            object.__setattr__(self, k, _spec_int(k, getattr(self, k)))
        names = tuple(TRANSFORMATION_TYPES) if self.transforms is None else self.transforms
        try:
            names = canonical(names)
        except (KeyError, ValueError, TypeError) as e:
            raise ValueError(f"synthetic spec transforms: {e}; known: {', '.join(TRANSFORMATION_TYPES)}") from None
        object.__setattr__(self, "transforms", names)
        from invfast.synthetic import ORDERS, SPLITS

        if not isinstance(self.split, str) or self.split not in SPLITS:
            raise ValueError(f"synthetic spec split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if not isinstance(self.order, str) or self.order not in ORDERS:
            raise ValueError(f"synthetic spec order must be one of {', '.join(ORDERS)}, got {self.order!r}")

    def replace(self, **kw: Any) -> SyntheticSpec:
        return dataclasses.replace(self, **kw)

    def to_string(self) -> str:
        """The canonical spec string (every key), ``synthetic:...``."""
        from invfast.synthetic import TRANSFORMATION_TYPES

        names = self.transforms
        assert names is not None  # resolved to names in __post_init__
        t = "all" if set(names) == set(TRANSFORMATION_TYPES) else ("+".join(names) or "none")
        return (
            f"synthetic:objects={self.objects},transforms={t},n={self.n},size={self.size},seed={self.seed},"
            f"split={self.split}" + ("" if self.order == "canonical" else f",order={self.order}")
        )

    def dataset(self) -> Any:
        """The :class:`invfast.synthetic.Transforms2D` data set this spec names."""
        from invfast import synthetic

        return synthetic.Transforms2D(
            objects=self.objects,
            transforms=self.transforms,
            size=self.size,
            n=self.n,
            seed=self.seed,
            split=self.split,
            order=self.order,
        )


def parse_synthetic_spec(spec: str | dict[str, Any] | SyntheticSpec = "") -> SyntheticSpec:
    """``'objects=10,transforms=rotate+hue,n=1000'`` (with or without ``synthetic:``), or a dict of the
    same keys -> :class:`SyntheticSpec` with the defaults filled in. ValueError names a bad key/value."""
    if isinstance(spec, SyntheticSpec):
        return spec
    if isinstance(spec, dict):
        items = {str(k): v for k, v in spec.items()}
    elif isinstance(spec, str):
        text = spec[len("synthetic:") :] if spec.startswith("synthetic:") else ("" if spec == "synthetic" else spec)
        items = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            if "=" not in part:
                raise ValueError(f"synthetic spec items must be key=value, got {part!r} in {spec!r}")
            k, v = (s.strip() for s in part.split("=", 1))
            items[k] = v
    else:
        raise TypeError(f"synthetic spec must be a string or dict, got {type(spec).__name__}")
    unknown = sorted(set(items) - set(SYNTHETIC_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown synthetic data option(s) {unknown}; known: {', '.join(SYNTHETIC_DEFAULTS)}")
    kw: dict[str, Any] = {}
    for k, v in items.items():
        if k in _INT_KEYS:
            kw[k] = _spec_int(k, v)
        elif k == "transforms":
            if isinstance(v, str):
                kw[k] = None if v == "all" else tuple(t for t in v.split("+") if t and t != "none")
            elif isinstance(v, (list, tuple)):
                kw[k] = tuple(v)
            else:
                raise ValueError(
                    f"synthetic spec transforms must be 'all', 'none', names joined by '+' or a list "
                    f"of names, got {v!r}"
                )
        else:
            kw[k] = str(v)
    return SyntheticSpec(**kw)


class SyntheticSource(Source):
    """Transforms-2D images generated by index, as uint8 [B, 3, size, size].

    With ``cache`` (default) each image is generated once and kept, so later epochs / passes cost
    nothing; generation is deterministic by index, so caching never changes the data. ``n`` keeps
    the first ``n`` images of the data set.
    """

    def __init__(self, dataset: Any, spec: str = "synthetic", cache: bool = True, n: int | None = None) -> None:
        total = len(dataset)
        if n is not None and not 1 <= n <= total:
            raise ValueError(f"asked for {n} images but the data set holds {total}")
        self.dataset = dataset
        self.spec = spec
        self.n = total if n is None else int(n)
        self.cache = cache
        self.groups = None
        self._cache: torch.Tensor | None = None
        self._have: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.n

    def _generate(self, indices: torch.Tensor) -> torch.Tensor:
        images = self.dataset.generate(indices)[0]
        return images if images.dtype == torch.uint8 else (images.clamp(0, 1) * 255).round().to(torch.uint8)

    def get(self, indices: Sequence[int] | torch.Tensor) -> torch.Tensor:
        indices = torch.as_tensor(indices, dtype=torch.long).reshape(-1)
        if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= self.n):
            raise IndexError(f"image index out of range for {self.n} images")
        if not self.cache:
            return self._generate(indices)
        if self._have is None:
            self._have = torch.zeros(self.n, dtype=torch.bool)
        missing = indices[~self._have[indices]].unique()
        if missing.numel():
            new = self._generate(missing)
            if self._cache is None:
                self._cache = torch.empty((self.n, *new.shape[1:]), dtype=torch.uint8)
            self._cache[missing] = new
            self._have[missing] = True
        if self._cache is None:  # nothing generated yet, so indices is empty
            return self._generate(indices)
        return self._cache[indices]

    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images = self.get(indices)
        return images, torch.ones(images.shape[0], dtype=torch.bool)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": "synthetic", "spec": self.spec, "n": self.n}
        for attr in ("seed", "size", "split"):
            v = getattr(self.dataset, attr, None)
            if v is not None:
                d[attr] = v if isinstance(v, (int, float, str)) else repr(v)
        return d


def synthetic_source(spec: str | dict[str, Any] | SyntheticSpec = "", n: int | None = None) -> SyntheticSource:
    """The data set a ``synthetic:`` spec names as a source; ``n`` keeps its first n images (at most
    the spec's n)."""
    s = parse_synthetic_spec(spec)
    keep = None if n is None else min(int(n), s.n)
    return SyntheticSource(s.dataset(), spec=_name(spec, s), n=keep)


def _name(spec: Any, parsed: SyntheticSpec) -> str:
    """The user's own spec text where there is one (it is what checkpoints recorded), else the canonical one."""
    if isinstance(spec, str):
        return spec if spec.startswith("synthetic") else "synthetic:" + spec
    return parsed.to_string()


def heldout_split(spec: str | dict[str, Any] | SyntheticSpec, split: str = "val") -> SyntheticSource:
    """The same synthetic data set on another split (images no training run has seen)."""
    s = parse_synthetic_spec(spec).replace(split=split)
    return SyntheticSource(s.dataset(), spec=f"{_name(spec, s)}#{split}")


__all__ = [
    "SYNTHETIC_DEFAULTS",
    "SyntheticSource",
    "SyntheticSpec",
    "heldout_split",
    "parse_synthetic_spec",
    "synthetic_help",
    "synthetic_source",
]
