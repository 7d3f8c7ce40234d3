"""Deprecated alias of :mod:`invfast.data.sources` (moved in invfast 0.2; removed in the next release)."""
from invfast._compat import warn_moved

warn_moved(__name__, "invfast.data.sources")

from invfast.data.sources import *  # noqa: E402,F401,F403
