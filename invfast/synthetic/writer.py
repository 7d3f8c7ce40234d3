"""Writing a Transforms-2D dataset into its folder (``invfast generate``, ``Transforms2D.materialize``).

The folder follows the rules of every invfast output folder (:mod:`invfast.runtime.run_folder`, docs/guarantees.md):

- it is an invfast dataset only when it holds the run marker ``.invfast-run.json`` that invfast wrote
  (command ``generate``); a folder holding other files and no marker is refused. The dataset's own
  ``manifest.json`` describes the data; it is the user's to read and never decides what is deleted;
- one run at a time holds the folder (``.invfast.lock``; a second run is refused naming the holder);
- everything is written inside the folder, under a new ``.invfast-staging-PID-RANDOM/`` that the marker
  records, and moved into place (one
  atomic rename per file) only when complete; the marker says ``swapping`` while files move and the
  loader refuses the folder until it says ``done``; a link inside the folder is refused, never followed;
- only files the marker lists *and* whose names the generator writes (``images_NNNNN.npy``,
  ``labels.npy``, ``params.npy``, ``manifest.json``, ``*.png`` previews) are ever replaced or deleted;
- temporary files of killed writers (those the folder's journal records) and a killed run's staging folder
  (the one the marker records) are removed by the next run; a user's lookalike is never touched;
- a folder holding the same dataset is verified against the manifest's checksums: a missing or altered
  file is regenerated (every sample is a pure function of (seed, split, index)), checked to match its
  recorded checksum byte for byte, and moved in; damage that cannot be repaired that way is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from invfast.io import atomic_write_text
from invfast.runtime.run_folder import MARKER, RunFolder
from invfast.runtime.write_paths import refuse_links
from invfast.synthetic.manifest import (
    COMMAND,
    FORMAT,
    FORMAT_VERSION,
    GENERATED,
    MANIFEST,
    Layout,
    _plain_name,
    check_manifest,
    damaged,
    read_manifest,
    sha256,
)
from invfast.synthetic.recipe import PARAM_NAMES

__all__ = ["Written", "transforms_text", "write_dataset"]
_OVERWRITE = "pass --overwrite (Python: overwrite=True)"


@dataclass(frozen=True)
class Written:
    """What :func:`write_dataset` did in ``path``: ``action`` is ``created``, ``replaced`` (another dataset),
    ``kept`` (the same dataset, every file verified) or ``repaired`` (``repaired`` lists ``'name (how)'``)."""

    path: Path
    action: str
    repaired: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for the user."""
        if self.action == "kept":
            return f"{self.path} already holds this dataset; every file verified against its {MANIFEST}"
        if self.action == "repaired":
            return (
                f"{self.path}: repaired {', '.join(self.repaired)}: regenerated exactly (every file now matches "
                f"its {MANIFEST})"
            )
        return f"{'wrote' if self.action == 'created' else 'replaced the dataset in'} {self.path}"


@dataclass(frozen=True)
class _Plan:
    kind: str  # "new", "keep", "repair"
    replacing: bool = False
    layout: Layout | None = None
    bad: tuple[tuple[str, str], ...] = ()


def transforms_text(transforms: Any) -> str:
    """``all``, ``none`` or the names joined by ',' (for one-line messages)."""
    from invfast.synthetic.recipe import TRANSFORMATION_TYPES

    if not isinstance(transforms, (list, tuple)):
        return str(transforms)
    return "all" if set(transforms) == set(TRANSFORMATION_TYPES) else ",".join(map(str, transforms)) or "none"


