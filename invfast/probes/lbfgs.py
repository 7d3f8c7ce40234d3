"""Batched, preconditioned L-BFGS: minimise F independent smooth convex problems at once (one per CV fold).

Each problem keeps its own curvature history, step length and stopping state; the objective is
called only for the problems still running, so a fold that has converged costs nothing more.
The optimiser state is float64 whatever the precision of the objective's matrix products.

Preconditioning: the two-loop recursion starts from ``H0 = γ·P`` where ``P`` (``precond``)
approximates the inverse Hessian and γ = sᵀy / yᵀPy is refreshed every iteration (Nocedal &
Wright 2006, eq. 7.20 with a general H0). Line search: backtracking by safeguarded quadratic
interpolation from t = 1 until Armijo's condition holds, or Hager & Zhang's (2005) approximate
Wolfe condition when the loss change is below its roundoff (``f_rtol``): near the optimum of a
problem evaluated with float32 products the loss stops resolving decreases before the gradient
meets ``tol``, and the directional derivative still decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

#: fun(x [a, ...], idx [a]) -> (loss [a], grad [a, ...]) of the problems ``idx``
Objective = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
#: precond(v [a, ...], idx [a]) -> P v, an approximate inverse Hessian applied to v
Preconditioner = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class LBFGSResult:
    """x [F, ...] solutions, loss [F], grad_norm [F] (the stopping measure), n_iter [F], converged [F]
    (grad_norm <= tol), stalled [F] (stopped short of tol for want of a resolvable step), and the
    curvature pairs (s, y) [F, P] of the last iterations (``memory``)."""

    x: torch.Tensor
    loss: torch.Tensor
    grad_norm: torch.Tensor
    n_iter: torch.Tensor
    converged: torch.Tensor
    stalled: torch.Tensor
    memory: list[tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)


def _flat(fun: Objective, shape: torch.Size) -> Objective:
    def call(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f, g = fun(x.view(-1, *shape[1:]), idx)
        return f, g.reshape(x.shape[0], -1)

    return call


def lbfgs(
    fun: Objective,
    x0: torch.Tensor,
    tol: float = 1e-4,
    max_iter: int = 100,
    history: int = 10,
    precond: Preconditioner | None = None,
    grad_norm: Callable[[torch.Tensor], torch.Tensor] | None = None,
    memory: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
    c1: float = 1e-4,
    f_rtol: float = 1e-12,
    max_backtracks: int = 30,
    stop_on_noise: bool = False,
) -> LBFGSResult:
    """Minimise ``fun`` from ``x0`` [F, ...] (float64), every problem to ``grad_norm(g) <= tol``.

    precond: approximate inverse Hessian (default identity). grad_norm: maps a gradient [a, ...] to
    the stopping measure [a] (default max |g|, scipy's ``gtol`` test). memory: curvature pairs to
    start from (e.g. the previous problem of a regularisation path, corrected by the caller).
    f_rtol: relative roundoff of the loss, below which the approximate Wolfe test decides a step.
    A problem stops when its measure is <= tol, after ``max_iter`` iterations, or when no step
    along its search direction is acceptable (``stalled``). With ``stop_on_noise`` a problem also
    stalls as soon as a step is accepted only by the roundoff test or after more than 8 halvings:
    its loss no longer resolves progress (e.g. float32 products on ill-conditioned features), and
    the caller can continue it in higher precision.
    """
    nf, shape, dev = x0.shape[0], x0.shape, x0.device
    call = _flat(fun, shape)
    pre = _flat_precond(precond, shape)
    measure = _flat_measure(grad_norm, shape)
    everyone = torch.arange(nf, device=dev)
    x = x0.reshape(nf, -1).clone()
    f, g = call(x, everyone)
    mem = [_pair(s.reshape(nf, -1), y.reshape(nf, -1)) for s, y in (memory or [])][-history:]
    n_iter = torch.zeros(nf, dtype=torch.long, device=dev)
    gnorm = measure(g)
    done = gnorm <= tol
    stalled = torch.zeros_like(done)
    gamma = _initial_scale(mem, pre, everyone, x.dtype)
    for _ in range(max_iter):
        idx = torch.nonzero(~done).flatten()
        if idx.numel() == 0:
            break
        every = idx.numel() == nf  # no gathers while every problem is running
        gi = g if every else g[idx]
        p, slope = _direction(gi, mem, gamma, pre, idx, every)
        xi, fi = (x, f) if every else (x[idx], f[idx])
        x_new, f_new, g_new, ok, noisy = _line_search(call, xi, fi, gi, p, slope, idx, c1, f_rtol, max_backtracks)
        mem = _remember(mem, x_new - xi, g_new - gi, ok, gamma, idx, every, pre, history)
        x[idx] = torch.where(ok[:, None], x_new, xi)
        f[idx] = torch.where(ok, f_new, fi)
        g[idx] = torch.where(ok[:, None], g_new, gi)
        n_iter[idx] += ok.long()
        gnorm[idx] = measure(g[idx])
        conv = gnorm[idx] <= tol
        stuck = ~conv & (~ok | (noisy if stop_on_noise else torch.zeros_like(ok)))
        stalled[idx] = stuck
        done[idx] = conv | stuck
    return LBFGSResult(x.view(shape), f, gnorm, n_iter, gnorm <= tol, stalled, [(s, y) for s, y, _ in mem])


def _flat_precond(precond: Preconditioner | None, shape: torch.Size) -> Preconditioner:
    """``precond`` on flattened vectors [a, P] (P = prod(shape[1:])); the identity when None."""
    if precond is None:
        return lambda v, idx: v
    return lambda v, idx: precond(v.view(-1, *shape[1:]), idx).reshape(v.shape[0], -1)


def _flat_measure(
    grad_norm: Callable[[torch.Tensor], torch.Tensor] | None, shape: torch.Size
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The stopping measure [a] of flattened gradients [a, P]: ``grad_norm`` on the original shape, else max |g|."""
    if grad_norm is None:
        return lambda g: g.abs().amax(1)
    return lambda g: grad_norm(g.view(-1, *shape[1:]))


def _initial_scale(
    mem: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    pre: Preconditioner,
    everyone: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    """γ [F] of the first H0 = γ·P: from the newest given pair, 1 where there is none or it is unusable."""
    gamma = torch.ones(everyone.numel(), dtype=dtype, device=everyone.device)
    if mem:
        gamma = _scale(mem[-1][0], mem[-1][1], pre(mem[-1][1], everyone), gamma)
    return gamma


def _direction(
    g: torch.Tensor,
    mem: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    gamma: torch.Tensor,
    pre: Preconditioner,
    idx: torch.Tensor,
    every: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Search direction p [a, P] and slope gᵀp [a] of the running problems ``idx`` [a] (g [a, P])."""
    pairs = mem if every else [(s[idx], y[idx], r[idx]) for s, y, r in mem]
    p = -_two_loop(g, pairs, gamma if every else gamma[idx], lambda v: pre(v, idx))
    slope = (g * p).sum(1)
    bad = ~(slope < 0)  # not a descent direction (or NaN): restart from the preconditioned gradient
    if bool(bad.any()):
        p[bad] = -pre(g, idx)[bad]
        slope = (g * p).sum(1)
    return p, slope


def _remember(
    mem: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    s: torch.Tensor,
    y: torch.Tensor,
    ok: torch.Tensor,
    gamma: torch.Tensor,
    idx: torch.Tensor,
    every: bool,
    pre: Preconditioner,
    history: int,
) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The newest ``history`` pairs after this step's (s, y) [a, P] of problems ``idx`` [a], zero (ρ = 0) where
    unusable and scattered to [F, P]; refreshes ``gamma`` [F] in place where the pair is usable."""
    sy = (s * y).sum(1)
    good = ok & (sy > 1e-10 * s.norm(dim=1) * y.norm(dim=1))
    if not bool(good.any()):
        return mem
    rho = torch.where(good, 1.0 / torch.where(good, sy, torch.ones_like(sy)), torch.zeros_like(sy))
    s, y = s * good[:, None], y * good[:, None]
    gamma[idx] = torch.where(good, _scale(s, y, pre(y, idx), gamma[idx]), gamma[idx])
    if not every:
        nf = gamma.shape[0]
        s, y, rho = _scatter(s, idx, nf), _scatter(y, idx, nf), _scatter(rho, idx, nf)
    return (mem + [(s, y, rho)])[-history:]


def _pair(s: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A curvature pair with its ρ = 1/sᵀy (0 where sᵀy <= 0: the pair is skipped)."""
    sy = (s * y).sum(1)
    return s, y, torch.where(sy > 0, 1.0 / torch.where(sy > 0, sy, torch.ones_like(sy)), torch.zeros_like(sy))


def _scatter(v: torch.Tensor, idx: torch.Tensor, nf: int) -> torch.Tensor:
    out = torch.zeros((nf, *v.shape[1:]), dtype=v.dtype, device=v.device)
    out[idx] = v
    return out


def _scale(s: torch.Tensor, y: torch.Tensor, py: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """γ = sᵀy / yᵀPy where the pair is usable, else the previous γ."""
    sy, ypy = (s * y).sum(1), (y * py).sum(1)
    ok = (sy > 0) & (ypy > 0)
    return torch.where(ok, sy / torch.where(ok, ypy, torch.ones_like(ypy)), old)


def _two_loop(
    g: torch.Tensor,
    mem: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    gamma: torch.Tensor,
    pre: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """H g by the two-loop recursion with H0 = γ P over pairs (s, y, ρ); pairs with ρ = 0 are skipped."""
    q = g.clone()
    alphas = []
    for s, y, rho in reversed(mem):
        a = rho * torch.linalg.vecdot(s, q)
        q.addcmul_(a[:, None], y, value=-1.0)
        alphas.append(a)
    r = gamma[:, None] * pre(q)
    for (s, y, rho), a in zip(mem, reversed(alphas)):
        r.addcmul_((a - rho * torch.linalg.vecdot(y, r))[:, None], s)
    return r


def _line_search(call, x, f, g, p, slope, idx, c1, f_rtol, max_backtracks):
    """Backtracking from t = 1: returns x, f, g at the accepted step, which problems accepted one, and
    which accepted only by the roundoff test or after more than 8 reductions (``noisy``)."""
    t = torch.ones_like(f)
    x_new, f_new, g_new = x.clone(), f.clone(), g.clone()
    ok = torch.zeros_like(f, dtype=torch.bool)
    noisy = torch.zeros_like(ok)
    pending = torch.arange(f.numel(), device=f.device)
    for trial_no in range(max_backtracks):
        trial = x[pending] + t[pending, None] * p[pending]
        ft, gt = call(trial, idx[pending])
        f0, s0 = f[pending], slope[pending]
        armijo = ft <= f0 + c1 * t[pending] * s0
        # approximate Wolfe (Hager & Zhang 2005, eq. 23): the loss change is within roundoff and the
        # directional derivative has risen from φ'(0) to at most 0.8|φ'(0)|
        flat = (ft <= f0 + f_rtol * f0.abs()) & ((gt * p[pending]).sum(1) <= -0.8 * s0)
        acc = (armijo | flat) & torch.isfinite(ft)
        if bool(acc.any()):
            j = pending[acc]
            x_new[j], f_new[j], g_new[j], ok[j] = trial[acc], ft[acc], gt[acc], True
            noisy[j] = ~armijo[acc] | (trial_no > 8)
        rest = ~acc
        if not bool(rest.any()):
            break
        # safeguarded minimiser of the quadratic through φ(0), φ'(0), φ(t)
        tp, d = t[pending][rest], (ft - f0 - s0 * t[pending])[rest]
        quad = -s0[rest] * tp * tp / (2.0 * d.clamp_min(1e-300))
        quad = torch.where(torch.isfinite(ft[rest]) & (d > 0), quad, 0.1 * tp)
        t[pending[rest]] = torch.minimum(torch.maximum(quad, 0.1 * tp), 0.5 * tp)
        pending = pending[rest]
    return x_new, f_new, g_new, ok, noisy
