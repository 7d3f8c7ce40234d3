"""The 18 Transforms-2D transformation types and their parameter distributions (Speicher et al., App. A.1; values
from the published code).

Each type is sampled independently per sample from the counter-based RNG
(:mod:`invfast.synthetic.rng`), so a dataset is defined by its set of types, not their order.
Parameters of types that are not in a dataset keep their identity value, so every dataset reports
the same latent factors.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from invfast.synthetic import rng

__all__ = [
    "GEOMETRIC",
    "PHOTOMETRIC",
    "CORRUPTION",
    "TRANSFORMATION_TYPES",
    "CATEGORY",
    "IMPLIED_BY",
    "implied_types",
    "ALIASES",
    "Recipe",
    "BINARY",
    "IDENTITY",
    "PARAM_NAMES",
    "canonical",
    "sample",
]

GEOMETRIC = ("translate", "rotate", "scale", "shear", "vflip", "hflip")
PHOTOMETRIC = ("hue", "brightness", "grayscale", "posterize", "invert", "sharpen")
CORRUPTION = ("blur", "noise", "pixelate", "elastic", "erasing", "contrast")
#: the 18 Transforms-2D transformation types (Speicher et al.), geometric, photometric, corruption
TRANSFORMATION_TYPES: tuple[str, ...] = GEOMETRIC + PHOTOMETRIC + CORRUPTION
CATEGORY = {
    **{t: "geometric" for t in GEOMETRIC},
    **{t: "photometric" for t in PHOTOMETRIC},
    **{t: "corruption" for t in CORRUPTION},
}
#: a type whose variation two others already produce, with those two: under the default recipe's full rotation
#: (0–360°), a rotation composed with one flip is the other flip
IMPLIED_BY = {"vflip": ("rotate", "hflip"), "hflip": ("rotate", "vflip")}


def implied_types(types: tuple[str, ...] | list[str] | set[str]) -> list[str]:
    """The types of ``types`` whose variation the others of ``types`` already produce (:data:`IMPLIED_BY`)."""
    on = set(types)
    return sorted(t for t in on if t in IMPLIED_BY and set(IMPLIED_BY[t]) <= on - {t})


ALIASES = {
    "rotation": "rotate",
    "translation": "translate",
    "vertical_flip": "vflip",
    "horizontal_flip": "hflip",
    "vertical-flip": "vflip",
    "horizontal-flip": "hflip",
    "sharpness": "sharpen",
    "gaussian_blur": "blur",
    "gaussian_noise": "noise",
    "erase": "erasing",
    "gray": "grayscale",
    "greyscale": "grayscale",
}


@dataclass(frozen=True)
class Recipe:
    """Distribution constants (Speicher et al., App. A.1; sizes in pixels are for a 32 px image and scale with it)."""

    rotate_deg: tuple[float, float] = (0.0, 360.0)
    scale: tuple[float, float] = (0.4, 1.0)
    shear_deg: tuple[float, float] = (-50.0, 50.0)
    hue: tuple[float, float] = (-0.5, 0.5)
    brightness: tuple[float, float] = (0.0, 2.0)
    contrast: tuple[float, float] = (0.0, 2.0)
    posterize_bits: int = 1
    sharpen_factor: float = 7.0
    blur_kernel: int = 7
    blur_sigma: tuple[float, float] = (0.1, 1.5)
    noise_std: float = 0.1  # the paper gives N(0, 1) * scale without the scale: invfast uses 0.1
    pixelate_ratio: float = 0.3
    elastic_alpha: float = 150.0
    elastic_sigma: float = 5.0  # torchvision ElasticTransform default
    erase_side_32: float = 14.0
    p: float = 0.5  # probability of the binary types
    fill: float = 0.7  # base layout: longer side of the object / image side

    def to_dict(self) -> dict:
        return asdict(self)


BINARY = ("vflip", "hflip", "grayscale", "posterize", "invert", "sharpen", "noise", "pixelate", "elastic", "erasing")

# latent factor -> value when the transformation is not applied
IDENTITY = {
    "x": 0.5,
    "y": 0.5,
    "angle": 0.0,
    "scale": 1.0,
    "shear_x": 0.0,
    "shear_y": 0.0,
    "vflip": 0.0,
    "hflip": 0.0,
    "hue": 0.0,
    "brightness": 1.0,
    "grayscale": 0.0,
    "posterize": 0.0,
    "invert": 0.0,
    "sharpen": 0.0,
    "blur_sigma": 0.0,
    "noise": 0.0,
    "pixelate": 0.0,
    "elastic": 0.0,
    "erasing": 0.0,
    "erase_x": 0.0,
    "erase_y": 0.0,
    "contrast": 1.0,
}
PARAM_NAMES: tuple[str, ...] = tuple(IDENTITY) + ("background",)


def canonical(transforms) -> tuple[str, ...]:
    """Validate and normalise a transformation list ('rotate,hue' or a sequence) to TRANSFORMATION_TYPES order."""
    if transforms is None:
        return ()
    if isinstance(transforms, str):
        items = [t.strip() for t in transforms.split(",") if t.strip()]
    else:
        items = list(transforms)
    out = set()
    for t in items:
        if not isinstance(t, str):
            raise TypeError(f"transforms: names must be strings, got {type(t).__name__}")
        name = ALIASES.get(t.lower(), t.lower())
        if name not in TRANSFORMATION_TYPES:
            raise ValueError(f"unknown transformation {t!r}; choose from {', '.join(TRANSFORMATION_TYPES)}")
        out.add(name)
    return tuple(t for t in TRANSFORMATION_TYPES if t in out)


def _u(keys, stream, lo_hi):
    lo, hi = lo_hi
    return lo + (hi - lo) * rng.uniform(keys, stream)


def sample(keys: np.ndarray, transforms: tuple[str, ...], recipe: Recipe) -> dict[str, np.ndarray]:
    """Sample the parameters of ``transforms`` for per-sample ``keys`` [B]: float64 arrays [B].

    Only the parameters that do not depend on the image are drawn here; translation offsets and
    the erasing position need the object's extent and are drawn by the generator (same streams).
    """
    B = keys.shape[0]
    out = {k: np.full(B, v, dtype=np.float64) for k, v in IDENTITY.items()}
    on = set(transforms)
    if "rotate" in on:
        out["angle"] = _u(keys, "rotate", recipe.rotate_deg)
    if "scale" in on:
        out["scale"] = _u(keys, "scale", recipe.scale)
    if "shear" in on:
        out["shear_x"] = _u(keys, "shear_x", recipe.shear_deg)
        out["shear_y"] = _u(keys, "shear_y", recipe.shear_deg)
    if "hue" in on:
        out["hue"] = _u(keys, "hue", recipe.hue)
    if "brightness" in on:
        out["brightness"] = _u(keys, "brightness", recipe.brightness)
    if "contrast" in on:
        out["contrast"] = _u(keys, "contrast", recipe.contrast)
    if "blur" in on:
        out["blur_sigma"] = _u(keys, "blur", recipe.blur_sigma)
    for b in BINARY:
        if b in on:
            out[b] = (rng.uniform(keys, b) < recipe.p).astype(np.float64)
    return out
