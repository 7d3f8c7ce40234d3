"""Streaming reference statistics of features: mean, covariance, shrinkage, Cholesky whitening.

All sums are float64 and mergeable (Chan et al. pairwise update, extended to the fourth
moment that Ledoit-Wolf needs), so batches, shards and ranks combine exactly.
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any

import torch

from invfast._validate import as_features
from invfast.intra_op import serial_if_small

__all__ = ["MAX_COUNT", "FeatureStats", "upper_mm"]

_SHRINKAGE = ("trace", "ledoit-wolf", "none")


#: the largest sample count whose sums float64 holds exactly (2**53): a larger one cannot come from a real run
MAX_COUNT = 2**53


def _check_moments(n: int, m2: torch.Tensor, m3: torch.Tensor, m4: torch.Tensor) -> None:
    """Raise ValueError where saved central moments cannot come from any n samples: a count beyond
    :data:`MAX_COUNT`; m2 = Σ c cᵀ not symmetric positive semi-definite; m4 = Σ ‖c‖⁴ outside
    [tr(m2)² / n, tr(m2)²]; |m3_j| = |Σ ‖c‖² c_j| above sqrt(m4 · m2_jj) (Cauchy–Schwarz). Tolerances are
    relative (1e-6), for float64 sums."""
    bad = "the FeatureStats state is impossible ({}): the file is damaged or was edited; recompute the statistics"
    if n > MAX_COUNT:
        raise ValueError(bad.format(f"a sample count of {n} exceeds {MAX_COUNT}, the most float64 sums count exactly"))
    scale = float(m2.abs().max()) if m2.numel() else 0.0
    tol = 1e-6 * max(scale, 1e-300)
    if float((m2 - m2.T).abs().max()) > tol:
        raise ValueError(bad.format("the second moments m2 are not symmetric"))
    if m2.shape[0] and float(torch.linalg.eigvalsh((m2 + m2.T) / 2).min()) < -tol:
        raise ValueError(bad.format("the second moments m2 have a negative eigenvalue (a variance below 0)"))
    tr, q = float(torch.trace(m2)), float(m4)
    if q < -1e-6 * max(tr * tr, 1e-300):
        raise ValueError(bad.format(f"the fourth moment m4 = {q:.6g} is negative"))
    if n >= 1 and not (tr * tr / n * (1 - 1e-6) <= q * (1 + 1e-6) and q <= tr * tr * (1 + 1e-6) + 1e-300):
        raise ValueError(bad.format(f"the fourth moment m4 = {q:.6g} lies outside [tr(m2)²/n, tr(m2)²] for n = {n}"))
    bound = torch.sqrt(torch.clamp(torch.diagonal(m2), min=0) * max(q, 0.0))
    if bool((m3.abs() > bound * (1 + 1e-6) + 1e-6 * max(float(bound.max()) if bound.numel() else 0.0, 1e-300)).any()):
        raise ValueError(bad.format("a third moment m3 exceeds sqrt(m4 · m2_jj)"))


class FeatureStats:
    """Mean and covariance of features ``x [B, D]``, accumulated in float64.

    ``update`` adds a batch, ``merge`` adds another partial state (exactly), ``finalize``
    chooses the shrinkage and factors ``Σ_λ = C Cᵀ``; ``whiten`` maps features to
    ``z = C⁻¹ (x − mean)``. Nothing is inverted explicitly.

    Shrinkage (``finalize(shrinkage=...)``):
      - ``"trace"`` (default): ``Σ + λI`` with ``λ = eps · tr(Σ) / D`` and ``Σ`` the unbiased covariance;
      - ``"ledoit-wolf"``: ``(1 − ρ) S + ρ μ I`` with ``S`` the biased covariance and ρ, μ as
        :func:`sklearn.covariance.ledoit_wolf`; ``lambda_`` reports ``ρ μ`` and ``rho_`` reports ρ;
      - ``"none"`` or a float: exactly that ``λ`` added to ``Σ``.
    """

    def __init__(self, dim: int | None = None, device: torch.device | str = "cpu") -> None:
        self.dim = dim
        self.device = torch.device(device)
        self.n = 0
        self.mean: torch.Tensor | None = None  # [D]
        self.m2: torch.Tensor | None = None  # [D, D]  Σ (x-μ)(x-μ)ᵀ
        self.m3: torch.Tensor | None = None  # [D]     Σ ‖x-μ‖² (x-μ)
        self.m4: torch.Tensor | None = None  # []      Σ ‖x-μ‖⁴
        self._reset_factor()
        if dim is not None:
            self._init_state(dim)

    # ------------------------------------------------------------------ accumulation
    def _init_state(self, dim: int) -> None:
        f64, dev = torch.float64, self.device
        self.dim = dim
        self.mean = torch.zeros(dim, dtype=f64, device=dev)
        self.m2 = torch.zeros(dim, dim, dtype=f64, device=dev)
        self.m3 = torch.zeros(dim, dtype=f64, device=dev)
        self.m4 = torch.zeros((), dtype=f64, device=dev)

    def _reset_factor(self) -> None:
        self.cov_: torch.Tensor | None = None
        self.chol_: torch.Tensor | None = None
        self.whitener_: torch.Tensor | None = None
        self.lambda_: float | None = None
        self.rho_: float | None = None
        self.shrinkage_: str | None = None
        self._cast_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, x: torch.Tensor) -> FeatureStats:
        """Add a batch of features ``x [B, D]`` (any float dtype). Returns self."""
        x = as_features(x, "x", ndim=2)
        if x.shape[0] == 0:
            return self
        if self.dim is None:
            self._init_state(x.shape[1])
        if x.shape[1] != self.dim:
            raise ValueError(f"x has D={x.shape[1]} features but these stats have D={self.dim}")
        # statistics are not differentiated: no autograd graph held across batches
        x = x.detach().to(device=self.device, dtype=torch.float64)
        b = x.shape[0]
        with serial_if_small(b * self.dim * self.dim, x.device):
            mean = x.mean(0)
            c = x - mean
            sq = (c * c).sum(1)
            part = FeatureStats(device=self.device)
            part.dim, part.n, part.mean = self.dim, b, mean
            part.m2 = c.T @ c
            part.m3 = (sq.unsqueeze(1) * c).sum(0)
            part.m4 = (sq * sq).sum()
            return self.merge(part)

    def merge(self, other: FeatureStats) -> FeatureStats:
        """Add another partial state into this one, exactly. Returns self."""
        if not isinstance(other, FeatureStats):
            raise TypeError(f"merge expects a FeatureStats, got {type(other).__name__}")
        if other.n == 0:
            return self
        d_other, *moments_other = other._moments()
        if self.dim is None:
            self._init_state(d_other)
        if d_other != self.dim:
            raise ValueError(f"cannot merge stats of D={d_other} into stats of D={self.dim}")
        if self.n == 0:  # the shifts below would add zeros: take the other's moments as they are
            self.mean, self.m2, self.m3, self.m4 = (t.to(self.device, copy=True) for t in moments_other)
            self.n = other.n
            self._reset_factor()
            return self
        _, mean_a, m2_a, m3_a, m4_a = self._moments()
        na, nb = self.n, other.n
        n = na + nb
        ob = [t.to(self.device) for t in moments_other]
        mean = mean_a + (ob[0] - mean_a) * (nb / n)
        pa = _shift(na, mean_a, m2_a, m3_a, m4_a, mean)
        pb = _shift(nb, ob[0], ob[1], ob[2], ob[3], mean)
        self.m2 = pa[0] + pb[0]
        self.m3 = pa[1] + pb[1]
        self.m4 = pa[2] + pb[2]
        self.mean, self.n = mean, n
        self._reset_factor()
        return self

    @classmethod
    def from_features(cls, x: torch.Tensor, **finalize_kwargs: Any) -> FeatureStats:
        """Stats of ``x [N, D]`` in one call, finalized with ``finalize_kwargs``."""
        return cls().update(x).finalize(**finalize_kwargs)

    # ------------------------------------------------------------------ factorisation
    @property
    def covariance(self) -> torch.Tensor:
        """Unbiased covariance ``Σ [D, D]`` (float64), before shrinkage."""
        self._need(2)
        return self._moments()[2] / (self.n - 1)

    def finalize(self, shrinkage: str | float = "trace", eps: float = 1e-6) -> FeatureStats:
        """Choose the shrinkage, factor ``Σ_λ = C Cᵀ`` and prepare whitening. Returns self."""
        self._need(2)
        if not (math.isfinite(eps) and eps >= 0):
            raise ValueError(f"eps must be a finite number >= 0, got {eps}")
        d, mean, m2, _, m4 = self._moments()
        if not (bool(torch.isfinite(mean).all()) and bool(torch.isfinite(m2).all())):
            raise ValueError(
                "the reference statistics hold NaN/Inf (in the mean or covariance): they were "
                "accumulated from non-finite features or the stats file is damaged; recompute them"
            )
        # every feature's spread within rounding of its mean (std <= 1e-6 x (1 + |mean|)): nothing varies, and a
        # shrinkage scaled by the variance cannot help; an explicit λ > 0 still defines the whitening (λ I)
        explicit = not isinstance(shrinkage, str) and float(shrinkage) > 0
        if not explicit and bool((m2.diagonal() <= 1e-12 * self.n * (1.0 + mean.square())).all()):
            raise ValueError(
                f"the features have zero variance: all {self.n} reference samples give the same {d}-d features, "
                "so no transform can be measured against them (a constant model: a zero-initialised head or "
                "last layer, an untrained layer after a ReLU that is dead, or the wrong output); check the model"
            )
        # the shrinkage is added to the diagonal of a fresh covariance in place (no D x D identity)
        if isinstance(shrinkage, str):
            if shrinkage not in _SHRINKAGE:
                raise ValueError(f"shrinkage must be one of {_SHRINKAGE} or a float λ >= 0, got {shrinkage!r}")
            if shrinkage == "ledoit-wolf":
                s = m2 / self.n
                rho, mu = _ledoit_wolf(s, m4.item(), self.n)
                cov = s.mul_(1 - rho)
                lam, self.rho_ = rho * mu, rho
            else:
                cov = self.covariance
                lam = eps * torch.trace(cov).item() / d if shrinkage == "trace" else 0.0
        else:
            lam = float(shrinkage)
            if not (math.isfinite(lam) and lam >= 0):
                raise ValueError(f"an explicit shrinkage λ must be finite and >= 0, got {shrinkage}")
            cov = self.covariance
            shrinkage = "explicit"
        cov.diagonal().add_(lam)
        chol, info = torch.linalg.cholesky_ex(cov)
        if info.item() != 0:
            raise ValueError(
                f"the covariance (D={d}, n={self.n}) is not positive definite after shrinkage "
                f"'{shrinkage}' (λ={lam:.3g}); use a larger eps (e.g. finalize(eps=1e-3)), "
                "shrinkage='ledoit-wolf', or more reference samples"
            )
        if self.n <= d and shrinkage != "ledoit-wolf":  # Ledoit-Wolf picks a shrinkage strong enough for N <= D
            warnings.warn(
                f"FeatureStats: N={self.n} reference samples for D={d} features (N <= D): the covariance "
                "is rank-deficient and the whitened cosine collapses towards 0 for every transform. Use "
                "more reference images (N well above D), reference stats from a larger set (stats=...; "
                "invfast measure --stats), or stronger shrinkage (shrinkage='ledoit-wolf' / --shrinkage "
                "ledoit-wolf, or a larger eps / --eps)",
                RuntimeWarning,
                stacklevel=2,
            )
        self.cov_, self.chol_, self.lambda_, self.shrinkage_ = cov, chol, float(lam), str(shrinkage)
        self.whitener_ = _lower_inverse(chol).T.contiguous()
        self._cast_cache = {}
        return self

    def whitening(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(W [D, D], shift [D]) in ``dtype`` on ``device`` with ``z = x @ W − shift`` = ``C⁻¹(x − mean)``."""
        if self.whitener_ is None:
            raise ValueError("FeatureStats is not finalized: call stats.finalize() before whitening")
        key = (dtype, device)
        if key not in self._cast_cache:
            w, mean = self.whitener_, self._moments()[1]
            self._cast_cache[key] = (w.to(device=device, dtype=dtype), (mean @ w).to(device=device, dtype=dtype))
        return self._cast_cache[key]

    def whiten(self, x: torch.Tensor) -> torch.Tensor:
        """``z = C⁻¹ (x − mean)`` for ``x [..., D]``; float32 stays float32, float64 stays float64."""
        x = as_features(x, "x", ndim=None)
        if x.shape[-1] != self.dim:
            raise ValueError(f"x has D={x.shape[-1]} features but these stats have D={self.dim}")
        dtype = x.dtype if x.dtype == torch.float64 else torch.float32
        w, shift = self.whitening(dtype, x.device)
        flat = x.reshape(-1, self.dim).to(dtype)
        return upper_mm(flat, w).sub_(shift).reshape(x.shape)

    # ------------------------------------------------------------------ persistence
    def state_dict(self) -> dict[str, Any]:
        self._need(1)
        _, mean, m2, m3, m4 = self._moments()
        return {
            "n": self.n,
            "mean": mean.cpu(),
            "m2": m2.cpu(),
            "m3": m3.cpu(),
            "m4": m4.cpu(),
            "format": "invfast.FeatureStats/1",
        }

    @classmethod
    def from_state_dict(
        cls, state: dict[str, Any], device: torch.device | str = "cpu", check_moments: bool = True
    ) -> FeatureStats:
        """A FeatureStats from :meth:`state_dict`'s layout, its fields checked; ``check_moments`` also checks that
        the moments are possible for n samples (an O(D³) eigendecomposition: skipped for states invfast has just
        made or verified by checksum, such as another rank's)."""
        if not isinstance(state, dict) or state.get("format") != "invfast.FeatureStats/1":
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"not an invfast FeatureStats state (format={got!r})")
        keys = ("n", "mean", "m2", "m3", "m4")
        if any(k not in state for k in keys) or not all(isinstance(state[k], torch.Tensor) for k in keys[1:]):
            raise ValueError(f"incomplete FeatureStats state: it needs {', '.join(keys)} (tensors)")
        d = state["mean"].shape[0] if state["mean"].dim() == 1 else -1
        shapes = {k: tuple(state[k].shape) for k in keys[1:]}
        if d < 1 or (shapes["m2"], shapes["m3"], state["m4"].numel()) != ((d, d), (d,), 1):
            raise ValueError(f"inconsistent FeatureStats state: shapes {shapes} (mean [D], m2 [D, D], m3 [D], m4 [])")
        if any(state[k].is_complex() for k in keys[1:]):
            raise ValueError("the FeatureStats state holds complex tensors")
        n = state["n"]
        if isinstance(n, torch.Tensor) and n.numel() == 1 and not n.is_floating_point() and not n.is_complex():
            n = int(n)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"the FeatureStats state's sample count n must be an integer >= 0, got {n!r}")
        for k in keys[1:]:
            if not bool(torch.isfinite(state[k]).all()):
                raise ValueError(
                    f"the FeatureStats state holds NaN/Inf in {k!r} (damaged, or accumulated from "
                    "non-finite features); recompute the statistics"
                )
        if check_moments:
            _check_moments(n, *(state[k].to(torch.float64) for k in ("m2", "m3", "m4")))
        out = cls(device=device)
        out.dim = int(state["mean"].shape[0])
        out.n = n
        out.mean, out.m2, out.m3, out.m4 = (
            state[k].to(device=out.device, dtype=torch.float64) for k in ("mean", "m2", "m3", "m4")
        )
        return out

    def save(self, path: str | os.PathLike) -> None:
        """Write the accumulated state (not the factorisation) to ``path`` atomically."""
        from invfast.io import atomic_torch_save

        atomic_torch_save(self.state_dict(), path)

    @classmethod
    def load(cls, path: str | os.PathLike, device: torch.device | str = "cpu") -> FeatureStats:
        """Read a file written by :meth:`save`; its checksum is verified when it has one (files from
        earlier versions have none). Raises ``DamagedFileError`` (a ``ValueError``) for anything else."""
        from invfast.io import DamagedFileError, load_verified

        if not os.path.exists(path):
            raise FileNotFoundError(f"no FeatureStats file at {os.fspath(path)!r}")
        fix = "pass a file written by FeatureStats.save (or invfast) or recompute the statistics"
        state = load_verified(path, what="FeatureStats file", require_checksum=False, fix=fix)
        try:
            return cls.from_state_dict(state, device=device)
        except ValueError as e:
            raise DamagedFileError(f"{os.fspath(path)!r} is not a usable FeatureStats file: {e}; {fix}") from e

    def _moments(self) -> tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(D, mean, m2, m3, m4) of the accumulated state; raises when nothing was accumulated yet."""
        if self.dim is None or self.mean is None or self.m2 is None or self.m3 is None or self.m4 is None:
            raise ValueError("FeatureStats holds no features yet: update() with features [B, D] first")
        return self.dim, self.mean, self.m2, self.m3, self.m4

    def _need(self, k: int) -> None:
        if self.n < k:
            raise ValueError(
                f"FeatureStats needs at least {k} reference samples, has {self.n}: update() with more features"
            )

    def __repr__(self) -> str:
        fin = f", shrinkage={self.shrinkage_!r}, λ={self.lambda_:.3g}" if self.chol_ is not None else ""
        return f"FeatureStats(n={self.n}, dim={self.dim}{fin})"


def upper_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w`` for an upper-triangular ``w [D, D]`` (the whitener): on the CPU one product per quarter of
    the columns over only the rows above the diagonal that can be non-zero (5/8 of the multiplications;
    1.3x / 1.5x one dense product at 16 / 256 x 2048, ``benchmarks/bench_invariance.py``). Each entry sums
    the same products; the skipped ones are exact zeros."""
    d = w.shape[0]
    with serial_if_small(x.shape[0] * d * d, x.device):
        if x.device.type != "cpu" or d < 256 or (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)):
            return torch.mm(x, w)  # the blocks write into one output (out=), which autograd cannot follow
        out = torch.empty(x.shape[0], d, dtype=torch.result_type(x, w), device=x.device)
        edges = [d * i // 4 for i in range(5)]
        for a, b in zip(edges[:-1], edges[1:]):
            torch.mm(x[:, :b], w[:b, a:b], out=out[:, a:b])
        return out


def _lower_inverse(chol: torch.Tensor) -> torch.Tensor:
    """``C⁻¹`` of a lower-triangular float64 ``C [D, D]``. On the CPU LAPACK's triangular inverse (``dtrtri``,
    D³/3 flops; faster than a triangular solve against the identity and as accurate: docs/performance.md);
    elsewhere that solve."""
    if chol.device.type == "cpu" and chol.dtype == torch.float64 and not chol.requires_grad:
        from scipy.linalg.lapack import dtrtri

        inv, info = dtrtri(chol.numpy(), lower=1)
        if info == 0:
            return torch.from_numpy(inv).tril_()  # dtrtri leaves the strict upper triangle as it found it
    eye = torch.eye(chol.shape[0], dtype=chol.dtype, device=chol.device)
    return torch.linalg.solve_triangular(chol, eye, upper=False)


def _shift(
    n: int, mean: torch.Tensor, m2: torch.Tensor, m3: torch.Tensor, m4: torch.Tensor, new_mean: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Central moments of a part about ``new_mean`` instead of its own mean."""
    delta = new_mean - mean  # y = x - mean has Σy = 0; moments of y - delta
    c = delta @ delta
    m2d = m2 @ delta
    tr = torch.trace(m2)
    m2_new = m2 + n * torch.outer(delta, delta)
    m3_new = m3 - 2 * m2d - delta * (tr + n * c)
    m4_new = m4 - 4 * (delta @ m3) + 4 * (delta @ m2d) + 2 * c * tr + n * c * c
    return m2_new, m3_new, m4_new


def _ledoit_wolf(s: torch.Tensor, m4: float, n: int) -> tuple[float, float]:
    """Ledoit-Wolf shrinkage ρ and target scale μ from the biased covariance and Σ‖x-μ‖⁴."""
    d = s.shape[0]
    mu = torch.trace(s).item() / d
    delta_ = (s * s).sum().item()
    beta = (m4 / n - delta_) / (d * n)
    delta = (delta_ - 2 * mu * torch.trace(s).item() + d * mu * mu) / d
    beta = min(beta, delta)
    rho = 0.0 if beta == 0 else beta / delta
    return float(rho), float(mu)
