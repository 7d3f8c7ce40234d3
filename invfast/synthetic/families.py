"""Transforms-2D dataset families (Speicher et al. §4-5 and App. C-D).

* :func:`same_vs_different` — source/target tasks with disjoint objects; a source with the target's
  transformations and one with a disjoint set.
* :func:`nested_transformation_sets` / :func:`nested` — T1 ⊂ T2 ⊂ ... ⊂ Tn.
* :class:`PerClassTransforms` — each group of objects under its own transformations (D_{T1 ⊕ T2}).
* :func:`mild_ood` (other objects) and :func:`strong_ood` (random patterns on random backgrounds).
* :class:`IrrelevantFeatureDataset` — small objects pasted on base images with label correlation α
  or availability β, labels for both tasks; :func:`builtin_base_set` and :func:`load_image_folder`
  give base images.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from invfast.ops.synth import composite
from invfast.ops.synth_reference import affine_warp
from invfast.synthetic import rng
from invfast.synthetic.banks import (
    _IMAGE_EXTS,
    SKIMAGE_COLOUR_PHOTOS,
    ObjectBank,
    builtin_objects,
    random_pattern_objects,
)
from invfast.synthetic.inputs import RANDOM_BACKGROUNDS, as_indices, as_objects, check_int
from invfast.synthetic.placement import alpha_box
from invfast.synthetic.recipe import TRANSFORMATION_TYPES, canonical
from invfast.synthetic.transforms2d import Transforms2D

__all__ = [
    "SameVsDifferent",
    "same_vs_different",
    "nested_transformation_sets",
    "nested",
    "PerClassTransforms",
    "mild_ood",
    "strong_ood",
    "builtin_base_set",
    "load_image_folder",
    "IrrelevantFeatureDataset",
]


@dataclass
class SameVsDifferent:
    """Disjoint object sets (source/target) and disjoint transformation sets (same/different)."""

    source_objects: list[int]
    target_objects: list[int]
    target_transforms: tuple[str, ...]
    other_transforms: tuple[str, ...]
    bank: ObjectBank
    kwargs: dict

    def _make(self, objects: list[int], transforms, split: str, n: int | None) -> Transforms2D:
        kw = dict(self.kwargs)
        if n is not None:
            kw["n"] = n
        return Transforms2D(self.bank.subset(objects), transforms, split=split, **kw)

    def source_same(self, split: str = "train", n: int | None = None) -> Transforms2D:
        """Source objects under the target's transformations."""
        return self._make(self.source_objects, self.target_transforms, split, n)

    def source_different(self, split: str = "train", n: int | None = None) -> Transforms2D:
        """Source objects under a disjoint transformation set."""
        return self._make(self.source_objects, self.other_transforms, split, n)

    def target(self, split: str = "train", n: int | None = None) -> Transforms2D:
        """Target objects under the target transformations."""
        return self._make(self.target_objects, self.target_transforms, split, n)

    def target_different(self, split: str = "train", n: int | None = None) -> Transforms2D:
        """Target objects under the other transformation set (Speicher's D_none: neither the source's
        objects nor, for a source under the target transformations, its transformations)."""
        return self._make(self.target_objects, self.other_transforms, split, n)


def same_vs_different(
    n_objects: int = 30,
    n_transforms: int = 3,
    seed: int = 0,
    objects: Any = None,
    transforms: Sequence[str] = TRANSFORMATION_TYPES,
    **dataset_kwargs,
) -> SameVsDifferent:
    """Draw disjoint source/target object sets (|O| = n_objects each) from ``objects`` (built-in 61 by
    default) and disjoint transformation sets (|T| = n_transforms each) from ``transforms``.

    ``dataset_kwargs`` (size, n, backgrounds, recipe) go to every Transforms2D; the dataset seed is ``seed``.
    """
    bank = as_objects(61 if objects is None else objects, None)
    pool = canonical(transforms)
    if 2 * n_objects > len(bank):
        raise ValueError(f"same_vs_different needs 2 x {n_objects} disjoint objects but the bank holds {len(bank)}")
    if 2 * n_transforms > len(pool):
        raise ValueError(
            f"same_vs_different needs 2 x {n_transforms} disjoint transformation types but only {len(pool)} were given"
        )
    if n_objects < 1 or n_transforms < 1:
        raise ValueError("n_objects and n_transforms must be >= 1")
    po = rng.permutation(seed, "same-vs-different/objects", len(bank))
    pt = rng.permutation(seed, "same-vs-different/transforms", len(pool))
    return SameVsDifferent(
        source_objects=sorted(int(i) for i in po[:n_objects]),
        target_objects=sorted(int(i) for i in po[n_objects : 2 * n_objects]),
        target_transforms=canonical([pool[i] for i in pt[:n_transforms]]),
        other_transforms=canonical([pool[i] for i in pt[n_transforms : 2 * n_transforms]]),
        bank=bank,
        kwargs={"seed": seed, **dataset_kwargs},
    )


