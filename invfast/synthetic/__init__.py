"""Transforms-2D synthetic data (Speicher et al.), generated offline and reproducibly by index.

>>> from invfast.synthetic import Transforms2D, TRANSFORMATION_TYPES
>>> ds = Transforms2D(objects=30, transforms="rotate,hue,blur", n=1000, seed=0)
>>> image, label, params = ds[0]          # float32 [3, 32, 32], int, {'angle': ..., 'hue': ..., ...}
>>> images, labels, params = ds.generate(range(256))   # uint8 [256, 3, 32, 32]
>>> Transforms2D(objects=30, transforms="rotate,hue", order="random").orders([0])  # per-sample order

``TRANSFORMATION_TYPES`` names the 18 transformation types of the data;
the test transforms that measure invariance are ``invfast.transforms.TEST_TRANSFORMS``.
"""

from invfast.synthetic.banks import (
    ObjectBank,
    builtin_backgrounds,
    builtin_objects,
    load_backgrounds,
    load_objects,
    random_pattern_objects,
)
from invfast.synthetic.inputs import ORDERS, SPLITS, check_split
from invfast.synthetic.recipe import (
    CATEGORY,
    CORRUPTION,
    GEOMETRIC,
    PARAM_NAMES,
    PHOTOMETRIC,
    TRANSFORMATION_TYPES,
    Recipe,
)
from invfast.synthetic.transforms2d import Transforms2D

__all__ = [
    "CATEGORY",
    "CORRUPTION",
    "GEOMETRIC",
    "ORDERS",
    "ObjectBank",
    "PARAM_NAMES",
    "PHOTOMETRIC",
    "Recipe",
    "SPLITS",
    "TRANSFORMATION_TYPES",
    "Transforms2D",
    "builtin_backgrounds",
    "builtin_objects",
    "check_split",
    "load_backgrounds",
    "load_objects",
    "random_pattern_objects",
]
