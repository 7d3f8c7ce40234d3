"""The output folder of a command: what invfast may write, clean and replace in it, and nothing else.

>>> folder = RunFolder("report/", "measure", overwrite=False)
>>> folder.check()                       # refuses a folder of other files, another command's run, symlinks
>>> with folder.lock():                  # one run at a time; marks the folder as this command's run
...     stage = folder.staging()         # the new report is written here completely ...
...     ...
...     folder.commit(stage)             # ... then swapped in; old files invfast wrote and did not rewrite go

Rules (docs/guarantees.md):
- a folder is an invfast run only when it holds the marker file ``.invfast-run.json`` that invfast wrote
  (format, command, invfast version, the files it wrote); anything else in it is the user's;
- invfast never follows a symbolic link inside the folder it writes or cleans: a link where it would
  write, read its state or delete is refused with one line naming the link;
- only files the marker lists are ever deleted or replaced; a new report is written beside the old one
  and swapped in only when complete;
- temporary files left by a killed writer (``.NAME.tmp-PID``, :func:`invfast.io.atomic_write`) are
  removed by the next run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
from collections.abc import Iterable, Iterator
from typing import Any

from invfast.io import atomic_write_text, output_lock

__all__ = ["MARKER", "RunFolder", "SymlinkError", "refuse_inside"]

MARKER = ".invfast-run.json"
MARKER_FORMAT = "invfast.run/1"
STAGING = ".invfast-staging"
_TMP = re.compile(r"^\..+\.tmp-(\d+)$")


class SymlinkError(ValueError):
    """A symbolic link where invfast would write, read its own state, or delete."""


def _is_link(p: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(p).st_mode)
    except FileNotFoundError:
        return False


def refuse_inside(out: str | os.PathLike, data: str | os.PathLike, what: str = "--out", of: str = "--data") -> None:
    """One ValueError when folder ``out`` is ``data`` or inside it (its files would become input next time)."""
    o, d = os.path.realpath(os.fspath(out)), os.path.realpath(os.fspath(data))
    if os.path.isdir(d) and (o == d or o.startswith(d.rstrip(os.sep) + os.sep)):
        raise ValueError(
            f"{what} {os.fspath(out)!r} is inside {of} {os.fspath(data)!r}: the files written there "
            f"would be read as input by the next run; choose a folder outside it"
        )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunFolder:
    """The folder ``path`` where command ``command`` writes its run (see the module docstring).

    ``overwrite``: a finished run of the same command may be replaced (only its own files, only once
    the new one is complete). ``done_file``: the file whose presence means a finished run (result.json).
    """

    def __init__(
        self, path: str | os.PathLike, command: str, *, overwrite: bool = False, done_file: str | None = None
    ) -> None:
        self.path = os.fspath(path)
        self.command = command
        self.overwrite = overwrite
        self.done_file = done_file

    # -------------------------------------------------------------------------------------------- reading
    def inside(self, *parts: str) -> str:
        """``path/parts...``, refusing a symbolic link at any component below the folder (SymlinkError)."""
        p = self.path
        for part in os.path.normpath(os.path.join(*parts)).split(os.sep):
            if part in ("", "."):
                continue
            if part == "..":
                raise ValueError(f"{os.path.join(*parts)!r} leaves the output folder {self.path!r}")
            p = os.path.join(p, part)
            if _is_link(p):
                raise SymlinkError(
                    f"{p!r} is a symbolic link inside the output folder; invfast never writes, reads "
                    "its state or deletes through a link: remove the link or choose another --out"
                )
        return p

    def _state(self) -> str:
        """The state the marker records ("running" when there is none)."""
        m = self.marker()
        return m.get("state", "running") if m else "running"

    def marker(self) -> dict[str, Any] | None:
        """The marker invfast wrote in the folder, or None (not an invfast run)."""
        p = self.inside(MARKER)
        if not os.path.isfile(p):
            return None
        try:
            with open(p, encoding="utf-8") as f:
                m = json.load(f)
        except (OSError, ValueError):
            return None
        return m if isinstance(m, dict) and m.get("format") == MARKER_FORMAT else None

    def owned(self) -> list[str]:
        """The files (relative paths) invfast wrote here, as the marker lists them."""
        files = (self.marker() or {}).get("files")
        return [f for f in files if isinstance(f, str)] if isinstance(files, list) else []

    def finished(self) -> bool:
        """Whether the folder holds a finished run of this command."""
        m = self.marker()
        return bool(m and m.get("command") == self.command and m.get("state") == "done")

    def check(self) -> None:
        """Refuse, with one line, a folder this command must not use: not a folder, one holding other files
        and no invfast run, another command's run, a finished run without ``overwrite``, or links."""
        if _is_link(self.path) and not os.path.isdir(self.path):
            raise SymlinkError(f"--out {self.path!r} is a symbolic link to something that is not a folder")
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"--out {self.path!r} exists and is not a folder")
        if not os.path.isdir(self.path):
            return
        self.inside(MARKER)
        m = self.marker()
        visible = sorted(f for f in os.listdir(self.path) if not f.startswith("."))
        if m is None:
            if visible:
                why = f"its {MARKER} is not invfast's" if os.path.isfile(self.inside(MARKER)) else f"no {MARKER}"
                raise ValueError(
                    f"--out {self.path!r} holds other files ({', '.join(visible[:3])}"
                    f"{', ...' if len(visible) > 3 else ''}) and no invfast run ({why}); choose "
                    "an empty or new folder"
                )
            return
        if m.get("command") != self.command:
            raise ValueError(
                f"--out {self.path!r} holds an invfast {m.get('command')!r} run; invfast "
                f"{self.command} needs its own folder"
            )
        if m.get("state") == "done" and not self.overwrite:
            what = f" ({self.done_file})" if self.done_file else ""
            raise ValueError(
                f"--out {self.path!r} already holds a finished report{what} of invfast {self.command}; "
                "choose a new folder, or pass --overwrite to replace it once the new run is complete"
            )
        for f in self.owned():
            self.inside(f)

    # -------------------------------------------------------------------------------------------- writing
    @contextlib.contextmanager
    def lock(self) -> Iterator[RunFolder]:
        """Exclusive use of the folder (:func:`invfast.io.output_lock`); inside it the folder is marked as
        this command's run and stale temporary files of killed writers are removed."""
        self.check()
        os.makedirs(self.path, exist_ok=True)
        with output_lock(self.path, f"invfast {self.command}"):
            self.check()  # again under the lock: another run may have changed it meanwhile
            m = self.marker()
            self._write_marker("running" if m is None or m.get("state") != "done" else "done", self.owned())
            self.clean_temporaries()
            yield self

    def _write_marker(self, state: str, files: Iterable[str]) -> None:
        from invfast import __version__

        atomic_write_text(
            self.inside(MARKER),
            json.dumps(
                {
                    "format": MARKER_FORMAT,
                    "command": self.command,
                    "invfast": __version__,
                    "state": state,
                    "files": sorted(set(files)),
                },
                indent=1,
            ),
        )

    def clean_temporaries(self) -> list[str]:
        """Remove ``.NAME.tmp-PID`` files (of :func:`invfast.io.atomic_write`) whose writer is gone, in the
        folder and in the folders the marker lists; returns what was removed."""
        dirs = {""} | {os.path.dirname(f) for f in self.owned()}
        removed = []
        for d in sorted(dirs):
            folder = self.inside(d) if d else self.path
            if not os.path.isdir(folder) or _is_link(folder):
                continue
            for f in os.listdir(folder):
                m = _TMP.match(f)
                p = os.path.join(folder, f)
                if m and not _pid_alive(int(m.group(1))) and os.path.isfile(p) and not _is_link(p):
                    os.remove(p)
                    removed.append(p)
        return removed

    def own(self, *files: str) -> None:
        """Record ``files`` (relative paths) as written by invfast, before writing them, so a killed run's
        files can be cleaned by the next one and never counted as the user's."""
        self._write_marker(self._state(), [*self.owned(), *files])

    def finish(self) -> None:
        """Mark the run finished, for commands that write their files in place (pretraining)."""
        self._write_marker("done", self.owned())

    def staging(self) -> str:
        """A fresh, empty staging folder inside the run for a new report (owned by invfast)."""
        stage = self.inside(STAGING)
        if os.path.isdir(stage):
            shutil.rmtree(stage)
        os.makedirs(stage)
        return stage

    def commit(self, stage: str, keep: Iterable[str] = ()) -> list[str]:
        """Move every file of ``stage`` into the folder (same relative paths, each replace atomic), then
        delete the files of the previous run that the new one did not rewrite (only those the marker
        lists, and ``keep`` aside), and mark the run finished. Returns the new run's files."""
        new = []
        for dirpath, _, files in os.walk(stage):
            for f in files:
                new.append(os.path.relpath(os.path.join(dirpath, f), stage))
        old = [f for f in self.owned() if f not in new and f not in set(keep)]
        self._write_marker("swapping", [*self.owned(), *new])
        for rel in sorted(new):
            dst = self.inside(rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.replace(os.path.join(stage, rel), dst)
        for rel in old:
            p = self.inside(rel)
            if os.path.isfile(p):
                os.remove(p)
        self._prune_folders(old)
        shutil.rmtree(stage, ignore_errors=True)
        self._write_marker("done", [*new, *keep])
        return new

    def _prune_folders(self, files: Iterable[str]) -> None:
        """Remove the folders of ``files`` (and their parents inside the run) that are now empty; a folder
        holding anything else, the user's files included, stays."""
        for d in sorted({os.path.dirname(f) for f in files if os.path.dirname(f)}, key=len, reverse=True):
            while d:
                with contextlib.suppress(OSError):
                    os.rmdir(self.inside(d))
                d = os.path.dirname(d)

    def remove(self, files: Iterable[str]) -> None:
        """Delete ``files`` (relative paths) that the marker lists as invfast's, then their folders if empty."""
        mine = set(self.owned())
        gone = [f for f in files if f in mine]
        for rel in gone:
            p = self.inside(rel)
            if os.path.isfile(p):
                os.remove(p)
        self._prune_folders(gone)
        self._write_marker(self._state(), [f for f in self.owned() if f not in set(gone)])
