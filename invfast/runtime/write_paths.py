"""Paths invfast writes, never through a symbolic link (the primitives under :mod:`invfast.io`).

- :func:`write_root`: a command's output or cache folder; below it a link at any component of a path that
  is written or checked is refused (:class:`SymlinkError`, naming it), and every temporary file is recorded
  in the folder's journal (``.invfast-temporaries``: name and inode);
- :func:`refuse_links`: the whole folder checked for links before a command uses it;
- :func:`open_append`: a file written in place only when it is a plain file with one name, never a link;
- :func:`new_temporary`: ``.NAME.tmp-PID-RANDOM`` created with ``O_EXCL | O_NOFOLLOW``;
- :func:`clean_temporaries`: deletes only the temporaries the journal records (name, inode, owner) whose
  writer is gone, never a file that merely looks like one;
- :func:`refuse_input_as_output`: an output file option naming a file the same command reads.

The registered folders are mirrored in the environment (``INVFAST_WRITE_ROOTS``), so worker processes
spawned inside :func:`write_root` keep the same rules.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator
from typing import IO

__all__ = [
    "PLAIN",
    "check_output_file",
    "is_link",
    "link_error",
    "plain_fd",
    "JOURNAL",
    "SymlinkError",
    "refuse_input_as_output",
    "check_in_place",
    "check_path",
    "clean_temporaries",
    "new_temporary",
    "open_append",
    "open_plain",
    "refuse_links",
    "write_root",
]


class SymlinkError(ValueError):
    """A symbolic link where invfast would write, read its own state, or delete."""


#: the folders registered with write_root, innermost last: (absolute path, what it is, its option);
#: mirrored in the environment so that spawned worker processes keep the same rules
_ROOTS: list[tuple[str, str, str]] = []
ROOTS_ENV = "INVFAST_WRITE_ROOTS"
JOURNAL = ".invfast-temporaries"
_TMP = re.compile(r"^\..+\.tmp-(\d+)-[0-9a-f]{8}$")


def link_error(p: str, what: str = "output folder", option: str = "--out") -> SymlinkError:
    return SymlinkError(
        f"{p!r} is a symbolic link inside the {what}; invfast never writes, reads its state or deletes "
        f"through a link: remove the link or choose another {option}"
    )


def is_link(p: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(p).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


def _roots() -> list[tuple[str, str, str]]:
    roots = list(_ROOTS)
    with contextlib.suppress(ValueError, TypeError):
        for r in json.loads(os.environ.get(ROOTS_ENV, "[]")):
            if isinstance(r, list) and len(r) == 3 and all(isinstance(x, str) for x in r) and tuple(r) not in roots:
                roots.append((r[0], r[1], r[2]))
    return roots


def _root_of(path: str) -> tuple[str, str, str] | None:
    """The innermost registered folder holding ``path`` (an absolute path), or None."""
    best = None
    for r in _roots():
        if (path == r[0] or path.startswith(r[0].rstrip(os.sep) + os.sep)) and (
            best is None or len(r[0]) > len(best[0])
        ):
            best = r
    return best


@contextlib.contextmanager
def write_root(folder: str | os.PathLike, what: str = "output folder", option: str = "--out") -> Iterator[str]:
    """While the block runs (in this process and the worker processes it spawns), every path below
    ``folder`` that invfast's primitives write or check is refused when a component below ``folder`` is a
    symbolic link (``folder`` itself may be one), and every temporary file created below it is recorded in
    ``folder``'s journal for :func:`clean_temporaries`. Yields the folder's absolute path."""
    root = (os.path.abspath(os.fspath(folder)), what, option)
    _ROOTS.append(root)
    old = os.environ.get(ROOTS_ENV)
    os.environ[ROOTS_ENV] = json.dumps([list(r) for r in _roots()])
    try:
        yield root[0]
    finally:
        _ROOTS.remove(root)
        if old is None:
            os.environ.pop(ROOTS_ENV, None)
        else:
            os.environ[ROOTS_ENV] = old


def check_path(path: str | os.PathLike) -> str:
    """``path`` (absolute), refusing with :class:`SymlinkError` a symbolic link at any of its components
    below the registered folder (:func:`write_root`) that holds it; outside every such folder, unchecked."""
    p = os.path.abspath(os.fspath(path))
    r = _root_of(p)
    if r is None or p == r[0]:
        return p
    q = r[0]
    for part in os.path.relpath(p, r[0]).split(os.sep):
        q = os.path.join(q, part)
        if is_link(q):
            raise link_error(q, r[1], r[2])
    return p


def refuse_links(folder: str | os.PathLike, what: str = "output folder", option: str = "--out") -> None:
    """:class:`SymlinkError` naming the first symbolic link anywhere below ``folder`` (none is followed)."""
    todo = [os.fspath(folder)]
    while todo:
        d = todo.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for e in entries:
            if e.is_symlink():
                raise link_error(e.path, what, option)
            if e.is_dir(follow_symlinks=False):
                todo.append(e.path)


#: never follow a link at the last component; never block on a FIFO (plain_fd then refuses it)
PLAIN = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)


def plain_fd(fd: int, p: str, what: str) -> int:
    """``fd`` when it is a regular file with one name; else closed and ValueError (one line naming ``p``)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        kind = "a second name (hard link) of another file" if stat.S_ISREG(st.st_mode) else "not a regular file"
        raise ValueError(f"{p!r} is {kind}; invfast writes {what} only into a file of its own: remove it")
    return fd


