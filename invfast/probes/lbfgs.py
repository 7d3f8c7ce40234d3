"""Batched L-BFGS: minimise F independent smooth convex problems at once (one per CV fold).

Each problem keeps its own history, step length and stopping state; all of them share the
matrix products of one objective evaluation. The optimiser state is float64 whatever the
precision of the objective's matrix products.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

Objective = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class LBFGSResult:
    """x [F, ...] solutions, loss [F], grad_norm [F] (max |g|), n_iter [F], converged [F] (max |g| <= tol)."""
    x: torch.Tensor
    loss: torch.Tensor
    grad_norm: torch.Tensor
    n_iter: torch.Tensor
    converged: torch.Tensor


def lbfgs(fun: Objective, x0: torch.Tensor, tol: float = 1e-4, max_iter: int = 100, history: int = 10,
          c1: float = 1e-4, max_backtracks: int = 40) -> LBFGSResult:
    """Minimise ``fun`` from ``x0`` [F, ...] (float64). ``fun(x)`` returns (loss [F], grad like x).

    Stops a problem when its gradient's max-abs entry is <= ``tol`` (scipy's ``gtol``), after
    ``max_iter`` iterations, or when no step along the search direction decreases the loss any more
    (reported as not converged unless the gradient test holds). Line search: Armijo backtracking,
    sufficient for L-BFGS on convex objectives (curvature pairs with sᵀy <= 0 are skipped).
    """
    nf = x0.shape[0]
    shape = x0.shape
    x = x0.reshape(nf, -1).clone()
    f, g = fun(x.view(shape))
    g = g.reshape(nf, -1)
    s_hist: list[torch.Tensor] = []
    y_hist: list[torch.Tensor] = []
    rho_hist: list[torch.Tensor] = []
    gamma = torch.ones(nf, dtype=x.dtype, device=x.device)
    n_iter = torch.zeros(nf, dtype=torch.long, device=x.device)
    gnorm = g.abs().amax(1)
    done = gnorm <= tol
    stalled = torch.zeros_like(done)
    for it in range(max_iter):
        if bool(done.all()):
            break
        # two-loop recursion, batched over problems
        q = g.clone()
        alphas = []
        for s, y, rho in zip(reversed(s_hist), reversed(y_hist), reversed(rho_hist)):
            a = rho * (s * q).sum(1)
            q -= a[:, None] * y
            alphas.append(a)
        r = gamma[:, None] * q
        for (s, y, rho), a in zip(zip(s_hist, y_hist, rho_hist), reversed(alphas)):
            b = rho * (y * r).sum(1)
            r += (a - b)[:, None] * s
        p = -r
        gp = (g * p).sum(1)
        bad = gp >= 0  # not a descent direction: fall back to steepest descent
        if bool(bad.any()):
            p[bad] = -g[bad]
            gp = torch.where(bad, -(g * g).sum(1), gp)
        t = torch.ones(nf, dtype=x.dtype, device=x.device)
        if it == 0:
            t = torch.clamp(1.0 / g.abs().sum(1).clamp_min(1e-300), max=1.0)
        active = ~done
        accepted = ~active
        x_new, f_new, g_new = x.clone(), f.clone(), g.clone()
        for _ in range(max_backtracks):
            trial = x + t[:, None] * p
            ft, gt = fun(trial.view(shape))
            gt = gt.reshape(nf, -1)
            armijo = ft <= f + c1 * t * gp
            # near the optimum the decrease drops below float64 resolution of f: accept a step that
            # keeps f within roundoff and shrinks the gradient (approximate Armijo, Hager & Zhang 2005)
            approx = (ft - f <= 1e-12 * f.abs()) & (gt.abs().amax(1) < g.abs().amax(1))
            ok = (armijo | approx) & torch.isfinite(ft) & ~accepted
            if bool(ok.any()):
                x_new[ok], f_new[ok], g_new[ok] = trial[ok], ft[ok], gt[ok]
                accepted |= ok
            if bool(accepted.all()):
                break
            t = torch.where(accepted, t, t * 0.5)
        failed = active & ~accepted
        stalled |= failed
        moved = active & accepted
        s = x_new - x
        yv = g_new - g
        sy = (s * yv).sum(1)
        good = moved & (sy > 1e-12 * (yv * yv).sum(1).sqrt() * (s * s).sum(1).sqrt())
        rho = torch.where(good, 1.0 / torch.where(good, sy, torch.ones_like(sy)), torch.zeros_like(sy))
        gamma = torch.where(good, sy / (yv * yv).sum(1).clamp_min(1e-300), gamma)
        s_hist.append(torch.where(good[:, None], s, torch.zeros_like(s)))
        y_hist.append(torch.where(good[:, None], yv, torch.zeros_like(yv)))
        rho_hist.append(rho)
        if len(s_hist) > history:
            s_hist.pop(0), y_hist.pop(0), rho_hist.pop(0)
        x, f, g = x_new, f_new, g_new
        n_iter += moved.long()
        gnorm = g.abs().amax(1)
        done = done | (gnorm <= tol) | stalled
    return LBFGSResult(x.view(shape), f, gnorm, n_iter, gnorm <= tol)
