"""Image folders: decoding with PIL, one resize/crop rule, DataLoader worker processes.

Every image becomes ``uint8 [3, size, size]`` the way torchvision's evaluation transform
``Resize(size) + CenterCrop(size)`` makes it: the shorter side is resized to ``size`` px (PIL
bilinear, antialiased when shrinking), then the centre ``size x size`` square is cut out. The same
rule serves measurement and pretraining, so an image means the same pixels to both.

16-bit images (PNG/TIFF modes ``I;16``/``I``) are scaled 0..65535 -> 0..255 before the conversion
to RGB (PIL's own conversion clips them to 255, which turns them nearly white).
"""
from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import torch

from invfast.data.protocol import ImageDecodeError, Source

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".jpe")
_SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


def _to_rgb(im: Any) -> Any:
    from PIL import Image

    if im.mode in _SIXTEEN_BIT_MODES:
        a = np.asarray(im).astype(np.float64)
        a = np.clip(np.round(a / 257.0), 0, 255).astype(np.uint8)  # 65535 / 257 = 255
        im = Image.fromarray(a, mode="L")
    return im.convert("RGB")


def decode_image(path: str | os.PathLike, size: int) -> torch.Tensor:
    """The image at ``path`` as uint8 [3, size, size]: shorter side resized to ``size``, centre-cropped."""
    from PIL import Image

    with Image.open(path) as im:
        im = _to_rgb(im)
        w, h = im.size
        s = size / min(w, h)
        nw, nh = max(size, round(w * s)), max(size, round(h * s))
        im = im.resize((nw, nh), Image.BILINEAR)
        left, top = (nw - size) // 2, (nh - size) // 2
        im = im.crop((left, top, left + size, top + size))
        arr = np.asarray(im, dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


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


class _Decoded(torch.utils.data.Dataset):
    """index -> (index, image uint8 [3, S, S] or zeros, error text or '')."""

    def __init__(self, files: list[str], size: int) -> None:
        self.files, self.size = files, size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, str]:
        try:
            return i, decode_image(self.files[i], self.size), ""
        except Exception as e:  # PIL raises many types for bad files
            return i, torch.zeros(3, self.size, self.size, dtype=torch.uint8), f"{type(e).__name__}: {e}"


def _collate(items: list[tuple[int, torch.Tensor, str]]) -> tuple[list[int], torch.Tensor, list[str]]:
    return [it[0] for it in items], torch.stack([it[1] for it in items]), [it[2] for it in items]


