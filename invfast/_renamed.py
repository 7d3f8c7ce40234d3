"""Old public names kept for a release: a module ``__getattr__`` that returns the new name's value and
warns once per process with a ``DeprecationWarning`` that names the new one."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any


def renamed_names(
    module: str, renamed: dict[str, str], values: Callable[[str], Any], what: str
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module``: old name -> new name in ``renamed``; ``values(new)`` gives the
    new name's value; ``what`` says in a few words what the new name holds (shown in the warning)."""
    warned: set[str] = set()

    def __getattr__(name: str) -> Any:
        if name not in renamed:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new = renamed[name]
        if name not in warned:
            warned.add(name)
            warnings.warn(
                f"{module}.{name} is now {module}.{new} ({what}); the old name will be removed in a later release",
                DeprecationWarning,
                stacklevel=2,
            )
        return values(new)

    return __getattr__