def open_plain(p: str, flags: int, what: str) -> int:
    """``os.open`` without following a link at the last component (SymlinkError naming it) and refusing
    anything but a plain file with one name."""
    check_path(p)
    try:
        fd = os.open(p, flags | PLAIN, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            r = _root_of(os.path.abspath(p))
            raise link_error(p, *(r[1:] if r else ("output folder", "--out"))) from None
        if e.errno in (errno.EISDIR, errno.ENXIO):
            raise ValueError(
                f"{p!r} is not a regular file; invfast writes {what} only into a file of its own: remove it"
            ) from None
        raise
    return plain_fd(fd, p, what)


def check_in_place(path: str | os.PathLike, what: str = "its data") -> str:
    """``path`` (absolute) when a file there may be written in place (a memory map, an append): no link at it
    or on the way below a registered folder (:class:`SymlinkError`) and, when it exists, a regular file with
    one name (ValueError otherwise)."""
    p = check_path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return p
    if stat.S_ISLNK(st.st_mode):
        r = _root_of(p)
        raise link_error(p, *(r[1:] if r else ("output folder", "--out")))
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        kind = "a second name (hard link) of another file" if stat.S_ISREG(st.st_mode) else "not a regular file"
        raise ValueError(f"{p!r} is {kind}; invfast writes {what} only into a file of its own: remove it")
    return p


@contextlib.contextmanager
def open_append(path: str | os.PathLike) -> Iterator[IO[str]]:
    """``path`` opened for appending text (created if absent), never through a link nor into a file that
    has another name (a hard link): a log written line by line."""
    p = os.fspath(path)
    with open(open_plain(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "a log"), "a", encoding="utf-8") as f:
        yield f


def _journal(tmp: str, fd: int) -> None:
    """Record the temporary ``tmp`` (just created as ``fd``) in the journal of the folder holding it."""
    r = _root_of(tmp)
    if r is None:
        return
    line = json.dumps({"tmp": os.path.relpath(tmp, r[0]), "ino": os.fstat(fd).st_ino}) + "\n"
    jfd = open_plain(os.path.join(r[0], JOURNAL), os.O_WRONLY | os.O_APPEND | os.O_CREAT, "its journal")
    try:
        os.write(jfd, line.encode())
    finally:
        os.close(jfd)


def new_temporary(path: str) -> tuple[int, str]:
    """A new, empty temporary sibling of ``path`` (``.NAME.tmp-PID-RANDOM``), created with ``O_EXCL |
    O_NOFOLLOW`` (never an existing file or a link) and recorded in its folder's journal."""
    folder, base = os.path.split(os.path.abspath(path))
    for _ in range(64):
        tmp = os.path.join(folder, f".{base}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | PLAIN, 0o644)
        except FileExistsError:
            continue  # a file (or a link) of that name: someone else's, never opened
        try:
            _journal(tmp, fd)
        except BaseException:
            os.close(fd)
            os.remove(tmp)
            raise
        return fd, tmp
    raise FileExistsError(f"cannot create a temporary file beside {path!r}: every name tried exists")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def clean_temporaries(folder: str | os.PathLike) -> list[str]:
    """Delete the temporaries that ``folder``'s journal records and whose writer is gone: only a regular
    file (not a link, no link on the way) of the recorded name and inode, owned by this user. The journal
    keeps the entries of live writers and goes when none is left. Returns what was deleted. Call it only
    while holding the folder (:func:`output_lock`), inside :func:`write_root` of it."""
    root = os.path.abspath(os.fspath(folder))
    journal = os.path.join(root, JOURNAL)
    if not os.path.lexists(journal):
        return []
    fd = open_plain(journal, os.O_RDWR, "its journal")
    removed, keep = [], []
    with open(fd, "r+", encoding="utf-8", errors="replace") as f:
        for line in f.read().splitlines():
            try:
                rec = json.loads(line)
                rel, ino = rec["tmp"], rec["ino"]
            except (ValueError, TypeError, KeyError):
                continue  # a line cut short by a kill
            m = _TMP.match(os.path.basename(str(rel)))
            p = os.path.normpath(os.path.join(root, str(rel)))
            if not m or not p.startswith(root + os.sep):
                continue
            try:
                check_path(p)
                st = os.lstat(p)
            except (OSError, SymlinkError):
                continue
            if not (stat.S_ISREG(st.st_mode) and st.st_ino == ino and st.st_uid == os.getuid()):
                continue
            if _pid_alive(int(m.group(1))):
                keep.append(line)
                continue
            os.remove(p)
            removed.append(p)
        if keep:
            f.seek(0)
            f.truncate()
            f.write("".join(k + "\n" for k in keep))
    if not keep:
        with contextlib.suppress(OSError):
            os.remove(journal)
    return removed


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): the same path names the same file
        return os.path.realpath(a) == os.path.realpath(b)


def check_output_file(path: str | os.PathLike, option: str, example: str) -> None:
    """ValueError (one line naming ``option``) where the output file ``path`` cannot be written: it is a folder
    (the message suggests ``<path>/<example>``) or its parent is a file. Called before the work that makes it."""
    p = os.fspath(path)
    if os.path.isdir(p):
        raise ValueError(f"{option} {p!r} is a folder; give a file name (e.g. {os.path.join(p, example)})")
    parent = os.path.dirname(os.path.abspath(p))
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise ValueError(f"{option} {p!r}: {parent!r} is a file, not a folder")


def refuse_input_as_output(output: str | os.PathLike, option: str, inputs: dict[str, list[str]]) -> None:
    """Raise ValueError where the output file ``output`` (given as ``option``) is one of the files the same
    command reads (``inputs``: input option -> its paths), by path or through another name for the same
    file: writing it would overwrite the input."""
    out = os.fspath(output)
    for name, paths in inputs.items():
        for p in paths:
            if p and _same_file(out, os.fspath(p)):
                raise ValueError(
                    f"{option} {out!r} is the {name} file this command reads; writing it would overwrite that "
                    "input: give another file name"
                )
