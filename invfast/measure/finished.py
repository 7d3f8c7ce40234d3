"""Finished transforms of a resumable measurement, each in a file of its own next to the state file.

A transform's accumulators (per-unit moments [V, U] for every view, per-fold equivariance sums, per-image
values) are live only while it is scored; once its result is assembled the result goes to
``<state file>.t<i>`` (``i``: the transform's place in the run's list), written once, and the accumulators
leave the state. The state file then holds one transform's accumulators at most, and a save rewrites only
those (before: every transform started so far, rewritten at every save). A resumed run reads a finished
transform's result back instead of scoring it again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from invfast.io import atomic_torch_save, load_verified
from invfast.measure.result import TransformResult
from invfast.measure.state import StateMismatchError

__all__ = ["finished_file", "save_finished", "load_finished"]

FINISHED_FORMAT = "invfast.measure-finished/1"


def finished_file(state_file: str, index: int) -> str:
    """Where the result of the run's ``index``-th transform is kept: ``<state_file>.t<index>``."""
    return f"{state_file}.t{index:02d}"


def save_finished(path: str, name: str, fingerprint: dict[str, Any], results: dict[str, TransformResult]) -> None:
    """Write transform ``name``'s results (by layer) atomically, with a checksum and the run's fingerprint."""
    layers = {ly: {f.name: getattr(tr, f.name) for f in dataclasses.fields(tr)} for ly, tr in results.items()}
    saved = {"format": FINISHED_FORMAT, "transform": name, "fingerprint": fingerprint, "layers": layers}
    atomic_torch_save(saved, path)


def load_finished(path: str, name: str, fingerprint: dict[str, Any]) -> dict[str, TransformResult]:
    """The results (by layer) of transform ``name`` saved at ``path`` by the run of ``fingerprint``.

    Raises ``DamagedFileError`` when it fails its checksum and :class:`StateMismatchError` when it is gone or
    holds another transform or another run's result."""
    fix = "delete the state folder (or pass --overwrite) to start the measurement over"
    try:
        saved = load_verified(path, what="finished-transform file", fix=fix)
    except FileNotFoundError:
        raise StateMismatchError(
            f"the saved state says transform {name!r} finished, but its result file {path!r} is gone; {fix}"
        ) from None
    if not isinstance(saved, dict) or saved.get("format") != FINISHED_FORMAT:
        raise StateMismatchError(f"{path!r} is not a finished-transform file of this invfast version; {fix}")
    if saved.get("transform") != name or saved.get("fingerprint") != fingerprint:
        what = f"transform {saved.get('transform')!r}" if saved.get("transform") != name else "another run"
        raise StateMismatchError(f"{path!r} holds the result of {what}, not of transform {name!r} of this run; {fix}")
    return {ly: TransformResult(**fields) for ly, fields in saved["layers"].items()}
