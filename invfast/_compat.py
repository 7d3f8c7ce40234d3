"""Old import paths kept for one release after a move, with a DeprecationWarning."""

from __future__ import annotations

import warnings


def warn_moved(old: str, new: str) -> None:
    """Warn once per import that module ``old`` is now ``new``."""
    warnings.warn(
        f"{old} moved to {new} in invfast 0.2; the old name will be removed in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
