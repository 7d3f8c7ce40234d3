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
- temporary files left by a killed writer (``.NAME.tmp-PID-RANDOM``, :func:`invfast.io.atomic_write`) are
  removed by the next run when the folder's journal records them (name and inode); a staging folder only
  when the marker records it (``staging``): a file that merely looks like one of them is never deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from typing import Any

from invfast.io import atomic_write_text, output_lock
from invfast.runtime.write_paths import SymlinkError, clean_temporaries, link_error, refuse_links, write_root
from invfast.runtime.write_paths import is_link as _is_link

__all__ = ["MARKER", "RunFolder", "refuse_inside"]

MARKER = ".invfast-run.json"
MARKER_FORMAT = "invfast.run/1"
#: the prefix of a staging folder (``.invfast-staging-PID-RANDOM``, recorded in the marker before use)
STAGING = ".invfast-staging"


def refuse_inside(out: str | os.PathLike, data: str | os.PathLike, what: str = "--out", of: str = "--data") -> None:
    """One ValueError when folder ``out`` is ``data`` or inside it (its files would become input next time)."""
    o, d = os.path.realpath(os.fspath(out)), os.path.realpath(os.fspath(data))
    if os.path.isdir(d) and (o == d or o.startswith(d.rstrip(os.sep) + os.sep)):
        raise ValueError(
            f"{what} {os.fspath(out)!r} is inside {of} {os.fspath(data)!r}: the files written there "
            f"would be read as input by the next run; choose a folder outside it"
        )


def _mine(st: os.stat_result) -> bool:
    return st.st_uid == os.getuid()


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
                raise link_error(p)
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

    def staged(self) -> list[str]:
        """The staging folders (names inside the folder) the marker records as invfast's."""
        names = (self.marker() or {}).get("staging")
        ok = [n for n in names if isinstance(n, str)] if isinstance(names, list) else []
        return [n for n in ok if n.startswith(STAGING + "-") and os.sep not in n and n not in (".", "..")]

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
        refuse_links(self.path)  # anywhere inside, named
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
        this command's run, every write below it refuses links (:func:`invfast.runtime.write_paths.write_root`), and
        what a killed run of invfast left (journaled temporaries, recorded staging folders) is removed."""
        self.check()
        os.makedirs(self.path, exist_ok=True)
        with output_lock(self.path, f"invfast {self.command}"), write_root(self.path):
            self.check()  # again under the lock: another run may have changed it meanwhile
            m = self.marker()
            self._write_marker("running" if m is None or m.get("state") != "done" else "done", self.owned())
            self.clean_temporaries()
            try:
                yield self
            finally:
                with contextlib.suppress(OSError, ValueError):
                    self.clean_temporaries()  # a failed run's staging folder; the journal once it is empty

    def _write_marker(self, state: str, files: Iterable[str], staging: Iterable[str] | None = None) -> None:
        from invfast import __version__

        staging = self.staged() if staging is None else staging
        doc: dict[str, Any] = {
            "format": MARKER_FORMAT,
            "command": self.command,
            "invfast": __version__,
            "state": state,
            "files": sorted(set(files)),
        }
        if staging:
            doc["staging"] = sorted(set(staging))
        atomic_write_text(self.inside(MARKER), json.dumps(doc, indent=1))

    def clean_temporaries(self) -> list[str]:
        """Remove what killed invfast writers left here: the temporary files the folder's journal records
        (:func:`invfast.runtime.write_paths.clean_temporaries`: name, inode, owner, writer gone) and the staging folders
        the marker records; a file that only looks like one of them stays. Returns what was removed."""
        removed = clean_temporaries(self.path)
        for name in self.staged():
            removed += self._discard(name)
        return removed

    def _discard(self, name: str) -> list[str]:
        """Delete staging folder ``name`` (recorded in the marker): the regular files this user owns in it,
        then its folders once empty; a link is never followed (nor deleted). The marker forgets it when it
        is gone."""
        stage = self.inside(name)
        removed: list[str] = []
        for dirpath, dirs, files in os.walk(stage, topdown=False):
            for f in files:
                p = os.path.join(dirpath, f)
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode) and _mine(st):
                    os.remove(p)
                    removed.append(p)
            for d in dirs:
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(dirpath, d))
        with contextlib.suppress(OSError):
            os.rmdir(stage)
        if not os.path.lexists(stage):
            self._write_marker(self._state(), self.owned(), [s for s in self.staged() if s != name])
        return removed

    def own(self, *files: str) -> None:
        """Record ``files`` (relative paths) as written by invfast, before writing them, so a killed run's
        files can be cleaned by the next one and never counted as the user's."""
        self._write_marker(self._state(), [*self.owned(), *files])

    def finish(self) -> None:
        """Mark the run finished, for commands that write their files in place (pretraining)."""
        self._write_marker("done", self.owned())

    def staging(self) -> str:
        """A new, empty staging folder inside the run for a new report: ``.invfast-staging-PID-RANDOM``,
        created (never an existing one) and recorded in the marker as invfast's."""
        for _ in range(64):
            name = f"{STAGING}-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                os.mkdir(self.inside(name), 0o700)
            except FileExistsError:
                continue
            self._write_marker(self._state(), self.owned(), [*self.staged(), name])
            return os.path.join(self.path, name)
        raise FileExistsError(f"cannot create a staging folder in {self.path!r}: every name tried exists")

    def discard(self, stage: str) -> None:
        """Delete the staging folder ``stage`` (from :meth:`staging`) and what invfast wrote in it."""
        name = os.path.basename(os.path.normpath(stage))
        if name in self.staged():
            self._discard(name)

    def commit(self, stage: str, keep: Iterable[str] = ()) -> list[str]:
        """Move every file of ``stage`` into the folder (same relative paths, each replace atomic), then
        delete the files of the previous run that the new one did not rewrite (only those the marker
        lists, and ``keep`` aside), and mark the run finished. Returns the new run's files."""
        new = []
        for dirpath, _, files in os.walk(stage):
            for f in files:
                new.append(os.path.relpath(os.path.join(dirpath, f), stage))
        mine = set(self.owned())
        clash = sorted(rel for rel in new if rel not in mine and os.path.lexists(os.path.join(self.path, rel)))
        if clash:  # a file of the user's with an output's name: never replaced; the old report stays whole
            self.discard(stage)
            raise FileExistsError(
                f"{self.path!r} holds {', '.join(clash[:5])}{' …' if len(clash) > 5 else ''}, which invfast did not "
                "write, where this run writes its outputs: move it away or choose another output folder"
            )
        old = [f for f in self.owned() if f not in new and f not in set(keep)]
        self._write_marker("swapping", [*self.owned(), *new])
        for rel in sorted(new):
            dst = self.inside(rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            self.inside(rel)  # no link planted on the way meanwhile
            os.replace(os.path.join(stage, rel), dst)
        self._delete(old)
        self._prune_folders(old)
        self.discard(stage)
        self._write_marker("done", [*new, *keep])
        return new

    def _delete(self, files: Iterable[str]) -> None:
        """Delete ``files`` (relative paths the marker lists): only regular files this user owns, never
        through a link."""
        for rel in files:
            p = self.inside(rel)
            with contextlib.suppress(FileNotFoundError):
                st = os.lstat(p)
                if stat.S_ISREG(st.st_mode) and _mine(st):
                    os.remove(p)

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
        self._delete(gone)
        self._prune_folders(gone)
        self._write_marker(self._state(), [f for f in self.owned() if f not in set(gone)])
