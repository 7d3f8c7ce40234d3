"""Counter-based random numbers: every value is a pure function of (seed, split, index, stream, counter).

A sample's randomness never depends on which batch or worker produced it, nor on the order
of access. The hash is the SplitMix64 finaliser (Steele et al., 2014) applied to a counter
chain, evaluated on numpy ``uint64`` arrays (wrap-around arithmetic).
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = [
    "mix",
    "text_key",
    "derive_seed",
    "sample_keys",
    "stream_bits",
    "uniform",
    "normal",
    "integers",
    "permutation",
]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser of ``x`` (uint64 array), a bijection with good avalanche."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> _S30)) * _M1
        z = (z ^ (z >> _S27)) * _M2
        return z ^ (z >> _S31)


def text_key(text: str) -> int:
    """A stable 32-bit key for a string (split and stream names)."""
    return zlib.crc32(text.encode("utf-8"))


def _key(seed: int, parts: tuple[int | str, ...]) -> np.ndarray:
    """The 64-bit key of (seed, *parts): ``mix`` of the seed, then one ``mix`` per part folded in by xor
    (a string part by its :func:`text_key`)."""
    k = mix(np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF))
    for p in parts:
        part = text_key(p) if isinstance(p, str) else int(p) & 0xFFFFFFFFFFFFFFFF
        k = mix(k ^ np.uint64(part))
    return k  # a 0-d uint64 array


def derive_seed(seed: int, *parts: int | str, bits: int = 63) -> int:
    """A ``bits``-bit seed (a non-negative Python int) keyed by (seed, *parts): the one seed mixer of
    invfast - pretraining's generators, reproduce's stage seeds and the synthetic data's sample keys all
    derive from it. Distinct parts give independent seeds; the same parts always give the same seed."""
    if not 1 <= bits <= 64:
        raise ValueError(f"derive_seed: bits must be in 1..64, got {bits}")
    return int(_key(seed, parts)) & ((1 << bits) - 1)


def sample_keys(seed: int, split: str, indices: np.ndarray) -> np.ndarray:
    """Per-sample 64-bit keys [B] for ``indices`` of (seed, split)."""
    idx = np.asarray(indices, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        return mix(_key(seed, (split,)) + idx * _GOLDEN)


def stream_bits(keys: np.ndarray, stream: str, count: int | None = None) -> np.ndarray:
    """Random uint64 bits for ``stream``: [B] if ``count`` is None, else [B, count]."""
    with np.errstate(over="ignore"):
        base = mix(keys ^ mix(np.uint64(text_key(stream))))
        if count is None:
            return base
        ctr = np.arange(count, dtype=np.uint64) * _GOLDEN
        return mix(base[:, None] + ctr[None, :])


def uniform(keys: np.ndarray, stream: str, count: int | None = None) -> np.ndarray:
    """float64 uniforms in [0, 1): [B] or [B, count]."""
    return (stream_bits(keys, stream, count) >> _S11).astype(np.float64) * (1.0 / 9007199254740992.0)


def normal(keys: np.ndarray, stream: str, count: int | None = None) -> np.ndarray:
    """Standard normals (Box-Muller on two independent streams): [B] or [B, count]."""
    u1 = uniform(keys, stream + "/bm1", count)
    u2 = uniform(keys, stream + "/bm2", count)
    return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)


def integers(keys: np.ndarray, stream: str, high: int) -> np.ndarray:
    """int64 uniform in {0, ..., high-1} per key (multiply-shift, bias < 2^-40 for high < 2^24)."""
    if high <= 0:
        raise ValueError(f"integers: high must be positive, got {high}")
    return np.floor(uniform(keys, stream) * high).astype(np.int64)


def permutation(seed: int, stream: str, n: int) -> np.ndarray:
    """A permutation of range(n) that depends only on (seed, stream)."""
    keys = sample_keys(seed, "permutation:" + stream, np.arange(n))
    return np.argsort(stream_bits(keys, "perm"), kind="stable")
