"""Linear and kernel readouts on frozen features, with exact cross-validation (Ericsson et al. 2021, App. E;
Chavhan et al. 2023, A.2).

* :class:`RidgeCV` — multi-output ridge; every λ of a fold from one eigendecomposition.
* :class:`LogisticCV` — multinomial L2 logistic regression; folds batched, preconditioned L-BFGS along the path.
* :class:`KernelRidgeCV` — RBF kernel ridge; every α of a (fold, γ) from one eigendecomposition.
* :func:`few_shot` — N-way K-shot episodes and few-shot regression, mean with a 95% CI.
* :func:`alpha_grid`, :func:`fuse` — the 45-value grids (shifted for fused models) and concatenation.

Penalty convention (see :mod:`invfast.probes.grids`): ``alpha`` = λ multiplies ½‖W‖² against a
summed loss, so ridge's λ is scikit-learn's ``alpha`` and logistic's λ is ``1 / C``.

Every estimator is a scikit-learn estimator (``BaseEstimator`` with scikit-learn's validation and
splitters; ``check_estimator`` passes) with ``alphas`` /
``alpha_``, ``best_index_``, ``best_score_``, ``best_params_`` and a ``cv_results_`` in
GridSearchCV's layout (``params``, ``param_*``, ``mean_test_score``, ``std_test_score``,
``split{k}_test_score``, ``rank_test_score``), loadable with ``pandas.DataFrame(cv_results_)``.
The 0.1 names (``penalties=``, ``penalty_``, ``warm_start=``, ``penalty_grid``, the old
``cv_results_`` keys) were removed in 0.4 (docs/probes.md lists their replacements).
"""

from __future__ import annotations

import importlib
from typing import Any

from invfast.probes._base import ConvergenceWarning, DataConversionWarning, NotFittedError
from invfast.probes.few_shot import (
    FewShotResult,
    episode_accuracy,
    few_shot,
    few_shot_classification,
    few_shot_regression,
    regression_splits,
    sample_episodes,
)
from invfast.probes.grids import KERNEL_ALPHAS, KERNEL_GAMMAS, alpha_grid, fuse
from invfast.probes.kernel_ridge import KernelRidgeCV
from invfast.probes.logistic import LogisticCV
from invfast.probes.ridge import RidgeCV

__all__ = [
    "RidgeCV",
    "LogisticCV",
    "KernelRidgeCV",
    "few_shot",
    "few_shot_classification",
    "few_shot_regression",
    "episode_accuracy",
    "regression_splits",
    "sample_episodes",
    "FewShotResult",
    "fuse",
    "alpha_grid",
    "KERNEL_ALPHAS",
    "KERNEL_GAMMAS",
    "ConvergenceWarning",
    "DataConversionWarning",
    "NotFittedError",
    "InvarianceProbe",
]


def __getattr__(name: str) -> Any:
    if name == "InvarianceProbe":
        return importlib.import_module("invfast.probes.invariance_probe").InvarianceProbe
    raise AttributeError(f"module 'invfast.probes' has no attribute {name!r}")
