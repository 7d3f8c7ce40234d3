"""Keyed randomness of pretraining: every random draw comes from a fresh ``torch.Generator`` seeded from
(seed, stream, counters), so a resumed run draws exactly what the uninterrupted one would have."""

from __future__ import annotations

import torch


def _mix(*parts: int) -> int:
    """A 63-bit seed from integers (splitmix64 steps): independent streams keyed by (seed, stream, counters)."""
    h = 0x9E3779B97F4A7C15
    for p in parts:
        h = (h ^ (int(p) & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
        h = h * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 29
    return h & 0x7FFFFFFFFFFFFFFF


_STREAM_DATA, _STREAM_DESC, _STREAM_AUG, _STREAM_SHUFFLE = 1, 2, 3, 4


def generator(seed: int, stream: int, *counters: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A fresh ``torch.Generator`` on ``device`` seeded from (seed, stream, counters)."""
    return torch.Generator(device=device).manual_seed(_mix(seed, stream, *counters))
