"""The output folder of ``invfast compare``: ``report.md``, ``results.json``, ``table.csv`` and PNGs.

The folder follows :class:`invfast.runtime.run_folder.RunFolder`'s rules, like ``invfast measure``'s: under its
lock every file is first written into a staging folder inside ``out`` and swapped in only when all are
complete; a folder of the user's files or of another command's run is refused, symbolic links inside it
are refused, and only files the run marker lists are ever replaced or deleted.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

from invfast.runtime.run_folder import RunFolder

RESULTS = "results.json"
REPORT_FILES = ("report.md", "table.csv", "radar.png", "heatmap.png", "significance.png", "correlation.png")


def run_folder(out: str | os.PathLike, overwrite: bool) -> RunFolder:
    """The compare run folder ``out`` (``results.json`` marks a finished comparison)."""
    return RunFolder(out, "compare", overwrite=overwrite, done_file=RESULTS)


def check_out(out: str | os.PathLike, overwrite: bool) -> None:
    """Refuse ``out`` (one ValueError) when compare must not write there; see :meth:`RunFolder.check`."""
    run_folder(out, overwrite).check()


def write_report_folder(out: str | os.PathLike, writers: dict[str, Callable[[str], Any]], *, overwrite: bool) -> None:
    """Write one report into ``out``: ``writers`` maps each file name (``results.json`` among them, and only
    names in ``REPORT_FILES``) -> a function writing that file at the path it is given. The old report stays
    whole until every new file is written; then the new files replace it (see :meth:`RunFolder.commit`)."""
    unknown = sorted(set(writers) - {RESULTS, *REPORT_FILES})
    if unknown or RESULTS not in writers:
        raise ValueError(f"writers must name {RESULTS} and only report files {REPORT_FILES}, got {sorted(writers)}")
    folder = run_folder(out, overwrite)
    with folder.lock():
        stage = folder.staging()
        for name, write in writers.items():
            write(os.path.join(stage, name))
        folder.commit(stage)


def _plottable() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        warnings.warn("matplotlib is not installed: the report has no pictures (pip install matplotlib)", stacklevel=3)
        return False
    return True


def write_comparison(
    comparison: Any, out: str | os.PathLike, *, overwrite: bool = False, plots: bool = True, digits: int = 3
) -> list[str]:
    """Write ``comparison``'s report into ``out`` (see the module docstring); returns the files written."""
    from invfast.io import atomic_write_text

    pictures: dict[str, str] = {}
    if plots and _plottable():
        fams: dict[str, int] = {}
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
    writers[RESULTS] = comparison.to_json
    write_report_folder(out, writers, overwrite=overwrite)
    return list(writers)
