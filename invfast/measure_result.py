"""Deprecated alias of :mod:`invfast.measure.result` (moved in invfast 0.2; removed in the next release)."""
from invfast._compat import warn_moved

warn_moved(__name__, "invfast.measure.result")

from invfast.measure.result import *  # noqa: E402,F401,F403
