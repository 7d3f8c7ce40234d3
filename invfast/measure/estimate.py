"""How long a measurement will take, said before it starts: the views it computes (model inputs) times one
timed forward pass per image; on the CPU a run longer than :data:`LONG_RUN_S` gets one line with the estimate
and what ``--quick`` would take instead."""

from __future__ import annotations

import time
from typing import Any

import torch

from invfast.measure.core import transform_grids
from invfast.measure.protocol import get_protocol

#: a CPU measurement estimated longer than this (seconds) is announced with the ``--quick`` alternative
LONG_RUN_S = 600.0


def views_per_image(transforms: Any, grid_size: int, protocol: str = "invfast", grid_side: int | None = None) -> int:
    """Model inputs per image: one for the reference statistics, then one per grid parameter of every transform
    (the identity parameters too: they are computed, then left out of the means)."""
    grids = transform_grids(transforms, grid_size, get_protocol(protocol), 0, grid_side)
    return 1 + sum(int(params.shape[0]) for _, params, _ in grids)


def seconds_per_image(extract: Any, images: torch.Tensor, repeats: int = 2) -> float:
    """Wall seconds per image of ``extract(images)`` (one call to warm up, then the fastest of ``repeats``)."""
    if images.shape[0] == 0:
        raise ValueError("no images to time the model on")
    with torch.no_grad():
        extract(images)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            extract(images)
            best = min(best, time.perf_counter() - t0)
    return best / images.shape[0]


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 600 else f"{s / 60:.1f} min"


def estimate_line(
    n_images: int, views: int, per_image_s: float, quick_views: int, quick_images: int, device: str = "cpu"
) -> str | None:
    """The line announcing a long CPU run (None when it is short or not on the CPU): its estimated time and that of
    ``--quick`` (``quick_views`` per image on ``quick_images`` images), both from the same timed forward pass."""
    total = n_images * views * per_image_s
    if device != "cpu" or total < LONG_RUN_S:
        return None
    quick = min(n_images, quick_images) * quick_views * per_image_s
    return (
        f"estimate: about {_minutes(total)} on the CPU ({n_images} images x {views} views at "
        f"{per_image_s * 1e3:.1f} ms per image, one forward pass timed); --quick would take about {_minutes(quick)} "
        "(fewer parameters and images, the same report)"
    )


__all__ = ["LONG_RUN_S", "estimate_line", "seconds_per_image", "views_per_image"]
