"""The manifest of a materialised Transforms-2D dataset: its format, its validation, and the check of the
data files against the checksums it records (shared by the loader, :mod:`invfast.synthetic.storage`, and
the writer, :mod:`invfast.synthetic.writer`).

``manifest.json`` describes the dataset (config, fingerprint, seed, format and package version, shard
layout, sha256 of every data file). It is the user's to read and may have been edited: it never decides
what invfast deletes (the run marker does, :mod:`invfast.runtime.run_folder`), and every field is checked before
it is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invfast.synthetic.inputs import check_int

__all__ = [
    "COMMAND",
    "DAMAGED_FIX",
    "FORMAT",
    "FORMAT_VERSION",
    "GENERATED",
    "MANIFEST",
    "Layout",
    "check_manifest",
    "damaged",
    "expected_arrays",
    "read_manifest",
    "sha256",
    "unfinished",
]

MANIFEST = "manifest.json"
FORMAT = "invfast-transforms2d"
FORMAT_VERSION = 1
#: the command name in the run marker of a dataset folder
COMMAND = "generate"
#: names of the files the generator writes (data files, manifest, previews): only these are ever deleted
GENERATED = re.compile(r"^(images_\d{5,}\.npy|labels\.npy|params\.npy|manifest\.json|[^./\\][^/\\]*\.png)$")
DAMAGED_FIX = (
    "rerun the `invfast generate` command (or Transforms2D.materialize) that wrote it: damaged files are "
    "regenerated exactly"
)
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
    ok = (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and os.path.basename(name) == name
        and not os.path.isabs(name)
    )
    if not ok:
        raise ValueError(
            f"{str(folder / MANIFEST)!r} names {what} {name!r}, which is not a plain file name inside "
            "the dataset folder; refusing to read outside it (re-create the dataset with "
            "`invfast generate --out`)"
        )
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
    ints, classes, k, names = _check_description(manifest, mf)
    shards, files = manifest.get("shards"), manifest.get("files")
    if not isinstance(shards, list) or not shards or not isinstance(files, dict):
        raise ValueError(f"{mf!r} is malformed (no shard list or file table); {_REMAKE}")
    out = _check_shards(shards, ints["n"], folder)
    table = _check_file_table(files, folder)
    return Layout(
        n=ints["n"],
        size=ints["size"],
        num_classes=k,
        classes=tuple(classes),
        param_names=tuple(names),
        shards=tuple(out),
        files=tuple((f, d) for f, _, _, d in out) + tuple(table),
    )


def _bad(mf: str, field: str, value: Any, want: str) -> ValueError:
    """The error for manifest ``mf``'s field ``field`` holding ``value`` where ``want`` belongs."""
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return ValueError(
        f"{mf!r} field {field} must be {want}, got {shown}: the manifest was edited or damaged; {_REMAKE}"
    )


def _check_description(manifest: dict[str, Any], mf: str) -> tuple[dict[str, int], list[str], int, list[str]]:
    """The format version, sizes, class and parameter names, config and fingerprint of manifest ``mf``
    checked; returns ``({'n': n, 'size': size}, classes, num_classes, param_names)``."""
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{mf!r}: format_version {manifest.get('format_version')!r} is not supported (this invfast "
            f"reads version {FORMAT_VERSION}); {_REMAKE}"
        )
    ints = {}
    for field in ("n", "size"):
        try:
            ints[field] = check_int(field, manifest.get(field))
        except ValueError as e:
            raise ValueError(f"{mf!r} field {e}: the manifest was edited or damaged; {_REMAKE}") from None
    classes = manifest.get("classes")
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise _bad(mf, "classes", classes, "a non-empty list of class names")
    k = manifest.get("num_classes")
    if isinstance(k, bool) or not isinstance(k, int) or k != len(classes):
        raise _bad(mf, "num_classes", k, f"the number of classes listed ({len(classes)})")
    names = manifest.get("param_names")
    if not isinstance(names, list) or not names or not all(isinstance(c, str) for c in names):
        raise _bad(mf, "param_names", names, "a non-empty list of names")
    if not isinstance(manifest.get("config"), dict) or not isinstance(manifest.get("fingerprint"), str):
        raise ValueError(f"{mf!r} is malformed (no config or fingerprint); {_REMAKE}")  # noqa: TRY004 - file content
    return ints, classes, k, names


