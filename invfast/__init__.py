"""invfast: measure, control and exploit the invariances of learned representations, fast.

Every public name loads on first attribute access, so ``import invfast`` (and ``invfast --help`` / ``--version``)
loads neither torch nor the compiled core; the core is loaded by the first op that needs it
(:func:`invfast._loader.load`).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.4.0"

_SUBPACKAGES = (
    "backend",
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
#: public name -> (module, attribute); ``invfast.compare`` is a function (its subpackage is ``invfast.comparison``)
_LAZY = {
    "backend_info": ("invfast.backend", "backend_info"),
    "acr": ("invfast.metrics", "acr"),
    "aggregate_scores": ("invfast.metrics", "aggregate_scores"),
    "alignment": ("invfast.metrics", "alignment"),
    "class_distance_ratio": ("invfast.metrics", "class_distance_ratio"),
    "invariance_scores": ("invfast.metrics", "invariance_scores"),
    "mahalanobis": ("invfast.metrics", "mahalanobis"),
    "sensitivity_ratio": ("invfast.metrics", "sensitivity_ratio"),
    "standardized_cosine": ("invfast.metrics", "standardized_cosine"),
    "uniformity": ("invfast.metrics", "uniformity"),
    "HoeffdingResult": ("invfast.significance", "HoeffdingResult"),
    "hoeffding_test": ("invfast.significance", "hoeffding_test"),
    "most_invariant": ("invfast.significance", "most_invariant"),
    "FeatureStats": ("invfast.stats", "FeatureStats"),
    "measure_invariance": ("invfast.measure", "measure_invariance"),
    "measure_real_world": ("invfast.measure", "measure_real_world"),
    "compare": ("invfast.comparison", "compare"),
}

__all__ = sorted([*_SUBPACKAGES, *_LAZY])


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        value = importlib.import_module(f"invfast.{name}")
    elif name in _LAZY:
        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod), attr)
    else:
        raise AttributeError(f"module 'invfast' has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
