"""The output folder of ``invfast compare``: ``report.md``, ``results.json``, ``table.csv`` and PNGs.

Written like ``invfast measure``'s report: under the folder's lock, every file is first written into a
staging folder inside ``out``; only when all are complete do they replace the old report's files
(``results.json``, which marks a finished report, is removed first and put back last). A folder holding
files of anything else is refused, and only the files named here are ever replaced or deleted.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import warnings
from typing import Any, Callable

MARKER = "results.json"
REPORT_FILES = ("report.md", "table.csv", "radar.png", "heatmap.png", "significance.png", "correlation.png")
STAGE_DIR = ".invfast-compare-staging"


def _is_ours(path: str) -> bool:
    from invfast.comparison.core import COMPARISON_FORMAT

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("format") == COMPARISON_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def check_out(out: str, overwrite: bool) -> None:
    """Refuse ``out`` when it is not a folder, already holds a finished comparison (unless
    ``overwrite``), or holds files that are not an invfast comparison's (dot-files aside)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out!r} exists and is not a folder")
    if not os.path.isdir(out):
        return
    marker = os.path.join(out, MARKER)
    if os.path.exists(marker):
        if not _is_ours(marker):
            raise ValueError(f"--out {out!r} holds a {MARKER} that 'invfast compare' did not write; choose an empty or "
                             "new folder")
        if not overwrite:
            raise ValueError(f"--out {out!r} already holds a finished comparison ({MARKER}); choose a new folder, or "
                             "pass --overwrite to replace it once the new one is complete")
        return
    foreign = sorted(f for f in os.listdir(out) if not f.startswith("."))
    if foreign:
        more = "..." if len(foreign) > 3 else ""
        raise ValueError(f"--out {out!r} holds other files ({', '.join(foreign[:3])}{more}) and no comparison; choose "
                         "an empty or new folder")


def write_report_folder(out: str | os.PathLike, writers: dict[str, Callable[[str], Any]], *, overwrite: bool,
                        command: str = "invfast compare") -> None:
    """Write one report into ``out``: ``writers`` maps each file name (``MARKER`` among them, and only names
    in ``REPORT_FILES``) -> a function writing that file at the path it is given. The old report's files
    stay whole until every new file is written; then the old ones (only ``MARKER`` and ``REPORT_FILES``)
    are removed and the new ones moved in, ``MARKER`` last."""
    out = os.fspath(out)
    unknown = sorted(set(writers) - {MARKER, *REPORT_FILES})
    if unknown or MARKER not in writers:
        raise ValueError(f"writers must name {MARKER} and only report files {REPORT_FILES}, got {sorted(writers)}")
    from invfast.io import output_lock

    check_out(out, overwrite)  # before the lock creates the folder
    with output_lock(out, command):
        check_out(out, overwrite)  # again: another run may have finished while we waited
        stage = os.path.join(out, STAGE_DIR)
        shutil.rmtree(stage, ignore_errors=True)  # a staging folder left by a killed run of ours
        os.makedirs(stage)
        try:
            for name, write in writers.items():
                write(os.path.join(stage, name))
            for name in (MARKER, *REPORT_FILES):  # the marker first: the folder no longer claims a finished report
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(out, name))
            for name in writers:
                if name != MARKER:
                    os.replace(os.path.join(stage, name), os.path.join(out, name))
            os.replace(os.path.join(stage, MARKER), os.path.join(out, MARKER))
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def _plottable() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        warnings.warn("matplotlib is not installed: the report has no pictures (pip install matplotlib)", stacklevel=3)
        return False
    return True


def write_comparison(comparison: Any, out: str | os.PathLike, *, overwrite: bool = False, plots: bool = True,
                     digits: int = 3) -> list[str]:
    """Write ``comparison``'s report into ``out`` (see the module docstring); returns the files written."""
    from invfast.io import atomic_write_text

    pictures: dict[str, str] = {}
    if plots and _plottable():
        fams = {}
        for _, f in comparison.table.columns:
            fams[f] = fams.get(f, 0) + 1
        if max(fams.values(), default=0) >= 3:
            pictures["radar"] = "radar.png"
        pictures["heatmap"] = "heatmap.png"
        if comparison.paired.of("cosine"):
            pictures["significance"] = "significance.png"
        if comparison.transfer is not None:
            pictures["correlation"] = "correlation.png"

    def picture(kind: str) -> Callable[[str], Any]:
        def write(path: str) -> None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # matplotlib layout notes
                comparison.plot(kind, path=path)

        return write

    writers: dict[str, Callable[[str], Any]] = {f: picture(k) for k, f in pictures.items()}
    writers["table.csv"] = comparison.to_csv
    writers["report.md"] = lambda p: atomic_write_text(p, comparison.to_markdown(digits=digits, pictures=pictures))
    writers[MARKER] = comparison.to_json
    write_report_folder(out, writers, overwrite=overwrite)
    return list(writers)
