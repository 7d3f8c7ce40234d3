"""``invfast reproduce``: the papers' findings end to end on built-in synthetic data.

- :mod:`~invfast.reproduce.config`: :class:`ReproduceConfig` and the on-disk format; :mod:`~invfast.reproduce.presets`:
  the named configurations;
- :mod:`~invfast.reproduce.findings`: the findings of docs/findings.md as records, and their selection;
- :mod:`~invfast.reproduce.pipeline`: the cached, resumable job (:func:`reproduce`) over :class:`Stage` records;
- :mod:`~invfast.reproduce.stages`: the stages as data (``STAGES``: data, pretraining, measurement, probes,
  transfer, amortised), one module per kind;
- :mod:`~invfast.reproduce.sections`: the report's findings and sections as data, one module per section;
- :mod:`~invfast.reproduce.document`: ``report.md``, ``results.json`` and figures assembled from the sections;
- :mod:`~invfast.reproduce.cli`: the command line.
"""

from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.folders import ConfigMismatchError
from invfast.reproduce.pipeline import reproduce
from invfast.reproduce.presets import PRESETS, preset
from invfast.reproduce.stage import Stage

__all__ = ["ReproduceConfig", "PRESETS", "preset", "reproduce", "ConfigMismatchError", "Stage"]
