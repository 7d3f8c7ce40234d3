"""Plots of invariance results (matplotlib, no pyplot state): per-parameter curves, a radar chart of
the spatial and appearance families, and a heatmap of models x transforms. Each returns a
``matplotlib.figure.Figure`` and saves it to ``path`` when given."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from invfast.report.tables import FAMILY_ORDER, ResultLike, as_results, ordered_transforms

_LABELS = {"distance": "Mahalanobis distance", "cosine": "standardised cosine"}


def _figure(w: float, h: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), layout="constrained")


def _save(fig: Any, path: str | os.PathLike | None) -> Any:
    if path is not None:
        from invfast.io import save_figure

        save_figure(fig, path, dpi=110)  # through a temporary and a rename, never through a link
    return fig


def _check_metric(metric: str) -> None:
    if metric not in _LABELS:
        raise ValueError(f"metric must be 'distance' or 'cosine', got {metric!r}")


def plot_curves(
    results: ResultLike | Sequence[ResultLike],
    *,
    metric: str = "cosine",
    transforms: Sequence[str] | None = None,
    path: str | os.PathLike | None = None,
    cols: int = 6,
) -> Any:
    """Mean ``metric`` over images for each grid parameter, one panel per transform, one line per model, every
    panel on one y-scale. 1-D grids are plotted against the parameter value, multi-dimensional grids against the
    index; a grid of two values (a flip: off or on) as points, with no line implying values between; identity
    parameters are marked with open circles."""
    results = as_results(results)
    _check_metric(metric)
    names = [n for n, _ in ordered_transforms(results) if transforms is None or n in transforms]
    names = [n for n in names if any(n in r.transforms and r[n].params.numel() for r in results)]
    if not names:
        raise ValueError("no transform with a parameter grid to plot (real-world results have no curves)")
    cols = max(1, min(cols, len(names)))
    rows = math.ceil(len(names) / cols)
    fig = _figure(2.6 * cols, 2.1 * rows)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    for ax, name in zip(axes.flat, names):
        for r in results:
            if name not in r.transforms:
                continue
            t = r[name]
            y = getattr(t, metric).numpy()
            x = t.params.numpy() if t.params.dim() == 1 else np.arange(t.params.shape[0])
            style = "o" if len(np.unique(x)) <= 2 else ("-" if len(y) > 8 else "o-")
            line = ax.plot(x, y, style, label=r.model, lw=1.2, ms=4)[0]
            ident = t.identity.numpy()
            if ident.any():
                ax.plot(x[ident], y[ident], "o", mfc="none", color=line.get_color(), ms=5)
        fam = results[0].transforms[name].family if name in results[0].transforms else ""
        ax.set_title(f"{name} ({fam})", fontsize=9)
        ax.tick_params(labelsize=7)
        multi = any(name in r.transforms and r[name].params.dim() == 2 for r in results)
        ax.set_xlabel("parameter index" if multi else "parameter", fontsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    axes.flat[0].set_ylabel(_LABELS[metric], fontsize=8)
    if len(results) > 1:
        axes.flat[0].legend(fontsize=7)
    return _save(fig, path)


def plot_radar(
    results: ResultLike | Sequence[ResultLike],
    *,
    metric: str = "cosine",
    path: str | os.PathLike | None = None,
) -> Any:
    """Radar charts of the mean ``metric`` per transform, one for each family (spatial, appearance;
    other families get their own), one polygon per model."""
    results = as_results(results)
    _check_metric(metric)
    cols = ordered_transforms(results)
    fams = [f for f in FAMILY_ORDER if any(c[1] == f for c in cols)]
    fams += sorted({f for _, f in cols} - set(fams))
    fig = _figure(4.2 * len(fams), 4.4)
    for k, fam in enumerate(fams):
        names = [n for n, f in cols if f == fam]
        ax = fig.add_subplot(1, len(fams), k + 1, projection="polar")
        ang = np.linspace(0, 2 * np.pi, len(names), endpoint=False)
        for r in results:
            vals = [getattr(r.transforms[n], f"mean_{metric}") if n in r.transforms else None for n in names]
            v = np.array([np.nan if x is None else x for x in vals], dtype=float)
            ax.plot(np.append(ang, ang[:1]), np.append(v, v[:1]), "-o", ms=3, lw=1.2, label=r.model)
            ax.fill(np.append(ang, ang[:1]), np.nan_to_num(np.append(v, v[:1])), alpha=0.08)
        vals_all = np.array(
            [
                getattr(r.transforms[n], f"mean_{metric}")
                if n in r.transforms and getattr(r.transforms[n], f"mean_{metric}") is not None
                else np.nan
                for r in results
                for n in names
            ],
            dtype=float,
        )
        top = np.nanmax(vals_all) if np.isfinite(vals_all).any() else 1.0
        low = np.nanmin(vals_all) if np.isfinite(vals_all).any() else 0.0
        ax.set_ylim(min(0.0, low), 1.0 if metric == "cosine" else 1.05 * top)
        ax.set_xticks(ang)
        ax.set_xticklabels(names, fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(f"{fam} — {_LABELS[metric]}", fontsize=9)
    if len(results) > 1:
        fig.axes[0].legend(fontsize=7, loc="upper right", bbox_to_anchor=(1.25, 1.12))
    return _save(fig, path)


def plot_heatmap(
    results: ResultLike | Sequence[ResultLike],
    *,
    metric: str = "cosine",
    path: str | os.PathLike | None = None,
    digits: int = 2,
) -> Any:
    """Models (rows) x transforms (columns, spatial then appearance) coloured by the mean ``metric``,
    with the values written in the cells."""
    results = as_results(results)
    _check_metric(metric)
    cols = ordered_transforms(results)
    m = np.full((len(results), len(cols)), np.nan)
    for i, r in enumerate(results):
        for j, (n, _) in enumerate(cols):
            v = getattr(r.transforms[n], f"mean_{metric}") if n in r.transforms else None
            m[i, j] = np.nan if v is None else v
    fig = _figure(max(4.0, 0.62 * len(cols) + 2.0), max(2.0, 0.45 * len(results) + 1.6))
    ax = fig.add_subplot(1, 1, 1)
    cmap = "viridis" if metric == "cosine" else "viridis_r"
    im = ax.imshow(m, aspect="auto", cmap=cmap)
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels([f"{n}\n({f[:3]})" for n, f in cols], fontsize=7, rotation=60, ha="right")
    ax.set_yticks(range(len(results)))
    ax.set_yticklabels([r.model for r in results], fontsize=8)
    finite = m[np.isfinite(m)]
    mid = float(finite.mean()) if finite.size else 0.0
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            if np.isfinite(m[i, j]):
                good = m[i, j] > mid if metric == "cosine" else m[i, j] < mid
                ax.text(
                    j,
                    i,
                    f"{m[i, j]:.{digits}f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="black" if good else "white",
                )
    fig.colorbar(im, ax=ax, label=_LABELS[metric])
    return _save(fig, path)


def plot_depth(result: ResultLike, *, path: str | os.PathLike | None = None) -> Any:
    """Invariance versus depth: for each transform, the mean standardised cosine, the mean Mahalanobis
    distance, tmeasures's normalized variance (:mod:`invfast.measure.units`) and, where measured, the linear
    equivariance (:mod:`invfast.measure.equivariance`) at every measured layer of one model, shallow to
    deep. ``result`` is a per-layer result (``result.layers``)."""
    by_layer = getattr(result, "layers", None) or {}
    layers = list(by_layer)
    if len(layers) < 2:
        raise ValueError("invariance versus depth needs a result measured at two or more layers (layers=...)")
    per = [by_layer[n] for n in layers]
    names = [n for n, _ in ordered_transforms(per)]
    panels = [
        ("mean_cosine", "standardised cosine (1 = invariant)"),
        ("mean_distance", "Mahalanobis distance (0 = invariant)"),
        ("normalized_variance", "normalized variance (0 = invariant)"),
    ]
    if any(t.linear_equivariance is not None for r in per for t in r.transforms.values()):
        panels.append(("mean_linear_equivariance", "linear equivariance R² (1 = acts linearly)"))
    if any(t.same_equivariance is not None for r in per for t in r.transforms.values()):
        panels.append(("same_equivariance", "same-equivariance (0 = maps move with the image)"))
    fig = _figure(3.85 * len(panels), 3.4)
    axes = fig.subplots(1, len(panels))
    x = np.arange(len(layers))
    collapsed = [rank_deficient(r) for r in per]
    ticks = [f"{n}\n(N ≤ D)" if c else n for n, c in zip(layers, collapsed)]
    for ax, (attr, label) in zip(axes, panels):
        for name in names:
            vals = [getattr(r.transforms[name], attr) if name in r.transforms else None for r in per]
            y = np.array([np.nan if v is None else v for v in vals], dtype=float)
            fam = per[0].transforms[name].family if name in per[0].transforms else ""
            ax.plot(x, y, "-o" if fam == "spatial" else "--s", ms=3, lw=1.1, label=name)
        for i in np.flatnonzero(collapsed):
            ax.axvspan(i - 0.4, i + 0.4, color="0.88", zorder=0, lw=0)
        ax.set_xticks(x, ticks, fontsize=7, rotation=30)
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].set_ylabel(result.model, fontsize=8)
    axes[-1].legend(fontsize=6, ncol=2, loc="best")
    if any(collapsed):
        fig.text(
            0.01,
            0.01,
            "shaded, N ≤ D: fewer reference images than features; the covariance is rank-deficient and the "
            "cosine collapses towards 0 (more images, --stats, or --shrinkage ledoit-wolf)",
            fontsize=7,
            color="0.3",
        )
    return _save(fig, path)


def rank_deficient(result: Any) -> bool:
    """Whether a (layer's) result was whitened with N ≤ D reference samples and a shrinkage that does not make up for
    it (anything but Ledoit-Wolf): its cosines collapse towards 0 (see :meth:`invfast.FeatureStats.finalize`)."""
    st = getattr(result, "stats", None) or {}
    n, d = st.get("n"), st.get("dim")
    return isinstance(n, int) and isinstance(d, int) and n <= d and st.get("shrinkage") != "ledoit-wolf"
