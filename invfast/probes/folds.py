"""Cross-validation folds from scikit-learn's splitters.

An integer ``cv`` means ``KFold(cv)`` for regression and ``StratifiedKFold(cv)`` for classification
(shuffled with ``shuffle=True, random_state=...``), exactly the folds ``GridSearchCV(..., cv=cv)``
and ``LogisticRegressionCV(cv=cv)`` use; any splitter with ``split(X, y)`` or an iterable of
(train, test) index pairs is taken as given.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.model_selection import KFold, StratifiedKFold, check_cv


def resolve_cv(
    cv: Any,
    n: int,
    y: np.ndarray | None = None,
    classifier: bool = False,
    shuffle: bool = False,
    seed: int | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``cv`` as a list of (train, test) int64 index pairs over ``n`` samples.

    y: class labels [n] for stratification (classification), else None. An int gives
    ``StratifiedKFold`` when ``classifier`` and ``y`` is given, else ``KFold``.
    """
    if isinstance(cv, (int, np.integer)) and not isinstance(cv, bool):
        k = int(cv)
        if k < 2:
            raise ValueError(f"cv must be at least 2 folds, got {k}")
        if n < k:
            raise ValueError(
                f"cannot split n_samples={n} into {k} folds; give at least {k} samples or fewer folds (at least 2)"
            )
        seed = seed if shuffle else None
        cv = (
            StratifiedKFold(k, shuffle=shuffle, random_state=seed)
            if classifier and y is not None
            else KFold(k, shuffle=shuffle, random_state=seed)
        )
    elif not hasattr(cv, "split"):
        try:
            cv = check_cv(list(cv))
        except TypeError:
            raise TypeError(
                f"cv must be an int, a splitter with .split(X, y) or an iterable of (train, test) "
                f"index pairs, got {type(cv).__name__}"
            ) from None
    splits = list(cv.split(np.zeros((n, 1)), y))
    out = []
    for i, pair in enumerate(splits):
        train, test = (np.asarray(p, dtype=np.int64).ravel() for p in pair)
        if train.size == 0 or test.size == 0:
            raise ValueError(f"cv split {i} has an empty train or test set")
        if min(train.min(), test.min()) < 0 or max(train.max(), test.max()) >= n:
            raise ValueError(f"cv split {i} indexes outside 0..{n - 1}")
        out.append((train, test))
    if not out:
        raise ValueError("cv produced no splits")
    return out
