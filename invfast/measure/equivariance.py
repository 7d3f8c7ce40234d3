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

FOLDS = 5  #: folds of the cross-validated fit (contiguous blocks of the image indices)
RIDGE = 1e-3  #: the fit's penalty relative to the training features' scale (see :func:`linear_equivariance`)

__all__ = [
    "back_maps",
    "FOLDS",
    "RIDGE",
    "linear_equivariance",
    "same_equivariance",
    "kfold",
    "fold_of",
    "fold_sums",
    "sums_bytes",
    "add_reference",
    "add_views",
    "fit_from_sums",
]


def kfold(n: int, folds: int) -> list[torch.Tensor]:
    """The test indices of ``folds`` contiguous folds of ``range(n)``, the first ``n % folds`` one longer
    (scikit-learn's ``KFold(folds)`` without shuffling)."""
    check_folds(folds, n)
    return list(torch.tensor_split(torch.arange(n, device="cpu"), folds))


def check_folds(folds: object, n: int) -> int:
    """``folds`` if it is an integer from 2 to ``n`` (the number of images), else one ValueError."""
    if isinstance(folds, bool) or not isinstance(folds, int) or not 2 <= folds <= n:
        raise ValueError(f"folds must be an integer from 2 to the number of images ({n}), got {folds!r}")
    return folds


def check_ridge(ridge: object) -> float:
    """``ridge`` as a float if it is a number >= 0, else one ValueError."""
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float)) or not ridge >= 0:
        raise ValueError(f"ridge must be a number >= 0, got {ridge!r}")
    return float(ridge)


