"""``invfast reproduce``: the papers' findings end to end on built-in synthetic data.

- :mod:`~invfast.reproduce.config`: :class:`ReproduceConfig`, presets, the on-disk format;
- :mod:`~invfast.reproduce.pipeline`: the cached, resumable job (:func:`reproduce`);
- :mod:`~invfast.reproduce.stages`: each stage (data, pretraining, measurement, probes, transfer, amortised);
- :mod:`~invfast.reproduce.report`: verdicts computed from the numbers, ``report.md``, figures;
- :mod:`~invfast.reproduce.cli`: the command line.
"""
from invfast.reproduce.config import PRESETS, ConfigMismatchError, ReproduceConfig, preset
from invfast.reproduce.pipeline import reproduce

__all__ = ["ReproduceConfig", "PRESETS", "preset", "reproduce", "ConfigMismatchError"]
