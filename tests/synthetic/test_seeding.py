"""The one seed mixer (``synthetic.rng.derive_seed``): pinned against SplitMix64 written out in plain Python
integers, and what its users rely on (range, independence of parts, stability)."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

from invfast.pretrain.randomness import generator
from invfast.reproduce.stages.context import stage_seed
from invfast.synthetic import rng

_M64 = (1 << 64) - 1


def _splitmix(x: int) -> int:
    """SplitMix64's finaliser (Steele et al. 2014) on Python ints: the reference."""
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _reference(seed: int, *parts: int | str) -> int:
    k = _splitmix(seed & _M64)
    for p in parts:
        k = _splitmix(k ^ (zlib.crc32(p.encode()) if isinstance(p, str) else p & _M64))
    return k


def test_derive_seed_is_splitmix64_folded_over_the_parts():
    r = random.Random(rng.derive_seed(7, "test"))
    for _ in range(200):
        seed = r.randrange(-(2**40), 2**64)
        parts = [r.choice([r.randrange(0, 2**64), f"stage/{r.randrange(99)}"]) for _ in range(r.randrange(4))]
        bits = r.choice([31, 63, 64])
        assert rng.derive_seed(seed, *parts, bits=bits) == _reference(seed, *parts) & ((1 << bits) - 1)


def test_its_users_take_their_seeds_from_it():
    assert stage_seed(3, "train/default") == _reference(3, "train/default") & 0x7FFFFFFF
    assert generator(5, 2, 11, 4).initial_seed() == _reference(5, 2, 11, 4) & (2**63 - 1)
    keys = rng.sample_keys(9, "val", np.arange(4))
    expect = [_splitmix((_reference(9, "val") + i * 0x9E3779B97F4A7C15) & _M64) for i in range(4)]
    assert keys.tolist() == expect


def test_parts_give_distinct_seeds_and_bits_are_checked():
    seeds = {rng.derive_seed(0, "a", i) for i in range(1000)} | {rng.derive_seed(1, "a", i) for i in range(1000)}
    assert len(seeds) == 2000
    assert rng.derive_seed(0, "a", 1) != rng.derive_seed(0, 1, "a")
    assert all(0 <= stage_seed(s, "x") < 2**31 for s in range(100))
    with pytest.raises(ValueError, match="bits must be in 1..64"):
        rng.derive_seed(0, bits=0)
