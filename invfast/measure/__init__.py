"""Invariance measurement: model + images + transforms -> :class:`InvarianceResult`.

- :mod:`~invfast.measure.config`: :class:`MeasureConfig` (how to measure; the resume fingerprint derives from it);
- :mod:`~invfast.measure.core`: :func:`measure_invariance` (test transforms over parameter grids);
- :mod:`~invfast.measure.real_world`: :func:`measure_real_world` (groups of views of the same content);
- :mod:`~invfast.measure.engine`: one run's source, extractor, shard, resumable state and reference statistics;
- :mod:`~invfast.measure.scoring`: the scoring loop; :mod:`~invfast.measure.assemble`: accumulators -> results;
- :mod:`~invfast.measure.selection`: transform names/families -> transform objects;
- :mod:`~invfast.measure.extractor`: models by name, fixed descriptors, images -> pooled features;
- :mod:`~invfast.measure.result`: the result and its JSON format;
- :mod:`~invfast.measure.units`: what a layer's unit is (channels or elements) and the per-unit measures
  (tmeasures's normalized variance, the variance ratio), streamed;
- :mod:`~invfast.measure.equivariance`: equivariance measures on features (cross-validated linear fit,
  tmeasures's same-equivariance);
- :mod:`~invfast.measure.state`: shards, resumable partial state; :mod:`~invfast.measure.finished`: each finished
  transform's result in a file of its own (the live state holds one transform's accumulators at most);
- :mod:`~invfast.measure.cli`: ``invfast measure``.
"""

from invfast.measure.config import MeasureConfig
from invfast.measure.core import measure_invariance
from invfast.measure.extractor import FeatureExtractor, WithDescriptor, load_model
from invfast.measure.real_world import measure_real_world
from invfast.measure.result import InvarianceResult, TransformResult
from invfast.measure.selection import resolve_transforms

__all__ = [
    "MeasureConfig",
    "measure_invariance",
    "measure_real_world",
    "resolve_transforms",
    "load_model",
    "FeatureExtractor",
    "WithDescriptor",
    "InvarianceResult",
    "TransformResult",
]