def _shown(names: list[str], path: str) -> str:
    shown = ", ".join(n + ("/" if os.path.isdir(os.path.join(path, n)) else "") for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _unmarked(folder: RunFolder, fp: str, extra: Mapping[str, Any]) -> bool:
    """For a folder without invfast's marker: True when it already holds this very dataset, written by an
    earlier invfast (verified; nothing is written into it); False when it is empty or absent; otherwise
    FileExistsError (invfast writes into a folder only when it is new, empty, or marked as its own)."""
    path = folder.path
    if not os.path.isdir(path) or folder.marker() is not None:
        return False
    visible = sorted(f for f in os.listdir(path) if not f.startswith("."))
    if not visible:
        return False
    try:
        manifest = read_manifest(Path(path))
    except ValueError:
        manifest = None
    if manifest is None:
        raise FileExistsError(
            f"{path!r} holds {_shown(visible, path)} and is not an invfast dataset; invfast never "
            "deletes files it did not write: choose a new or empty folder (or move those files away)"
        )
    if manifest.get("fingerprint") == fp and not extra:
        with contextlib.suppress(ValueError):
            if not damaged(Path(path), check_manifest(manifest, Path(path))):
                return True
    raise FileExistsError(
        f"{path!r} holds a dataset written by an earlier invfast, without the run marker {MARKER} "
        "that lets invfast repair or replace the files it wrote (it can still be read with "
        "invfast.synthetic.storage.load); choose a new folder for this one"
    )


def _plan(folder: RunFolder, dataset: Any, fp: str, overwrite: bool, verify: bool = True) -> _Plan:
    """What to do in a folder that is new, empty or marked as a ``generate`` run (see the module docstring);
    without ``verify`` the files of the same dataset are not read (``keep`` then means keep or repair)."""
    if not folder.finished():
        return _Plan("new")  # nothing finished here: a new folder or a killed run's remains
    path = Path(folder.path)
    folder.inside(MANIFEST)
    state = "is missing"
    try:
        state = "cannot be read" if os.path.lexists(path / MANIFEST) else state
        manifest = read_manifest(path)
        if manifest is None:
            raise ValueError(f"{MANIFEST} is missing")
        state = "is damaged"
        if manifest.get("fingerprint") != fp and not overwrite:
            cfg = manifest.get("config")
            had = transforms_text(cfg.get("transforms") if isinstance(cfg, dict) else None)
            raise FileExistsError(
                f"{str(path)!r} already holds a different dataset (fingerprint "
                f"{str(manifest.get('fingerprint', '?'))[:12]}…, transforms {had}); choose another "
                f"folder, or {_OVERWRITE} to replace it once the new one is complete"
            )
        layout = check_manifest(manifest, path)
        own = hashlib.sha256(json.dumps(manifest["config"], sort_keys=True).encode()).hexdigest()
        if own != manifest["fingerprint"]:
            raise ValueError(f"its config does not match its fingerprint in {MANIFEST}")
        if (layout.n, layout.size, layout.num_classes, layout.param_names) != (
            dataset.n,
            dataset.size,
            dataset.num_classes,
            tuple(PARAM_NAMES),
        ):
            raise ValueError(f"its sizes in {MANIFEST} do not match its config")
        if [f for f, _, _, _ in layout.shards] != [f"images_{i:05d}.npy" for i in range(len(layout.shards))]:
            raise ValueError(f"its shard names in {MANIFEST} are not the generator's")
    except FileExistsError:
        raise
    except ValueError as e:
        if overwrite:
            return _Plan("new", replacing=True)
        reason = " ".join(str(e).split()).replace(str(path / MANIFEST), MANIFEST)
        raise ValueError(
            f"{str(path)!r} holds an `invfast generate` run whose {MANIFEST} {state} "
            f"({reason[:300]}); {_OVERWRITE} to regenerate the dataset"
        ) from None
    if manifest["fingerprint"] != fp:
        return _Plan("new", replacing=True)
    bad = damaged(path, layout, where=folder.inside) if verify else []
    return _Plan("repair" if bad else "keep", layout=layout, bad=tuple(bad))


def _check_space(path: str, need: int) -> None:
    """ValueError when the file system holding ``path`` has less than ``need`` bytes free."""
    where = os.path.abspath(path)
    while not os.path.exists(where):
        where = os.path.dirname(where)
    free = shutil.disk_usage(where).free
    if need > free:
        raise ValueError(
            f"the dataset needs {need / 1e9:.3g} GB but {where!r} has {free / 1e9:.3g} GB free; choose a "
            "smaller --n or --size (Python: n, size), or another --out folder"
        )


def _render(
    dataset: Any,
    stage: Path,
    shards: tuple[tuple[str, int, int], ...],
    images: set[str],
    tables: bool,
    batch_size: int,
    progress: bool,
    desc: str,
) -> None:
    """Generate the shards named in ``images`` (``(file, start, n)`` of ``shards``) into ``stage``, and with
    ``tables`` ``labels.npy`` [n] and ``params.npy`` [n, P] over every shard (each file fsynced)."""
    n, S = dataset.n, dataset.size
    todo = [s for s in shards if tables or s[0] in images]
    bar = None
    if progress:
        from invfast.runtime.progress import bar as progress_bar

        bar = progress_bar(total=sum(k for _, _, k in todo), unit="img", desc=desc)
    fmt = np.lib.format
    labels = fmt.open_memmap(stage / "labels.npy", "w+", np.int64, (n,)) if tables else None
    params = fmt.open_memmap(stage / "params.npy", "w+", np.float64, (n, len(PARAM_NAMES))) if tables else None
    for name, s0, k in todo:
        arr = fmt.open_memmap(stage / name, "w+", np.uint8, (k, 3, S, S)) if name in images else None
        for b0 in range(s0, s0 + k, batch_size):
            b1 = min(s0 + k, b0 + batch_size)
            im, lab, par = dataset.generate(range(b0, b1))
            if arr is not None:
                arr[b0 - s0 : b1 - s0] = im.numpy()
            if labels is not None and params is not None:
                labels[b0:b1] = lab.numpy()
                for j, key in enumerate(PARAM_NAMES):
                    params[b0:b1, j] = par[key].numpy()
            if bar is not None:
                bar.update(b1 - b0)
        if arr is not None:
            arr.flush()
            del arr
            _fsync(stage / name)
    for name, a in (("labels.npy", labels), ("params.npy", params)):
        if a is not None:
            a.flush()
            _fsync(stage / name)
    del labels, params
    if bar is not None:
        bar.close()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _manifest(dataset: Any, fp: str, stage: Path, shards: tuple[tuple[str, int, int], ...]) -> None:
    from invfast import __version__, backend

    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "invfast_version": __version__,
        "fingerprint": fp,
        "config": dataset.config(),
        "seed": dataset.seed,
        "n": dataset.n,
        "size": dataset.size,
        "num_classes": dataset.num_classes,
        "classes": dataset.classes,
        "param_names": list(PARAM_NAMES),
        "backend": backend.mode(),
        "shards": [{"file": f, "start": s0, "n": k, "sha256": sha256(stage / f)} for f, s0, k in shards],
        "files": {f: sha256(stage / f) for f in ("labels.npy", "params.npy")},
    }
    atomic_write_text(stage / MANIFEST, json.dumps(manifest, indent=1))


