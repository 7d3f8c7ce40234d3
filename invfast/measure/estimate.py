"""How long a measurement will take and, for per-element units, how much memory it will hold, said before it
starts: the views it computes (model inputs) times the model's time per input at the run's batch size (on the
CPU a run longer than :data:`LONG_RUN_S` gets one line with the estimate and what ``--quick`` would take
instead); the float64 per-unit moments of the transform being scored, against the memory free on the device
(more is refused, more than :data:`LARGE_MOMENTS_BYTES` is announced)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from invfast.measure.core import transform_grids
from invfast.measure.protocol import get_protocol

#: a CPU measurement estimated longer than this (seconds) is announced with the ``--quick`` alternative
LONG_RUN_S = 600.0
#: per-unit moments estimated larger than this (bytes) are announced before the run
LARGE_MOMENTS_BYTES = 1 << 30


def views_per_image(transforms: Any, grid_size: int, protocol: str = "invfast", grid_side: int | None = None) -> int:
    """Model inputs per image: one for the reference statistics, then one per grid parameter of every transform
    (the identity parameters too: they are computed, then left out of the means)."""
    grids = transform_grids(transforms, grid_size, get_protocol(protocol), 0, grid_side)
    return 1 + sum(int(params.shape[0]) for _, params, _ in grids)


def views_per_transform(
    transforms: Any, grid_size: int, protocol: str = "invfast", grid_side: int | None = None
) -> list[int]:
    """Grid parameters of each transform (its views per image, the identity included where its grid has it)."""
    grids = transform_grids(transforms, grid_size, get_protocol(protocol), 0, grid_side)
    return [int(params.shape[0]) for _, params, _ in grids]


def unit_moment_bytes(views: Sequence[int], units: Sequence[int]) -> int:
    """Peak bytes of the per-unit moments of a run: a float64 mean and M2 ``[V, U]`` for every layer (``units``:
    each U) of the transform being scored, the largest of ``views`` (each transform's V) at worst, plus a copy of
    one layer's while its result is assembled. Only one transform's are live: a finished transform's result
    goes to a file of its own (:mod:`invfast.measure.finished`)."""
    return 16 * max(views) * (sum(units) + max(units))


def free_memory_bytes(device: torch.device) -> int | None:
    """Memory free for a run's tensors on ``device``: CUDA's free memory, or the host's ``MemAvailable``
    (``/proc/meminfo``); None where neither can be read."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def moments_line(need: int, free: int | None, device: str, units: Sequence[int], views: Sequence[int]) -> str | None:
    """The line announcing large per-unit moments (None when under :data:`LARGE_MOMENTS_BYTES`); a ValueError
    when they exceed the memory free on the device. ``units``/``views``: the U of each layer, the V of each
    transform."""
    what = (
        f"the per-element moments need about {_gib(need)} on {device} ({sum(units)} units over {len(units)} "
        f"layer(s) x {max(views)} views, the largest grid of {len(views)} transform(s), float64 mean and M2, "
        "one transform at a time)"
    )
    if free is not None and need > free:
        raise ValueError(
            f"{what}, more than the {_gib(free)} free; choose --units channels, fewer --layers, a smaller "
            "--grid-size or fewer --transforms"
        )
    if need < LARGE_MOMENTS_BYTES:
        return None
    return f"memory: {what}" + ("" if free is None else f"; {_gib(free)} free")


def seconds_per_image(
    extract: Any,
    images: torch.Tensor,
    batch: int = 256,
    budget_s: float = 2.0,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Wall seconds per image of ``extract`` at the run's model-call size: ``images`` ``[n, C, H, W]`` repeated
    into batches of ``n``, ``2n``, ``4n`` ... up to ``batch`` images (the run's ``forward_batch``), each timed
    once after a warm-up call, stopping once a call took ``budget_s``; the last batch's time per image. A small
    batch costs more per image than the run's large ones (a fixed cost per call), so timing only the first
    ``n`` images overestimated runs of small models several-fold."""
    if images.shape[0] == 0:
        raise ValueError("no images to time the model on")
    if batch < 1 or budget_s <= 0:
        raise ValueError(f"batch must be >= 1 and budget_s > 0, got {batch} and {budget_s}")
    n = min(int(images.shape[0]), batch)
    with torch.no_grad():
        extract(images[:n])
        while True:
            x = images[torch.arange(n, device=images.device) % images.shape[0]]
            t0 = clock()
            extract(x)
            took = clock() - t0
            if n >= batch or took >= budget_s:
                return took / n
            n = min(batch, 2 * n)


def _minutes(s: float) -> str:
    return f"{s / 60:.0f} min" if s >= 600 else f"{s / 60:.1f} min"


def estimate_line(
    n_images: int, views: int, per_image_s: float, quick_views: int, quick_images: int, device: str = "cpu"
) -> str | None:
    """The line announcing a long CPU run (None when it is short or not on the CPU): its estimated time and that of
    ``--quick`` (``quick_views`` per image on ``quick_images`` images), both from the same timing
    (:func:`seconds_per_image`)."""
    total = n_images * views * per_image_s
    if device != "cpu" or total < LONG_RUN_S:
        return None
    quick = min(n_images, quick_images) * quick_views * per_image_s
    return (
        f"estimate: about {_minutes(total)} on the CPU ({n_images} images x {views} views at "
        f"{per_image_s * 1e3:.2f} ms per view, timed at the run's batch size); --quick would take about "
        f"{_minutes(quick)} (fewer parameters and images, the same report)"
    )


__all__ = [
    "LARGE_MOMENTS_BYTES",
    "LONG_RUN_S",
    "estimate_line",
    "free_memory_bytes",
    "moments_line",
    "seconds_per_image",
    "unit_moment_bytes",
    "views_per_image",
    "views_per_transform",
]
