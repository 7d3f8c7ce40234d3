"""Linear and kernel readouts on frozen features, with exact cross-validation (SPEC §4).

* :class:`RidgeCV` — multi-output ridge; every λ of a fold from one eigendecomposition.
* :class:`LogisticCV` — multinomial L2 logistic regression; folds batched, warm-started path.
* :class:`KernelRidgeCV` — RBF kernel ridge; every α of a (fold, γ) from one eigendecomposition.
* :func:`few_shot` — N-way K-shot episodes and few-shot regression, mean with a 95% CI.
* :func:`penalty_grid`, :func:`fuse` — the 45-value grids (shifted for fused models) and concatenation.

Penalty convention (see :mod:`invfast.probes.grids`): λ multiplies ½‖W‖² against a summed loss,
so ridge's λ is scikit-learn's ``alpha`` and logistic's λ is ``1 / C``.

``cv_results_`` of every estimator holds 'penalties', 'mean_score', 'std_score' (over folds),
'fold_scores' [values, folds], 'best_index', 'best_penalty', 'best_score', 'best_std'.
"""
from __future__ import annotations

import importlib
from typing import Any

from invfast.probes.few_shot import FewShotResult, few_shot, few_shot_classification, few_shot_regression
from invfast.probes.grids import KERNEL_ALPHAS, KERNEL_GAMMAS, fuse, penalty_grid
from invfast.probes.kernel_ridge import KernelRidgeCV
from invfast.probes.logistic import ConvergenceWarning, LogisticCV
from invfast.probes.ridge import RidgeCV

__all__ = ["RidgeCV", "LogisticCV", "KernelRidgeCV", "few_shot", "few_shot_classification",
           "few_shot_regression", "FewShotResult", "fuse", "penalty_grid", "KERNEL_ALPHAS", "KERNEL_GAMMAS",
           "ConvergenceWarning", "InvarianceProbe"]


def __getattr__(name: str) -> Any:
    if name == "InvarianceProbe":
        return importlib.import_module("invfast.probes.invariance_probe").InvarianceProbe
    raise AttributeError(f"module 'invfast.probes' has no attribute {name!r}")
