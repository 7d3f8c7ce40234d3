"""invfast: measure, control and exploit the invariances of learned representations, fast.

The foundation (statistics, metrics, significance) is imported eagerly and is light; the
larger subpackages (transforms, synthetic, models, pretrain, probes, measure) load on
first attribute access.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.4.0"

from invfast import wait_policy as _wait_policy

_wait_policy.apply()  # the invfast command's OpenMP wait policy: read by the runtime when torch loads, below

from invfast import _loader  # noqa: E402

_loader.load()

from invfast import backend  # noqa: E402
from invfast.backend import backend_info  # noqa: E402
from invfast.metrics import (  # noqa: E402
    acr,
    aggregate_scores,
    alignment,
    class_distance_ratio,
    invariance_scores,
    mahalanobis,
    sensitivity_ratio,
    standardized_cosine,
    uniformity,
)
from invfast.significance import HoeffdingResult, hoeffding_test, most_invariant  # noqa: E402
from invfast.stats import FeatureStats  # noqa: E402

_SUBPACKAGES = (
    "transforms",
    "synthetic",
    "models",
    "pretrain",
    "probes",
    "report",
    "measure",
    "comparison",
    "evidence",
)
#: public functions loaded on first use; ``invfast.compare`` is a function (its subpackage is ``invfast.comparison``)
_LAZY = {
    "measure_invariance": ("invfast.measure", "measure_invariance"),
    "measure_real_world": ("invfast.measure", "measure_real_world"),
    "compare": ("invfast.comparison", "compare"),
}

__all__ = [
    "FeatureStats",
    "HoeffdingResult",
    "acr",
    "aggregate_scores",
    "alignment",
    "backend",
    "backend_info",
    "class_distance_ratio",
    "hoeffding_test",
    "invariance_scores",
    "mahalanobis",
    "most_invariant",
    "sensitivity_ratio",
    "standardized_cosine",
    "uniformity",
    *_SUBPACKAGES,
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"invfast.{name}")
    if name in _LAZY:
        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'invfast' has no attribute {name!r}")
