"""Progress for long work: a live tqdm bar on a terminal, plain lines in a log file.

>>> from invfast.runtime.progress import bar
>>> b = bar(total=1000, desc="measure", unit="view")
>>> b.update(10); b.close()

When stderr is a terminal the bar is tqdm's. Otherwise (a log file, a pipe, a batch job) nothing is
redrawn: one line ``desc: 40% (400/1000 view, 12.3 view/s, ETA 49 s)`` is written at most every
``INVFAST_PROGRESS_SECONDS`` seconds (default 30) and one when the work ends, so logs carry no escape
codes and no carriage returns. The rate shown is the mean since the start; the ETA uses the rate since the
previous line, so work that slows down (a probe's larger penalties, later stages) is not promised early.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")

__all__ = ["bar", "track", "LineBar", "is_terminal"]


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default stderr) is an interactive terminal."""
    s = sys.stderr if stream is None else stream
    try:
        return bool(s.isatty())
    except (AttributeError, ValueError):
        return False


def _seconds(s: float) -> str:
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


class LineBar:
    """A progress report as occasional plain lines (see the module docstring); tqdm's methods that invfast
    uses: ``update``, ``set_description``, ``set_postfix``, ``set_postfix_str``, ``close``, and ``n``, ``total``,
    ``unit``."""

    def __init__(
        self,
        total: float | None = None,
        initial: float = 0,
        desc: str = "",
        unit: str = "it",
        every: float | None = None,
        file: TextIO | None = None,
    ) -> None:
        self.total, self.n, self.desc, self.unit = total, initial, desc, unit
        self.every = float(os.environ.get("INVFAST_PROGRESS_SECONDS", "30")) if every is None else every
        self.file = file
        self._t0 = self._last = time.monotonic()
        self._n0 = initial
        self._mark = (self._t0, float(initial))  # (time, n) of the last line: the recent rate the ETA uses
        self._postfix = ""
        self._closed = False

    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self._print(now)

    def set_description(self, desc: str, refresh: bool = True) -> None:
        self.desc = desc

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self._postfix = s

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **kwargs: Any) -> None:
        self._postfix = ", ".join(f"{k}={v}" for k, v in {**(ordered_dict or {}), **kwargs}.items())

    def refresh(self) -> None:
        pass

    def _line(self, now: float) -> str:
        rate = (self.n - self._n0) / max(now - self._t0, 1e-9)
        t_mark, n_mark = self._mark
        recent = (self.n - n_mark) / (now - t_mark) if now > t_mark and self.n > n_mark else rate
        parts = []
        if self.total:
            parts.append(f"{self.n:.0f}/{self.total:.0f} {self.unit}")
        else:
            parts.append(f"{self.n:.0f} {self.unit}")
        parts.append(f"{rate:.3g} {self.unit}/s")
        if self.total and recent > 0 and self.n < self.total:  # work that slows down: the recent rate, not the mean
            parts.append(f"ETA {_seconds((self.total - self.n) / recent)}")
        pct = f"{100 * self.n / self.total:.0f}% " if self.total else ""
        post = f" {self._postfix}" if self._postfix else ""
        return f"{self.desc}: {pct}({', '.join(parts)}){post}"

    def _print(self, now: float) -> None:
        print(self._line(now), file=self.file or sys.stderr, flush=True)
        self._mark = (now, float(self.n))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        now = time.monotonic()
        if self.n > self._n0:
            print(f"{self._line(now)} in {_seconds(now - self._t0)}", file=self.file or sys.stderr, flush=True)

    def __enter__(self) -> LineBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _Off:
    """A bar that shows nothing (``disable=True``)."""

    n = 0
    total = None
    unit = ""

    def update(self, n: float = 1) -> None:
        pass

    def set_description(self, desc: str, refresh: bool = True) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, refresh: bool = True, **kwargs: Any) -> None:
        pass

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> _Off:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def bar(
    total: float | None = None,
    *,
    desc: str = "",
    unit: str = "it",
    initial: float = 0,
    disable: bool = False,
    leave: bool = True,
    position: int | None = None,
) -> Any:
    """A progress bar: tqdm's on a terminal, :class:`LineBar` otherwise, nothing when ``disable``."""
    if disable:
        return _Off()
    if is_terminal():
        from tqdm.auto import tqdm

        return tqdm(
            total=total, initial=initial, desc=desc, unit=unit, leave=leave, position=position, dynamic_ncols=True
        )
    return LineBar(total=total, initial=initial, desc=desc, unit=unit)


def track(
    iterable: Iterable[T],
    *,
    total: float | None = None,
    desc: str = "",
    unit: str = "it",
    disable: bool = False,
    leave: bool = True,
) -> Iterator[T]:
    """Yield the items of ``iterable`` while a :func:`bar` counts them (``total`` defaults to its length)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    b = bar(total=total, desc=desc, unit=unit, disable=disable, leave=leave)
    try:
        for item in iterable:
            yield item
            b.update(1)
    finally:
        b.close()
