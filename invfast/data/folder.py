"""Image folders: decoding with PIL, one resize/crop rule, DataLoader worker processes.

Every image becomes ``uint8 [3, size, size]`` the way torchvision's evaluation transform
``Resize(size) + CenterCrop(size)`` makes it: the shorter side is resized to ``size`` px (PIL
bilinear, antialiased when shrinking), then the centre ``size x size`` square is cut out. The same
rule serves measurement and pretraining, so an image means the same pixels to both.

Decoding turns the image upright by its EXIF orientation (as Pillow's ``ImageOps.exif_transpose``; not with
``exif=False``, the default of ``native``) and reads it by what its mode holds: 16-bit images (PNG/TIFF
``I;16``) are scaled 0..65535 -> 0..255 (PIL's own conversion clips them to 255, nearly white); float (``F``)
and 32-bit integer (``I``) images by their range, with the rule of in-memory arrays
(:func:`invfast.data.protocol.float_range_scale`: 0..1 floats scaled by 255, values in 0..255 kept with a
warning, a maximum slightly above 1 refused); NaN/Inf or a range that tells no scale is refused (the file
counts as unreadable, with the reason). ``native=True`` keeps every image as the published evaluation code
loads it (``torchvision``'s ``pil_loader``: its own size and aspect, not turned by EXIF) and transforms it;
``pixels="pillow"`` reads every file as that loader does (Pillow's ``convert("RGB")``: 16-bit and 32-bit images
clipped to 255, float ones truncated, with a warning naming the file), and ``listing="imagefolder"`` lists the
folder as torchvision 0.10's ``ImageFolder`` does (:func:`imagefolder_listing`).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from invfast.data.protocol import ImageDecodeError, Source, float_range_scale, integer_scale, pin
from invfast.io import require_regular

#: the largest intermediate image (pixels) the shorter-side resize may make: 64 M px, 192 MiB of RGB (a photo of any
#: ordinary aspect ratio stays far below; a 100 000×1 strip at 256 px would need 19 GiB)
MAX_RESIZED_PIXELS = 1 << 26

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".jpe")
#: torchvision 0.10's ``IMG_EXTENSIONS`` (``torchvision/datasets/folder.py``): the files ``ImageFolder`` lists
IMAGEFOLDER_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
#: how a folder is listed: invfast's own rule, or torchvision 0.10 ``ImageFolder``'s (:class:`FolderSource`)
LISTINGS = ("invfast", "imagefolder")
#: how 16-bit, 32-bit and float files become 8-bit: by their range (invfast), or Pillow's ``convert("RGB")``
FILE_PIXELS = ("range", "pillow")
#: the modes Pillow's ``convert("RGB")`` narrows to 8 bits, and what it does to their values
_WIDE_MODES = {
    **dict.fromkeys(("I;16", "I;16L", "I;16B", "I;16N"), "a 16-bit image (values above 255 clipped to 255)"),
    "I": "a 32-bit integer image (values clipped to 0..255)",
    "F": "a float image (values clipped to 0..255 and truncated: 0..1 turns black)",
}


def image_to_rgb(im: Any) -> Any:
    """A PIL image as 8-bit RGB, scaled by what its mode holds: 16-bit modes 0..65535 -> 0..255 (PIL's own
    conversion clips them to 255, nearly white); 32-bit integer images by their range
    (:func:`invfast.data.protocol.integer_scale`: 0..255 as is, up to 65535 as 16-bit); float images by
    their range as in-memory float arrays are (:func:`invfast.data.protocol.float_range_scale`: 0..1 floats,
    or values already in 0..255 with a warning), refusing NaN/Inf or a range that says nothing of the scale
    (below 0, above 255, or slightly above 1). Every reader of user images (folders, ``invfast transforms
    --image``, background folders) decodes through it."""
    from PIL import Image

    if im.mode in ("I;16", "I;16L", "I;16B", "I;16N"):
        a = np.asarray(im).astype(np.float64)
        return Image.fromarray(np.clip(np.round(a / 257.0), 0, 255).astype(np.uint8), mode="L").convert("RGB")
    if im.mode in ("F", "I"):
        a = np.asarray(im).astype(np.float64)
        if not np.isfinite(a).all():
            raise ValueError(f"{im.mode}-mode image holds {int((~np.isfinite(a)).sum())} NaN/Inf pixel(s)")
        lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
        if im.mode == "I":
            a = a / integer_scale(int(lo), int(hi), "32-bit integer image pixels")
        elif float_range_scale(lo, hi, "float image") == 1.0:
            a = a * 255.0
        else:
            warnings.warn(f"float image with values up to {hi:.4g} read as 0..255", stacklevel=2)
        return Image.fromarray(np.clip(np.round(a), 0, 255).astype(np.uint8), mode="L").convert("RGB")
    return im.convert("RGB")


def open_rgb(path: str | os.PathLike, exif: bool = True, pixels: str = "range") -> Any:
    """The image at ``path`` as 8-bit RGB, turned upright by its EXIF orientation (as Pillow's
    ``ImageOps.exif_transpose``: cameras store photos sideways and record the rotation in EXIF); with
    ``exif=False`` as stored. ``pixels``: ``"range"`` reads 16-bit, 32-bit and float images by what they hold
    (:func:`image_to_rgb`); ``"pillow"`` as torchvision's ``pil_loader`` does, ``Image.open(path).convert("RGB")``
    (Pillow clips 16-bit and 32-bit values to 0..255 and truncates float ones: a 0..1 float image turns
    black), with a one-line warning naming such a file."""
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        if exif:
            im = ImageOps.exif_transpose(im)
        if pixels == "range":
            return image_to_rgb(im)
        if pixels != "pillow":
            raise ValueError(f"pixels must be one of {', '.join(FILE_PIXELS)}, got {pixels!r}")
        if im.mode in _WIDE_MODES:
            warnings.warn(
                f"{os.fspath(path)}: {_WIDE_MODES[im.mode]} read as the original's loader reads it, "
                "Image.open(f).convert('RGB'): its range is lost",
                stacklevel=2,
            )
        return im.convert("RGB")


def decode_image(path: str | os.PathLike, size: int, exif: bool = True, pixels: str = "range") -> torch.Tensor:
    """The image at ``path`` as uint8 [3, size, size]: shorter side resized to ``size``, centre-cropped."""
    from PIL import Image

    im = open_rgb(path, exif, pixels)
    w, h = im.size
    s = size / min(w, h)
    nw, nh = max(size, round(w * s)), max(size, round(h * s))
    if nw * nh > MAX_RESIZED_PIXELS:
        raise ValueError(
            f"a {w}×{h} image resized to a shorter side of {size} px would be {nw}×{nh} "
            f"({3 * nw * nh / 2**30:.1f} GiB) before its centre crop; crop it to a sane aspect ratio first"
        )
    im = im.resize((nw, nh), Image.Resampling.BILINEAR)
    left, top = (nw - size) // 2, (nh - size) // 2
    im = im.crop((left, top, left + size, top + size))
    arr = np.asarray(im, dtype=np.uint8)
    return torch.from_numpy(arr.copy()).permute(2, 0, 1)


def decode_native(path: str | os.PathLike, exif: bool = True, pixels: str = "range") -> torch.Tensor:
    """The image at ``path`` as loaded, uint8 [3, H, W] (upright by its EXIF orientation unless ``exif=False``;
    no resizing; ``pixels`` as :func:`open_rgb`)."""
    arr = np.asarray(open_rgb(path, exif, pixels), dtype=np.uint8)
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
    """index -> (index, image uint8 [3, S, S] (or [3, H, W] as loaded when ``native``) or zeros,
    error text or '')."""

    def __init__(
        self, files: list[str], size: int, native: bool = False, exif: bool = True, pixels: str = "range"
    ) -> None:
        self.files, self.size, self.native, self.exif, self.pixels = files, size, native, exif, pixels

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, str]:
        try:
            f = self.files[i]
            require_regular(f, "image file")
            if self.native:
                img = decode_native(f, self.exif, self.pixels)
            else:
                img = decode_image(f, self.size, self.exif, self.pixels)
            return i, img, ""
        except Exception as e:  # PIL raises many types for bad files
            side = 1 if self.native else self.size
            return i, torch.zeros(3, side, side, dtype=torch.uint8), f"{type(e).__name__}: {e}"


def _collate(items: list[tuple[int, torch.Tensor, str]]) -> tuple[list[int], list[torch.Tensor], list[str]]:
    return [it[0] for it in items], [it[1] for it in items], [it[2] for it in items]


class _Requests:
    """A batch sampler whose batches are set before each pass (so worker processes persist)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def imagefolder_listing(root: str) -> tuple[list[str], list[int], list[str]]:
    """``(paths, class index of each, class names)`` as torchvision 0.10's ``ImageFolder(root)`` lists them
    (``find_classes`` + ``make_dataset``, its ``samples``): the classes are the sorted names of the entries of
    ``root`` that are directories (``os.scandir``, links followed; hidden ones too); each class folder is walked
    as ``sorted(os.walk(class_dir, followlinks=True))``, its file names sorted, and a path kept when it ends
    (case-insensitively) in one of :data:`IMAGEFOLDER_EXTENSIONS` (hidden files too). Files directly under
    ``root`` are not listed. A folder with no sub-folder at all (which ``ImageFolder`` refuses) is listed as
    ``ImageFolder`` lists it as the one class of its parent: its image files, sorted, class names ``[]``."""
    classes = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    dirs = [(os.path.join(root, c), i) for i, c in enumerate(classes)] or [(root, 0)]
    files: list[str] = []
    targets: list[int] = []
    for class_dir, i in dirs:
        if not os.path.isdir(class_dir):
            continue
        for dirpath, _, fnames in sorted(os.walk(class_dir, followlinks=True)):
            for f in sorted(fnames):
                path = os.path.join(dirpath, f)
                if path.lower().endswith(IMAGEFOLDER_EXTENSIONS):
                    files.append(path)
                    targets.append(i)
    return files, targets, classes


