"""The penalised softmax (multinomial) or binomial log-loss of F cross-validation problems that share
one design matrix, and the Kronecker preconditioner that makes L-BFGS on it insensitive to the
conditioning of the features.

Objective of problem f (training rows T_f, n_f = |T_f|), identical to scikit-learn's
``LogisticRegression(C=1/λ)`` objective divided by n_f::

    (1/n_f) Σ_{i∈T_f} CE(y_i, W xᵢ + b)  +  λ/(2 n_f) ‖W‖²_F

Preconditioner: near any point the Hessian is Σ_i x_i x_iᵀ ⊗ (diag pᵢ − pᵢpᵢᵀ) / n_f + λ/n_f I,
approximated by A_f ⊗ G + λ/n_f I with G = XᵀX/n (the centred Gram of all rows, eigendecomposed
once per fit) and A_f the mean class covariance of fold f at the start of each path value; its
inverse costs two products with the eigenvectors of G.
"""

from __future__ import annotations

import copy

import torch

_F64 = torch.float64


class SoftmaxLoss:
    """Mean cross-entropy plus ridge penalty of F problems sharing the rows of ``x``.

    x: design [n, Dp] in the compute dtype (a last column of ones when ``fit_intercept``); codes:
    int64 class codes [n]; train: one index tensor per problem; n_classes K (two classes use the
    binomial model with one weight column). Weights are [F, Dp, Kout] float64, Kout = 1 or K.
    Each evaluation is one GEMM x @ [Dp, a·Kout] and one back, over row chunks that bound the
    float64 logits to about ``chunk_elems`` entries.
    """

    def __init__(
        self,
        x: torch.Tensor,
        codes: torch.Tensor,
        train: list[torch.Tensor],
        n_classes: int,
        fit_intercept: bool,
        chunk_elems: int = 1 << 22,
    ):
        n, dev = x.shape[0], x.device
        self.x, self.codes = x, codes
        w = torch.zeros((len(train), n), dtype=_F64, device=dev)
        for f, idx in enumerate(train):
            w[f, idx] = 1.0 / idx.numel()
        self.wt = w.T.contiguous()  # [n, F]
        self.n_train = torch.tensor([float(t.numel()) for t in train], dtype=_F64, device=dev)
        self.binary = n_classes == 2
        self.k = n_classes
        self.kout = 1 if self.binary else n_classes
        self.mask = torch.ones(x.shape[1], 1, dtype=_F64, device=dev)
        if fit_intercept:
            self.mask[-1] = 0.0
        self.lam = torch.zeros_like(self.n_train)  # [F], set per path value
        self.chunk_elems = chunk_elems
        self.n_evals = 0
        self._cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def retyped(self, x: torch.Tensor) -> SoftmaxLoss:
        """The same problems (folds, penalties) over the same rows held in another dtype."""
        other = copy.copy(self)
        other.x, other.n_evals, other._cache = x, 0, None
        return other

    def _logits(self, xc: torch.Tensor, ws: torch.Tensor, a: int) -> torch.Tensor:
        z = (xc @ ws).to(_F64).view(xc.shape[0], a, self.kout)
        return torch.cat([torch.zeros_like(z), z], -1) if self.binary else z

    def _stack(self, w: torch.Tensor) -> torch.Tensor:
        return w.permute(1, 0, 2).reshape(w.shape[1], -1).to(self.x.dtype)  # [Dp, a*Kout]

    def data_term(
        self, w: torch.Tensor, idx: torch.Tensor, curvature: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Mean cross-entropy [a], its gradient [a, Dp, Kout] (float64) and, on request, the mean class
        covariance A [a, Kout, Kout] of problems ``idx`` at weights ``w`` [a, Dp, Kout]."""
        self.n_evals += 1
        a = w.shape[0]
        ws = self._stack(w)
        ce = torch.zeros(a, dtype=_F64, device=w.device)
        gs = torch.zeros(ws.shape, dtype=_F64, device=w.device)
        cov = torch.zeros((a, self.k, self.k), dtype=_F64, device=w.device) if curvature else None
        rows = max(1, self.chunk_elems // (a * self.k))
        for i in range(0, self.x.shape[0], rows):
            xc, cc = self.x[i : i + rows], self.codes[i : i + rows]
            wc = self.wt[i : i + rows][:, idx]  # [r, a]
            z = self._logits(xc, ws, a)  # [r, a, K]
            lse = torch.logsumexp(z, -1, keepdim=True)
            lab = cc[:, None, None].expand(-1, a, 1)
            ce += ((lse - z.gather(-1, lab))[..., 0] * wc).sum(0)
            p = torch.exp(z - lse)
            if cov is not None:
                pw = p * wc[..., None]
                cov += torch.diag_embed(pw.sum(0)) - torch.einsum("rak,ral->akl", pw, p)
            p.scatter_add_(-1, lab, -torch.ones_like(p[..., :1]))
            p *= wc[..., None]
            if self.binary:
                p = p[..., 1:]
            gs += (xc.T @ p.reshape(xc.shape[0], -1).to(xc.dtype)).to(_F64)
        if cov is not None and self.binary:
            cov = cov[:, 1:, 1:]
        return ce, gs.view(w.shape[1], a, self.kout).transpose(0, 1), cov

    def start(self, w: torch.Tensor) -> torch.Tensor:
        """Evaluate every problem at ``w`` (kept for the solver's first call) and return A [F, Kout, Kout]."""
        idx = torch.arange(w.shape[0], device=w.device)
        ce, g, cov = self.data_term(w, idx, curvature=True)
        self._cache = (w.clone(), idx, ce, g)
        assert cov is not None
        return cov

    def __call__(self, w: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Penalised loss [a] and gradient [a, Dp, Kout] of problems ``idx`` at ``w``."""
        c = self._cache
        if c is not None and c[1].numel() == idx.numel() and torch.equal(c[1], idx) and torch.equal(c[0], w):
            ce, g = c[2], c[3]
        else:
            ce, g, _ = self.data_term(w, idx)
        self._cache = None
        reg = (self.lam / self.n_train)[idx]
        wm = w * self.mask
        return ce + 0.5 * reg * (wm * wm).sum((1, 2)), g + reg[:, None, None] * wm

    def logits(self, w: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Logits [r, K] of the samples ``rows`` under one problem's weights ``w`` [Dp, Kout]."""
        return self._logits(self.x[rows], w.to(self.x.dtype), 1)[:, 0]


class KroneckerPreconditioner:
    """Applies (A_f ⊗ G + λ_f/n_f I)⁻¹ to the feature rows and A_f⁺ to the intercept row.

    G = XᵀX/n [D, D] (float64, centred when there is an intercept) given by its eigenpairs s [r],
    V [D, r]: all of them, or only the r < D nonzero ones (then G is zero on the rest, where only
    the penalty acts). ``update(cov, reg)`` sets the class covariances A [F, Kout, Kout] and the
    penalties λ_f/n_f [F].
    """

    def __init__(self, eig_s: torch.Tensor, eig_v: torch.Tensor, fit_intercept: bool):
        self.s, self.v = eig_s.clamp_min(0), eig_v
        self.fit_intercept = fit_intercept
        self.d, self.r = eig_v.shape

    def update(self, cov: torch.Tensor, reg: torch.Tensor) -> None:
        a, self.q = torch.linalg.eigh(cov)
        a = a.clamp_min(0)  # [F, Kout]
        self.reg = reg
        self.inv = 1.0 / (self.s[None, :, None] * a[:, None, :] + reg[:, None, None])  # [F, r, Kout]
        top = a.amax(1, keepdim=True)
        self.a_inv = torch.where(a > 1e-12 * top, 1.0 / a.clamp_min(1e-300), torch.zeros_like(a))

    def __call__(self, v: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        every = idx.numel() == self.q.shape[0]
        q, inv = (self.q, self.inv) if every else (self.q[idx], self.inv[idx])  # [b, K, K], [b, r, K]
        b, k = v.shape[0], v.shape[2]
        vw = (v[:, : self.d] @ q).transpose(0, 1).reshape(self.d, b * k)  # class eigenbasis, [D, b*K]
        t = self.v.T @ vw  # feature eigenbasis, [r, b*K]
        scaled = (t.view(self.r, b, k).transpose(0, 1) * inv).transpose(0, 1).reshape(self.r, b * k)
        if self.r == self.d:
            out = self.v @ scaled
        else:  # the complement of V's span: penalty only
            back = self.v @ torch.cat([scaled, t], 1)
            reg = (self.reg if every else self.reg[idx]).repeat_interleave(k)
            out = back[:, : b * k] + (vw - back[:, b * k :]) / reg
        out = out.view(self.d, b, k).transpose(0, 1)
        if self.fit_intercept:
            ai = self.a_inv if every else self.a_inv[idx]
            out = torch.cat([out, (v[:, self.d :] @ q) * ai[:, None, :]], 1)
        return out @ q.transpose(1, 2)
