"""Which code computed a result: the invfast version and the commit of the checkout it runs from, stamped on
every stage record (``computed_by``) so that a report rendered from a cache says when its numbers come from
other code than the one rendering it."""

from __future__ import annotations

import contextlib
import os
import subprocess

__all__ = ["git_commit", "describe", "code_version", "stale_stages", "stale_line"]


def git_commit(package_file: str) -> str | None:
    """The short commit of the checkout holding the invfast package (``package_file``: its ``__init__.py``),
    marked when invfast/ has uncommitted changes; None outside a git checkout. Reads only: nothing in the
    checkout is written (no index refresh, no index.lock)."""
    commit = None
    with contextlib.suppress(OSError, subprocess.SubprocessError):  # no git, or a hung one: None
        root = os.path.dirname(os.path.dirname(os.path.abspath(package_file)))
        commit = (
            subprocess.run(
                ["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
        if commit:
            dirty = subprocess.run(
                ["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "invfast"],
                capture_output=True,
                text=True,
                timeout=10,
                env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},  # status must not refresh (write) the index
            ).stdout.strip()
            commit += " (invfast/ modified)" if dirty else ""
    return commit


def describe(version: str, commit: str | None) -> str:
    """'invfast <version>, commit <short>' ('commit unknown' where ``commit`` is None)."""
    return f"invfast {version}, commit {commit or 'unknown'}"


def code_version() -> str:
    """:func:`describe` of the running package, read again at each call (two short git reads): a stage that
    finishes while the checkout it imports from has uncommitted changes under invfast/ is stamped so."""
    import invfast

    return describe(invfast.__version__, git_commit(invfast.__file__))


def stale_stages(timings: dict[str, dict], current: str) -> dict[str, list[str]]:
    """The stages of ``timings`` (name -> {..., 'computed_by'}) computed by other code than ``current``
    (a :func:`code_version`), grouped by what computed them; a record without the stamp (written before
    invfast stamped them) is grouped under 'not recorded'."""
    out: dict[str, list[str]] = {}
    for name, t in timings.items():
        by = t.get("computed_by") or "not recorded"
        if by != current:
            out.setdefault(by, []).append(name)
    return out


def stale_line(timings: dict[str, dict], current: str, shown: int = 6) -> str | None:
    """One sentence for a report naming the stages :func:`stale_stages` finds (``shown`` names per group,
    then a count); None when every stage was computed by ``current``."""
    groups = stale_stages(timings, current)
    if not groups:
        return None
    parts = []
    for by, names in sorted(groups.items()):
        more = f" and {len(names) - shown} more" if len(names) > shown else ""
        parts.append(f"{by}: {len(names)} ({', '.join(names[:shown])}{more})")
    return (
        f"**Stage results from other code than this report's ({current})**, read from the cache — "
        + "; ".join(parts)
        + ". Their numbers are those that code computed; delete the cache to recompute them with this one."
    )
