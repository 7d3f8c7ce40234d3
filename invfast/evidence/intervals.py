"""95 % intervals of a statistic: a percentile bootstrap over the test units of one seed (images, pairs,
out-of-fold predictions) and a t interval over seeds (docs/findings.md §5.1, restated in
docs/findings.md).

The bootstrap draws its resample indices exactly as ``scipy.stats.bootstrap`` does
(``rng.integers(0, n, (n_resamples, n))`` per sample, one draw shared by every sample when paired) and
takes the same percentiles, so on the same generator both give the same interval; the statistic is
vectorised over a leading resample axis, so 2 000 resamples of a 3 000-image accuracy cost one gather.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "Interval",
    "bootstrap",
    "mean_interval",
    "difference_interval",
    "accuracy_statistic",
    "r2_statistic",
    "t_interval",
    "DEFAULT_RESAMPLES",
]

#: resamples of every bootstrap interval (docs/findings.md asks for at least 1 000)
DEFAULT_RESAMPLES = 2000


@dataclass(frozen=True)
class Interval:
    """A point value and its two-sided interval.

    Attributes:
        estimate: the statistic on the data as observed.
        low, high: the interval's bounds (``low <= high``).
        confidence: its coverage (0.95).
        method: 'bootstrap' (percentile, over ``n`` units of one seed), 't' (over ``n`` seeds) or 'exact'
            (a number without sampling error: a count, a measured time; ``low == high == estimate``).
        n: the number of units resampled (images, pairs, predictions, seeds).
    """

    estimate: float
    low: float
    high: float
    confidence: float = 0.95
    method: str = "bootstrap"
    n: int = 0

    def __post_init__(self) -> None:
        if not all(math.isfinite(v) for v in (self.estimate, self.low, self.high)):
            raise ValueError(f"an interval needs finite numbers, got {self.estimate}, [{self.low}, {self.high}]")
        if self.low > self.high:
            raise ValueError(f"interval low {self.low} is above high {self.high}")

    @classmethod
    def exact(cls, value: float, n: int = 1) -> Interval:
        """A number with no sampling error (a count, a measured time)."""
        return cls(float(value), float(value), float(value), 1.0, "exact", n)

    def above(self, value: float = 0.0) -> bool:
        """The whole interval lies above ``value``."""
        return self.low > value

    def below(self, value: float = 0.0) -> bool:
        """The whole interval lies below ``value``."""
        return self.high < value

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Interval:
        return cls(**{k: d[k] for k in ("estimate", "low", "high", "confidence", "method", "n")})

    def __str__(self) -> str:
        if self.method == "exact":
            return f"{self.estimate:.3f}"
        return f"{self.estimate:.3f} [{self.low:.3f}, {self.high:.3f}]"


def _check_confidence(confidence: float) -> float:
    if not 0.5 <= float(confidence) < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    return float(confidence)


def bootstrap(
    statistic: Callable[..., np.ndarray],
    samples: Sequence[Any],
    *,
    paired: bool = True,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = 0.95,
    seed: int | np.random.Generator = 0,
) -> Interval:
    """Percentile bootstrap interval of ``statistic`` over the first axis of every sample.

    Args:
        statistic: ``statistic(*resampled) -> [R]``: each argument is a sample with a leading resample axis,
            ``[R, n, ...]``; it returns one value per resample (vectorised, as ``scipy.stats.bootstrap`` with
            ``vectorized=True`` along the last axis, here along axis 1).
        samples: one or more arrays ``[n_i, ...]`` (units along axis 0).
        paired: resample the same units for every sample (they must have the same ``n``: the same images
            seen by both models); False resamples each independently (different images).
        n_resamples: at least 1 000.
        confidence: the interval's coverage.
        seed: a seed or a numpy Generator (the draw: ``integers(0, n, (n_resamples, n))``).

    Returns:
        an :class:`Interval` with ``estimate`` the statistic on the samples as observed.
    """
    arrays = [np.asarray(s, dtype=np.float64) for s in samples]
    if not arrays:
        raise ValueError("bootstrap needs at least one sample")
    for i, a in enumerate(arrays):
        if a.ndim == 0 or a.shape[0] < 2:
            raise ValueError(f"sample {i} needs at least 2 units along axis 0, got shape {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError(f"sample {i} holds NaN or infinite values")
    if paired and len({a.shape[0] for a in arrays}) > 1:
        raise ValueError(f"paired samples must have the same number of units, got {[a.shape[0] for a in arrays]}")
    if int(n_resamples) < 1000:
        raise ValueError(f"n_resamples must be at least 1000 (docs/findings.md), got {n_resamples}")
    conf = _check_confidence(confidence)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    estimate = float(np.asarray(statistic(*[a[None] for a in arrays])).reshape(-1)[0])
    if paired:
        n = arrays[0].shape[0]
        idx = rng.integers(0, n, (int(n_resamples), n))
        resampled = [a[idx] for a in arrays]
    else:
        resampled = [a[rng.integers(0, a.shape[0], (int(n_resamples), a.shape[0]))] for a in arrays]
    theta = np.asarray(statistic(*resampled), dtype=np.float64).reshape(-1)
    if theta.shape[0] != int(n_resamples):
        raise ValueError(f"statistic must return one value per resample ({n_resamples}), got {theta.shape[0]}")
    if not np.isfinite(theta).all() or not math.isfinite(estimate):
        raise ValueError("the statistic is NaN or infinite on some resample")
    alpha = (1.0 - conf) / 2.0
    low, high = np.percentile(theta, [100 * alpha, 100 * (1 - alpha)])
    return Interval(estimate, float(low), float(high), conf, "bootstrap", int(arrays[0].shape[0]))


def _mean(x: np.ndarray) -> np.ndarray:
    return x.mean(axis=tuple(range(1, x.ndim)))


def mean_interval(x: Any, **kw: Any) -> Interval:
    """Bootstrap interval of the mean of ``x`` [n] (or of ``x`` [n, ...] averaged over everything but units)."""
    return bootstrap(_mean, [x], **kw)


def difference_interval(a: Any, b: Any, *, paired: bool = True, **kw: Any) -> Interval:
    """Bootstrap interval of mean(a) − mean(b): paired when both are per-unit values on the same units."""
    return bootstrap(lambda x, y: _mean(x) - _mean(y), [a, b], paired=paired, **kw)


def accuracy_statistic(correct: np.ndarray) -> np.ndarray:
    """Accuracy per resample from per-unit correctness [R, n] (0/1)."""
    return correct.mean(axis=1)


def r2_statistic(target: np.ndarray, prediction: np.ndarray) -> np.ndarray:
    """Mean R² over targets per resample: ``target``, ``prediction`` [R, n] or [R, n, t] (as
    ``sklearn.metrics.r2_score``: a constant resampled target scores 1 when predicted exactly, else 0)."""
    if target.ndim == 2:
        target, prediction = target[..., None], prediction[..., None]
    ss_res = ((target - prediction) ** 2).sum(axis=1)
    ss_tot = ((target - target.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    ok = ss_tot > 0
    r2 = np.where(ok, 1.0 - ss_res / np.where(ok, ss_tot, 1.0), np.where(ss_res == 0, 1.0, 0.0))
    return r2.mean(axis=-1)


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Mean of ``values`` (one per seed) with its Student-t interval: mean ± t_{n−1} · sd / √n (n ≥ 2)."""
    from scipy import stats as st

    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size < 2:
        raise ValueError(f"a t interval needs at least 2 values, got {v.size}")
    if not np.isfinite(v).all():
        raise ValueError("t_interval got NaN or infinite values")
    conf = _check_confidence(confidence)
    mean, sem = float(v.mean()), float(v.std(ddof=1)) / math.sqrt(v.size)
    half = float(st.t.ppf(0.5 + conf / 2, v.size - 1)) * sem
    return Interval(mean, mean - half, mean + half, conf, "t", int(v.size))
