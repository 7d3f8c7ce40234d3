"""Matrix pictures: pairwise significance counts of a comparison of several models (models × models),
invariance-vs-transfer correlations (transforms × tasks) and any table of numbers as a heatmap. Each
returns a ``matplotlib.figure.Figure`` and saves it to ``path`` when given."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from invfast.report.plots import _figure, _save


def plot_significance_matrix(
    wins: np.ndarray,
    labels: Sequence[str],
    *,
    tested: np.ndarray | None = None,
    title: str = "significantly more invariant",
    path: str | os.PathLike | None = None,
) -> Any:
    """Models × models: entry (i, j) of ``wins [R, R]`` = on how many transforms model i is significantly
    more invariant than model j, written as ``k/T`` with ``T`` from ``tested [R, R]`` (the transforms on
    which the pair was tested) when given; the colour is k / T (k alone without ``tested``)."""
    wins = np.asarray(wins)
    r = len(labels)
    if wins.shape != (r, r):
        raise ValueError(f"wins must be [{r}, {r}] for {r} labels, got {list(wins.shape)}")
    if tested is not None and np.asarray(tested).shape != (r, r):
        raise ValueError(f"tested must be [{r}, {r}] like wins, got {list(np.asarray(tested).shape)}")
    frac = wins.astype(np.float64)
    if tested is not None:
        tested = np.asarray(tested)
        frac = np.where(tested > 0, wins / np.maximum(tested, 1), np.nan)
    np.fill_diagonal(frac, np.nan)
    side = max(3.2, 0.55 * r + 2.2)
    fig = _figure(side + 0.8, side)
    ax = fig.add_subplot(1, 1, 1)
    top = 1.0 if tested is not None else max(1.0, float(np.nanmax(frac)) if np.isfinite(frac).any() else 1.0)
    im = ax.imshow(frac, cmap="Blues", vmin=0.0, vmax=top)
    ax.set_xticks(range(r))
    ax.set_xticklabels(labels, fontsize=7, rotation=45, ha="right")
    ax.set_yticks(range(r))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("… than this model", fontsize=8)
    ax.set_ylabel("this model is more invariant …", fontsize=8)
    for i in range(r):
        for j in range(r):
            if i == j:
                continue
            text = f"{wins[i, j]}" if tested is None else (f"{wins[i, j]}/{tested[i, j]}" if tested[i, j] else "–")
            dark = np.isfinite(frac[i, j]) and frac[i, j] > 0.6 * top
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_title(title, fontsize=8)
    fig.colorbar(im, ax=ax, label="share of transforms" if tested is not None else "transforms", shrink=0.8)
    return _save(fig, path)


def plot_correlation(
    values: np.ndarray,
    rows: Sequence[str],
    cols: Sequence[str],
    *,
    marks: np.ndarray | None = None,
    title: str = "rank correlation",
    path: str | os.PathLike | None = None,
    digits: int = 2,
) -> Any:
    """A correlation table as a heatmap: ``values [len(rows), len(cols)]`` in [-1, 1] on a diverging
    scale (NaN blank), the value written in each cell, followed by * where ``marks`` (bool, same shape)."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (len(rows), len(cols)):
        raise ValueError(f"values must be [{len(rows)}, {len(cols)}] (rows x cols), got {list(values.shape)}")
    if marks is not None and np.asarray(marks).shape != values.shape:
        raise ValueError(
            f"marks must have the shape of values {list(values.shape)}, got {list(np.asarray(marks).shape)}"
        )
    fig = _figure(max(3.4, 1.0 * len(cols) + 2.4), max(2.4, 0.32 * len(rows) + 1.4))
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(values, cmap="RdBu_r", vmin=-1.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, fontsize=8, rotation=30, ha="right")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=7)
    for i in range(len(rows)):
        for j in range(len(cols)):
            if np.isfinite(values[i, j]):
                star = "*" if marks is not None and bool(np.asarray(marks)[i, j]) else ""
                ax.text(
                    j,
                    i,
                    f"{values[i, j]:+.{digits}f}{star}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if abs(values[i, j]) > 0.7 else "black",
                )
    ax.set_title(title, fontsize=8)
    fig.colorbar(im, ax=ax, label="ρ", shrink=0.8)
    return _save(fig, path)


def plot_matrix(
    values: Any,
    rows: Sequence[str],
    cols: Sequence[str],
    *,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    label: str = "",
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    cmap: str = "viridis",
    digits: int = 2,
    path: str | os.PathLike | None = None,
) -> Any:
    """Any table of numbers as a heatmap on a sequential scale (a transfer matrix, sensitivities):
    ``values [len(rows), len(cols)]`` (NaN blank), each value written in its cell; ``vmin`` / ``vmax``
    None: the data's range."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (len(rows), len(cols)):
        raise ValueError(f"values must be [{len(rows)}, {len(cols)}] (rows x cols), got {list(values.shape)}")
    finite = values[np.isfinite(values)]
    lo = vmin if vmin is not None else (float(finite.min()) if finite.size else 0.0)
    hi = vmax if vmax is not None else (float(finite.max()) if finite.size else 1.0)
    fig = _figure(max(3.4, 0.62 * len(cols) + 2.4), max(2.6, 0.36 * len(rows) + 1.6))
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(values, cmap=cmap, vmin=lo, vmax=hi if hi > lo else lo + 1e-9, aspect="auto")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, fontsize=7, rotation=35, ha="right")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=7)
    mid = (lo + hi) / 2
    for i in range(len(rows)):
        for j in range(len(cols)):
            if np.isfinite(values[i, j]):
                dark = values[i, j] < mid if cmap == "viridis" else values[i, j] > mid
                colour = "white" if dark else "black"
                ax.text(j, i, f"{values[i, j]:.{digits}f}", ha="center", va="center", fontsize=6, color=colour)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=8)
    fig.colorbar(im, ax=ax, label=label, shrink=0.8)
    return _save(fig, path)
