"""Invariance metrics (Ericsson et al. 2021, App. C; Wang & Isola 2020; Speicher et al.): Mahalanobis distance,
standardised cosine, their aggregates, alignment, uniformity, ACR, sensitivity ratio and class distance ratio."""

from __future__ import annotations

import math
from typing import Any

import torch

from invfast._validate import as_features, as_labels, check_finite, compiling
from invfast.ops.invariance import knn_sqdist, pair_scores, pairwise_logsumexp
from invfast.stats import FeatureStats, upper_mm

__all__ = [
    "invariance_scores",
    "whiten_rows",
    "scores_of_whitened",
    "mahalanobis",
    "standardized_cosine",
    "aggregate_scores",
    "alignment",
    "pair_block_rows",
    "uniformity",
    "acr",
    "sensitivity_ratio",
    "class_distance_ratio",
]

_CHUNK_BYTES = 32 << 20


def _check_pair(f_ref: torch.Tensor, f_t: torch.Tensor, stats: FeatureStats, nan_policy: str):
    if not isinstance(stats, FeatureStats):
        raise TypeError(f"stats must be a FeatureStats, got {type(stats).__name__}")
    if nan_policy not in ("raise", "propagate"):
        raise ValueError(f"nan_policy must be 'raise' or 'propagate', got {nan_policy!r}")
    # finiteness is checked on the scores (a NaN/Inf feature always makes its pair's scores non-finite),
    # which costs nothing next to a pass over f_t
    f_ref = as_features(f_ref, "f_ref", ndim=2, finite=False)
    f_t = as_features(f_t, "f_t", ndim=None, finite=False)
    squeeze = f_t.dim() == 2
    if squeeze:
        f_t = f_t.unsqueeze(1)
    if f_t.dim() != 3:
        raise ValueError(f"f_t must be [N, D] or [N, P, D], got shape {tuple(f_t.shape)}")
    if f_ref.shape[0] != f_t.shape[0]:
        raise ValueError(f"f_ref has N={f_ref.shape[0]} rows but f_t has N={f_t.shape[0]}; pair them row by row")
    if f_ref.shape[0] == 0:
        raise ValueError("f_ref and f_t hold N=0 images; give at least one")
    if f_t.shape[1] == 0:
        raise ValueError("f_t has P=0 transformation parameters; give at least one")
    if f_ref.shape[1] != f_t.shape[2]:
        raise ValueError(f"f_ref has D={f_ref.shape[1]} but f_t has D={f_t.shape[2]}")
    if stats.dim != f_ref.shape[1]:
        raise ValueError(f"features have D={f_ref.shape[1]} but stats were accumulated with D={stats.dim}")
    if stats.whitener_ is None:
        raise ValueError("stats is not finalized: call stats.finalize() first")
    return f_ref, f_t, squeeze


def invariance_scores(
    f_ref: torch.Tensor, f_t: torch.Tensor, stats: FeatureStats, *, nan_policy: str = "raise", precision: str = "auto"
) -> dict[str, torch.Tensor]:
    """Per-pair Mahalanobis distance and standardised cosine (Ericsson eq. C.1-C.3).

    Args:
        f_ref: [N, D] features of the untransformed images.
        f_t: [N, P, D] features of each image under P transformation parameters ([N, D] for P = 1).
        stats: finalized reference :class:`FeatureStats`.
        nan_policy: 'raise' (default) or 'propagate' (NaN features give NaN scores).
        precision: 'auto' (float64 inputs whiten in float64, others in float32) or 'float64'.

    Returns:
        {'distance': [N, P], 'cosine': [N, P]} ([N] each when f_t was [N, D]). Whitening is one
        GEMM per chunk of rows with ``C⁻¹``; the reduction is one fused pass (float64 sums).
    """
    f_ref, f_t, squeeze = _check_pair(f_ref, f_t, stats, nan_policy)
    if precision not in ("auto", "float64"):
        raise ValueError(f"precision must be 'auto' or 'float64', got {precision!r}")
    dtype = torch.float64 if (precision == "float64" or f_t.dtype == torch.float64) else torch.float32
    dist, cos = scores_of_whitened(whiten_rows(f_ref, stats, dtype), f_t, stats)
    if nan_policy == "raise" and compiling():  # inside the graph: one device assert, no host read
        check_finite(torch.stack([dist, cos]), "invariance_scores: the features or the scores are NaN/Inf")
    elif nan_policy == "raise" and not bool(torch.isfinite(dist).all() & torch.isfinite(cos).all()):
        # NaN/Inf anywhere in a pair's features makes its scores non-finite: name the culprit
        as_features(f_ref, "f_ref", ndim=2)
        as_features(f_t, "f_t", ndim=3)
        raise ValueError(
            "the scores overflowed to Inf/NaN although the features are finite; the features are too "
            "large for float32 whitening: pass precision='float64'"
        )
    if squeeze:
        dist, cos = dist[:, 0], cos[:, 0]
    return {"distance": dist, "cosine": cos}