def fold_of(index: torch.Tensor, n: int, folds: int) -> torch.Tensor:
    """The fold of each image index (int64, same shape) in the contiguous split :func:`kfold` makes of
    ``range(n)``."""
    small, extra = divmod(n, folds)
    big = extra * (small + 1)  # images in the first ``extra`` folds, one longer each
    index = index.long()
    return torch.where(index < big, index // (small + 1), extra + (index - big) // max(small, 1))


def fold_sums(folds: int, p: int, d: int, e: int, shift: torch.Tensor) -> dict[str, torch.Tensor]:
    """Zeroed sufficient statistics of the fit, per fold, float64 on ``shift``'s device: ``n [F]`` images,
    ``sx [F, D]``, ``sxx [F, D, D]`` of the reference features, ``sy [F, P, E]``, ``syy [F, P]`` (sums of
    squares) and ``sxy [F, P, D, E]`` of the views' features, all taken after subtracting ``shift [D]``
    (kept as ``shift``; any constant does, it only keeps the sums small)."""

    def z(*shape: int) -> torch.Tensor:
        return torch.zeros(*shape, dtype=torch.float64, device=shift.device)

    return {
        "shift": shift.double().clone(),
        "n": z(folds),
        "sx": z(folds, d),
        "sxx": z(folds, d, d),
        "sy": z(folds, p, e),
        "syy": z(folds, p),
        "sxy": z(folds, p, d, e),
    }


def sums_bytes(folds: int, p: int, d: int, e: int) -> int:
    """Bytes :func:`fold_sums` keeps (float64), dominated by ``sxy``: ``F x P x D x E x 8``."""
    return 8 * (folds * (1 + d + d * d + p * e + p + p * d * e) + d)


def _fold_rows(fold: torch.Tensor, device: torch.device) -> list[tuple[int, torch.Tensor]]:
    """``(f, the rows in fold f)`` for every fold present in ``fold [B]`` (on the host), the row indices copied to
    ``device``: selecting them there reads nothing back (a boolean mask on a device would, to size its result)."""
    return [(f, (fold == f).nonzero().flatten().to(device, non_blocking=True)) for f in torch.unique(fold).tolist()]


def add_reference(sums: dict[str, torch.Tensor], fold: torch.Tensor, x: torch.Tensor) -> None:
    """Add images' reference features ``x [B, D]`` (their folds ``fold [B]``) into ``sums``, in place."""
    x = x.double() - sums["shift"]
    for f, rows in _fold_rows(fold, x.device):
        xf = x.index_select(0, rows)
        sums["n"][f] += xf.shape[0]
        sums["sx"][f] += xf.sum(0)
        sums["sxx"][f] += xf.T @ xf


def add_views(
    sums: dict[str, torch.Tensor], fold: torch.Tensor, x: torch.Tensor, y: torch.Tensor, first: int = 0
) -> None:
    """Add the features ``y [B, c, E]`` of views ``first .. first + c`` of images with reference features
    ``x [B, D]`` (folds ``fold [B]``) into ``sums``, in place."""
    shift = sums["shift"]
    x = x.double() - shift
    y = y.double() - (shift if y.shape[-1] == shift.shape[0] else 0)
    b, c, e = y.shape
    for f, rows in _fold_rows(fold, x.device):
        xf, yf = x.index_select(0, rows), y.index_select(0, rows)
        sums["sy"][f, first : first + c] += yf.sum(0)
        sums["syy"][f, first : first + c] += yf.square().sum((0, 2))
        sums["sxy"][f, first : first + c] += (xf.T @ yf.reshape(-1, c * e)).view(-1, c, e).transpose(0, 1)


def fit_from_sums(sums: dict[str, torch.Tensor], ridge: float = RIDGE) -> torch.Tensor:
    """The cross-validated R² of :func:`linear_equivariance` from the fold sums (:func:`fold_sums`): for each
    fold, the ridge map fitted on the other folds' sums; its held-out squared error expanded in the fold's
    own sums. float64 ``[P]``, NaN where the views do not vary."""
    ridge = check_ridge(ridge)
    n_f, sx, sxx, sy, syy, sxy = (sums[k] for k in ("n", "sx", "sxx", "sy", "syy", "sxy"))
    n_all = n_f.sum()
    d = sx.shape[1]
    res = torch.zeros_like(syy[0])
    for f in range(n_f.shape[0]):
        if not n_f[f] > 0:
            continue
        nt = n_all - n_f[f]
        mx = (sx.sum(0) - sx[f]) / nt  # [D]
        my = (sy.sum(0) - sy[f]) / nt  # [P, E]
        gram = sxx.sum(0) - sxx[f] - nt * torch.outer(mx, mx)
        cxy = sxy.sum(0) - sxy[f] - nt * mx[None, :, None] * my[:, None, :]  # [P, D, E]
        if ridge > 0:
            alpha = ridge * float(torch.trace(gram)) / d
            w = torch.linalg.solve(gram + alpha * torch.eye(d, dtype=gram.dtype, device=gram.device), cxy)
        else:
            w = torch.linalg.pinv(gram, hermitian=True) @ cxy
        b = my - torch.einsum("d,pde->pe", mx, w)  # [P, E]: the intercept
        # sum over the fold's images of ||y - x W - b||², from its sums alone
        cross = torch.einsum("pde,pde->p", w, sxy[f]) + torch.einsum("pe,pe->p", b, sy[f])
        quad = torch.einsum("pde,dk,pke->p", w, sxx[f], w) + 2 * torch.einsum("pe,d,pde->p", b, sx[f], w)
        res += syy[f] - 2 * cross + quad + n_f[f] * b.square().sum(1)
    raw = syy.sum(0)
    tot = raw - sy.sum(0).square().sum(1) / n_all
    varies = tot > 1e-12 * raw  # not rounding noise of views that do not vary
    return torch.where(varies, 1 - res / tot.clamp_min(1e-300), torch.full_like(tot, float("nan")))


def linear_equivariance(
    reference: torch.Tensor, transformed: torch.Tensor, *, folds: int = FOLDS, ridge: float = RIDGE
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
        ``cross_val_predict``); NaN where the views do not vary. Computed from per-fold sums
        (:func:`fold_sums`, :func:`fit_from_sums`), as the streamed measurement computes it.
    """
    if reference.dim() != 2 or transformed.dim() != 3 or transformed.shape[0] != reference.shape[0]:
        raise ValueError(
            f"reference must be [N, D] and transformed [N, P, D'] with the same N, got {tuple(reference.shape)} "
            f"and {tuple(transformed.shape)}"
        )
    check_ridge(ridge)
    for label, t in (("reference", reference), ("transformed", transformed)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"{label} holds NaN/Inf features; the fit needs finite ones (nothing is dropped silently)")
    n, p, e = transformed.shape
    check_folds(folds, n)
    x = reference.double()
    sums = fold_sums(folds, p, x.shape[1], e, x.mean(0))
    fold = fold_of(torch.arange(n, device="cpu"), n, folds)  # on the host: the folds are read as numbers
    y = transformed.double()
    if e != x.shape[1]:  # the shift is for y too when it has x's size; otherwise centre y on its own
        y = y - y.mean((0, 1))
    add_reference(sums, fold, x)
    add_views(sums, fold, x, y)
    return fit_from_sums(sums, ridge)


def back_maps(matrix: torch.Tensor, image_hw: tuple[int, int], map_hw: tuple[int, int]) -> torch.Tensor:
    """The sampling maps that bring a layer's feature maps of the transformed views back to the image's frame.

    Args:
        matrix: float64 ``[P, 2, 3]``, the transform's sampling maps at the image size: output pixel ``o = (x, y)``
            of view ``p`` samples the image at ``matrix[p] @ (x, y, 1)`` (pixel-centre coordinates; as
            :func:`invfast.transforms.affine.affine_maps` gives them).
        image_hw: ``(H, W)`` of the model input; ``map_hw``: ``(h, w)`` of the layer's feature maps (pixel centres
            aligned: ``x_image = (x_map + 0.5) W / w - 0.5``).

    Returns:
        float64 ``[P, 2, 3]``: position ``q`` of the mapped-back map samples the view's feature map at
        ``back[p] @ (q, 1)``, the transform's forward map expressed in feature-map pixels (the inverse of
        ``matrix[p]`` there), so a representation that moves with the image maps back onto the image's own.
    """
    (H, W), (h, w) = image_hw, map_hw
    m = matrix.to(torch.float64)
    s = torch.tensor([W / w, H / h], dtype=torch.float64, device=m.device)  # map pixel -> image pixel scale (x, y)
    b = 0.5 * s - 0.5
    a = m[:, :, :2]
    a_map = a * s[None, None, :] / s[None, :, None]  # S^-1 A S
    d_map = (torch.einsum("pij,j->pi", a, b) + m[:, :, 2] - b) / s  # S^-1 (A b + d - b)
    inv = torch.linalg.inv(a_map)
    return torch.cat([inv, -torch.einsum("pij,pj->pi", inv, d_map).unsqueeze(-1)], dim=-1)


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
