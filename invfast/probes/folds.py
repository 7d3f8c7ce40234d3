"""Cross-validation folds: plain K-fold (contiguous, as ``sklearn.model_selection.KFold``)
and stratified K-fold (the same allocation as ``StratifiedKFold``), optionally shuffled.

Without shuffling the folds are identical to scikit-learn's, so CV scores can be compared
value for value with ``GridSearchCV(..., cv=5)``.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def kfold(n: int, n_folds: int, shuffle: bool = False, seed: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_folds`` (train, test) index pairs over ``n`` samples; the first ``n % n_folds`` folds get one extra."""
    if n_folds < 2:
        raise ValueError(f"cv must be at least 2 folds, got {n_folds}")
    if n < n_folds:
        raise ValueError(f"cannot split n_samples={n} into {n_folds} folds; give at least {n_folds} samples "
                         "or fewer folds (cv >= 2)")
    order = np.arange(n)
    if shuffle:
        np.random.default_rng(seed).shuffle(order)
    sizes = np.full(n_folds, n // n_folds)
    sizes[: n % n_folds] += 1
    out, start = [], 0
    for size in sizes:
        test = order[start:start + size]
        train = np.concatenate([order[:start], order[start + size:]])
        out.append((np.sort(train), np.sort(test)))
        start += size
    return out


def stratified_kfold(codes: np.ndarray, n_folds: int, shuffle: bool = False,
                     seed: int | None = None, classes: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Stratified folds for integer class ``codes`` [n]; each fold keeps the class proportions.

    Raises ValueError when a class has fewer members than folds (stratification is impossible)
    and names the fallbacks.
    """
    codes = np.asarray(codes)
    n = codes.shape[0]
    if n_folds < 2:
        raise ValueError(f"cv must be at least 2 folds, got {n_folds}")
    if n < n_folds:
        raise ValueError(f"cannot split n_samples={n} into {n_folds} folds; give at least {n_folds} samples "
                         "or fewer folds (cv >= 2)")
    # classes numbered by first appearance, as StratifiedKFold does
    _, first, inv = np.unique(codes, return_index=True, return_inverse=True)
    _, perm = np.unique(first, return_inverse=True)
    enc = perm[inv]
    counts = np.bincount(enc)
    small = np.flatnonzero(counts < n_folds)
    if small.size:
        names = np.unique(codes)[np.argsort(first)][small] if classes is None else \
            np.asarray(classes)[np.unique(codes)[np.argsort(first)][small]]
        raise ValueError(
            f"stratified {n_folds}-fold CV is impossible: class(es) {names.tolist()} have only "
            f"{counts[small].tolist()} member(s), fewer than the {n_folds} folds. Fallbacks: use fewer folds "
            f"(cv={max(2, int(counts.min()))}), pass stratify=False for plain shuffled K-fold "
            "(some training folds may then miss a class), or drop the rare classes.")
    order = np.sort(enc)
    alloc = np.asarray([np.bincount(order[i::n_folds], minlength=counts.size) for i in range(n_folds)])
    test_fold = np.empty(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    for k in range(counts.size):
        fk = np.arange(n_folds).repeat(alloc[:, k])
        if shuffle:
            rng.shuffle(fk)
        test_fold[enc == k] = fk
    idx = np.arange(n)
    return [(idx[test_fold != f], idx[test_fold == f]) for f in range(n_folds)]


def resolve_cv(cv: Any, n: int, codes: np.ndarray | None = None, shuffle: bool = False,
               seed: int | None = None, classes: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Turn ``cv`` (an int, a splitter with ``.split``, or an iterable of (train, test)) into index pairs.

    With an int, classification (``codes`` given) gets stratified folds, regression plain K-fold.
    """
    if isinstance(cv, (int, np.integer)) and not isinstance(cv, bool):
        if codes is not None:
            return stratified_kfold(codes, int(cv), shuffle=shuffle, seed=seed, classes=classes)
        return kfold(n, int(cv), shuffle=shuffle, seed=seed)
    if hasattr(cv, "split"):
        dummy = np.zeros((n, 1))
        splits = list(cv.split(dummy, codes if codes is not None else None))
    else:
        try:
            splits = list(cv)
        except TypeError:
            raise TypeError(f"cv must be an int, a splitter with .split(X, y) or an iterable of (train, test) "
                            f"index pairs, got {type(cv).__name__}") from None
    out = []
    for i, pair in enumerate(splits):
        train, test = (np.asarray(p, dtype=np.int64).ravel() for p in pair)
        if train.size == 0 or test.size == 0:
            raise ValueError(f"cv split {i} has an empty train or test set")
        if train.min() < 0 or test.min() < 0 or max(train.max(), test.max()) >= n:
            raise ValueError(f"cv split {i} indexes outside 0..{n - 1}")
        out.append((train, test))
    if len(out) < 1:
        raise ValueError("cv produced no splits")
    return out
