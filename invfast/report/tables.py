"""Tables of invariance results: rows, data frames, Table-1-style markdown, JSON, significance marks."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeGuard

import torch

from invfast.io import atomic_write_text
from invfast.significance import most_invariant

__all__ = [
    "FAMILY_ORDER",
    "ResultLike",
    "as_results",
    "ordered_transforms",
    "significance",
    "to_rows",
    "to_frame",
    "to_markdown",
    "to_json",
    "common_images",
]

FAMILY_ORDER = ("spatial", "appearance")
_HEADINGS = {
    "distance": "Mahalanobis distance (lower = more invariant)",
    "cosine": "standardised cosine similarity (1 = invariant)",
    "equivariance": "linear equivariance: cross-validated R² of the best linear map (1 = the transform acts linearly)",
}
#: the TransformResult attribute each table metric reads
_ATTRS = {"distance": "mean_distance", "cosine": "mean_cosine", "equivariance": "mean_linear_equivariance"}


class ResultLike(Protocol):
    """What the report needs of an :class:`invfast.measure.InvarianceResult` (the report does not
    import the measurement package, which depends on it)."""

    model: str
    transforms: dict[str, Any]

    def to_dict(self, per_image: bool = ...) -> dict[str, Any]: ...

    def __getitem__(self, name: str) -> Any: ...


def _is_result(r: Any) -> TypeGuard[ResultLike]:
    return all(hasattr(r, a) for a in ("model", "transforms", "to_dict", "__getitem__")) and isinstance(
        r.transforms, dict
    )


def as_results(results: ResultLike | Sequence[ResultLike]) -> list[ResultLike]:
    """A list of results with distinct model names, checked."""
    if _is_result(results):
        lst = [results]
    elif isinstance(results, Iterable):
        lst = list(results)
    else:
        raise TypeError(f"expected an InvarianceResult or a sequence of them, got {type(results).__name__}")
    if not lst:
        raise ValueError("no results given")
    for r in lst:
        if not _is_result(r):
            raise TypeError(f"expected InvarianceResult objects, got {type(r).__name__}")
    names = [r.model for r in lst]
    if len(set(names)) != len(names):
        raise ValueError(
            f"results need distinct model names to be compared, got {names}; pass name=... to "
            "measure_invariance or set result.model"
        )
    return lst


def ordered_transforms(results: Sequence[ResultLike]) -> list[tuple[str, str]]:
    """(name, family) of every transform in any result: spatial first, then appearance, then the rest."""
    seen: dict[str, str] = {}
    for r in results:
        for t in r.transforms.values():
            seen.setdefault(t.name, t.family)
    rank = {f: i for i, f in enumerate(FAMILY_ORDER)}
    return sorted(seen.items(), key=lambda kv: rank.get(kv[1], len(rank)))


def significance(results: Sequence[ResultLike], *, delta: float = 0.05) -> dict[str, str | None]:
    """Transform -> the model that is significantly most invariant by standardised cosine (Ericsson et al. 2021, App. F:
    Hoeffding with Bonferroni over the comparisons, on per-image scores of the same images), or None.
    Transforms that some model lacks or kept no per-image scores for are left out."""
    results = as_results(results)
    out: dict[str, str | None] = {}
    if len(results) < 2:
        return out
    for name, _ in ordered_transforms(results):
        if not all(name in r.transforms and r[name].per_image_cosine is not None for r in results):
            continue
        vals = common_images(results, name, "cosine")
        if next(iter(vals.values())).numel() == 0:
            continue
        out[name] = most_invariant(vals, delta=delta, bounds=(-2.0, 2.0), higher_is_more_invariant=True)
    return out


def to_rows(results: ResultLike | Sequence[ResultLike], *, delta: float = 0.05) -> list[dict[str, Any]]:
    """One dict per (model, transform): mean distance / cosine (identity excluded), identity values,
    number of images and pairs, and ``best`` (significantly most invariant by cosine)."""
    results = as_results(results)
    best = significance(results, delta=delta)
    rows = []
    for r in results:
        for t in r.transforms.values():
            rows.append(
                {
                    "model": r.model,
                    "transform": t.name,
                    "family": t.family,
                    "distance": t.mean_distance,
                    "cosine": t.mean_cosine,
                    "identity_distance": t.identity_distance,
                    "identity_cosine": t.identity_cosine,
                    "n_images": t.n_images,
                    "n_pairs": t.n_pairs,
                    "best": best.get(t.name) == r.model,
                }
            )
    return rows


def to_frame(results: ResultLike | Sequence[ResultLike], *, delta: float = 0.05) -> Any:
    """A pandas DataFrame of :func:`to_rows` when pandas is installed, else the list of row dicts."""
    rows = to_rows(results, delta=delta)
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame(rows)


def _fmt(v: float | None, digits: int) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def to_markdown(
    results: ResultLike | Sequence[ResultLike],
    *,
    metrics: Sequence[str] = ("distance", "cosine"),
    digits: int = 2,
    delta: float = 0.05,
    marks: bool = True,
) -> str:
    """Table 1 of Ericsson et al.: one row per model, transforms as columns grouped spatial | appearance
    (a family row above the names), one block per metric. With several models, the cosine of the
    model that is significantly most invariant to a transform is marked •."""
    results = as_results(results)
    for m in metrics:
        if m not in _HEADINGS:
            raise ValueError(f"metrics must be among 'distance', 'cosine' and 'equivariance', got {m!r}")
    cols = ordered_transforms(results)
    best = significance(results, delta=delta) if marks else {}
    out = []
    for m in metrics:
        out.append(f"**{_HEADINGS[m]}**\n")
        fam_row, prev = [], None
        for _, fam in cols:
            fam_row.append(fam if fam != prev else "")
            prev = fam
        out.append("| model | " + " | ".join(n for n, _ in cols) + " |")
        out.append("|---|" + "|".join("---:" for _ in cols) + "|")
        out.append("| *family* | " + " | ".join(f"*{f}*" if f else "" for f in fam_row) + " |")
        for r in results:
            cells = []
            for name, _ in cols:
                t = r.transforms.get(name)
                v = None if t is None else getattr(t, _ATTRS[m], None)
                cell = _fmt(v, digits)
                if m == "cosine" and best.get(name) == r.model:
                    cell += " •"
                cells.append(cell)
            out.append(f"| {r.model} | " + " | ".join(cells) + " |")
        out.append("")
    if marks and len(results) > 1 and "cosine" in metrics:
        out.append(f"• significantly most invariant (Hoeffding, δ = {delta} Bonferroni-corrected, per-image cosine).")
    out.extend(_reference_lines(results))
    return "\n".join(out).rstrip() + "\n"


def _reference_lines(results: Sequence[ResultLike]) -> list[str]:
    """One line per model with the size of its reference statistics, N/D, and a warning when N <= D."""
    lines = []
    for r in results:
        stats = getattr(r, "stats", None) or {}
        n, d = stats.get("n"), stats.get("dim")
        if not (n and d):
            continue
        line = f"Reference statistics of {r.model}: N = {n} images, D = {d} features, N/D = {n / d:.2f}."
        if n <= d and stats.get("shrinkage") == "ledoit-wolf":
            line += (
                f" N ≤ D: Ledoit–Wolf shrinkage (λ = {stats.get('lambda', float('nan')):.3g}) keeps the "
                "covariance invertible; more reference images would still sharpen the whitening."
            )
        elif n <= d:
            line += (
                " **N ≤ D: the whitened cosine collapses towards 0** — use more reference images, --stats "
                "from a larger set, or stronger shrinkage."
            )
        lines.append(line)
    return [""] + lines if lines else []


def to_json(
    results: ResultLike | Sequence[ResultLike],
    path: str | os.PathLike | None = None,
    *,
    per_image: bool = False,
    delta: float = 0.05,
    indent: int | None = 2,
) -> str:
    """JSON with every result (per-image values only if ``per_image``) and the significance marks."""
    results = as_results(results)
    doc = {"results": [r.to_dict(per_image=per_image) for r in results], "best": significance(results, delta=delta)}
    text = json.dumps(doc, indent=indent, allow_nan=False)
    if path is not None:
        atomic_write_text(path, text)
    return text


def common_images(results: Sequence[ResultLike], transform: str, metric: str = "cosine") -> dict[str, torch.Tensor]:
    """Per-image ``metric`` of each model on ``transform``, restricted to images every model scored."""
    vals = {}
    for r in results:
        t = r[transform]
        v = getattr(t, f"per_image_{metric}")
        if v is None:
            raise ValueError(f"model {r.model!r} kept no per-image scores for {transform!r}")
        vals[r.model] = v
    lengths = {k: v.shape[0] for k, v in vals.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(
            f"models were measured on different images for {transform!r} (counts {lengths}); "
            "significance needs the same images for every model"
        )
    keep = torch.ones(next(iter(lengths.values())), dtype=torch.bool)
    for v in vals.values():
        keep &= ~torch.isnan(v)
    return {k: v[keep] for k, v in vals.items()}