def _refuse_clashes(folder: RunFolder, names: list[str]) -> None:
    """FileExistsError when a file about to be moved in would replace one the marker does not list."""
    owned = set(folder.owned())
    for name in names:
        p = folder.inside(name)
        if os.path.lexists(p) and name not in owned:
            raise FileExistsError(
                f"{p!r} exists and is not a file invfast wrote (its {MARKER} does not list it); "
                "invfast never replaces the user's files: move it away or choose another --out"
            )


def write_dataset(
    dataset: Any,
    path: str | os.PathLike,
    *,
    batch_size: int = 2048,
    shard_size: int = 10_000,
    overwrite: bool = False,
    progress: bool = True,
    extra: Mapping[str, Callable[[str], None]] | None = None,
) -> Written:
    """Write every sample of ``dataset`` (a Transforms2D) to folder ``path`` (see the module docstring).

    ``shard_size`` images per ``images_NNNNN.npy`` file, generated ``batch_size`` at a time. A folder
    holding the same dataset is verified (and repaired); one holding another dataset is replaced only
    with ``overwrite``. ``extra``: files written with the dataset, ``{plain name ending in .png: writer}``
    where ``writer(file_path)`` writes the file (the CLI's preview in ``--out``).
    Raises FileExistsError / ValueError (one line) before any work when the folder may not be used,
    :class:`invfast.io.OutputLockedError` when another run holds it.
    """
    _check_sizes(batch_size, shard_size)
    extra = _checked_extra(extra, path)
    folder = RunFolder(path, COMMAND, overwrite=True)
    fp = dataset.fingerprint()
    if os.path.isdir(path):
        refuse_links(path)  # a link anywhere inside is named before anything is read or written
    if _unmarked(folder, fp, extra):
        return Written(Path(path), "kept")
    folder.check()
    plan = _plan(folder, dataset, fp, overwrite, verify=False)  # refusals before any work
    n, S = dataset.n, dataset.size
    shards = _shard_layout(n, shard_size)
    _check_space(folder.path, n * (3 * S * S + 8 * (1 + len(PARAM_NAMES))) if plan.kind == "new" else 0)
    with folder.lock():
        plan = _plan(folder, dataset, fp, overwrite)  # again under the lock: another run may have written meanwhile
        if plan.kind == "keep" and not extra:
            return Written(Path(path), "kept")
        plan = _write_staged(folder, dataset, fp, plan, shards, extra, batch_size, progress, overwrite, Path(path))
    if plan.kind == "repair":
        return Written(Path(path), "repaired", tuple(f"{name} ({how})" for name, how in plan.bad))
    return Written(Path(path), "replaced" if plan.replacing else "created" if plan.kind == "new" else "kept")


