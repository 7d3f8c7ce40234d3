"""The per-unit measures of the per-layer literature, streamed: what a unit is, the float64 moments kept for
every unit, and the normalized variance of ``tmeasures`` (F. Quiroga's pip package, version 1.2.11:
``tmeasures.pytorch.NormalizedVarianceInvariance``) computed from them.

A *unit* is one channel of a layer after global average pooling (``units="channels"``, invfast's default) or
every single activation of the layer, ``C x H x W`` of them (``units="elements"``, tmeasures's default:
``NoTransformation``). For a transform with ``V`` views (its grid, the identity included once) of ``N``
images, activations ``a [N, V, U]`` (float64):

- the normalized variance of unit ``u`` is ``mean_n std_v a[n, :, u] / mean_v std_n a[:, v, u]`` with
  sample standard deviations (``ddof = 1``; one value gives 0, as tmeasures's running variance does):
  0 = invariant, about 1 = the transform moves the unit as much as a change of image does. A unit whose
  denominator is 0 (constant over images: a dead unit) is NaN here; tmeasures scores it 1 when the numerator
  is 0 too, +inf otherwise (``tmeasures.pytorch.quotient.safe_divide``), and its layer mean averages the
  finite values, so its layer mean counts dead units as 1 where invfast's leaves them out;
- the variance ratio (invfast's measure before issue 42) is ``mean_n var_v / mean_v var_n`` with
  ``ddof = 0``: the same idea with variances.

Nothing here needs ``N`` activations at once: the moments are merged batch by batch (Chan, Golub and LeVeque's
pairwise update: :func:`invfast.ops.invariance.merge_unit_moments_`), so memory is ``O(V x U)`` per layer
whatever ``N``.
"""

from __future__ import annotations

import torch

from invfast.ops.invariance import moments

__all__ = [
    "UNITS",
    "check_units",
    "sample_std",
    "ratio_of_means",
    "normalized_variance",
    "variance_ratio",
]

#: what a unit of a layer is: a pooled channel, or every C x H x W activation
UNITS = ("channels", "elements")


def check_units(units: object) -> str:
    """``units`` if it is one of :data:`UNITS`, else one ValueError naming the choices."""
    if not isinstance(units, str) or units not in UNITS:
        raise ValueError(
            f"units must be 'channels' (each channel after global pooling) or 'elements' (every C x H x W "
            f"activation of a layer as its own unit), got {units!r}"
        )
    return units


def sample_std(m2: torch.Tensor, n: int) -> torch.Tensor:
    """Sample standard deviation (``ddof = 1``) from M2 of ``n`` values; 0 for ``n <= 1`` (tmeasures's
    ``RunningMeanAndVarianceWelford.var``)."""
    if n <= 1:
        return torch.zeros_like(m2)
    return (m2.clamp_min(0) / (n - 1)).sqrt()


def ratio_of_means(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num / den`` per unit, NaN where ``den`` is not > 0 (a unit constant over images)."""
    return torch.where(den > 0, num / den.clamp_min(1e-300), torch.full_like(den, float("nan")))


def normalized_variance(acts: torch.Tensor) -> torch.Tensor:
    """tmeasures's normalized variance of every unit, straight from activations ``acts [N, V, U]`` (images,
    views, units; float64 advised): ``[U]``, NaN where the denominator is 0. The reference that the streamed
    measurement (:attr:`invfast.measure.result.TransformResult.unit_normalized_variance`) equals."""
    a = acts.double()
    n, v = a.shape[0], a.shape[1]
    num = sample_std(moments(a, 1)[1], v).mean(0)
    den = sample_std(moments(a, 0)[1], n).mean(0)
    return ratio_of_means(num, den)


def variance_ratio(acts: torch.Tensor) -> torch.Tensor:
    """The variance ratio of every unit from ``acts [N, V, U]``: mean over images of the variance over views
    over the mean over views of the variance over images (``ddof = 0``); ``[U]``, NaN where the latter is 0."""
    a = acts.double()
    return ratio_of_means(a.var(1, correction=0).mean(0), a.var(0, correction=0).mean(0))
