"""Invariance-metric ops: fused per-pair scores, the streamed pairwise log-sum-exp (per row, and over all pairs
for uniformity) and the exact k-nearest-neighbour search behind ACR."""

from __future__ import annotations

import math

import torch

from invfast import _loader, backend, dispatch

__all__ = [
    "pair_scores_reference",
    "sqdist_logsumexp_reference",
    "pairwise_logsumexp_reference",
    "knn_sqdist_reference",
    "pair_scores",
    "sqdist_logsumexp",
    "moments",
    "merge_moments",
    "merge_unit_moments_reference",
    "merge_unit_moments_",
    "pairwise_logsumexp",
    "pairwise_logsumexp_by_rows",
    "knn_sqdist",
]


@backend.register_reference("pair_scores")
def pair_scores_reference(
    z_ref: torch.Tensor, z_t: torch.Tensor, shift: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """z_ref [N, D], z_t [N, P, D], shift [D] -> (distance [N, P], cosine [N, P]) of the centred
    vectors ``z_ref[n] − shift`` and ``z_t[n, p] − shift``, float64 sums."""
    out_dtype = torch.float32 if z_t.dtype in (torch.float16, torch.bfloat16) else z_t.dtype
    c = shift.to(torch.float64)
    a = (z_ref.to(torch.float64) - c).unsqueeze(1)
    b = z_t.to(torch.float64) - c
    dist = torch.linalg.vector_norm(a - b, dim=-1)
    denom = torch.linalg.vector_norm(a, dim=-1) * torch.linalg.vector_norm(b, dim=-1)
    dot = (a * b).sum(-1)
    # a zero vector has cosine 0; a NaN/Inf one gives a NaN denominator and so a NaN cosine
    use = (denom > 0) | torch.isnan(denom)
    cos = torch.where(use, dot / torch.where(use, denom, torch.ones_like(denom)), torch.zeros_like(dot))
    return dist.to(out_dtype), cos.to(out_dtype)


@backend.register_reference("sqdist_logsumexp")
def sqdist_logsumexp_reference(rows: torch.Tensor, x: torch.Tensor, row_offset: int, scale: float) -> torch.Tensor:
    """rows [B, D], x [N, D] -> [B] float64 log-sum-exp of -scale*||rows_i - x_j||^2 over j != row_offset + i."""
    r = rows.to(torch.float64)
    xx = x.to(torch.float64)
    d2 = torch.cdist(r, xx).pow(2)
    v = -scale * d2
    idx = torch.arange(r.shape[0], device=r.device) + row_offset
    valid = idx < xx.shape[0]
    v[torch.arange(r.shape[0], device=r.device)[valid], idx[valid]] = float("-inf")
    return torch.logsumexp(v, dim=1)


@backend.register_reference("pairwise_logsumexp")
def pairwise_logsumexp_reference(x: torch.Tensor, scale: float, normalize: bool, block_rows: int) -> torch.Tensor:
    """x [N, D] -> float64 scalar ``log sum_{i<j} exp(-scale ||x^_i - x^_j||^2)`` (x^ = x / ||x|| when
    ``normalize``), in float64, ``block_rows`` rows at a time against the rows after them."""
    xx = x.to(torch.float64)
    if normalize:
        xx = torch.nn.functional.normalize(xx, dim=1)
    n = xx.shape[0]
    parts = []
    for s in range(0, n - 1, block_rows):
        e = min(n - 1, s + block_rows)
        v = torch.cdist(xx[s:e], xx[s:]).pow(2).mul(-scale)
        # only j > i: column c of this block is row s + c
        upper = torch.arange(n - s, device=xx.device)[None, :] > torch.arange(e - s, device=xx.device)[:, None]
        parts.append(torch.logsumexp(v.masked_fill(~upper, float("-inf")), dim=1))
    return torch.logsumexp(torch.cat(parts), dim=0)


@backend.register_reference("knn_sqdist")
def knn_sqdist_reference(
    x: torch.Tensor, k: int, normalize: bool, block_rows: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """x [N, D] -> (sqdist [N, k] float64, index [N, k] int64): the k nearest other rows of every row (squared
    Euclidean distance of x^, float64), ascending, ties by the lower index (a stable sort)."""
    xx = x.to(torch.float64)
    if normalize:
        xx = torch.nn.functional.normalize(xx, dim=1)
    n = xx.shape[0]
    dists, idxs = [], []
    for s in range(0, n, block_rows):
        e = min(n, s + block_rows)
        # differences, not the ||a||^2 + ||b||^2 - 2 a.b identity: exact for near-duplicate rows too
        d2 = torch.cdist(xx[s:e], xx, compute_mode="donot_use_mm_for_euclid_dist").pow(2)
        rows = torch.arange(e - s, device=xx.device)
        d2[rows, rows + s] = float("inf")
        d, i = torch.sort(d2, dim=1, stable=True)
        dists.append(d[:, :k])
        idxs.append(i[:, :k])
    return torch.cat(dists), torch.cat(idxs)


def pair_scores(z_ref: torch.Tensor, z_t: torch.Tensor, shift: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Distance and cosine between each ``z_ref[n] − shift`` and every ``z_t[n, p] − shift`` (compiled where the
    dispatch table says so)."""
    return backend.call("pair_scores", z_ref, z_t, shift)


def sqdist_logsumexp(rows: torch.Tensor, x: torch.Tensor, row_offset: int, scale: float) -> torch.Tensor:
    """rows [B, D], x [N, D] -> [B] float64 (see :func:`sqdist_logsumexp_reference`); compiled where the dispatch
    table says so (inputs that require grad take the reference: the kernel has no backward)."""
    fn = backend.compiled_for("sqdist_logsumexp", rows, x)
    if fn is None:
        return sqdist_logsumexp_reference(rows, x, row_offset, scale)
    return fn(rows, x, int(row_offset), float(scale))


def moments(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and sum of squared deviations (M2) of float64 ``x`` along ``dim`` (two passes, no cancellation)."""
    m = x.mean(dim, keepdim=True)
    return m.squeeze(dim), (x - m).square().sum(dim)


def merge_moments(
    n_a: int, mean_a: torch.Tensor, m2_a: torch.Tensor, n_b: int, mean_b: torch.Tensor, m2_b: torch.Tensor
) -> None:
    """Merge the moments of ``n_b`` more values (``mean_b``, ``m2_b``) into ``mean_a``, ``m2_a`` (of ``n_a``
    values) in place (Chan et al. 1979); shapes broadcast, ``n_a = 0`` takes ``b``'s."""
    n = n_a + n_b
    if n_b == 0:
        return
    delta = mean_b - mean_a
    mean_a += delta * (n_b / n)
    m2_a += m2_b + delta.square() * (n_a * n_b / n)


@backend.register_reference("merge_unit_moments_")
def merge_unit_moments_reference(
    u: torch.Tensor,
    mean_v: torch.Tensor,
    m2_v: torch.Tensor,
    n_v: int,
    mean_b: torch.Tensor,
    m2_b: torch.Tensor,
    n_b: int,
) -> None:
    """Merge the float64 moments of activations ``u [B, V, U]`` (images, views, units) over each image's views
    into the running ``mean_v``, ``m2_v [B, U]`` (of ``n_v`` views before) and over each view's images into
    ``mean_b``, ``m2_b [V, U]`` (of ``n_b`` images before), in place; M2 is the sum of squared deviations."""
    a = u.to(torch.float64)
    merge_moments(n_v, mean_v, m2_v, a.shape[1], *moments(a, 1))
    merge_moments(n_b, mean_b, m2_b, a.shape[0], *moments(a, 0))


def merge_unit_moments_(
    u: torch.Tensor,
    mean_v: torch.Tensor,
    m2_v: torch.Tensor,
    n_v: int,
    mean_b: torch.Tensor,
    m2_b: torch.Tensor,
    n_b: int,
) -> None:
    """:func:`merge_unit_moments_reference`, in one read of ``u`` and no torch op per call where the dispatch
    table picks the compiled kernel (the accumulators must then be contiguous); half precision is read as
    float32."""
    if u.dtype not in (torch.float32, torch.float64):
        u = u.float()
    backend.call("merge_unit_moments_", u, mean_v, m2_v, int(n_v), mean_b, m2_b, int(n_b))


def pairwise_logsumexp(x: torch.Tensor, scale: float, normalize: bool, block_rows: int) -> torch.Tensor:
    """``log sum_{i<j} exp(-scale ||x^_i - x^_j||^2)`` of x [N, D] (see :func:`pairwise_logsumexp_reference`):
    the compiled kernel where the dispatch table picks it (no backward: inputs that require grad take the
    reference); on a device without it whose per-row kernel the table picks (CUDA), row blocks through
    :func:`sqdist_logsumexp`; the torch reference otherwise."""
    if not dispatch.kernel_available("pairwise_logsumexp", x.device.type) and backend.compiled_for(
        "sqdist_logsumexp", x, x
    ):
        return pairwise_logsumexp_by_rows(x, scale, normalize, block_rows)
    fn = backend.compiled_for("pairwise_logsumexp", x)
    if fn is None:
        return pairwise_logsumexp_reference(x, scale, normalize, block_rows)
    return fn(x, float(scale), bool(normalize), int(block_rows))


def pairwise_logsumexp_by_rows(x: torch.Tensor, scale: float, normalize: bool, block_rows: int) -> torch.Tensor:
    """:func:`pairwise_logsumexp` from every row's sum over the others (:func:`sqdist_logsumexp`, ``block_rows``
    rows per call): each unordered pair counted twice, so ``log 2`` less. Float64 scalar."""
    if normalize:
        x = torch.nn.functional.normalize(x, dim=1)
    n = x.shape[0]
    parts = [sqdist_logsumexp(x[s : s + block_rows], x, s, scale) for s in range(0, n, block_rows)]
    return torch.logsumexp(torch.cat(parts), 0) - math.log(2.0)


def knn_sqdist(x: torch.Tensor, k: int, normalize: bool, block_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k nearest other rows of every row of x [N, D] (see :func:`knn_sqdist_reference`); compiled where the
    dispatch table says so."""
    return backend.call("knn_sqdist", x, int(k), bool(normalize), int(block_rows))


def _register_compiled() -> None:
    if _loader.load() is None:
        return

    @torch.library.register_fake("invfast::pair_scores")
    def _(z_ref, z_t, shift):
        out_dtype = torch.float32 if z_t.dtype in (torch.float16, torch.bfloat16) else z_t.dtype
        shape = (z_t.shape[0], z_t.shape[1])
        return z_t.new_empty(shape, dtype=out_dtype), z_t.new_empty(shape, dtype=out_dtype)

    @torch.library.register_fake("invfast::sqdist_logsumexp")
    def _(rows, x, row_offset, scale):
        return rows.new_empty((rows.shape[0],), dtype=torch.float64)

    @torch.library.register_fake("invfast::pairwise_logsumexp")
    def _(x, scale, normalize, block_rows):
        return x.new_empty((), dtype=torch.float64)

    @torch.library.register_fake("invfast::knn_sqdist")
    def _(x, k, normalize, block_rows):
        return x.new_empty((x.shape[0], k), dtype=torch.float64), x.new_empty((x.shape[0], k), dtype=torch.int64)

    @torch.library.register_fake("invfast::merge_unit_moments_")
    def _(u, mean_v, m2_v, n_v, mean_b, m2_b, n_b):
        return None

    def setup_context(ctx, inputs, output):
        z_ref, z_t, shift = inputs
        dist, cos = output
        ctx.save_for_backward(z_ref, z_t, shift, dist, cos)

    def backward(ctx, g_dist, g_cos):
        z_ref, z_t, shift, dist, cos = ctx.saved_tensors
        a = (z_ref - shift).unsqueeze(1)
        b = z_t - shift
        na = torch.linalg.vector_norm(a, dim=-1, keepdim=True)
        nb = torch.linalg.vector_norm(b, dim=-1, keepdim=True)
        diff = a - b
        safe_d = torch.where(dist > 0, dist, torch.ones_like(dist)).unsqueeze(-1)
        gd = torch.where(dist.unsqueeze(-1) > 0, diff / safe_d, torch.zeros_like(diff))
        g_a = torch.zeros_like(b)
        g_b = torch.zeros_like(b)
        if g_dist is not None:
            g_a = g_a + g_dist.unsqueeze(-1) * gd
            g_b = g_b - g_dist.unsqueeze(-1) * gd
        if g_cos is not None:
            ok = (na * nb) > 0
            inv = torch.where(ok, 1.0 / torch.where(ok, na * nb, torch.ones_like(na)), torch.zeros_like(na))
            c = cos.unsqueeze(-1)
            ga_c = b * inv - c * a / torch.where(na > 0, na * na, torch.ones_like(na))
            gb_c = a * inv - c * b / torch.where(nb > 0, nb * nb, torch.ones_like(nb))
            g_a = g_a + g_cos.unsqueeze(-1) * torch.where(ok, ga_c, torch.zeros_like(ga_c))
            g_b = g_b + g_cos.unsqueeze(-1) * torch.where(ok, gb_c, torch.zeros_like(gb_c))
        g_ref = g_a.sum(1)
        g_shift = -(g_ref.sum(0) + g_b.sum((0, 1))) if ctx.needs_input_grad[2] else None
        return g_ref.to(z_ref.dtype), g_b.to(z_t.dtype), g_shift

    torch.library.register_autograd("invfast::pair_scores", backward, setup_context=setup_context)


_register_compiled()