def _invfast_listing(root: str, exts: tuple[str, ...] | None) -> list[str]:
    """Every file under ``root`` (ending in ``exts`` when given), hidden files and folders skipped, sorted by
    relative path."""
    files: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in sorted(filenames):
            if f.startswith(".") or (exts is not None and not f.lower().endswith(exts)):
                continue
            files.append(os.path.join(dirpath, f))
    files.sort(key=lambda p: os.path.relpath(p, root))
    return files


def folder_listing(
    root: str, listing: str = "invfast", extensions: Sequence[str] | None = None, n: int | None = None
) -> tuple[list[str], torch.Tensor | None, list[str]]:
    """``(files, group of each or None, group names)`` of ``root`` listed by ``listing`` (the first ``n``)."""
    if listing not in LISTINGS:
        raise ValueError(f"listing must be one of {', '.join(LISTINGS)}, got {listing!r}")
    exts = None if extensions is None else tuple(e.lower() for e in extensions)
    if listing == "imagefolder":
        if exts is not None:
            raise ValueError("extensions cannot be given with listing='imagefolder' (ImageFolder's own are used)")
        files, targets, names = imagefolder_listing(root)
        what = f"files ending in {', '.join(IMAGEFOLDER_EXTENSIONS)} (listed as torchvision's ImageFolder lists)"
    else:
        files, targets, names = _invfast_listing(root, exts), [], []
        what = f"files ending in {', '.join(exts)}" if exts else "files"
    if not files:
        raise ValueError(f"data folder {root!r} holds no images (no {what})")
    if n is not None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        files, targets = files[:n], targets[:n]
    if listing == "imagefolder":
        return files, (torch.tensor(targets, dtype=torch.long, device="cpu") if names else None), names
    rel_dirs = [os.path.dirname(os.path.relpath(p, root)) for p in files]
    names = sorted(set(rel_dirs))
    lookup = {d: i for i, d in enumerate(names)}
    groups = torch.tensor([lookup[d] for d in rel_dirs], dtype=torch.long) if names != [""] else None
    return files, groups, names