def nested_transformation_sets(
    sizes: Sequence[int] = (1, 2, 4, 8, 18), seed: int = 0, transforms: Sequence[str] = TRANSFORMATION_TYPES
) -> list[tuple[str, ...]]:
    """T1 ⊂ T2 ⊂ ... : the first ``sizes[k]`` types of one seeded permutation of ``transforms``."""
    pool = canonical(transforms)
    sizes = list(sizes)
    if not sizes or sizes != sorted(sizes) or len(set(sizes)) != len(sizes) or sizes[0] < 1 or sizes[-1] > len(pool):
        raise ValueError(f"sizes must be strictly increasing within 1..{len(pool)}, got {sizes}")
    perm = rng.permutation(seed, "nested", len(pool))
    return [canonical([pool[i] for i in perm[:k]]) for k in sizes]


def nested(
    objects: Any = 30, sizes: Sequence[int] = (1, 2, 4, 8, 18), seed: int = 0, **dataset_kwargs
) -> list[Transforms2D]:
    """One Transforms2D per nested transformation set (same objects and seed)."""
    return [Transforms2D(objects, t, seed=seed, **dataset_kwargs) for t in nested_transformation_sets(sizes, seed)]


class PerClassTransforms(torch.utils.data.Dataset):
    """Objects of each group under that group's own transformations (Speicher et al., "Invariance makes a
    difference" §4.2: D_{T1 ⊕ T2}, objects O1 under T1 and O2 under T2).

    Args:
        groups: ``[(objects, transforms), ...]``: built-in object indices (or an :class:`ObjectBank`) and
            transformation types per group; classes are numbered group by group (group 0's objects first).
        size, n, seed, split, backgrounds, recipe: as :class:`Transforms2D` (shared by every group).

    A sample's class is drawn uniformly over all classes (as Transforms2D does), then rendered with its
    group's transformations; ``generate(indices, view)`` and ``ds[i]`` behave as Transforms2D's.
    """

    def __init__(
        self,
        groups: Sequence[tuple[Any, Any]],
        size: int = 32,
        n: int | None = None,
        seed: int = 0,
        split: str = "train",
        backgrounds: Any = None,
        recipe: Any = None,
    ):
        if len(groups) < 1:
            raise ValueError("PerClassTransforms needs at least one (objects, transforms) group")
        self.parts = [
            Transforms2D(objs, ts, size=size, n=n, seed=seed, split=split, backgrounds=backgrounds, recipe=recipe)
            for objs, ts in groups
        ]
        self.n, self.seed, self.split, self.size = self.parts[0].n, int(seed), split, int(size)
        self.offsets = np.cumsum([0] + [p.num_classes for p in self.parts])
        self.transforms = tuple(p.transforms for p in self.parts)

    def __len__(self) -> int:
        return self.n

    @property
    def num_classes(self) -> int:
        return int(self.offsets[-1])

    def generate(self, indices: Any, view: int = 0):
        """(images uint8 [B, 3, H, W], labels int64 [B], params dict of float64 [B]) as Transforms2D."""
        idx = as_indices(indices, self.n)
        keys = rng.sample_keys(self.seed, self.split, idx)
        labels = rng.integers(keys, "object", self.num_classes)
        group = np.searchsorted(self.offsets, labels, side="right") - 1
        S = self.size
        images = torch.empty(idx.size, 3, S, S, dtype=torch.uint8)
        params: dict[str, torch.Tensor] = {}
        for g, part in enumerate(self.parts):
            sel = np.flatnonzero(group == g)
            im, _, par = part._render(keys[sel], labels[sel] - self.offsets[g], view=view)
            images[torch.from_numpy(sel)] = im
            for k, v in par.items():
                params.setdefault(k, torch.empty(idx.size, dtype=torch.float64))[torch.from_numpy(sel)] = v
        return images, torch.from_numpy(labels.astype(np.int64)), params

    def __getitem__(self, idx: int):
        images, labels, params = self.generate([int(idx) % self.n])
        return images[0].float() / 255.0, int(labels[0]), {k: float(v[0]) for k, v in params.items()}