def _check_shards(shards: list[Any], n: int, folder: Path) -> list[tuple[str, int, int, str]]:
    """The manifest's shard entries checked to cover images 0..``n`` in order: ``(file, start, n, sha256)``."""
    mf = str(folder / MANIFEST)
    out: list[tuple[str, int, int, str]] = []
    start = 0
    for s in shards:
        if not isinstance(s, dict) or not {"file", "start", "n", "sha256"} <= set(s):
            raise ValueError(f"{mf!r} has a malformed shard entry {str(s)[:80]}; {_REMAKE}")
        name = _plain_name(s["file"], "shard", folder)
        if s["start"] != start or isinstance(s["start"], bool):
            raise _bad(mf, f"shards[{len(out)}].start", s["start"], f"{start} (the end of the shard before it)")
        if isinstance(s["n"], bool) or not isinstance(s["n"], int) or not 1 <= s["n"] <= n - start:
            raise _bad(mf, f"shards[{len(out)}].n", s["n"], f"a count from 1 to {n - start}")
        if not isinstance(s["sha256"], str) or not _HEX64.match(s["sha256"]):
            raise _bad(mf, f"shards[{len(out)}].sha256", s["sha256"], "64 hex digits")
        out.append((name, start, s["n"], s["sha256"]))
        start += s["n"]
    if start != n:
        raise _bad(mf, "shards", f"{start} images", f"the n = {n} images in shards")
    return out


def _check_file_table(files: dict[Any, Any], folder: Path) -> list[tuple[str, Any]]:
    """The manifest's file table checked to hold exactly labels.npy and params.npy: ``(name, sha256)``."""
    mf = str(folder / MANIFEST)
    for name in ("labels.npy", "params.npy"):
        if name not in files:
            raise ValueError(f"{mf!r} does not list {name}; {_REMAKE}")
    table = [(_plain_name(k, "file", folder), v) for k, v in files.items()]
    if sorted(files) != ["labels.npy", "params.npy"]:
        raise ValueError(
            f"{mf!r} lists files {sorted(files)} in its file table, where only labels.npy and params.npy "
            f"belong; {_REMAKE}"
        )
    for name, digest in table:
        if not isinstance(digest, str) or not _HEX64.match(digest):
            raise _bad(mf, f"files[{name!r}]", digest, "64 hex digits")
    return table


def _inside(folder: Path, name: str) -> Path:
    """``folder / name``, refused (ValueError) when it resolves outside ``folder`` (e.g. a symbolic link)."""
    f = folder / name
    root = folder.resolve()
    if f.resolve().parent != root:
        raise ValueError(
            f"dataset file {str(f)!r} resolves to {str(f.resolve())!r}, outside the dataset folder; refusing to read it"
        )
    return f


def expected_arrays(layout: Layout) -> dict[str, tuple[tuple[int, ...], str]]:
    """``{file: (shape, dtype)}`` of every data file of ``layout``."""
    S, n = layout.size, layout.n
    out: dict[str, tuple[tuple[int, ...], str]] = {f: ((k, 3, S, S), "uint8") for f, _, k, _ in layout.shards}
    out.update({"labels.npy": ((n,), "int64"), "params.npy": ((n, len(layout.param_names)), "float64")})
    return out


def _npy_header(path: Any) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype) from a ``.npy`` file's header, None when it is not one."""
    import numpy as np

    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read:
                return None
            shape, fortran, dtype = read[version](f)
    except (OSError, ValueError):
        return None
    return (tuple(shape), str(dtype)) if not fortran else None


def damaged(folder: Path, layout: Layout, where: Any = None) -> list[tuple[str, str]]:
    """``(name, 'missing' | 'altered' | 'wrong array')`` of every data file of ``layout`` that is absent, whose
    bytes do not match its checksum, or that is not the array the manifest describes (shape, dtype);
    ``where(name)`` gives a file's path (default: inside ``folder``, links out refused)."""
    arrays = expected_arrays(layout)
    out = []
    for name, digest in layout.files:
        p = where(name) if where is not None else _inside(folder, name)
        if not os.path.isfile(p):
            out.append((name, "missing"))
        elif sha256(p) != digest:
            out.append((name, "altered"))
        elif _npy_header(p) != arrays.get(name):
            out.append((name, "wrong array"))
    return out


def unfinished(path: Path) -> bool:
    """Whether an ``invfast generate`` run in ``path`` started and did not finish (its marker says so)."""
    from invfast.runtime.run_folder import RunFolder

    m = RunFolder(path, COMMAND).marker()
    return bool(m and m.get("command") == COMMAND and m.get("state") != "done")