class _Requests:
    """A batch sampler whose batches are set before each pass (so worker processes persist)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


class FolderSource(Source):
    """Images under a folder, decoded with PIL to ``uint8 [3, resize, resize]`` (see the module docstring).

    Layouts: a flat folder of images (ImageNet val as distributed), or one subfolder per class /
    object / scene; the subfolder is the group of each image (real-world mode). Files are sorted by
    relative path, hidden ones skipped, so the order (and any sharding) is reproducible.

    Args:
        root: the folder.
        resize: side in px of the square images (the shorter side is resized to it, then centre-cropped).
        n: keep the first ``n`` files.
        strict: raise :class:`ImageDecodeError` on a file that is not an image; otherwise (default) it
            is counted in ``errors`` and its row comes back with ``ok = False``.
        extensions: only files ending so (case-insensitive); ``None`` (default) takes every file, so a
            stray non-image shows up in ``errors`` rather than vanishing.
        workers: DataLoader worker processes decoding images (0, the default: in this process, best
            for small data; 4-8 pay off for large photographs; ``invfast measure`` defaults to
            ``min(8, usable CPUs)``). ``load`` splits one batch over them;
            :meth:`batches` also decodes the next batches while the caller uses the current one.
        cache: keep decoded images in memory (pretraining reads every image once per epoch).
        load_size: deprecated name of ``resize``.
    """

    def __init__(self, root: str | os.PathLike, resize: int | None = None, *, n: int | None = None,
                 strict: bool = False, extensions: Sequence[str] | None = None, workers: int = 0,
                 cache: bool = False, load_size: int | None = None) -> None:
        if load_size is not None:
            warnings.warn("FolderSource(load_size=...) is now resize=... (invfast 0.2); load_size will be removed "
                          "in the next release", DeprecationWarning, stacklevel=2)
            if resize is not None and resize != load_size:
                raise ValueError(f"give resize or load_size, not both (got {resize} and {load_size})")
            resize = load_size
        resize = 256 if resize is None else resize
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"data folder {root!r} does not exist or is not a folder")
        if isinstance(resize, bool) or not isinstance(resize, (int, np.integer)) or resize < 1:
            raise ValueError(f"resize must be an int >= 1 pixel, got {resize!r}")
        if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 0:
            raise ValueError(f"workers must be an int >= 0, got {workers!r}")
        self.root, self.resize, self.strict, self.workers = root, int(resize), strict, int(workers)
        exts = None if extensions is None else tuple(e.lower() for e in extensions)
        files: list[str] = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for f in sorted(filenames):
                if f.startswith(".") or (exts is not None and not f.lower().endswith(exts)):
                    continue
                files.append(os.path.join(dirpath, f))
        files.sort(key=lambda p: os.path.relpath(p, root))
        if not files:
            what = f"files ending in {', '.join(exts)}" if exts else "files"
            raise ValueError(f"data folder {root!r} holds no images (no {what})")
        if n is not None:
            if n < 1:
                raise ValueError(f"n must be >= 1, got {n}")
            files = files[:n]
        self.files = files
        rel_dirs = [os.path.dirname(os.path.relpath(p, root)) for p in files]
        names = sorted(set(rel_dirs))
        self.group_names = names
        lookup = {d: i for i, d in enumerate(names)}
        self.groups = torch.tensor([lookup[d] for d in rel_dirs], dtype=torch.long) if names != [""] else None
        self.spec = f"folder:{os.path.abspath(root)}"
        self.errors = DecodeErrors()
        self._seen_bad: set[int] = set()
        self._cache: dict[int, torch.Tensor] | None = {} if cache else None
        self._dataset = _Decoded(files, self.resize)
        self._requests = _Requests()
        self._loader: torch.utils.data.DataLoader | None = None
        self._lock = threading.Lock()

    # pretraining's old attribute names
    @property
    def paths(self) -> list[str]:
        return self.files

    @property
    def load_size(self) -> int:
        return self.resize

    def __len__(self) -> int:
        return len(self.files)

    def __getstate__(self) -> dict[str, Any]:  # worker processes and locks do not travel
        d = dict(self.__dict__)
        d["_loader"], d["_lock"], d["_requests"] = None, None, _Requests()
        return d

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()

    def _decoded(self, chunks: list[list[int]], pool: bool) -> Iterator[tuple[list[int], torch.Tensor, list[str]]]:
        """(indices, images, errors) per chunk, decoded here or (``pool``) by the worker processes."""
        if not pool:
            for c in chunks:
                yield _collate([self._dataset[i] for i in c])
            return
        if self._loader is None:
            self._loader = torch.utils.data.DataLoader(self._dataset, batch_sampler=self._requests,
                                                       num_workers=self.workers, collate_fn=_collate,
                                                       persistent_workers=True)
        self._requests.batches = chunks
        yield from self._loader

    def _read(self, index_batches: list[list[int]], pin_memory: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # the worker pool serves one pass at a time; a call made while a pass is open (another
        # thread, or a load() inside a batches() loop) decodes in this process instead
        pool = self.workers > 0 and self._lock.acquire(blocking=False)
        try:
            parts = max(1, self.workers)
            plan = []  # per batch: the chunks still to decode, split over the workers
            for b in index_batches:
                need = [i for i in dict.fromkeys(b) if self._cache is None or i not in self._cache]
                plan.append([need[j::parts] for j in range(parts) if need[j::parts]])
            stream = self._decoded([c for cs in plan for c in cs], pool)
            for b, cs in zip(index_batches, plan):
                got: dict[int, tuple[torch.Tensor, str]] = {}
                for _ in cs:
                    ids, imgs, errs = next(stream)
                    got.update({i: (img, err) for i, img, err in zip(ids, imgs, errs)})
                # a fresh buffer per batch: an asynchronous upload of the previous one may still be reading it
                out = torch.zeros(len(b), 3, self.resize, self.resize, dtype=torch.uint8, device="cpu",
                                  pin_memory=pin_memory)
                ok = torch.zeros(len(b), dtype=torch.bool)
                for j, i in enumerate(b):
                    if i not in got:  # cached
                        out[j], ok[j] = self._cache[i], True
                        continue
                    img, err = got[i]
                    if err:
                        self._bad(i, err)
                        continue
                    out[j], ok[j] = img, True
                    if self._cache is not None:
                        self._cache[i] = img.clone()
                yield out, ok
        finally:
            if pool:
                self._lock.release()

    def _bad(self, i: int, err: str) -> None:
        if self.strict:
            raise ImageDecodeError(f"cannot read {self.files[i]!r} as an image ({err}); "
                                   "remove it, or run without --strict to skip unreadable files")
        if i not in self._seen_bad:
            self._seen_bad.add(i)
            self.errors.add(self.files[i], err)

    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Images ``uint8 [B, 3, resize, resize]`` and ``ok [B]`` at ``indices``."""
        return next(self._read([_indices(indices, len(self))]))

    def batches(self, index_batches: Iterable[Sequence[int] | torch.Tensor], *,
                pin_memory: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``load`` of each batch in order; with workers, later batches decode while earlier ones are
        used (DataLoader prefetch: about two batches ahead). ``pin_memory``: each batch is assembled in
        page-locked memory (CUDA builds of torch), ready for a ``non_blocking`` upload."""
        return self._read([_indices(b, len(self)) for b in index_batches], pin_memory)

    def identity(self) -> str:
        """SHA-256 over every file's path relative to the root and its size, and the loading size (not the
        root or modification times: a copy of the folder elsewhere is the same image set)."""
        import hashlib

        h = hashlib.sha256(f"resize={self.resize}\n".encode())
        for f in self.files:
            try:
                size = os.path.getsize(f)
            except OSError:
                size = -1
            h.update(f"{os.path.relpath(f, self.root)}:{size}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        return {"kind": "folder", "root": os.path.abspath(self.root), "n": len(self), "resize": self.resize,
                "first": os.path.relpath(self.files[0], self.root), "last": os.path.relpath(self.files[-1], self.root)}


def _indices(indices: Sequence[int] | torch.Tensor, n: int) -> list[int]:
    idx = [int(i) for i in torch.as_tensor(indices, dtype=torch.long).reshape(-1)]
    bad = [i for i in idx if not 0 <= i < n]
    if bad:
        raise IndexError(f"image index {bad[0]} out of range for {n} images")
    return idx


__all__ = ["DecodeErrors", "FolderSource", "IMAGE_EXTENSIONS", "decode_image"]
