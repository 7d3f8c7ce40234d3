"""Downstream invariance learning (Chavhan et al. 2023): on a frozen amortised extractor,
learn a linear head together with the invariance descriptor ``i in [0, 1]^K``.

``i`` starts at 0.5 and is kept in [0, 1] either by projection (clamp after every Adam step,
the default, so it can reach the corners) or by a sigmoid parametrisation. With
``quantize_bits=b`` the forward pass uses ``Q(i; b) = round(i (2^b - 1)) / (2^b - 1)`` with a
straight-through gradient, and ``i_`` reports the quantised descriptor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from invfast._validate import as_features, as_labels
from invfast.probes._base import NotFittedError
from invfast.runtime.progress import track

TASKS = ("classification", "regression")
CONSTRAINTS = ("project", "sigmoid")


def quantize(i: torch.Tensor, bits: int) -> torch.Tensor:
    """Q(i; b): each entry of i in [0, 1] rounded to the nearest of 2^b evenly spaced levels."""
    if bits < 1:
        raise ValueError(f"quantize bits must be >= 1, got {bits}")
    levels = 2**bits - 1
    return torch.round(i * levels) / levels


class InvarianceProbe:
    """Linear probe that also learns the invariance descriptor of a frozen amortised model.

    Args:
        model: module with ``forward_features(x, i)`` (HyperResNet, PromptViT, ...) and ``inv_dim``
            (or pass ``inv_dim``); it is put in eval mode and left unchanged.
        task: 'classification' (cross-entropy, accuracy) or 'regression' (MSE, R²).
        epochs, batch_size: passes over the training set and minibatch size.
        lr: Adam learning rate of the head; lr_i: of the descriptor.
        weight_decay: L2 on the head weights (Adam weight decay).
        ridge_init: initialise the head by ridge regression (λ ``ridge_alpha``) on the
            features at the initial descriptor (one-hot targets for classification).
        constraint: 'project' (clamp to [0, 1] after each step) or 'sigmoid' (i = sigmoid(θ)).
        quantize_bits: None, or b for Q(i; b) with straight-through gradients.
        init: initial value of every entry of i (0.5 in the paper).
        seed: minibatch order.

    Fitted attributes: ``i_`` [K] (quantised when quantize_bits is set), ``i_continuous_``,
    ``head_`` (nn.Linear), ``history_`` (mean training loss per epoch), ``i_history_`` [epochs, K].
    """

    def __init__(
        self,
        model: nn.Module,
        task: str = "classification",
        epochs: int = 50,
        batch_size: int = 256,
        lr: float = 1e-2,
        lr_i: float = 5e-2,
        weight_decay: float = 0.0,
        ridge_init: bool = True,
        ridge_alpha: float = 1e-3,
        constraint: str = "project",
        quantize_bits: int | None = None,
        init: float = 0.5,
        inv_dim: int | None = None,
        seed: int = 0,
        verbose: bool = False,
    ):
        self.model = model
        self.task = task
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.lr_i = lr_i
        self.weight_decay = weight_decay
        self.ridge_init = ridge_init
        self.ridge_alpha = ridge_alpha
        self.constraint = constraint
        self.quantize_bits = quantize_bits
        self.init = init
        self.inv_dim = inv_dim
        self.seed = seed
        self.verbose = verbose

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {
            k: getattr(self, k)
            for k in (
                "model",
                "task",
                "epochs",
                "batch_size",
                "lr",
                "lr_i",
                "weight_decay",
                "ridge_init",
                "ridge_alpha",
                "constraint",
                "quantize_bits",
                "init",
                "inv_dim",
                "seed",
                "verbose",
            )
        }

    def set_params(self, **params: Any) -> InvarianceProbe:
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"InvarianceProbe has no parameter {k!r}")
            setattr(self, k, v)
        return self

    # descriptor parametrisation -------------------------------------------------------------
    def _descriptor(self, raw: torch.Tensor) -> torch.Tensor:
        i = torch.sigmoid(raw) if self.constraint == "sigmoid" else raw
        if self.quantize_bits is not None:
            i = i + (quantize(i, self.quantize_bits) - i).detach()
        return i

    def _check_config(self) -> int:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if self.constraint not in CONSTRAINTS:
            raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {self.constraint!r}")
        if not 0.0 <= self.init <= 1.0:
            raise ValueError(f"init must lie in [0, 1], got {self.init}")
        if self.constraint == "sigmoid" and self.init in (0.0, 1.0):
            raise ValueError("init must lie strictly inside (0, 1) with constraint='sigmoid'")
        if self.quantize_bits is not None and self.quantize_bits < 1:
            raise ValueError(f"quantize_bits must be None or >= 1, got {self.quantize_bits}")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch_size must be >= 1")
        k = self.inv_dim if self.inv_dim is not None else getattr(self.model, "inv_dim", None)
        if k is None:
            raise ValueError("the model has no inv_dim attribute: pass inv_dim=K")
        self._forward_features()  # raises a TypeError if the model has none
        return int(k)

    def _forward_features(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        fn = getattr(self.model, "forward_features", None)
        if not callable(fn):
            raise TypeError("model must have forward_features(x, i)")
        return fn

    @torch.no_grad()
    def _features(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        forward_features = self._forward_features()
        return torch.cat(
            [forward_features(x[s : s + self.batch_size], i) for s in range(0, x.shape[0], self.batch_size)]
        )

    def fit(self, x: torch.Tensor, y: Any) -> InvarianceProbe:
        """x: model inputs [N, ...] (e.g. images [N, 3, H, W]); y: labels [N] or targets [N] / [N, T]."""
        k = self._check_config()
        x = as_features(x, "x", ndim=None).detach()
        target, n_out = self._targets(y, x.shape[0])
        device = next(self.model.parameters()).device
        was_training = self.model.training
        grads = [p.requires_grad for p in self.model.parameters()]
        self.model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        try:
            raw = self._initial_raw(k, device)
            head = self._initial_head(x, target, raw, n_out, device)
            i_hist = self._train_epochs(x, target, raw, head, device)
        finally:
            for p, g in zip(self.model.parameters(), grads):
                p.requires_grad_(g)
            self.model.train(was_training)
        self.head_ = head
        self._raw = raw.detach()
        cont = torch.sigmoid(self._raw) if self.constraint == "sigmoid" else self._raw
        self.i_continuous_ = cont.to("cpu", copy=True)
        self.i_ = (quantize(cont, self.quantize_bits) if self.quantize_bits is not None else cont).cpu()
        self.i_history_ = torch.stack(i_hist)
        return self

    def _targets(self, y: Any, n: int) -> tuple[torch.Tensor, int]:
        """The training targets, class indices [N] (sets ``classes_``) or floats [N, T], and the head's outputs."""
        if self.task == "classification":
            y = as_labels(y, "y", n)
            self.classes_, y_idx = torch.unique(y, return_inverse=True)
            return y_idx, len(self.classes_)
        y = as_features(y, "y", ndim=None).detach()
        if y.shape[0] != n:
            raise ValueError(f"y has {y.shape[0]} rows but x has {n}")
        target = y.reshape(n, -1).float()
        return target, target.shape[1]

    def _initial_raw(self, k: int, device: torch.device) -> torch.Tensor:
        """The descriptor's trained parameter [K] at ``init`` (its logit under 'sigmoid'), requiring grad."""
        init = torch.full((k,), float(self.init), device=device)
        raw = torch.logit(init) if self.constraint == "sigmoid" else init.clone()
        raw.requires_grad_(True)
        return raw

    def _initial_head(
        self, x: torch.Tensor, target: torch.Tensor, raw: torch.Tensor, n_out: int, device: torch.device
    ) -> nn.Linear:
        """The linear head [D -> n_out] on the features at the initial descriptor (ridge fit if ``ridge_init``)."""
        feats0 = self._features(x.to(device), self._descriptor(raw).detach())
        head = nn.Linear(feats0.shape[1], n_out).to(device)
        if self.ridge_init:
            self._ridge_init(head, feats0, target.to(device))
        return head

    def _train_epochs(
        self, x: torch.Tensor, target: torch.Tensor, raw: torch.Tensor, head: nn.Linear, device: torch.device
    ) -> list[torch.Tensor]:
        """Adam on head and descriptor over ``epochs`` shuffled passes; sets ``history_`` (mean loss per epoch)
        and returns the descriptor [K] after each epoch."""
        opt = torch.optim.Adam(
            [
                {"params": head.parameters(), "lr": self.lr, "weight_decay": self.weight_decay},
                {"params": [raw], "lr": self.lr_i},
            ]
        )
        gen = torch.Generator().manual_seed(self.seed)
        forward_features = self._forward_features()
        n = x.shape[0]
        self.history_, i_hist = [], []
        for _ in track(range(self.epochs), desc="InvarianceProbe", disable=not self.verbose):
            perm = torch.randperm(n, generator=gen)
            total = 0.0
            for s in range(0, n, self.batch_size):
                idx = perm[s : s + self.batch_size]
                xb, tb = x[idx].to(device), target[idx].to(device)
                out = head(forward_features(xb, self._descriptor(raw)))
                loss = F.cross_entropy(out, tb) if self.task == "classification" else F.mse_loss(out, tb)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if self.constraint == "project":
                    with torch.no_grad():
                        raw.clamp_(0.0, 1.0)
                total += float(loss.detach()) * len(idx)
            self.history_.append(total / n)
            i_hist.append(self._descriptor(raw).detach().to("cpu", copy=True))
        return i_hist

    def _ridge_init(self, head: nn.Linear, feats: torch.Tensor, target: torch.Tensor) -> None:
        f = feats.double()
        t = F.one_hot(target, head.out_features).double() if self.task == "classification" else target.double()
        mu_f, mu_t = f.mean(0), t.mean(0)
        fc, tc = f - mu_f, t - mu_t
        a = fc.T @ fc + self.ridge_alpha * f.shape[0] * torch.eye(f.shape[1], dtype=f.dtype, device=f.device)
        w = torch.linalg.solve(a, fc.T @ tc)  # [D, T]
        with torch.no_grad():
            head.weight.copy_(w.T.to(head.weight.dtype))
            head.bias.copy_((mu_t - mu_f @ w).to(head.bias.dtype))

    def _check_fitted(self) -> None:
        if not hasattr(self, "head_"):
            raise NotFittedError("InvarianceProbe is not fitted: call fit(x, y) first")

    @torch.no_grad()
    def transform(self, x: torch.Tensor) -> torch.Tensor:
        """Features of x at the learned descriptor i_ [N, D]."""
        self._check_fitted()
        device = next(self.model.parameters()).device
        was = self.model.training
        self.model.eval()
        try:
            return self._features(as_features(x, "x", ndim=None).to(device), self.i_.to(device))
        finally:
            self.model.train(was)

    @torch.no_grad()
    def decision_function(self, x: torch.Tensor) -> torch.Tensor:
        """Head outputs at the learned descriptor: logits [N, C] or predictions [N, T]."""
        feats = self.transform(x)
        return self.head_(feats).cpu()

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        out = self.decision_function(x)
        if self.task == "classification":
            return self.classes_[out.argmax(1)]
        return out.squeeze(1) if out.shape[1] == 1 else out

    def score(self, x: torch.Tensor, y: Any) -> float:
        """Accuracy (classification) or R² averaged over targets (regression)."""
        pred = self.predict(x)
        if self.task == "classification":
            return float((pred == as_labels(y, "y", pred.shape[0])).float().mean())
        y = as_features(y, "y", ndim=None).detach().reshape(pred.shape[0], -1).double()
        p = pred.reshape(y.shape).double()
        ss_res = ((y - p) ** 2).sum(0)
        ss_tot = ((y - y.mean(0)) ** 2).sum(0)
        return float((1 - ss_res / ss_tot).mean())