def mild_ood(
    dataset: Transforms2D, n_objects: int | None = None, pool: ObjectBank | None = None, seed: int | None = None
) -> Transforms2D:
    """The same transformations, size and backgrounds with other objects (none of ``dataset``'s).

    Objects come from ``pool`` (built-in bank by default), excluding any with the same pixels as a
    dataset object; ``n_objects`` defaults to the dataset's number of classes.
    """
    k = dataset.num_classes if n_objects is None else int(n_objects)
    if pool is None:
        pool = builtin_objects(max(61, dataset.num_classes + k))
    used = {img.tobytes() for img in dataset.objects.images}
    free = [i for i, img in enumerate(pool.images) if img.tobytes() not in used]
    if len(free) < k:
        raise ValueError(f"mild_ood needs {k} objects not in the dataset but the pool has only {len(free)}")
    return Transforms2D(
        pool.subset(free[:k]),
        dataset.transforms,
        size=dataset.size,
        n=dataset.n,
        seed=dataset.seed if seed is None else seed,
        split=dataset.split,
        backgrounds=dataset.backgrounds,
        recipe=dataset.recipe,
    )


def strong_ood(
    n_classes: int = 30,
    transforms: Any = (),
    size: int = 32,
    n: int | None = None,
    seed: int = 0,
    split: str = "train",
    pattern_seed: int = 0,
    **kwargs,
) -> Transforms2D:
    """Random data (Speicher App. D.1): per class one fixed uniform-random square pattern (70% of the
    image side), transformed and pasted on a fresh uniform-random background per sample."""
    return Transforms2D(
        random_pattern_objects(n_classes, size, seed=pattern_seed),
        transforms,
        size=size,
        n=n,
        seed=seed,
        split=split,
        backgrounds=RANDOM_BACKGROUNDS,
        **kwargs,
    )


# ----------------------------------------------------------------------------- irrelevant features

_BASE_PHOTOS = SKIMAGE_COLOUR_PHOTOS + ("china.jpg", "flower.jpg")  # the colour photographs, one class each


def builtin_base_set(
    n_per_class: int = 100, size: int = 32, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """A small CIFAR-like base set from the shipped photographs: class ``c`` = random square crops
    (side 30-70% of the shorter side) of photograph ``c``. Returns (images uint8 [N, 3, size, size],
    labels int64 [N], class names)."""
    from PIL import Image

    from invfast.synthetic.banks import _photo_sources_cached

    src = {name: img for name, img in _photo_sources_cached()}
    names = [n for n in _BASE_PHOTOS if n in src]
    if not names:
        raise RuntimeError("builtin_base_set: no shipped photographs found (install scikit-image / scikit-learn)")
    N = n_per_class * len(names)
    images = np.empty((N, size, size, 3), np.uint8)
    labels = np.repeat(np.arange(len(names)), n_per_class)
    keys = rng.sample_keys(seed, "base-set", np.arange(N))
    side_u, pos = rng.uniform(keys, "side"), rng.uniform(keys, "pos", 2)
    pils = [Image.fromarray(src[n]) for n in names]
    for j in range(N):
        pil = pils[labels[j]]
        w, h = pil.size
        side = int(min(h, w) * (0.3 + 0.4 * side_u[j]))
        y0, x0 = int(pos[j, 0] * (h - side + 1)), int(pos[j, 1] * (w - side + 1))
        images[j] = np.asarray(pil.resize((size, size), Image.Resampling.BOX, box=(x0, y0, x0 + side, y0 + side)))
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), torch.from_numpy(labels), names


