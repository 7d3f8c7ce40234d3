"""What a pretraining augmentation policy does, as data: :class:`PolicyConfig`, the named policies and
the amortised-invariance descriptors. Both backends (:mod:`invfast.transforms.policies` in torch,
:mod:`invfast.transforms.dali`) build on it."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from invfast.constants import IMAGENET_MEAN, IMAGENET_STD

__all__ = ["AUGMENTATIONS", "POLICIES", "SWITCHES_5", "VALID_DESCRIPTORS", "PolicyConfig", "policy_config"]

AUGMENTATIONS = ("crop", "flip", "jitter", "grayscale", "blur", "solarize")
POLICIES = ("default", "spatial", "appearance", "solarize-default")
SWITCHES_5 = ("crop", "flip", "jitter", "grayscale", "blur")
# the K = 5 binary descriptors with at least two augmentations on (Chavhan et al.): 26 of them
VALID_DESCRIPTORS: tuple[tuple[int, ...], ...] = tuple(d for d in itertools.product((0, 1), repeat=5) if sum(d) >= 2)


@dataclass(frozen=True)
class PolicyConfig:
    """What a policy does. Sizes in pixels of the output view; sigmas at 224 px, scaled by size/224.

    Attributes:
        size: output side (224 for ImageNet-style data, 32 for synthetic/CIFAR-style data).
        crop: RandomResizedCrop(size, crop_scale, crop_ratio); when off, resize the shorter side to
            round(size * 256/224) and centre-crop ``size`` (the Appearance policy).
        flip / jitter / grayscale / blur / solarize: switch each augmentation on or off.
    """

    size: int = 224
    crop: bool = True
    flip: bool = True
    jitter: bool = True
    grayscale: bool = True
    blur: bool = True
    solarize: bool = False
    crop_scale: tuple[float, float] = (0.2, 1.0)
    crop_ratio: tuple[float, float] = (3.0 / 4.0, 4.0 / 3.0)
    jitter_strength: tuple[float, float, float, float] = (0.4, 0.4, 0.4, 0.1)
    p_flip: float = 0.5
    p_jitter: float = 0.8
    p_grayscale: float = 0.2
    p_blur: float = 0.5
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    p_solarize: float = 0.5
    solarize_threshold: float = 0.5
    resize_ratio: float = 256.0 / 224.0
    normalize: bool = True
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 2:
            raise ValueError(f"size must be an int >= 2, got {self.size!r}")
        for name in ("p_flip", "p_jitter", "p_grayscale", "p_blur", "p_solarize"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1], got {v}")
        lo, hi = self.crop_scale
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"crop_scale must satisfy 0 < lo <= hi <= 1, got {self.crop_scale}")
        if not 0.0 < self.crop_ratio[0] <= self.crop_ratio[1]:
            raise ValueError(f"crop_ratio must satisfy 0 < lo <= hi, got {self.crop_ratio}")
        if min(self.jitter_strength) < 0 or self.jitter_strength[3] > 0.5:
            raise ValueError(f"jitter_strength must be >= 0 and the hue strength <= 0.5, got {self.jitter_strength}")
        if not 0.0 < self.blur_sigma[0] <= self.blur_sigma[1]:
            raise ValueError(f"blur_sigma must satisfy 0 < lo <= hi, got {self.blur_sigma}")

    @property
    def augmentations(self) -> tuple[str, ...]:
        return tuple(a for a in AUGMENTATIONS if getattr(self, a))


_NAMED = {
    "default": dict(crop=True, flip=True, jitter=True, grayscale=True, blur=True, solarize=False),
    "spatial": dict(crop=True, flip=True, jitter=False, grayscale=False, blur=False, solarize=False),
    "appearance": dict(crop=False, flip=False, jitter=True, grayscale=True, blur=True, solarize=False),
    "solarize-default": dict(crop=True, flip=True, jitter=True, grayscale=True, blur=True, solarize=True),
}


def policy_config(name: str | Sequence[str], size: int = 224, **overrides: Any) -> tuple[PolicyConfig, str]:
    """The :class:`PolicyConfig` of a named policy or of a list of augmentations, and its label."""
    if isinstance(name, str):
        if name not in _NAMED:
            raise ValueError(
                f"unknown policy {name!r}; valid names: {', '.join(POLICIES)} "
                f"(or a list of augmentations from {AUGMENTATIONS})"
            )
        switches = dict(_NAMED[name])
        label = name
    else:
        names = list(name)
        bad = [n for n in names if n not in AUGMENTATIONS]
        if bad or not names:
            raise ValueError(
                f"unknown augmentation(s) {bad if bad else names}; valid augmentations: {', '.join(AUGMENTATIONS)}"
            )
        switches = {a: a in names for a in AUGMENTATIONS}
        label = "+".join(a for a in AUGMENTATIONS if a in names)
    fields = {f.name for f in dataclasses.fields(PolicyConfig)}
    unknown = set(overrides) - fields
    if unknown:
        raise ValueError(f"unknown policy option(s) {sorted(unknown)}; valid options: {sorted(fields)}")
    config = PolicyConfig(size=size, **{**switches, **overrides})
    return config, label
