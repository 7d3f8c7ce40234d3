"""On-disk format of a materialised Transforms-2D dataset, and its loader.

A dataset folder holds ``images_00000.npy ...`` (uint8 [n_shard, 3, S, S], memory-mappable),
``labels.npy`` (int64 [n]), ``params.npy`` (float64 [n, len(PARAM_NAMES)]), ``manifest.json`` (config,
fingerprint, seed, format version, package version, shard layout, sha256 of every data file) and the
run marker ``.invfast-run.json`` (:mod:`invfast.runtime.run_folder`) that says which files invfast wrote.
:mod:`invfast.synthetic.writer` writes it; the manifest (:mod:`invfast.synthetic.manifest`) describes
the dataset, the marker alone decides what invfast may replace or delete. The loader reads only the plain
file names a manifest lists, inside the dataset folder, checks every field of the manifest and (by
default) every file's checksum, and refuses a dataset whose writer did not finish.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from invfast.synthetic.manifest import (
    DAMAGED_FIX,
    MANIFEST,
    _inside,
    check_manifest,
    damaged,
    read_manifest,
    unfinished,
)


def _damage_line(path: Path, bad: list[tuple[str, str]]) -> str:
    name, how = bad[0]
    what = {"missing": "is missing", "altered": f"does not match its checksum in {MANIFEST} (altered or corrupt)"}.get(
        how, f"is not the array its {MANIFEST} describes (shape or type)"
    )
    more = f" (and {len(bad) - 1} more damaged file(s))" if len(bad) > 1 else ""
    return f"dataset file {str(path / name)!r} {what}{more}; {DAMAGED_FIX}"


def _open(f: Path, shape: tuple[int, ...], dtype: Any, mmap: bool = True) -> np.ndarray:
    """The array in ``.npy`` file ``f``, refused (ValueError) unless it has ``shape`` and ``dtype``."""
    try:
        a = np.load(f, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"dataset file {str(f)!r} is not a readable .npy array ({' '.join(str(e).split())[:200]}); {DAMAGED_FIX}"
        ) from None
    if a.shape != shape or a.dtype != np.dtype(dtype):
        raise ValueError(
            f"dataset file {str(f)!r} holds {a.dtype} {list(a.shape)}, the manifest says "
            f"{np.dtype(dtype)} {list(shape)}; {DAMAGED_FIX}"
        )
    return a


class MaterializedTransforms2D(torch.utils.data.Dataset):
    """A dataset written by :func:`materialize`: same item interface as Transforms2D, memory-mapped.

    Refused (one ValueError) when its writer did not finish, when the manifest is malformed or names a
    file outside the folder, when a file is missing, has the wrong shape, or (``verify``) its bytes do not
    match the manifest's checksum."""

    def __init__(self, path: str | os.PathLike, verify: bool = True):
        self.path = Path(path)
        manifest = read_manifest(self.path) if self.path.is_dir() else None
        if manifest is None:
            raise ValueError(
                f"{str(self.path)!r} is not a materialised Transforms-2D dataset (no valid {MANIFEST}); "
                "create one with Transforms2D.materialize(path) or `invfast generate --out`"
            )
        if unfinished(self.path):
            raise ValueError(
                f"{str(self.path)!r}: the `invfast generate` run writing this dataset did not finish "
                "(it was killed or is still running); rerun the same command to finish it"
            )
        layout = check_manifest(manifest, self.path)  # plain names inside the folder only, always
        self.manifest = manifest
        self.config = manifest["config"]
        for name, _ in layout.files:
            if not _inside(self.path, name).is_file():
                raise ValueError(_damage_line(self.path, [(name, "missing")]))
        if verify:
            bad = damaged(self.path, layout)
            if bad:
                raise ValueError(_damage_line(self.path, bad))
        S, P = layout.size, len(layout.param_names)
        self._shards = [_open(self.path / f, (k, 3, S, S), np.uint8) for f, _, k, _ in layout.shards]
        self._starts = np.array([s for _, s, _, _ in layout.shards], np.int64)
        self.labels = torch.from_numpy(_open(self.path / "labels.npy", (layout.n,), np.int64, mmap=False))
        par = _open(self.path / "params.npy", (layout.n, P), np.float64, mmap=False)
        self.params = {k: torch.from_numpy(np.ascontiguousarray(par[:, j])) for j, k in enumerate(layout.param_names)}
        self.n = layout.n
        self.size = layout.size
        self.num_classes = layout.num_classes
        self.classes = list(layout.classes)

    def __len__(self) -> int:
        return self.n

    def images(self, indices: Iterable[int]) -> torch.Tensor:
        idx = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices, np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise IndexError(f"index out of range for a dataset of {self.n} samples")
        out = np.empty((idx.size, 3, self.size, self.size), np.uint8)
        shard = np.searchsorted(self._starts, idx, side="right") - 1
        for j, (s, i) in enumerate(zip(shard, idx)):
            out[j] = self._shards[s][i - self._starts[s]]
        return torch.from_numpy(out)

    def generate(self, indices: Iterable[int]):
        """Same return value as Transforms2D.generate, read from disk."""
        idx = np.asarray(list(indices) if not isinstance(indices, np.ndarray) else indices, np.int64).reshape(-1)
        t = torch.from_numpy(idx)
        return self.images(idx), self.labels[t], {k: v[t] for k, v in self.params.items()}

    def __getitem__(self, idx: int):
        idx = int(idx)
        if idx < 0:
            idx += self.n
        images, labels, params = self.generate([idx])
        return images[0].to(torch.float32) / 255.0, int(labels[0]), {k: float(v[0]) for k, v in params.items()}


def load(path: str | os.PathLike, verify: bool = True) -> MaterializedTransforms2D:
    """Open a materialised dataset (checksums verified unless ``verify=False``)."""
    return MaterializedTransforms2D(path, verify=verify)


def materialize(
    dataset,
    path: str | os.PathLike,
    *,
    batch_size: int = 2048,
    shard_size: int = 10_000,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Generate every sample of ``dataset`` (a Transforms2D) into folder ``path``; returns ``path``.

    :func:`invfast.synthetic.writer.write_dataset` does the work (its docstring gives the rules): a folder
    holding the same dataset is verified and any damaged file regenerated exactly (with a warning saying
    which); another dataset is replaced only with ``overwrite``; files invfast did not write are never
    deleted.
    """
    from invfast.synthetic.writer import write_dataset

    written = write_dataset(
        dataset, path, batch_size=batch_size, shard_size=shard_size, overwrite=overwrite, progress=progress
    )
    if written.action == "repaired":
        warnings.warn(written.describe(), stacklevel=2)
    return written.path
