"""A cheap probe of the model being trained: kNN and linear accuracy of its frozen features on a
small labelled held-out set, so a training log shows whether the features learn (the loss alone
does not: a contrastive loss can fall while the features get worse for the task).

The held-out images are split once into a fit part and a test part (stratified, deterministic);
each call extracts the features of all of them in eval mode and reports

- ``probe/knn``: weighted k-nearest-neighbour accuracy on the test part (cosine similarity, the
  fit part as the memory bank, votes weighted by ``exp(similarity / T)`` as in InstDisc / solo-learn);
- ``probe/linear``: multinomial logistic regression on standardised features (fit-part mean and std),
  the best test accuracy over a few penalties (:class:`invfast.probes.LogisticCV` on the one split);
- ``probe/feature_std_min`` / ``probe/feature_std_median``: per-dimension standard deviation of the
  raw features over the held-out images (a dimension near 0 carries nothing: collapse);
- ``probe/effective_rank``: exp of the entropy of the normalised singular values² of the centred
  features (1 = every image on one line, D = spread evenly over all D dimensions).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["HeldoutProbe", "knn_accuracy"]


def knn_accuracy(
    fit: torch.Tensor,
    y_fit: torch.Tensor,
    test: torch.Tensor,
    y_test: torch.Tensor,
    k: int = 20,
    temperature: float = 0.07,
    n_classes: int | None = None,
) -> float:
    """Accuracy of a similarity-weighted kNN classifier: features [N, D] (any scale; compared by cosine),
    integer labels [N]. Each test point votes over its ``k`` most similar fit points with weight
    ``exp(cos / temperature)``; ties go to the lower class index."""
    if fit.shape[0] < 1 or test.shape[0] < 1:
        raise ValueError("knn_accuracy needs at least one fit and one test point")
    c = int(n_classes if n_classes is not None else int(max(y_fit.max(), y_test.max())) + 1)
    a = torch.nn.functional.normalize(fit.double(), dim=1)
    b = torch.nn.functional.normalize(test.double(), dim=1)
    sim = b @ a.T  # [test, fit]
    k = min(int(k), a.shape[0])
    top, idx = sim.topk(k, dim=1)
    votes = torch.zeros(b.shape[0], c, dtype=torch.float64, device=sim.device)
    votes.scatter_add_(1, y_fit.to(sim.device).long()[idx], torch.exp(top / temperature))
    return float((votes.argmax(1).cpu() == y_test.cpu().long()).double().mean())


class HeldoutProbe:
    """kNN and linear accuracy of an encoder's features on labelled held-out images.

    Args:
        images: uint8 [N, 3, H, W] (or float 0..1) held-out images; ``labels``: integer classes [N].
        fit_fraction: share of each class used to fit (the rest is scored), split deterministically.
        k, temperature: of the kNN vote. alphas: penalties λ (= 1/C) of the logistic probe.
        max_iter: L-BFGS iterations per penalty.
    """

    def __init__(
        self,
        images: torch.Tensor,
        labels: Any,
        fit_fraction: float = 0.5,
        k: int = 20,
        temperature: float = 0.07,
        alphas: tuple[float, ...] = (1e-1, 1e0, 1e1, 1e2),
        max_iter: int = 100,
    ) -> None:
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be a tensor [N, 3, H, W], got {getattr(images, 'shape', type(images))}")
        y = torch.as_tensor(np.asarray(labels)).long().reshape(-1)
        if y.shape[0] != images.shape[0]:
            raise ValueError(f"labels must be one per image ({images.shape[0]}), got {y.shape[0]}")
        if not 0.0 < fit_fraction < 1.0:
            raise ValueError(f"fit_fraction must be in (0, 1), got {fit_fraction}")
        fit, test = [], []
        for c in torch.unique(y).tolist():
            members = torch.nonzero(y == c).flatten()
            cut = int(round(fit_fraction * members.numel()))
            if cut < 1 or cut >= members.numel():
                raise ValueError(f"class {c} has {members.numel()} held-out images: too few to fit and score it")
            fit.append(members[:cut])
            test.append(members[cut:])
        self.images = images
        self.labels = y
        self.fit_index = torch.cat(fit).sort().values
        self.test_index = torch.cat(test).sort().values
        self.k, self.temperature, self.alphas, self.max_iter = int(k), float(temperature), tuple(alphas), int(max_iter)

    @torch.no_grad()
    def features(
        self, features: Callable[[torch.Tensor], torch.Tensor], size: int, device: Any = "cpu", batch: int = 256
    ) -> torch.Tensor:
        """float64 [N, D] features of the held-out images (resized to ``size``, ImageNet-normalised)."""
        from invfast.pretrain.invariance import to_input

        out = [
            features(to_input(self.images[s : s + batch].to(device), size)).double().cpu()
            for s in range(0, self.images.shape[0], batch)
        ]
        return torch.cat(out)

    def scores(self, f: torch.Tensor) -> dict[str, float]:
        """The probe's numbers for features ``f`` [N, D] of the held-out images (see the module doc)."""
        from invfast.probes import LogisticCV

        if not torch.isfinite(f).all():
            raise FloatingPointError("the encoder gave non-finite features on the held-out images")
        y = self.labels
        fi, ti = self.fit_index, self.test_index
        knn = knn_accuracy(f[fi], y[fi], f[ti], y[ti], self.k, self.temperature)
        mu, sd = f[fi].mean(0), f[fi].std(0)
        z = ((f - mu) / torch.where(sd > 0, sd, torch.ones_like(sd))).numpy()
        est = LogisticCV(alphas=self.alphas, cv=[(fi.numpy(), ti.numpy())], max_iter=self.max_iter)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an unconverged fit at a weak penalty is still scored
            est.fit(z, y.numpy())
        std = f.std(0)
        s = torch.linalg.svdvals(f - f.mean(0))
        p = s.pow(2) / s.pow(2).sum().clamp_min(1e-300)
        erank = float(torch.exp(-(p * torch.log(p.clamp_min(1e-300))).sum()))
        return {
            "probe/knn": knn,
            "probe/linear": float(est.best_score_),
            "probe/feature_std_min": float(std.min()),
            "probe/feature_std_median": float(std.median()),
            "probe/effective_rank": erank,
        }

    def __call__(
        self, features: Callable[[torch.Tensor], torch.Tensor], size: int, device: Any = "cpu"
    ) -> dict[str, float]:
        """Extract the held-out features with ``features`` (eval mode is the caller's) and score them."""
        return self.scores(self.features(features, size, device))