def _check_sizes(batch_size: Any, shard_size: Any) -> None:
    """ValueError unless ``batch_size`` and ``shard_size`` are integers >= 1."""
    for name, v in (("batch_size", batch_size), ("shard_size", shard_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")


def _checked_extra(
    extra: Mapping[str, Callable[[str], None]] | None, path: str | os.PathLike
) -> dict[str, Callable[[str], None]]:
    """``extra`` as a dict, each name checked to be a plain ``.png`` name the generator may write (ValueError)."""
    extra = dict(extra or {})
    for name in extra:
        _plain_name(name, "extra file", Path(path))
        if not name.endswith(".png") or not GENERATED.match(name) or name.startswith(("images_", "manifest")):
            raise ValueError(
                f"a file written with the dataset must be named like preview.png (a .png, not a dataset "
                f"file name, not hidden), got {name!r}"
            )
    return extra


def _shard_layout(n: int, shard_size: int) -> tuple[tuple[str, int, int], ...]:
    """``(file, start, count)`` of each ``images_NNNNN.npy`` file holding ``n`` images, ``shard_size`` per file."""
    return tuple(
        (f"images_{i:05d}.npy", s0, min(n, s0 + shard_size) - s0) for i, s0 in enumerate(range(0, n, shard_size))
    )


def _generated_names(plan: _Plan, shards: tuple[tuple[str, int, int], ...]) -> list[str]:
    """The data files ``plan`` writes: every one for a new dataset, else the damaged ones (sorted)."""
    if plan.kind == "new":
        return [f for f, _, _ in shards] + ["labels.npy", "params.npy", MANIFEST]
    return sorted(name for name, _ in plan.bad)


def _write_staged(
    folder: RunFolder,
    dataset: Any,
    fp: str,
    plan: _Plan,
    shards: tuple[tuple[str, int, int], ...],
    extra: dict[str, Callable[[str], None]],
    batch_size: int,
    progress: bool,
    overwrite: bool,
    path: Path,
) -> _Plan:
    """Write the files of ``plan`` (a new dataset or a repair) and ``extra`` into a staging folder of the
    locked ``folder`` and move them in; returns the plan carried out (with ``overwrite``, a repair that
    cannot be exact regenerates the whole dataset)."""
    names = _generated_names(plan, shards) + list(extra)
    _refuse_clashes(folder, names)
    stage = Path(folder.staging())
    try:
        if plan.kind == "repair":
            try:
                _repair(dataset, stage, plan, batch_size, progress, path)
            except _NotExact:
                if not overwrite:
                    raise
                folder.discard(str(stage))
                plan, stage = _Plan("new", replacing=True), Path(folder.staging())  # regenerate it all
                names = _generated_names(plan, shards) + list(extra)
                _refuse_clashes(folder, names)
        if plan.kind == "new":
            _render(
                dataset, stage, shards, {f for f, _, _ in shards}, True, batch_size, progress, f"generate {path.name}"
            )
            _manifest(dataset, fp, stage, shards)
        for name, write in extra.items():
            write(str(stage / name))
        folder.commit(str(stage), keep=_kept(folder, plan, names))
    finally:
        folder.discard(str(stage))
    return plan


def _kept(folder: RunFolder, plan: _Plan, names: list[str]) -> list[str]:
    """The files ``folder``'s marker lists that the commit leaves in place (none of ``names``)."""
    owned = folder.owned()
    if plan.kind == "new":  # the previous run's files that are not the generator's are never deleted
        return [f for f in owned if not GENERATED.match(f) and f not in names]
    return [f for f in owned if f not in names]


class _NotExact(ValueError):
    """A regenerated file does not match the checksum the manifest recorded for it."""


def _repair(dataset: Any, stage: Path, plan: _Plan, batch_size: int, progress: bool, path: Path) -> None:
    """Regenerate the damaged files of ``plan`` into ``stage`` and check each against its recorded checksum;
    :class:`_NotExact` (nothing moved in) when one does not match. ``stage`` then holds exactly those files."""
    assert plan.layout is not None
    bad = {name for name, _ in plan.bad}
    shards = tuple((f, s0, k) for f, s0, k, _ in plan.layout.shards)
    tables = bool(bad & {"labels.npy", "params.npy"})
    _render(dataset, stage, shards, bad, tables, batch_size, progress, f"repair {path.name}")
    recorded = dict(plan.layout.files)
    for name in sorted(bad):
        if sha256(stage / name) != recorded[name]:
            raise _NotExact(
                f"{str(path / name)!r} is damaged and cannot be repaired exactly: regenerated, its bytes "
                f"do not match the checksum in {MANIFEST} (the manifest was edited, or this invfast "
                f"renders differently from the one that wrote it); {_OVERWRITE} to regenerate the whole "
                "dataset"
            )
    for f in os.listdir(stage):
        if f not in bad:
            os.remove(stage / f)  # regenerated only to rebuild a table: intact on disk already
