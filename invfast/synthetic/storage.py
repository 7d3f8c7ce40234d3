"""On-disk format of a materialised Transforms-2D dataset.

A dataset folder holds ``images_00000.npy ...`` (uint8 [n_shard, 3, S, S], memory-mappable),
``labels.npy`` (int64 [n]), ``params.npy`` (float64 [n, len(PARAM_NAMES)]) and ``manifest.json``
(config, fingerprint, seed, format version, package version, shard sizes, sha256 of every file).
Files are written into a temporary sibling folder that is renamed into place only when complete,
so a partially written dataset never looks complete.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch

from invfast.synthetic.recipe import PARAM_NAMES

MANIFEST = "manifest.json"
FORMAT = "invfast-transforms2d"
FORMAT_VERSION = 1


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read_manifest(path: Path) -> dict[str, Any] | None:
    mf = path / MANIFEST
    if not mf.is_file():
        return None
    try:
        data = json.loads(mf.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{str(mf)!r} is not a readable invfast manifest: {exc}") from exc
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def materialize(dataset, path: str | os.PathLike, *, batch_size: int = 2048, shard_size: int = 10_000,
                overwrite: bool = False, progress: bool = True) -> Path:
    """Generate every sample of ``dataset`` (a Transforms2D) and write it to ``path``.

    An existing folder holding the same dataset (same fingerprint) is kept as it is; one holding
    anything else raises FileExistsError unless ``overwrite``.
    """
    from invfast import __version__

    if batch_size < 1 or shard_size < 1:
        raise ValueError(f"batch_size and shard_size must be >= 1, got {batch_size}, {shard_size}")
    path = Path(path)
    fp = dataset.fingerprint()
    if path.exists():
        if not path.is_dir():
            raise FileExistsError(f"{str(path)!r} exists and is not a folder")
        old = _read_manifest(path)
        if old is not None and old.get("fingerprint") == fp and not overwrite:
            return path
        if any(path.iterdir()) and not overwrite:
            what = (f"a different dataset (fingerprint {old.get('fingerprint', '?')[:12]}…, "
                    f"transforms {old.get('config', {}).get('transforms')})" if old is not None else "other files")
            raise FileExistsError(f"{str(path)!r} already holds {what}; choose another folder or pass "
                                  "overwrite=True (CLI: --overwrite)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        n, S = dataset.n, dataset.size
        labels = np.empty(n, np.int64)
        params = np.empty((n, len(PARAM_NAMES)), np.float64)
        shards = []
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=n, unit="img", desc=f"generate {path.name}")
        for s0 in range(0, n, shard_size):
            s1 = min(n, s0 + shard_size)
            name = f"images_{len(shards):05d}.npy"
            arr = np.lib.format.open_memmap(tmp / name, mode="w+", dtype=np.uint8, shape=(s1 - s0, 3, S, S))
            for b0 in range(s0, s1, batch_size):
                b1 = min(s1, b0 + batch_size)
                images, lab, par = dataset.generate(range(b0, b1))
                arr[b0 - s0:b1 - s0] = images.numpy()
                labels[b0:b1] = lab.numpy()
                for j, k in enumerate(PARAM_NAMES):
                    params[b0:b1, j] = par[k].numpy()
                if bar is not None:
                    bar.update(b1 - b0)
            arr.flush()
            del arr
            shards.append({"file": name, "start": s0, "n": s1 - s0, "sha256": _sha256(tmp / name)})
        if bar is not None:
            bar.close()
        np.save(tmp / "labels.npy", labels)
        np.save(tmp / "params.npy", params)
        from invfast import backend

        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "invfast_version": __version__,
            "fingerprint": fp, "config": dataset.config(), "seed": dataset.seed, "n": n, "size": S,
            "num_classes": dataset.num_classes, "classes": dataset.classes, "param_names": list(PARAM_NAMES),
            "backend": backend.mode(), "shards": shards,
            "files": {"labels.npy": _sha256(tmp / "labels.npy"), "params.npy": _sha256(tmp / "params.npy")},
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        if path.exists():
            trash = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(path, trash)
            os.replace(tmp, path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


class MaterializedTransforms2D(torch.utils.data.Dataset):
    """A dataset written by :func:`materialize`: same item interface as Transforms2D, memory-mapped."""

    def __init__(self, path: str | os.PathLike, verify: bool = True):
        self.path = Path(path)
        manifest = _read_manifest(self.path) if self.path.is_dir() else None
        if manifest is None:
            raise ValueError(f"{str(self.path)!r} is not a materialised Transforms-2D dataset (no valid {MANIFEST}); "
                             "create one with Transforms2D.materialize(path) or `invfast generate --out`")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{str(self.path)!r}: format version {manifest.get('format_version')} is not supported "
                             f"(this invfast reads version {FORMAT_VERSION})")
        self.manifest = manifest
        self.config = manifest["config"]
        if verify:
            for name, digest in [(s["file"], s["sha256"]) for s in manifest["shards"]] + list(manifest["files"].items()):
                f = self.path / name
                if not f.is_file():
                    raise ValueError(f"dataset file {str(f)!r} is missing")
                if _sha256(f) != digest:
                    raise ValueError(f"dataset file {str(f)!r} does not match its checksum in {MANIFEST} (corrupt)")
        self._shards = [np.load(self.path / s["file"], mmap_mode="r") for s in manifest["shards"]]
        self._starts = np.array([s["start"] for s in manifest["shards"]], np.int64)
        self.labels = torch.from_numpy(np.load(self.path / "labels.npy"))
        par = np.load(self.path / "params.npy")
        self.params = {k: torch.from_numpy(np.ascontiguousarray(par[:, j])) for j, k in enumerate(manifest["param_names"])}
        self.n = int(manifest["n"])
        self.size = int(manifest["size"])
        self.num_classes = int(manifest["num_classes"])
        self.classes = list(manifest["classes"])

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
