"""Which model is significantly most invariant: Hoeffding's test with Bonferroni correction
(Ericsson et al. 2021, App. F)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from invfast._validate import as_features

__all__ = ["HoeffdingResult", "hoeffding_test", "most_invariant"]


@dataclass(frozen=True)
class HoeffdingResult:
    """Outcome of testing 'A is not more invariant than B' on paired per-image scores."""

    mean_diff: float  # S_n: mean of X_i = s_A − s_B (sign-flipped for distances)
    threshold: float  # (b − a)·sqrt(ln(1/δ) / (2n))
    reject: bool  # True: A is significantly more invariant than B
    n: int
    delta: float


def hoeffding_test(
    s_a: torch.Tensor,
    s_b: torch.Tensor,
    *,
    delta: float = 0.05,
    bounds: tuple[float, float] = (-2.0, 2.0),
    higher_is_more_invariant: bool = True,
) -> HoeffdingResult:
    """One-sided Hoeffding test that model A is more invariant than model B.

    Args:
        s_a, s_b: [n] per-image scores of the two models on the same images.
        bounds: (a, b) with a ≤ X_i ≤ b for X_i = s_A − s_B; (−2, 2) suits cosine similarities.
            For distances give bounds that hold a priori (the test is invalid otherwise).
        higher_is_more_invariant: True for similarities, False for distances.
    """
    s_a = as_features(s_a, "s_a", ndim=1).to(torch.float64)
    s_b = as_features(s_b, "s_b", ndim=1).to(device=s_a.device, dtype=torch.float64)
    if s_a.shape != s_b.shape:
        raise ValueError(f"s_a and s_b must score the same images, got {s_a.shape[0]} and {s_b.shape[0]}")
    n = s_a.shape[0]
    if n == 0:
        raise ValueError("s_a and s_b are empty")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    lo, hi = float(bounds[0]), float(bounds[1])
    if not hi > lo:
        raise ValueError(f"bounds must be (a, b) with b > a, got {bounds}")
    x = s_a - s_b if higher_is_more_invariant else s_b - s_a
    x_min, x_max, mean = torch.stack([x.min(), x.max(), x.mean()]).tolist()  # one read from the device
    if x_min < lo - 1e-9 or x_max > hi + 1e-9:
        raise ValueError(
            f"score differences lie in [{x_min:.3g}, {x_max:.3g}], outside bounds "
            f"{bounds}; pass bounds that hold for every image"
        )
    thr = (hi - lo) * math.sqrt(math.log(1 / delta) / (2 * n))
    return HoeffdingResult(mean_diff=mean, threshold=thr, reject=mean > thr, n=n, delta=delta)


def most_invariant(
    scores: Mapping[str, torch.Tensor],
    *,
    delta: float = 0.05,
    bounds: tuple[float, float] = (-2.0, 2.0),
    higher_is_more_invariant: bool = True,
    n_tests: int | None = None,
) -> str | None:
    """The model that is significantly more invariant than every other one, or None.

    ``scores`` maps model name -> [n] per-image scores on the same images. A model wins when
    it beats each of the other M − 1 models with Bonferroni-corrected δ / n_tests
    (``n_tests`` defaults to M − 1, the comparisons one candidate must win).
    """
    if len(scores) < 2:
        raise ValueError(f"most_invariant needs at least 2 models, got {len(scores)}")
    names = list(scores)
    k = n_tests if n_tests is not None else len(names) - 1
    if k < 1:
        raise ValueError(f"n_tests must be >= 1, got {k}")
    for cand in names:
        if all(
            hoeffding_test(
                scores[cand],
                scores[o],
                delta=delta / k,
                bounds=bounds,
                higher_is_more_invariant=higher_is_more_invariant,
            ).reject
            for o in names
            if o != cand
        ):
            return cand
    return None
