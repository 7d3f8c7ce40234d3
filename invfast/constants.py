"""Numbers shared across invfast, defined once."""

from __future__ import annotations

#: ImageNet per-channel mean and standard deviation of RGB in [0, 1] (the normalisation of torchvision's models)
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)

#: ITU-R 601-2 luma weights of R, G, B (torchvision's ``rgb_to_grayscale``)
LUMA_WEIGHTS: tuple[float, float, float] = (0.2989, 0.587, 0.114)

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "LUMA_WEIGHTS"]
