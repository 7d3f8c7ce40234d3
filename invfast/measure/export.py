"""Features of a frozen model on a data source, written to a ``.npy`` file a batch at a time and resumable.

:func:`export_features` is what ``invfast features`` runs: rows ``[N_readable, D]`` float32 in the source's
order (unreadable images are skipped and named, never counted), a sidecar ``<stem>.json`` (model, data, the
images skipped, timing) and, for a folder of class subfolders, ``<stem>.labels.npy`` (int64 ``[N_readable]``,
the subfolder of each image; the names in the sidecar) — what ``invfast probe --features F.npy --targets
F.labels.npy`` reads. While it runs the rows live in ``<file>.partial.npy`` with ``<file>.partial.json``
(how many images are done); rerunning the same command continues from there.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from invfast.io import atomic_save_npy, atomic_write_text


@dataclass(frozen=True)
class ExportPaths:
    """The files of one export of ``features`` (``F.npy``)."""

    features: str

    @property
    def stem(self) -> str:
        return self.features[:-4] if self.features.endswith(".npy") else self.features

    @property
    def sidecar(self) -> str:
        return self.stem + ".json"

    @property
    def labels(self) -> str:
        return self.stem + ".labels.npy"

    @property
    def partial(self) -> str:
        return self.features + ".partial.npy"

    @property
    def record(self) -> str:
        return self.features + ".partial.json"

    def written(self) -> list[str]:
        return [self.features, self.sidecar, self.labels]


def export_features(
    extract: Callable[[torch.Tensor], torch.Tensor],
    source: Any,
    paths: ExportPaths,
    key: dict[str, Any],
    *,
    batch_size: int = 64,
    save_every: float = 30.0,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Features ``extract(images uint8 [B, 3, H, W]) -> [B, D]`` of every readable image of ``source``, written to
    ``paths.features``; returns the sidecar's content.

    ``key`` names what the rows depend on (model, checkpoint, data, input geometry): a partial export with
    another key is refused (ValueError) rather than mixed in; the caller removes it on ``--overwrite``.
    ``save_every``: seconds between flushes of the partial file (a kill loses at most that much work);
    ``progress(done, total)`` is called after every batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(source)
    if n == 0:
        raise ValueError("the data holds no images")
    start = time.perf_counter()
    done, bad, rows = _resume(paths, key, n)
    last_save = time.perf_counter()
    while done < n:
        idx = list(range(done, min(n, done + batch_size)))
        images, ok = source.load(idx)
        ok = torch.as_tensor(ok, dtype=torch.bool).cpu()
        if bool(ok.any()):  # the rows of unreadable images are left unwritten: they are dropped at the end
            feats = _as_rows(extract(images[ok.to(images.device)]), int(ok.sum()))
            if rows is None:
                rows = np.lib.format.open_memmap(paths.partial, mode="w+", dtype=np.float32, shape=(n, feats.shape[1]))
            if feats.shape[1] != rows.shape[1]:
                raise ValueError(f"the model returned {feats.shape[1]} features for a batch, {rows.shape[1]} before")
            rows[np.asarray(idx)[ok.numpy()]] = feats.numpy()
        bad += [i for i, good in zip(idx, ok.tolist()) if not good]
        done += len(idx)
        if rows is not None and (time.perf_counter() - last_save >= save_every or done == n):
            rows.flush()
            _save_record(paths, key, done, bad, rows.shape[1])
            last_save = time.perf_counter()
        if progress is not None:
            progress(done, n)
    if rows is None:
        raise ValueError(f"none of the {n} images could be read")
    return _finish(paths, source, key, rows, bad, time.perf_counter() - start)


def _as_rows(feats: Any, count: int) -> torch.Tensor:
    if not isinstance(feats, torch.Tensor) or feats.dim() != 2 or feats.shape[0] != count:
        got = tuple(feats.shape) if isinstance(feats, torch.Tensor) else type(feats).__name__
        raise ValueError(f"the model must return features [B, D] for B = {count} images, got {got}")
    return feats.detach().float().cpu()


def _resume(paths: ExportPaths, key: dict[str, Any], n: int) -> tuple[int, list[int], Any]:
    """``(images done, unreadable indices, rows memmap or None)`` from a partial export of the same ``key``."""
    if not os.path.exists(paths.record):
        return 0, [], None
    try:
        with open(paths.record, encoding="utf-8") as f:
            rec = json.load(f)
        rows = np.load(paths.partial, mmap_mode="r+")
        done, bad = int(rec["done"]), [int(i) for i in rec["bad"]]
        same = rec["key"] == json.loads(json.dumps(key, default=str)) and rows.shape[0] == n
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"the partial export {paths.record!r} cannot be read ({type(e).__name__}: {e}); rerun with --overwrite "
            "to start again"
        ) from None
    if not same or not 0 <= done <= n:
        raise ValueError(
            f"{paths.partial!r} holds a partial export of another model, checkpoint, data or input size; rerun the "
            "command that made it to finish it, or add --overwrite to start again"
        )
    return done, bad, rows


def _save_record(paths: ExportPaths, key: dict[str, Any], done: int, bad: list[int], dim: int) -> None:
    rec = {"key": key, "done": done, "bad": bad, "dim": dim}
    atomic_write_text(paths.record, json.dumps(rec, default=str))


def _finish(paths: ExportPaths, source: Any, key: dict[str, Any], rows: Any, bad: list[int], seconds: float) -> dict:
    """Write the final files (features, labels, sidecar), then remove the partial ones."""
    keep = np.ones(rows.shape[0], dtype=bool)
    keep[bad] = False
    atomic_save_npy(paths.features, np.ascontiguousarray(rows[keep]))
    groups = getattr(source, "groups", None)
    names = getattr(source, "group_names", None)
    files = getattr(source, "files", None)
    meta: dict[str, Any] = {
        **json.loads(json.dumps(key, default=str)),
        "n_images": int(keep.sum()),
        "dim": int(rows.shape[1]),
        "skipped": [files[i] if files is not None else i for i in bad],
        "seconds": round(seconds, 3),
        "features": os.path.basename(paths.features),
    }
    if groups is not None:  # labels 0..C-1 over the classes of the readable images (a stray root file is none)
        used, labels = np.unique(torch.as_tensor(groups).cpu().numpy().astype(np.int64)[keep], return_inverse=True)
        atomic_save_npy(paths.labels, labels.astype(np.int64))
        meta["labels"], meta["classes"] = os.path.basename(paths.labels), [list(names or [])[i] for i in used]
    elif os.path.isfile(paths.labels):  # an earlier export's labels (replaced with --overwrite): not these images'
        os.remove(paths.labels)
    atomic_write_text(paths.sidecar, json.dumps(meta, indent=2) + "\n")
    del rows
    for p in (paths.partial, paths.record):
        if os.path.exists(p):
            os.remove(p)
    return meta


__all__ = ["ExportPaths", "export_features"]