def whiten_rows(f: torch.Tensor, stats: FeatureStats, dtype: torch.dtype) -> torch.Tensor:
    """``f W`` for features ``f [N, D]`` in ``dtype``: the rows whitened but not yet centred (the centring,
    ``− mean W``, happens inside :func:`scores_of_whitened`'s fused reduction). ValueError when the
    statistics are of another number of features (another model or layer)."""
    if f.shape[-1] != stats.dim:
        raise ValueError(
            f"the features have D={f.shape[-1]} dimensions but the reference statistics have D={stats.dim}: "
            "they come from another model or layer; give the statistics of this model and layer"
        )
    w, _ = stats.whitening(dtype, f.device)
    return upper_mm(f.to(dtype), w)


def scores_of_whitened(
    z_ref: torch.Tensor, f_t: torch.Tensor, stats: FeatureStats
) -> tuple[torch.Tensor, torch.Tensor]:
    """(distance, cosine) ``[N, P]`` of the views ``f_t [N, P, D]`` against references whitened by
    :func:`whiten_rows` (``z_ref [N, D]``, in the dtype the views are whitened in). A caller that scores one
    reference batch against several chunks of views whitens the references once. Non-finite features give
    non-finite scores. Whitening is one GEMM per chunk of rows; the reduction is one fused pass (float64 sums)."""
    n, p, d = f_t.shape
    w, shift = stats.whitening(z_ref.dtype, f_t.device)
    rows = max(1, _CHUNK_BYTES // max(1, p * d * z_ref.element_size()))
    outs_d, outs_c = [], []
    for s in range(0, n, rows):
        e = min(n, s + rows)
        z_t = upper_mm(f_t[s:e].reshape(-1, d).to(w.dtype), w).view(e - s, p, d)
        dd, cc = pair_scores(z_ref[s:e], z_t, shift)
        outs_d.append(dd)
        outs_c.append(cc)
    return (torch.cat(outs_d), torch.cat(outs_c)) if len(outs_d) > 1 else (outs_d[0], outs_c[0])


def mahalanobis(f_ref: torch.Tensor, f_t: torch.Tensor, stats: FeatureStats, **kw: Any) -> torch.Tensor:
    """``‖C⁻¹(f_ref − f_t)‖`` per pair: [N] for f_t [N, D], [N, P] for f_t [N, P, D]. Low = invariant."""
    return invariance_scores(f_ref, f_t, stats, **kw)["distance"]


def standardized_cosine(f_ref: torch.Tensor, f_t: torch.Tensor, stats: FeatureStats, **kw: Any) -> torch.Tensor:
    """Cosine between whitened features per pair: [N] or [N, P]. 1 = invariant."""
    return invariance_scores(f_ref, f_t, stats, **kw)["cosine"]


def aggregate_scores(
    scores: torch.Tensor, identity: torch.Tensor | None = None, *, nan_policy: str = "raise"
) -> dict[str, Any]:
    """Summaries of per-pair scores ``[N, P]`` (Ericsson et al. 2021, eq. C.4).

    Returns 'mean' (over images and non-identity parameters), 'per_param' [P] (mean over images),
    'per_image' [N] (mean over non-identity parameters), 'identity_mean' (mean over identity
    parameters, None when there are none). ``identity`` is a bool mask [P] of identity parameters.
    ``nan_policy='omit'`` ignores NaN scores explicitly; 'raise' (default) refuses them.
    """
    s = as_features(scores, "scores", ndim=2, finite=False).to(torch.float64)
    if nan_policy not in ("raise", "omit"):
        raise ValueError(f"nan_policy must be 'raise' or 'omit', got {nan_policy!r}")
    if nan_policy == "raise" and bool(torch.isnan(s).any()):
        raise ValueError("scores contain NaN; pass nan_policy='omit' to ignore them explicitly")
    p = s.shape[1]
    mask = (
        torch.zeros(p, dtype=torch.bool, device=s.device)
        if identity is None
        else torch.as_tensor(identity, dtype=torch.bool, device=s.device)
    )
    if mask.shape != (p,):
        raise ValueError(f"identity must be a bool mask of shape [{p}], got {tuple(mask.shape)}")
    if bool(mask.all()):
        raise ValueError("every parameter is marked identity; nothing left to average")
    keep = s[:, ~mask]
    return {
        "mean": float(torch.nanmean(keep)),
        "per_param": torch.nanmean(s, dim=0),
        "per_image": torch.nanmean(keep, dim=1),
        "identity_mean": float(torch.nanmean(s[:, mask])) if bool(mask.any()) else None,
    }


def alignment(a: torch.Tensor, b: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    """``E ‖â − b̂‖^α`` over paired rows of ``a, b [N, D]`` after L2 normalisation (Wang & Isola)."""
    a = as_features(a, "a")
    b = as_features(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[0] == 0:
        raise ValueError("a and b are empty")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    an = torch.nn.functional.normalize(a.to(torch.float64), dim=1)
    bn = torch.nn.functional.normalize(b.to(torch.float64), dim=1)
    return torch.linalg.vector_norm(an - bn, dim=1).pow(alpha).mean()


#: bytes of the [block_rows, N] tile of inner products the all-pairs kernels hold at once
_PAIR_TILE_BYTES = 32 << 20
#: at most this many rows per block: uniformity's kernel computes each block against the rows after it, so
#: smaller blocks skip more of the lower triangle (the GEMM does N^2/2 + N * block_rows / 2 inner products)
_PAIR_BLOCK_MAX = 256


def pair_block_rows(n: int, itemsize: int) -> int:
    """Rows per block of the all-pairs kernels (uniformity, ACR) for N = ``n`` rows of ``itemsize`` bytes: the
    [block_rows, N] tile of inner products stays within 32 MiB, so memory is O(block_rows * N), never O(N^2)."""
    return max(1, min(n, _PAIR_BLOCK_MAX, _PAIR_TILE_BYTES // (itemsize * n)))


def uniformity(
    x: torch.Tensor, t: float = 2.0, *, normalize: bool = True, block_rows: int | None = None
) -> torch.Tensor:
    """``log E_{i≠j} exp(−t ‖x̂_i − x̂_j‖²)`` over all ordered pairs (Wang & Isola), streamed in row blocks.

    ``x [N, D]``; x̂ = x / ‖x‖ when ``normalize``. Returns a float64 scalar. Memory is O(block_rows · N) (default
    :func:`pair_block_rows`); the N×N matrix is never formed. On CPU the compiled kernel takes each block's
    inner products from one GEMM in the dtype of x (float32 or float64) against the rows after it (i < j: half
    the pairs, the other half by symmetry), the squared distances and the log-sum-exp in float64, and recomputes
    near-duplicate pairs exactly; its error against float64 is at most ``2 t D u / (1 − D u)`` for normalised
    rows (u = 2⁻²⁴ for float32 input, 2⁻⁵³ for float64; 3.1e-5 at t = 2, D = 128 in float32), see
    csrc/invariance/pairwise_cpu.cpp. On CUDA the per-row kernel serves where the dispatch table picks it
    (:func:`invfast.ops.invariance.pairwise_logsumexp` decides); elsewhere the float64 torch reference.
    """
    x = as_features(x, "x")
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"uniformity needs at least 2 samples, got {n}")
    if not t > 0:
        raise ValueError(f"t must be > 0, got {t}")
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()
    if block_rows is not None and block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    rows = block_rows or pair_block_rows(n, x.element_size())
    # the sum over i < j counts each unordered pair once; the ordered pairs i != j count it twice
    return pairwise_logsumexp(x, t, normalize, rows) + math.log(2.0 / (n * (n - 1)))


def acr(views: torch.Tensor, k: int = 10, *, block_rows: int | None = None) -> float:
    """Average confusion ratio (Wang et al., ICLR 2022) of ``views [N, C, D]``.

    Every view is an anchor; among its ``k`` nearest other views (Euclidean, on L2-normalised
    features, over all N·C views) count those that come from a different image. ACR is the mean
    of that count over ``k``: 0 = the views of each image cluster together, 1 = total confusion.
    ``k = 1`` is the nearest-neighbour form of the authors' code. The neighbours are exact in float64 (ties go
    to the lower view index); memory O(block_rows · N·C) (default :func:`pair_block_rows`).
    """
    v = as_features(views, "views", ndim=3)
    n, c, d = v.shape
    if n < 2 or c < 1:
        raise ValueError(f"views must be [N >= 2, C >= 1, D], got {tuple(v.shape)}")
    if not 1 <= k <= n * c - 1:
        raise ValueError(f"k must be in [1, {n * c - 1}], got {k}")
    if block_rows is not None and block_rows < 1:
        raise ValueError(f"block_rows must be >= 1, got {block_rows}")
    flat = v.reshape(n * c, d)
    if flat.dtype not in (torch.float32, torch.float64):
        flat = flat.float()
    _, idx = knn_sqdist(flat, k, True, block_rows or pair_block_rows(n * c, flat.element_size()))
    owner = torch.arange(n, device=v.device).repeat_interleave(c)
    confused = (owner[idx] != owner[:, None]).sum()  # summed on the device, read once
    return int(confused) / (n * c * k)


def sensitivity_ratio(g_x: torch.Tensor, g_x2: torch.Tensor, *, n_pairs: int = 10_000, seed: int = 0) -> float:
    """Speicher's sensitivity ``E‖g(x) − g(x′)‖ / E‖g(a) − g(b)‖``; lower = more invariant.

    ``g_x, g_x2 [N, D]``: features of samples that differ only in the sampled transformation.
    ``(a, b)`` are ``n_pairs`` random pairs of distinct rows of ``g_x`` (b = a + U{1..N−1} mod N,
    never a sample with itself). The numerator averages over ``n_pairs`` rows drawn with the
    same seeded generator (all rows when N ≤ n_pairs).
    """
    g_x = as_features(g_x, "g_x")
    g_x2 = as_features(g_x2, "g_x2")
    if g_x.shape != g_x2.shape:
        raise ValueError(f"g_x and g_x2 must have the same shape, got {tuple(g_x.shape)} and {tuple(g_x2.shape)}")
    n = g_x.shape[0]
    if n < 2:
        raise ValueError(f"sensitivity_ratio needs at least 2 samples, got {n}")
    if n_pairs < 1:
        raise ValueError(f"n_pairs must be >= 1, got {n_pairs}")
    # pairs drawn on the CPU (the same pairs for every device), moved once
    cpu = torch.device("cpu")
    gen = torch.Generator(device=cpu).manual_seed(seed)
    rows = torch.arange(n, device=cpu) if n <= n_pairs else torch.randperm(n, generator=gen, device=cpu)[:n_pairs]
    a = torch.randint(0, n, (n_pairs,), generator=gen, device=cpu)
    b = (a + torch.randint(1, n, (n_pairs,), generator=gen, device=cpu)) % n
    rows, a, b = rows.to(g_x.device), a.to(g_x.device), b.to(g_x.device)
    x64, x264 = g_x.to(torch.float64), g_x2.to(torch.float64)
    num = torch.linalg.vector_norm(x64[rows] - x264[rows], dim=1).mean()
    den = torch.linalg.vector_norm(x64[a] - x64[b], dim=1).mean()
    if den == 0:
        raise ValueError("all random pairs have identical features (denominator 0); the features are constant")
    return float(num / den)


def class_distance_ratio(x: torch.Tensor, y: torch.Tensor, *, block_rows: int = 2048) -> float:
    """Mean L2 distance between samples of different classes over the mean distance within a class
    (all pairs, self-pairs excluded). Higher = classes easier to separate."""
    x = as_features(x, "x")
    y = as_labels(y, "y", n=x.shape[0]).to(x.device)
    if int(y.unique().numel()) < 2:
        raise ValueError("class_distance_ratio needs at least 2 classes in y")
    xf = x.to(torch.float64)
    n = xf.shape[0]
    # [within, n_within, between, n_between], summed on the device and read once after the loop
    acc = torch.zeros(4, dtype=torch.float64, device=x.device)
    for s in range(0, n, block_rows):
        e = min(n, s + block_rows)
        dist = torch.cdist(xf[s:e], xf)
        same = y[s:e, None] == y[None, :]
        rows = torch.arange(e - s, device=x.device)
        same[rows, rows + s] = False
        diff = y[s:e, None] != y[None, :]
        acc += torch.stack(
            [(dist * same).sum(), same.sum().to(torch.float64), (dist * diff).sum(), diff.sum().to(torch.float64)]
        )
    within, n_within, between, n_between = acc.tolist()
    if n_within == 0:
        raise ValueError("every class has a single sample: no within-class pairs to compare against")
    return (between / n_between) / (within / n_within)
