"""How warnings reach the user: one line each, ``invfast: warning: <message>`` (no source line), each distinct
message once; the command line (:mod:`invfast.cli`) and every worker process it spawns (:mod:`invfast.runtime.launch`)
show them the same way."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["one_line_warnings"]


@contextlib.contextmanager
def one_line_warnings(show: bool = True) -> Iterator[None]:
    """Warnings as ``invfast: warning: <message>``, each distinct message once; none at all with ``show=False``
    (a worker whose rank-0 twin already says the same)."""
    seen: set[str] = set()
    old_show = warnings.showwarning

    def display(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        text = " ".join(str(message).split())
        if text in seen:
            return
        seen.add(text)
        print(f"invfast: warning: {text}", file=sys.stderr if file is None else file)

    with warnings.catch_warnings():
        warnings.simplefilter("default" if show else "ignore")
        warnings.showwarning = display
        try:
            yield
        finally:
            warnings.showwarning = old_show
