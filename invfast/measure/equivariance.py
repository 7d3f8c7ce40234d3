"""How well a transform acts on a representation: equivariance measures as pure functions of features.

A representation ``g`` is equivariant to a transform ``t`` when ``g(t x) = u(g(x))`` for some map ``u`` that
is not constant (Speicher et al., "Invariance makes a difference"; invariance is the case ``u = id``).

- :func:`linear_equivariance`: the cross-validated R² of the best affine map ``u`` (ridge regression,
  closed form) from the features of the images to the features of their transformed views, one R² per grid
  parameter: 1 = the transform acts on the representation as a linear map, 0 = no better than the mean.
- :func:`same_equivariance`: tmeasures's same-equivariance (``NormalizedVarianceSameEquivariance``, tmeasures
  1.2.11, ``tmeasures/pytorch/variance_sameequivariance.py``): each view's feature maps are mapped back by
  the inverse transform (tmeasures: ``F.grid_sample`` of the inverse affine matrix, bilinear, border padding,
  on every ``[C, H, W]`` map; it has no meaning for ``[D]`` vectors) and the normalized variance of the
  result is taken per C x H x W element (:func:`invfast.measure.units.normalized_variance`): 0 = the maps
  move exactly with the image.

Both run on the device of their inputs, in float64.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from invfast.measure.units import normalized_variance

__all__ = ["linear_equivariance", "same_equivariance", "kfold"]


def kfold(n: int, folds: int) -> list[torch.Tensor]:
    """The test indices of ``folds`` contiguous folds of ``range(n)``, the first ``n % folds`` one longer
    (scikit-learn's ``KFold(folds)`` without shuffling)."""
    if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= n:
        raise ValueError(f"folds must be an integer from 2 to the number of images ({n}), got {folds!r}")
    return list(torch.tensor_split(torch.arange(n), folds))


def linear_equivariance(
    reference: torch.Tensor, transformed: torch.Tensor, *, folds: int = 5, ridge: float = 1e-3
) -> torch.Tensor:
    """Cross-validated R² of the best affine map from ``reference`` to each view's features.

    Args:
        reference: features of the images ``[N, D]``.
        transformed: features of their views ``[N, P, D']`` (one per grid parameter; ``D'`` may differ).
        folds: k of the k-fold split over images (contiguous, :func:`kfold`).
        ridge: the penalty relative to the training fold's scale: ``alpha = ridge * tr(Xc^T Xc) / D`` (Xc the
            centred training features), so the fit does not depend on the features' units; 0 = least squares
            (minimum-norm where it is not unique).

    Returns:
        float64 ``[P]``: for each parameter, ``1 - sum ||y - u(x)||² / sum ||y - mean y||²`` over every held-out
        image (each predicted by the map fitted on the other folds, intercept included), the mean taken over
        all N images (scikit-learn's ``r2_score(..., multioutput='variance_weighted')`` of
        ``cross_val_predict``); NaN where the views do not vary.
    """
    if reference.dim() != 2 or transformed.dim() != 3 or transformed.shape[0] != reference.shape[0]:
        raise ValueError(
            f"reference must be [N, D] and transformed [N, P, D'] with the same N, got {tuple(reference.shape)} "
            f"and {tuple(transformed.shape)}"
        )
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not ridge >= 0:
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}")
    n, p, d_out = transformed.shape
    x = reference.double()
    y = transformed.double().reshape(n, p * d_out)
    pred = torch.empty_like(y)
    for test in kfold(n, folds):
        train = torch.ones(n, dtype=torch.bool, device=x.device)
        train[test.to(x.device)] = False
        xt, yt = x[train], y[train]
        mx, my = xt.mean(0), yt.mean(0)
        xc, yc = xt - mx, yt - my
        gram = xc.T @ xc
        if ridge > 0:
            alpha = ridge * float(torch.trace(gram)) / x.shape[1]
            eye = torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
            w = torch.linalg.solve(gram + alpha * eye, xc.T @ yc)
        else:
            w = torch.linalg.pinv(xc) @ yc
        idx = test.to(x.device)
        pred[idx] = (x[idx] - mx) @ w + my
    res = (y - pred).square().reshape(n, p, d_out).sum((0, 2))
    tot = (y - y.mean(0)).square().reshape(n, p, d_out).sum((0, 2))
    return torch.where(tot > 0, 1 - res / tot.clamp_min(1e-300), torch.full_like(tot, float("nan")))


def same_equivariance(
    acts: torch.Tensor, inverse: Callable[[torch.Tensor, int], torch.Tensor] | None = None
) -> torch.Tensor:
    """tmeasures's same-equivariance of every C x H x W element: the normalized variance (ratio of standard
    deviations, ddof 1; NaN where the denominator is 0, tmeasures: 1 or inf) of the feature maps after each
    view is mapped back by its inverse transform.

    Args:
        acts: feature maps ``[N, V, C, H, W]`` of ``N`` images under ``V`` views.
        inverse: ``inverse(maps [N, C, H, W], v)`` -> the maps of view ``v`` mapped back by the inverse of
            that view's transform (an exact inverse for rotations by 90° or flips; tmeasures resamples
            bilinearly); None when ``acts`` are mapped back already.

    Returns:
        float64 ``[C*H*W]`` (C, H, W order): 0 = the representation moves exactly as the image does.
    """
    if acts.dim() != 5:
        raise ValueError(
            f"same-equivariance needs feature maps [N, V, C, H, W] (tmeasures maps [C, H, W] back), got "
            f"{tuple(acts.shape)}"
        )
    if inverse is not None:
        acts = torch.stack([inverse(acts[:, v], v) for v in range(acts.shape[1])], 1)
    return normalized_variance(acts.flatten(2))
