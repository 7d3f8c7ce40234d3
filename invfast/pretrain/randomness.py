"""Keyed randomness of pretraining: every random draw comes from a fresh ``torch.Generator`` seeded from
(seed, stream, counters), so a resumed run draws exactly what the uninterrupted one would have."""

from __future__ import annotations

import torch

from invfast.synthetic.rng import derive_seed

_STREAM_DATA, _STREAM_DESC, _STREAM_AUG, _STREAM_SHUFFLE = 1, 2, 3, 4


def generator(seed: int, stream: int, *counters: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A fresh ``torch.Generator`` on ``device`` seeded from (seed, stream, counters)."""
    return torch.Generator(device=device).manual_seed(derive_seed(seed, stream, *counters))
