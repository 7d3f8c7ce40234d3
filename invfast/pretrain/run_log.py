"""The files of a pretraining run beside its checkpoint: the metrics log (``metrics.jsonl``, one JSON record a
line, appended in place but never through a link, cut back to the checkpoint's step on resume) and its CSV
copy (``metrics.csv``, written atomically); and the loss window, the running sum behind the next logged loss,
which the checkpoint carries so that a resumed run logs the same numbers as an uninterrupted one."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from invfast.io import atomic_write_text
from invfast.runtime.write_paths import open_append

__all__ = ["append", "truncate", "write_csv", "Window"]


def truncate(path: str, step: int) -> list[dict]:
    """The records of log ``path`` up to ``step`` (a line cut short by a kill is dropped); the file is
    rewritten to hold exactly those."""
    recs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by the kill
                continue
    history = [r for r in recs if isinstance(r, dict) and r.get("step", step + 1) <= step]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in history))
    return history


def append(path: str, rec: dict) -> None:
    """Append one record to log ``path`` (:func:`invfast.runtime.write_paths.open_append`: no link, no second name)."""
    with open_append(path) as f:
        f.write(json.dumps(rec) + "\n")


def write_csv(path: str, history: list[dict]) -> None:
    """Every record of ``history`` as one CSV table (columns in order of first appearance), atomically."""
    keys = list(dict.fromkeys(k for r in history for k in r))
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows(history)
    atomic_write_text(path, buf.getvalue())


class Window:
    """What the next log record averages over since the last one: the loss sum and count, and the time spent
    augmenting and in total (per rank; the checkpoint keeps every rank's)."""

    def __init__(self, state: Any = None) -> None:
        try:  # a checkpoint of an earlier invfast has none: the window starts empty, as it did then
            loss_sum, n, t_aug, t_total = (float(v) for v in state)
        except (TypeError, ValueError):
            loss_sum, n, t_aug, t_total = 0.0, 0.0, 0.0, 0.0
        self.loss_sum: float = loss_sum
        self.n: int = int(n)
        self.t_aug: float = t_aug
        self.t_total: float = t_total

    def state(self) -> list[float]:
        return [self.loss_sum, self.n, self.t_aug, self.t_total]