class FolderSource(Source):
    """Images under a folder, decoded with PIL to ``uint8 [3, resize, resize]`` (see the module docstring).

    Layouts: a flat folder of images (ImageNet val as distributed), or one subfolder per class /
    object / scene; the subfolder is the group of each image (real-world mode). Files are sorted by
    relative path, hidden ones skipped, so the order (and any sharding) is reproducible (``listing`` below
    gives ImageFolder's list instead).

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
        native: images as loaded, each at its own size and aspect (no resize or crop): ``load`` then
            gives a list of ``uint8 [3, H_i, W_i]`` (the published evaluation code transforms images so).
        exif: turn each image upright by its EXIF orientation; default: yes, except with ``native`` (the
            published code's loader, ``pil_loader``, does not: a photo stored sideways is measured sideways).
        listing: ``"invfast"`` (default: the rule above) or ``"imagefolder"``: the list of torchvision 0.10's
            ``ImageFolder(root).samples`` (:func:`imagefolder_listing`; only its image extensions, class folders
            in Python's sort, hidden files included, files directly under ``root`` left out); the group of each
            image is then its class (none for a folder without sub-folders).
        pixels: ``"range"`` (default: 16-bit, 32-bit and float files read by their range) or ``"pillow"``
            (Pillow's ``convert("RGB")``, as the published code's loader: :func:`open_rgb`).
        listed: the folder's listing made already (:func:`folder_listing` of the same ``root``, ``listing``,
            ``extensions`` and ``n``, e.g. by rank 0 of a distributed run, sent to the others): the folder is
            not listed again.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        resize: int | None = None,
        *,
        n: int | None = None,
        strict: bool = False,
        extensions: Sequence[str] | None = None,
        workers: int = 0,
        cache: bool = False,
        native: bool = False,
        exif: bool | None = None,
        listing: str = "invfast",
        pixels: str = "range",
        listed: tuple[list[str], torch.Tensor | None, list[str]] | None = None,
    ) -> None:
        resize = 256 if resize is None else resize
        root = os.fspath(root)
        if not os.path.isdir(root):
            raise FileNotFoundError(f"data folder {root!r} does not exist or is not a folder")
        if isinstance(resize, bool) or not isinstance(resize, (int, np.integer)) or resize < 1:
            raise ValueError(f"resize must be an int >= 1 pixel, got {resize!r}")
        if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 0:
            raise ValueError(f"workers must be an int >= 0, got {workers!r}")
        if pixels not in FILE_PIXELS:
            raise ValueError(f"pixels must be one of {', '.join(FILE_PIXELS)}, got {pixels!r}")
        self.root, self.resize, self.strict, self.workers = root, int(resize), strict, int(workers)
        self.native = bool(native)
        self.exif = not self.native if exif is None else bool(exif)
        self.listing, self.pixels = listing, pixels
        self.files, self.groups, self.group_names = (
            folder_listing(root, listing, extensions, n) if listed is None else listed
        )
        self.spec = f"folder:{os.path.abspath(root)}"
        self.errors = DecodeErrors()
        self._seen_bad: set[int] = set()
        self._cache: dict[int, torch.Tensor] | None = {} if cache else None
        self._dataset = _Decoded(self.files, self.resize, self.native, self.exif, pixels)
        self._requests = _Requests()
        self._loader: torch.utils.data.DataLoader | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.files)

    def __getstate__(self) -> dict[str, Any]:  # worker processes and locks do not travel
        d = dict(self.__dict__)
        d["_loader"], d["_lock"], d["_requests"] = None, None, _Requests()
        return d

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()

    def _decoded(
        self, chunks: list[list[int]], pool: bool
    ) -> Iterator[tuple[list[int], list[torch.Tensor], list[str]]]:
        """(indices, images, errors) per chunk, decoded here or (``pool``) by the worker processes."""
        if not pool:
            for c in chunks:
                yield _collate([self._dataset[i] for i in c])
            return
        if self._loader is None:
            self._loader = torch.utils.data.DataLoader(
                self._dataset,
                batch_sampler=self._requests,
                num_workers=self.workers,
                collate_fn=_collate,
                persistent_workers=True,
            )
        self._requests.batches = chunks
        yield from self._loader

    def _read(
        self, index_batches: list[list[int]], pin_memory: bool = False
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
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
                ok = torch.zeros(len(b), dtype=torch.bool)
                batch: list[torch.Tensor] = []
                for j, i in enumerate(b):
                    if i in got:
                        img, err = got[i]
                    else:  # not decoded now: cached (only cached images are left out of the plan)
                        assert self._cache is not None
                        img, err = self._cache[i], ""
                    if err:
                        self._bad(i, err)
                    elif self._cache is not None and i in got:
                        self._cache[i] = img.clone()
                    ok[j] = not err
                    batch.append(img)
                yield self._assemble(batch, ok, pin_memory), ok
        finally:
            if pool:
                self._lock.release()

    def _assemble(self, imgs: list[torch.Tensor], ok: torch.Tensor, pin_memory: bool) -> Any:
        """One batch: uint8 [B, 3, S, S] (zeros where unreadable), or with ``native`` the list of images."""
        if self.native:
            return [pin(x) if pin_memory else x for x in imgs]
        # a fresh buffer per batch: an asynchronous upload of the previous one may still be reading it
        out = torch.zeros(
            len(imgs), 3, self.resize, self.resize, dtype=torch.uint8, device="cpu", pin_memory=pin_memory
        )
        for j, img in enumerate(imgs):
            if ok[j]:
                out[j] = img
        return out

    def _bad(self, i: int, err: str) -> None:
        if self.strict:
            raise ImageDecodeError(
                f"cannot read {self.files[i]!r} as an image ({err}); "
                "remove or replace it (invfast measure without --strict skips unreadable files)"
            )
        if i not in self._seen_bad:
            self._seen_bad.add(i)
            self.errors.add(self.files[i], err)

    def load(self, indices: Sequence[int] | torch.Tensor) -> tuple[Any, torch.Tensor]:
        """Images ``uint8 [B, 3, resize, resize]`` (``native``: a list of ``[3, H_i, W_i]``) and ``ok [B]``
        at ``indices``."""
        return next(self._read([_indices(indices, len(self))]))

    def batches(
        self, index_batches: Iterable[Sequence[int] | torch.Tensor], *, pin_memory: bool = False
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """``load`` of each batch in order; with workers, later batches decode while earlier ones are
        used (DataLoader prefetch: about two batches ahead). ``pin_memory``: each batch is assembled in
        page-locked memory (CUDA builds of torch), ready for a ``non_blocking`` upload."""
        return self._read([_indices(b, len(self)) for b in index_batches], pin_memory)

    def identity(self) -> str:
        """SHA-256 over every file's path relative to the root and its size, and the loading size (not the
        root or modification times: a copy of the folder elsewhere is the same image set)."""
        import hashlib

        h = hashlib.sha256(f"resize={'native' if self.native else self.resize}\n".encode())
        if not self.exif:  # the pixels of EXIF-tagged photos differ (the default's identity is unchanged)
            h.update(b"exif=off\n")
        if self.pixels != "range":  # so do those of 16-bit and float files
            h.update(f"pixels={self.pixels}\n".encode())
        for f in self.files:
            try:
                size = os.path.getsize(f)
            except OSError:
                size = -1
            h.update(f"{os.path.relpath(f, self.root)}:{size}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        d = {
            "kind": "folder",
            "root": os.path.abspath(self.root),
            "n": len(self),
            "resize": "native" if self.native else self.resize,
            "exif_transpose": self.exif,
            "first": os.path.relpath(self.files[0], self.root),
            "last": os.path.relpath(self.files[-1], self.root),
        }
        if self.listing != "invfast":  # the default's description is unchanged
            d["listing"] = self.listing
        if self.pixels != "range":
            d["pixels"] = self.pixels
        return d


def _indices(indices: Sequence[int] | torch.Tensor, n: int) -> list[int]:
    idx = [int(i) for i in torch.as_tensor(indices, dtype=torch.long).reshape(-1)]
    bad = [i for i in idx if not 0 <= i < n]
    if bad:
        raise IndexError(f"image index {bad[0]} out of range for {n} images")
    return idx


__all__ = [
    "DecodeErrors",
    "FILE_PIXELS",
    "FolderSource",
    "IMAGEFOLDER_EXTENSIONS",
    "IMAGE_EXTENSIONS",
    "LISTINGS",
    "decode_image",
    "decode_native",
    "folder_listing",
    "image_to_rgb",
    "imagefolder_listing",
    "open_rgb",
]
