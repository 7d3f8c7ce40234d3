"""Transforms-2D synthetic data (Speicher et al.), generated offline and reproducibly by index.

>>> from invfast.synthetic import Transforms2D
>>> ds = Transforms2D(objects=30, transforms="rotate,hue,blur", n=1000, seed=0)
>>> image, label, params = ds[0]          # float32 [3, 32, 32], int, {'angle': ..., 'hue': ..., ...}
>>> images, labels, params = ds.generate(range(256))   # uint8 [256, 3, 32, 32]
"""
from invfast.synthetic.banks import (ObjectBank, builtin_backgrounds, builtin_objects, load_backgrounds, load_objects,
                                     random_pattern_objects)
from invfast.synthetic.recipe import (CATEGORY, CORRUPTION, GEOMETRIC, PARAM_NAMES, PHOTOMETRIC, TRANSFORMATIONS,
                                      Recipe)
from invfast.synthetic.transforms2d import Transforms2D

__all__ = ["CATEGORY", "CORRUPTION", "GEOMETRIC", "ObjectBank", "PARAM_NAMES", "PHOTOMETRIC", "Recipe",
           "TRANSFORMATIONS", "Transforms2D", "builtin_backgrounds", "builtin_objects", "load_backgrounds",
           "load_objects", "random_pattern_objects"]
