"""Image sources for invariance measurement: in-memory tensors, image folders, the synthetic generator.

Every source gives random access to fixed-size image batches by index, so the engine can shard
images across ranks and resume from any position:

- ``len(source)``: number of images;
- ``source.load(indices) -> (images [B, C, H, W] uint8 or float in [0, 1], ok [B] bool)``; rows whose
  ``ok`` is False could not be decoded (their pixels are zeros) and are left out of every statistic;
- ``source.groups``: ``None``, or an int64 tensor [N] of group ids (object/scene) for real-world mode;
- ``source.describe()``: a JSON-able description, used to recognise the same run when resuming.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".jpe")


class TensorSource:
    """Images held in memory: ``images [N, C, H, W]`` uint8 (0..255) or float (0..1)."""

    def __init__(self, images: torch.Tensor | np.ndarray, groups: Any = None, name: str = "tensor") -> None:
        if isinstance(images, np.ndarray):
            images = torch.from_numpy(images)
        if not isinstance(images, torch.Tensor):
            raise TypeError(f"data must be a tensor [N, C, H, W], got {type(images).__name__}")
        if images.dim() != 4:
            raise ValueError(f"data must be images [N, C, H, W], got shape {tuple(images.shape)}")
        if images.shape[0] == 0:
            raise ValueError("data holds no images (N = 0)")
        if images.dtype != torch.uint8 and not images.is_floating_point():
            raise TypeError(f"images must be uint8 (0..255) or float (0..1), got {images.dtype}")
        if images.is_floating_point() and images.numel() and not bool(torch.isfinite(images).all()):
            raise ValueError("images contain NaN/Inf values")
        self.images = images
        self.groups = _as_groups(groups, images.shape[0])
        self.name = name

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return self.images[idx], torch.ones(idx.numel(), dtype=torch.bool)

    def describe(self) -> dict[str, Any]:
        x = self.images
        return {"kind": "tensor", "name": self.name, "n": len(self), "shape": list(x.shape[1:]), "dtype": str(x.dtype),
                "checksum": float(x[:: max(1, x.shape[0] // 64)].double().sum())}


class DatasetSource:
    """Any map-style dataset whose items are an image ``[C, H, W]`` or a tuple starting with one.

    Objects with a ``generate(indices)`` method (``invfast.synthetic.Transforms2D``) are read a
    batch at a time through it.
    """

    def __init__(self, dataset: Any, n: int | None = None, name: str | None = None) -> None:
        if not hasattr(dataset, "__len__") or not (hasattr(dataset, "__getitem__") or hasattr(dataset, "generate")):
            raise TypeError(f"data must be a tensor, a folder path or a map-style dataset, got {type(dataset).__name__}")
        total = len(dataset)
        if n is not None and n > total:
            raise ValueError(f"asked for {n} images but the dataset holds {total}")
        self.dataset = dataset
        self.n = total if n is None else int(n)
        if self.n == 0:
            raise ValueError("data holds no images (N = 0)")
        self.groups = None
        self.name = name or type(dataset).__name__

    def __len__(self) -> int:
        return self.n

    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = [int(i) for i in torch.as_tensor(indices, dtype=torch.long)]
        if hasattr(self.dataset, "generate"):
            images = self.dataset.generate(idx)[0]
        else:
            items = [self.dataset[i] for i in idx]
            images = torch.stack([it[0] if isinstance(it, (tuple, list)) else it for it in items])
        if images.dim() != 4:
            raise ValueError(f"the dataset's images must be [C, H, W], got a batch of shape {tuple(images.shape)}")
        return images, torch.ones(len(idx), dtype=torch.bool)

    def describe(self) -> dict[str, Any]:
        d = {"kind": "dataset", "name": self.name, "n": self.n}
        for attr in ("seed", "size", "split"):
            if hasattr(self.dataset, attr):
                v = getattr(self.dataset, attr)
                d[attr] = v if isinstance(v, (int, float, str)) else repr(v)
        return d


@dataclass
class DecodeErrors:
    """Files that could not be read as images: how many, and the first few with the reason."""

    count: int = 0
    examples: list[tuple[str, str]] = field(default_factory=list)
    max_examples: int = 20

    def add(self, path: str, reason: str) -> None:
        self.count += 1
        if len(self.examples) < self.max_examples:
            self.examples.append((path, reason))

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "examples": [list(e) for e in self.examples]}


class ImageDecodeError(ValueError):
    """An image file could not be decoded and the policy is strict."""


class FolderSource:
    """Images under a folder, read with PIL, resized (shorter side) to ``resize`` and centre-cropped square.

    Layouts: a flat folder of images (ImageNet val as distributed), or one subfolder per class /
    object / scene (ImageNet val sorted into synsets, COIL/ALOI-style object folders). The
    subfolder is the group of each image (used by real-world mode). Every file that is not hidden
    counts as an image: unreadable or non-image files are counted in ``errors`` and skipped under
    ``strict=False`` (the default), or raise :class:`ImageDecodeError` under ``strict=True``.
    Files are sorted, so the order (and any sharding) is reproducible.
    """

    def __init__(self, root: str | os.PathLike, *, resize: int = 256, n: int | None = None, strict: bool = False,
                 extensions: Sequence[str] | None = None) -> None:
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"data folder {root!r} does not exist or is not a folder")
        if resize < 1:
            raise ValueError(f"resize must be >= 1 pixel, got {resize}")
        self.root, self.resize, self.strict = root, int(resize), strict
        exts = None if extensions is None else tuple(e.lower() for e in extensions)
        files: list[str] = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in sorted(filenames):
                if f.startswith("."):
                    continue
                if exts is not None and not f.lower().endswith(exts):
                    continue
                files.append(os.path.join(dirpath, f))
        files.sort(key=lambda p: os.path.relpath(p, root))
        if not files:
            raise ValueError(f"data folder {root!r} holds no files")
        if n is not None:
            if n < 1:
                raise ValueError(f"n must be >= 1, got {n}")
            files = files[:n]
        self.files = files
        rel_dirs = [os.path.dirname(os.path.relpath(p, root)) for p in files]
        names = sorted(set(rel_dirs))
        self.group_names = names
        lookup = {d: i for i, d in enumerate(names)}
        self.groups = torch.tensor([lookup[d] for d in rel_dirs], dtype=torch.long) if len(names) > 1 or names != [""] else None
        self.errors = DecodeErrors()
        self._seen_bad: set[int] = set()

    def __len__(self) -> int:
        return len(self.files)

    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = [int(i) for i in torch.as_tensor(indices, dtype=torch.long)]
        out = torch.zeros(len(idx), 3, self.resize, self.resize, dtype=torch.uint8)
        ok = torch.zeros(len(idx), dtype=torch.bool)
        for j, i in enumerate(idx):
            try:
                out[j] = self._decode(self.files[i])
                ok[j] = True
            except Exception as e:  # PIL raises many types for bad files
                if self.strict:
                    raise ImageDecodeError(f"cannot read {self.files[i]!r} as an image ({type(e).__name__}: {e}); "
                                           "remove it, or run without --strict to skip unreadable files") from e
                if i not in self._seen_bad:
                    self._seen_bad.add(i)
                    self.errors.add(self.files[i], f"{type(e).__name__}: {e}")
        return out, ok

    def _decode(self, path: str) -> torch.Tensor:
        from PIL import Image

        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            s = self.resize / min(w, h)
            nw, nh = max(self.resize, round(w * s)), max(self.resize, round(h * s))
            im = im.resize((nw, nh), Image.BILINEAR)
            left, top = (nw - self.resize) // 2, (nh - self.resize) // 2
            im = im.crop((left, top, left + self.resize, top + self.resize))
            arr = np.asarray(im, dtype=np.uint8)
        return torch.from_numpy(arr.copy()).permute(2, 0, 1)

    def describe(self) -> dict[str, Any]:
        return {"kind": "folder", "root": os.path.abspath(self.root), "n": len(self), "resize": self.resize,
                "first": os.path.relpath(self.files[0], self.root), "last": os.path.relpath(self.files[-1], self.root)}


def _as_groups(groups: Any, n: int) -> torch.Tensor | None:
    if groups is None:
        return None
    g = torch.as_tensor(np.asarray(groups) if not isinstance(groups, torch.Tensor) else groups)
    if g.dim() != 1 or g.shape[0] != n:
        raise ValueError(f"groups must be a 1-D sequence of {n} group ids (one per image), got shape {tuple(g.shape)}")
    if g.is_floating_point():
        raise TypeError("groups must hold integer group ids")
    _, inv = torch.unique(g, return_inverse=True)
    return inv.long()


def parse_synthetic_spec(spec: str) -> dict[str, Any]:
    """``'objects=10,transforms=rotate+hue,size=32,n=1000,seed=0,split=test'`` -> keyword dict."""
    out: dict[str, Any] = {}
    if not spec:
        return out
    for part in spec.split(","):
        if "=" not in part:
            raise ValueError(f"synthetic spec items must be key=value, got {part!r} in {spec!r}")
        k, v = (s.strip() for s in part.split("=", 1))
        if k in ("objects", "size", "n", "seed"):
            try:
                out[k] = int(v)
            except ValueError:
                raise ValueError(f"synthetic spec {k} must be an integer, got {v!r}") from None
        elif k == "transforms":
            out[k] = tuple(t for t in v.split("+") if t)
        elif k == "split":
            out[k] = v
        else:
            raise ValueError(f"unknown synthetic spec key {k!r}; use objects, transforms, size, n, seed, split")
    return out


def synthetic_source(spec: str | dict[str, Any], n: int | None = None) -> DatasetSource:
    """A Transforms-2D data set (``invfast.synthetic``) as a measurement source.

    Spec keys: objects (number of built-in objects, default 10), transforms ('+'-joined Transforms-2D
    types sampled into the images, default none), size (default 32), n (default 1000, or ``n``),
    seed, split (default 'test').
    """
    from invfast import synthetic

    kw = parse_synthetic_spec(spec) if isinstance(spec, str) else dict(spec)
    n_objects = kw.pop("objects", 10)
    transforms = kw.pop("transforms", ())  # prototypes on random backgrounds; the test transforms do the rest
    kw.setdefault("split", "test")
    total = kw.pop("n", n if n is not None else 1000)
    keep = None if n is None else min(n, total)  # the spec's n bounds the images asked for
    ds = synthetic.Transforms2D(synthetic.builtin_objects(n=n_objects), transforms, n=total, **kw)
    return DatasetSource(ds, n=keep, name="synthetic:" + (spec if isinstance(spec, str) else repr(spec)))


def as_source(data: Any, *, n: int | None = None, resize: int = 256, strict: bool = False,
              groups: Any = None) -> Any:
    """Turn what the user gave into a source: a source, tensor/array, folder path, 'folder:PATH',
    'synthetic:SPEC', or a map-style dataset. ``n`` keeps the first n images."""
    if hasattr(data, "load") and hasattr(data, "describe") and hasattr(data, "__len__"):
        src = data
    elif isinstance(data, (torch.Tensor, np.ndarray)):
        x = data if n is None else data[:n]
        return TensorSource(x, groups=None if groups is None else np.asarray(groups)[: len(x)])
    elif isinstance(data, (str, os.PathLike)):
        s = os.fspath(data)
        if s.startswith("synthetic:") or s == "synthetic":
            return synthetic_source(s.partition(":")[2], n=n)
        if s.startswith("folder:"):
            s = s[len("folder:"):]
        return FolderSource(s, resize=resize, n=n, strict=strict)
    else:
        return DatasetSource(data, n=n)
    if groups is not None:
        raise ValueError("groups can only be given with in-memory tensors; folders group by subfolder")
    return src