def load_image_folder(path: str | os.PathLike, size: int = 32) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Base images from an ImageFolder layout ``path/<class>/<image>`` (centre square crop, resized).
    Returns (images uint8 [N, 3, size, size], labels int64 [N], class names); names a corrupt file."""
    from invfast.synthetic.banks import load_backgrounds

    root = Path(path)
    classes = sorted(d.name for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    if not classes:
        raise ValueError(
            f"load_image_folder: {str(root)!r} has no class subfolders (expected <folder>/<class>/<image>)"
        )
    imgs, labels = [], []
    for c, name in enumerate(classes):
        if not any(p.suffix.lower() in _IMAGE_EXTS for p in (root / name).rglob("*")):
            continue
        t = load_backgrounds(root / name, size=size)
        imgs.append(t)
        labels.append(torch.full((t.shape[0],), c, dtype=torch.int64))
    return torch.cat(imgs), torch.cat(labels), classes


class IrrelevantFeatureDataset(torch.utils.data.Dataset):
    """Small objects pasted onto base images (Speicher §4.2, App. C.3).

    Args:
        base_images: uint8/float [N, 3, H, W] (or [N, H, W, 3]) array/tensor, or an ImageFolder path.
        base_labels: int [N] (ignored for a folder, whose subfolders are the classes).
        objects: object bank spec (default: 10 built-in objects).
        alpha: label correlation — with probability α the object is the one of the base class
            (object ``base_label % n_objects``), otherwise a uniformly random object.
        beta: availability — an (uniformly random) object is pasted with probability β, else none.
            Give at most one of alpha / beta; neither means a random object on every image.
        task: 'base' or 'object' — which label ``ds[i]`` returns as its label.
        object_scale: object's longer side as a fraction of the image side.
        position: 'random' (uniform, object fully inside) or 'upper-right' (Speicher App. C.3).

    ``ds[i]`` -> (image float32 [3, H, W], label, {'base_label', 'object_label' (-1: none), 'x', 'y'}).
    """

    def __init__(
        self,
        base_images: Any,
        base_labels: Any = None,
        objects: Any = 10,
        alpha: float | None = None,
        beta: float | None = None,
        task: str = "base",
        object_scale: float = 0.4,
        position: str = "random",
        seed: int = 0,
        size: int = 32,
    ):
        if isinstance(base_images, (str, os.PathLike)):
            base_images, base_labels, _ = load_image_folder(base_images, size=size)
        if isinstance(base_images, np.ndarray):
            base_images = torch.from_numpy(np.ascontiguousarray(base_images))
        if not isinstance(base_images, torch.Tensor):
            raise TypeError(f"base_images must be an array/tensor or a folder path, got {type(base_images).__name__}")
        x = base_images
        if x.dim() == 4 and x.shape[-1] == 3 and x.shape[1] != 3:
            x = x.permute(0, 3, 1, 2)
        if x.dim() != 4 or x.shape[1] != 3 or x.shape[2] != x.shape[3]:
            raise ValueError(
                f"base_images must be square RGB [N, 3, H, H] or [N, H, H, 3], got {tuple(base_images.shape)}"
            )
        if x.dtype != torch.uint8:
            if not x.is_floating_point():
                raise TypeError(f"base_images must be uint8 or float in [0, 1], got {x.dtype}")
            x = (x.float().clamp(0, 1) * 255).round().to(torch.uint8)
        if base_labels is None:
            raise ValueError("base_labels are required with an image array (one int label per image)")
        if isinstance(base_labels, np.ndarray):
            base_labels = torch.from_numpy(base_labels)
        y = torch.as_tensor(base_labels).long().reshape(-1)
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"base_labels has {y.shape[0]} labels but there are {x.shape[0]} base images")
        if alpha is not None and beta is not None:
            raise ValueError("give at most one of alpha (label correlation) and beta (availability)")
        for nm, v in (("alpha", alpha), ("beta", beta)):
            if v is not None and not 0.0 <= float(v) <= 1.0:
                raise ValueError(f"{nm} must be in [0, 1], got {v}")
        if task not in ("base", "object"):
            raise ValueError(f"task must be 'base' or 'object', got {task!r}")
        if position not in ("random", "upper-right"):
            raise ValueError(f"position must be 'random' or 'upper-right', got {position!r}")
        if not 0.05 <= object_scale <= 1.0:
            raise ValueError(f"object_scale must be in [0.05, 1], got {object_scale}")
        self.images_base = x.contiguous()
        self.base_labels = y
        self.objects = as_objects(objects, None)
        self.alpha, self.beta, self.task, self.position, self.seed = alpha, beta, task, position, int(seed)
        self.size = int(x.shape[2])
        self._canvases = self.objects.canvases(self.size, object_scale)

    def __len__(self) -> int:
        return self.images_base.shape[0]

    @property
    def num_classes(self) -> int:
        """Classes of ``task``: base classes (the largest base label + 1) or objects."""
        return int(self.base_labels.max()) + 1 if self.task == "base" else len(self.objects)

    def generate(self, indices: Sequence[int], view: int = 0, vary: str = "object"):
        """(images uint8 [B, 3, H, W], labels int64 [B] for ``task``, params dict of Tensors [B]).

        ``view`` > 0 gives another view of the same samples in which only ``vary`` changes:
        ``'object'``: the same base image with the object (which one, where, whether present) drawn anew;
        ``'base'``: the same object at the same place on another base image. Pairs of views measure the
        sensitivity to the pasted object or to the base image (Speicher et al. Tab. 1)."""
        if vary not in ("object", "base"):
            raise ValueError(f"vary must be 'object' or 'base', got {vary!r}")
        idx = as_indices(indices, len(self))
        view = check_int("view", view)
        keys = rng.sample_keys(self.seed, "irrelevant", idx)
        B, S, K = idx.size, self.size, len(self.objects)
        base = self.base_labels[torch.from_numpy(idx)].numpy()
        on_base = idx
        if view and vary == "base" and len(self) > 1:
            other = rng.integers(rng.stream_bits(keys, f"view/{view}"), "base", len(self) - 1)
            on_base = (idx + 1 + other) % len(self)
        elif view:
            keys = rng.stream_bits(keys, f"view/{view}")
        obj = rng.integers(keys, "object", K)
        present = np.ones(B, bool)
        if self.alpha is not None:
            obj = np.where(rng.uniform(keys, "correlated") < self.alpha, base % K, obj)
        if self.beta is not None:
            present = rng.uniform(keys, "available") < self.beta
        pm = self._canvases.index_select(0, torch.from_numpy(obj)) * torch.from_numpy(present).view(-1, 1, 1, 1).float()
        y0, y1, x0, x1 = alpha_box(self._canvases.index_select(0, torch.from_numpy(obj)))
        if self.position == "random":
            u = rng.uniform(keys, "position", 2)
            top = np.floor(u[:, 0] * (S - (y1 - y0))).astype(np.int64) - y0.astype(np.int64)
            left = np.floor(u[:, 1] * (S - (x1 - x0))).astype(np.int64) - x0.astype(np.int64)
        else:
            top = (1 - y0).astype(np.int64)
            left = (S - 2 - x1).astype(np.int64)
        # integer shifts: exact, object fully inside
        offset = np.stack([left * 2.0 / S, top * 2.0 / S], 1)
        inv = np.broadcast_to(np.eye(2), (B, 2, 2)).copy()
        pm = affine_warp(pm, torch.from_numpy(inv), torch.from_numpy(offset))
        images = composite(pm.contiguous(), self.images_base, torch.from_numpy(on_base))
        obj_label = np.where(present, obj, -1)
        params = {
            "base_label": self.base_labels[torch.from_numpy(on_base)].clone(),
            "object_label": torch.from_numpy(obj_label.astype(np.int64)),
            "x": torch.from_numpy(np.where(present, (left + (x0 + x1 + 1) / 2.0) / S, -1.0)),
            "y": torch.from_numpy(np.where(present, (top + (y0 + y1 + 1) / 2.0) / S, -1.0)),
        }
        labels = params["base_label"] if self.task == "base" else params["object_label"]
        return images, labels.clone(), params

    def __getitem__(self, idx: int):
        idx = int(idx)
        if idx < 0:
            idx += len(self)
        images, labels, params = self.generate([idx])
        return images[0].float() / 255.0, int(labels[0]), {k: float(v[0]) for k, v in params.items()}
