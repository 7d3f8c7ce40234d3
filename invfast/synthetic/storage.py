"""On-disk format of a materialised Transforms-2D dataset, and its loader.

A dataset folder holds ``images_00000.npy ...`` (uint8 [n_shard, 3, S, S], memory-mappable),
``labels.npy`` (int64 [n]), ``params.npy`` (float64 [n, len(PARAM_NAMES)]), ``manifest.json`` (config,
fingerprint, seed, format version, package version, shard layout, sha256 of every data file) and the
run marker ``.invfast-run.json`` (:mod:`invfast.run_folder`) that says which files invfast wrote.
:mod:`invfast.synthetic.writer` writes it; the manifest describes the dataset, the marker alone decides
what invfast may replace or delete. The loader reads only the plain file names a manifest lists, inside
the dataset folder, checks every field of the manifest and (by default) every file's checksum, and
refuses a dataset whose writer did not finish.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch

from invfast.synthetic.inputs import check_int

MANIFEST = "manifest.json"
FORMAT = "invfast-transforms2d"
FORMAT_VERSION = 1
#: the command name in the run marker of a dataset folder
COMMAND = "generate"
#: names of the files the generator writes (data files, manifest, previews): only these are ever deleted
GENERATED = re.compile(r"^(images_\d{5,}\.npy|labels\.npy|params\.npy|manifest\.json|[^./\\][^/\\]*\.png)$")
DAMAGED_FIX = ("rerun the `invfast generate` command (or Transforms2D.materialize) that wrote it: damaged files are "
               "regenerated exactly")
_REMAKE = "re-create the dataset with `invfast generate --overwrite` and the options that made it"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def sha256(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of dataset folder ``path`` (a dict of format :data:`FORMAT`), None when there is none or
    it is another kind of JSON; ValueError when it cannot be read."""
    mf = path / MANIFEST
    if not mf.is_file():
        return None
    try:
        data = json.loads(mf.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{str(mf)!r} is not a readable invfast manifest ({' '.join(str(exc).split())})") from exc
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


@dataclass(frozen=True)
class Layout:
    """What a validated manifest says: sizes, class names, shards ``(file, start, n, sha256)`` in order,
    and ``files``: every data file ``(name, sha256)``, shards first."""

    n: int
    size: int
    num_classes: int
    classes: tuple[str, ...]
    param_names: tuple[str, ...]
    shards: tuple[tuple[str, int, int, str], ...]
    files: tuple[tuple[str, str], ...]


def check_manifest(manifest: dict[str, Any], folder: Path) -> Layout:
    """The :class:`Layout` of ``manifest`` (of the dataset in ``folder``), every field checked: one
    ValueError naming the first bad field (a value that would break reading later)."""
    mf = str(folder / MANIFEST)

    def bad(field: str, value: Any, want: str) -> ValueError:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return ValueError(f"{mf!r} field {field} must be {want}, got {shown}: the manifest was edited or damaged; "
                          f"{_REMAKE}")

    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{mf!r}: format_version {manifest.get('format_version')!r} is not supported (this invfast "
                         f"reads version {FORMAT_VERSION}); {_REMAKE}")
    ints = {}
    for field in ("n", "size"):
        try:
            ints[field] = check_int(field, manifest.get(field))
        except ValueError as e:
            raise ValueError(f"{mf!r} field {e}: the manifest was edited or damaged; {_REMAKE}") from None
    classes = manifest.get("classes")
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise bad("classes", classes, "a non-empty list of class names")
    k = manifest.get("num_classes")
    if isinstance(k, bool) or not isinstance(k, int) or k != len(classes):
        raise bad("num_classes", k, f"the number of classes listed ({len(classes)})")
    names = manifest.get("param_names")
    if not isinstance(names, list) or not names or not all(isinstance(c, str) for c in names):
        raise bad("param_names", names, "a non-empty list of names")
    if not isinstance(manifest.get("config"), dict) or not isinstance(manifest.get("fingerprint"), str):
        raise ValueError(f"{mf!r} is malformed (no config or fingerprint); {_REMAKE}")
    shards, files = manifest.get("shards"), manifest.get("files")
    if not isinstance(shards, list) or not shards or not isinstance(files, dict):
        raise ValueError(f"{mf!r} is malformed (no shard list or file table); {_REMAKE}")
    out: list[tuple[str, int, int, str]] = []
    start = 0
    for s in shards:
        if not isinstance(s, dict) or not {"file", "start", "n", "sha256"} <= set(s):
            raise ValueError(f"{mf!r} has a malformed shard entry {str(s)[:80]}; {_REMAKE}")
        name = _plain_name(s["file"], "shard", folder)
        if s["start"] != start or isinstance(s["start"], bool):
            raise bad(f"shards[{len(out)}].start", s["start"], f"{start} (the end of the shard before it)")
        if isinstance(s["n"], bool) or not isinstance(s["n"], int) or not 1 <= s["n"] <= ints["n"] - start:
            raise bad(f"shards[{len(out)}].n", s["n"], f"a count from 1 to {ints['n'] - start}")
        if not isinstance(s["sha256"], str) or not _HEX64.match(s["sha256"]):
            raise bad(f"shards[{len(out)}].sha256", s["sha256"], "64 hex digits")
        out.append((name, start, s["n"], s["sha256"]))
        start += s["n"]
    if start != ints["n"]:
        raise bad("shards", f"{start} images", f"the n = {ints['n']} images in shards")
    for name in ("labels.npy", "params.npy"):
        if name not in files:
            raise ValueError(f"{mf!r} does not list {name}; {_REMAKE}")
    table = [(_plain_name(k, "file", folder), v) for k, v in files.items()]
    if sorted(files) != ["labels.npy", "params.npy"]:
        raise ValueError(f"{mf!r} lists files {sorted(files)} in its file table, where only labels.npy and params.npy "
                         f"belong; {_REMAKE}")
    for name, digest in table:
        if not isinstance(digest, str) or not _HEX64.match(digest):
            raise bad(f"files[{name!r}]", digest, "64 hex digits")
    return Layout(n=ints["n"], size=ints["size"], num_classes=k, classes=tuple(classes), param_names=tuple(names),
                  shards=tuple(out), files=tuple((f, d) for f, _, _, d in out) + tuple(table))


def _inside(folder: Path, name: str) -> Path:
    """``folder / name``, refused (ValueError) when it resolves outside ``folder`` (e.g. a symbolic link)."""
    f = folder / name
    root = folder.resolve()
    if f.resolve().parent != root:
        raise ValueError(f"dataset file {str(f)!r} resolves to {str(f.resolve())!r}, outside the dataset folder; "
                         "refusing to read it")
    return f


def damaged(folder: Path, layout: Layout, where: Any = None) -> list[tuple[str, str]]:
    """``(name, 'missing' | 'altered')`` of every data file of ``layout`` that is absent or whose bytes do not
    match its checksum; ``where(name)`` gives a file's path (default: inside ``folder``, links out refused)."""
    out = []
    for name, digest in layout.files:
        p = where(name) if where is not None else _inside(folder, name)
        if not os.path.isfile(p):
            out.append((name, "missing"))
        elif sha256(p) != digest:
            out.append((name, "altered"))
    return out


def unfinished(path: Path) -> bool:
    """Whether an ``invfast generate`` run in ``path`` started and did not finish (its marker says so)."""
    from invfast.run_folder import RunFolder

    m = RunFolder(path, COMMAND).marker()
    return bool(m and m.get("command") == COMMAND and m.get("state") != "done")


def _damage_line(path: Path, bad: list[tuple[str, str]]) -> str:
    name, how = bad[0]
    what = "is missing" if how == "missing" else f"does not match its checksum in {MANIFEST} (altered or corrupt)"
    more = f" (and {len(bad) - 1} more damaged file(s))" if len(bad) > 1 else ""
    return f"dataset file {str(path / name)!r} {what}{more}; {DAMAGED_FIX}"


def _open(f: Path, shape: tuple[int, ...], dtype: Any, mmap: bool = True) -> np.ndarray:
    """The array in ``.npy`` file ``f``, refused (ValueError) unless it has ``shape`` and ``dtype``."""
    try:
        a = np.load(f, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ValueError(f"dataset file {str(f)!r} is not a readable .npy array ({' '.join(str(e).split())[:200]}); "
                         f"{DAMAGED_FIX}") from None
    if a.shape != shape or a.dtype != np.dtype(dtype):
        raise ValueError(f"dataset file {str(f)!r} holds {a.dtype} {list(a.shape)}, the manifest says {np.dtype(dtype)} "
                         f"{list(shape)}; {DAMAGED_FIX}")
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
            raise ValueError(f"{str(self.path)!r} is not a materialised Transforms-2D dataset (no valid {MANIFEST}); "
                             "create one with Transforms2D.materialize(path) or `invfast generate --out`")
        if unfinished(self.path):
            raise ValueError(f"{str(self.path)!r}: the `invfast generate` run writing this dataset did not finish "
                             "(it was killed or is still running); rerun the same command to finish it")
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


def materialize(dataset, path: str | os.PathLike, *, batch_size: int = 2048, shard_size: int = 10_000,
                overwrite: bool = False, progress: bool = True, own_files: Iterable[str] = ()) -> Path:
    """Generate every sample of ``dataset`` (a Transforms2D) into folder ``path``; returns ``path``.

    :func:`invfast.synthetic.writer.write_dataset` does the work (its docstring gives the rules): a folder
    holding the same dataset is verified and any damaged file regenerated exactly (with a warning saying
    which); another dataset is replaced only with ``overwrite``; files invfast did not write are never
    deleted. ``own_files`` is no longer needed (the run marker records what invfast wrote) and has no effect.
    """
    from invfast.synthetic.writer import write_dataset

    if list(own_files):
        warnings.warn("materialize(own_files=...) has no effect any more: invfast records the files it writes in "
                      "the folder's .invfast-run.json and never touches the others", DeprecationWarning, stacklevel=2)
    written = write_dataset(dataset, path, batch_size=batch_size, shard_size=shard_size, overwrite=overwrite,
                            progress=progress)
    if written.action == "repaired":
        warnings.warn(written.describe(), stacklevel=2)
    return written.path
