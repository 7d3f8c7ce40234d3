"""On-disk format of a materialised Transforms-2D dataset.

A dataset folder holds ``images_00000.npy ...`` (uint8 [n_shard, 3, S, S], memory-mappable),
``labels.npy`` (int64 [n]), ``params.npy`` (float64 [n, len(PARAM_NAMES)]) and ``manifest.json``
(config, fingerprint, seed, format version, package version, shard sizes, sha256 of every file).
Files are written into a temporary sibling folder that is swapped into place only when complete,
so a partially written dataset never looks complete and an interrupted overwrite keeps the old one.
The loader reads only the plain file names a manifest lists, inside the dataset folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import uuid
import warnings
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


def _plain_name(name: Any, what: str, folder: Path) -> str:
    """``name`` if it is a plain file name (no folder part, not '.'/'..', not absolute); else ValueError.
    A manifest may only name files inside its own dataset folder."""
    ok = (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name
          and "\0" not in name and os.path.basename(name) == name and not os.path.isabs(name))
    if not ok:
        raise ValueError(f"{str(folder / MANIFEST)!r} names {what} {name!r}, which is not a plain file name inside "
                         "the dataset folder; refusing to read outside it (re-create the dataset with "
                         "`invfast generate --out`)")
    return name


def _manifest_files(manifest: dict[str, Any], folder: Path) -> list[tuple[str, str]]:
    """(file name, sha256) of every data file a manifest names, validated as plain names inside ``folder``;
    ValueError for a malformed manifest."""
    shards, files = manifest.get("shards"), manifest.get("files")
    if not isinstance(shards, list) or not shards or not isinstance(files, dict):
        raise ValueError(f"{str(folder / MANIFEST)!r} is malformed (no shard list or file table); "
                         "re-create the dataset with `invfast generate --out`")
    out = []
    for s in shards:
        if not isinstance(s, dict) or not {"file", "start", "n", "sha256"} <= set(s):
            raise ValueError(f"{str(folder / MANIFEST)!r} has a malformed shard entry {s!r}")
        out.append((_plain_name(s["file"], "shard", folder), str(s["sha256"])))
    for name in ("labels.npy", "params.npy"):
        if name not in files:
            raise ValueError(f"{str(folder / MANIFEST)!r} does not list {name}")
    out += [(_plain_name(k, "file", folder), str(v)) for k, v in files.items()]
    return out


def _inside(folder: Path, name: str) -> Path:
    """``folder / name``, refused (ValueError) when it resolves outside ``folder`` (e.g. a symbolic link)."""
    f = folder / name
    root = folder.resolve()
    if f.resolve().parent != root:
        raise ValueError(f"dataset file {str(f)!r} resolves to {str(f.resolve())!r}, outside the dataset folder; "
                         "refusing to read it")
    return f


def _own_entries(manifest: dict[str, Any]) -> set[str]:
    """Names of the entries a dataset folder written by :func:`materialize` holds (no validation)."""
    names = {MANIFEST, "labels.npy", "params.npy"}
    names.update(s.get("file") for s in manifest.get("shards", []) if isinstance(s, dict))
    names.update(manifest.get("files", {}) if isinstance(manifest.get("files"), dict) else ())
    names.update(manifest.get("extra_files", []) if isinstance(manifest.get("extra_files"), list) else ())
    return {n for n in names if isinstance(n, str) and n and "/" not in n and n not in (".", "..")}


def _check_target(path: Path, fingerprint: str, overwrite: bool, own: set[str]) -> tuple[str, set[str]]:
    """What :func:`materialize` may do with an existing ``path``: ('write', names it may delete),
    ('keep', set()) for the same dataset, or FileExistsError. Only an invfast dataset (valid manifest,
    nothing else beside it) or the caller's ``own`` files are ever replaced."""
    if path.is_symlink() or not path.is_dir():
        raise FileExistsError(f"{str(path)!r} exists and is not a folder" if not path.is_dir() else
                              f"{str(path)!r} is a symbolic link; give the folder it points to")
    entries = set(os.listdir(path))
    try:
        old = _read_manifest(path)
    except ValueError:
        old = None
    if old is not None and old.get("fingerprint") == fingerprint and not overwrite:
        return "keep", set()
    dataset = _own_entries(old) if old is not None else set()
    foreign = sorted(entries - dataset - own)
    if foreign:
        shown = ", ".join(n + ("/" if (path / n).is_dir() else "") for n in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        what = "beside an invfast dataset" if old is not None else "and is not an invfast dataset"
        raise FileExistsError(f"{str(path)!r} holds {shown}{more} {what}; invfast never deletes files it did not "
                              "write: choose a new or empty folder (or move those files away)")
    if old is not None and not overwrite:
        raise FileExistsError(f"{str(path)!r} already holds a different dataset (fingerprint "
                              f"{str(old.get('fingerprint', '?'))[:12]}…, transforms "
                              f"{old.get('config', {}).get('transforms')}); choose another folder or pass "
                              "overwrite=True (CLI: --overwrite) to replace it")
    return "write", entries


def _swap(tmp: Path, path: Path) -> Path | None:
    """Put ``tmp`` at ``path``. An existing ``path`` is exchanged atomically where the OS can
    (Linux renameat2 RENAME_EXCHANGE), else renamed aside first; returns where the old folder now is."""
    if not path.exists():
        os.replace(tmp, path)
        return None
    if _exchange(tmp, path):
        return tmp
    trash = path.parent / f".{path.name}.old-{uuid.uuid4().hex[:8]}"
    os.replace(path, trash)
    os.replace(tmp, path)
    return trash


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux renameat2 with RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def _remove_old(folder: Path, names: set[str]) -> None:
    """Delete ``names`` (files this module wrote, checked before the swap) from the old dataset folder
    and then the folder if it is empty; anything else that appeared meanwhile is left in place."""
    for n in names:
        f = folder / n
        if f.is_file() or f.is_symlink():
            f.unlink()
    try:
        folder.rmdir()
    except OSError:
        warnings.warn(f"kept {str(folder)!r}: it holds files invfast did not write", stacklevel=3)


def materialize(dataset, path: str | os.PathLike, *, batch_size: int = 2048, shard_size: int = 10_000,
                overwrite: bool = False, progress: bool = True, own_files: Iterable[str] = ()) -> Path:
    """Generate every sample of ``dataset`` (a Transforms2D) and write it to ``path``.

    An existing folder holding the same dataset (same fingerprint) is kept as it is. One holding another
    invfast dataset raises FileExistsError unless ``overwrite``; one holding anything else (files that are
    neither the dataset's nor named in ``own_files``, plain names the caller writes itself) is refused
    even with ``overwrite``: nothing invfast did not write is ever deleted. The new dataset is built in a
    temporary sibling folder and swapped into place, so an interrupted run leaves the old dataset intact.
    """
    from invfast import __version__

    if batch_size < 1 or shard_size < 1:
        raise ValueError(f"batch_size and shard_size must be >= 1, got {batch_size}, {shard_size}")
    path = Path(path)
    own_files = list(own_files)
    fp = dataset.fingerprint()
    replaced: set[str] = set()
    if path.exists() or path.is_symlink():
        action, replaced = _check_target(path, fp, overwrite, set(own_files))
        if action == "keep":
            return path
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
            # files the caller writes beside the dataset (e.g. the CLI's preview): replaceable next time
            "extra_files": sorted({_plain_name(n, "extra file", path) for n in own_files}),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        if path.exists() or path.is_symlink():  # again just before the swap: nothing foreign appeared meanwhile
            action, replaced = _check_target(path, fp, overwrite, set(own_files))
            if action == "keep":
                shutil.rmtree(tmp, ignore_errors=True)
                return path
        old = _swap(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        _remove_old(old, replaced)
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
        self.config = manifest.get("config")
        files = _manifest_files(manifest, self.path)  # plain names inside the folder only, always
        for name, digest in files:
            f = _inside(self.path, name)
            if not f.is_file():
                raise ValueError(f"dataset file {str(f)!r} is missing")
            if verify and _sha256(f) != digest:
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
