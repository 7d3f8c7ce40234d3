"""Regularisation grids of Ericsson et al. (2021, App. E), feature fusion, and the penalty convention.

Penalty convention (one number, ``alpha`` = λ, for every linear probe)::

    minimise   Σ_i ℓ_i(W)  +  (λ / 2) ‖W‖²_F          (intercept never penalised)

with ℓ_i = ½‖y_i − W x_i − b‖² for ridge and the multinomial cross-entropy for logistic
regression. Hence

* ridge:     ``sklearn.linear_model.Ridge(alpha=λ)``           (alpha = λ)
* logistic:  ``sklearn.linear_model.LogisticRegression(C=1/λ)`` (C = 1/λ; ``LogisticCV.C_``)
* kernel ridge keeps scikit-learn's own ``alpha`` on standardised targets.

The papers' published code passed the logistic grid value C straight to ridge as alpha;
invfast uses the convention above for both, so the best ``alpha_`` means the same thing for
classification and regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

N_VALUES = 45
KERNEL_ALPHAS = (1e-4, 1e-3, 1e-2, 1e-1, 1e0)
KERNEL_GAMMAS = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e0, 1e1, 1e2)


def alpha_grid(n_models: int = 1, n: int = N_VALUES) -> np.ndarray:
    """The published grid: ``n`` log-spaced λ in [1e-6, 1e5] for one model, shifted one decade up per
    extra fused model ([1e-5, 1e6] for two, [1e-4, 1e7] for three, and so on).

    Returns float64 [n], ascending.
    """
    if int(n_models) != n_models or n_models < 1:
        raise ValueError(f"n_models must be a positive integer, got {n_models!r}")
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    shift = int(n_models) - 1
    return np.logspace(-6 + shift, 5 + shift, int(n))


def fuse(features: Sequence[Any]) -> Any:
    """Concatenate the feature matrices of several models along the feature axis.

    features: sequence of [n, d_k] numpy arrays or tensors (same n). Returns [n, Σ d_k], numpy if
    every input is numpy, else a tensor on the first tensor's device (numpy inputs are moved there).
    Use ``alpha_grid(n_models=len(features))`` for the matching grid.
    """
    if isinstance(features, (np.ndarray, torch.Tensor)) or len(features) == 0:
        raise TypeError("fuse expects a list of feature matrices, e.g. fuse([f_spatial, f_appearance])")
    for i, f in enumerate(features):
        if not isinstance(f, (np.ndarray, torch.Tensor)):
            raise TypeError(f"features[{i}] must be a numpy array or tensor, got {type(f).__name__}")
        if f.ndim != 2:
            raise ValueError(f"features[{i}] must be 2-D [n, d], got shape {tuple(f.shape)}")
    ns = [int(f.shape[0]) for f in features]
    if len(set(ns)) != 1:
        raise ValueError(f"all feature matrices must have the same number of samples, got {ns}")
    if all(isinstance(f, np.ndarray) for f in features):
        return np.concatenate(features, axis=1)
    ref = next(f for f in features if isinstance(f, torch.Tensor))
    ts = [torch.as_tensor(f, device=ref.device) for f in features]
    dtype = ts[0].dtype
    for t in ts[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return torch.cat([t.to(dtype) for t in ts], dim=1)
