"""The result of an invariance measurement: per-transform scores, curves, per-image values."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from invfast.io import atomic_write, atomic_write_text
from invfast.measure.units import ratio_of_means

__all__ = ["RESULT_FORMAT", "TransformResult", "InvarianceResult"]

RESULT_FORMAT = "invfast.invariance-result/1"


@dataclass
class TransformResult:
    """Scores of one model under one transformation (or one real-world group set).

    Shapes: ``params [P]`` or ``[P, m]``; ``identity``, ``distance``, ``cosine``, ``distance_std``,
    ``cosine_std`` ``[P]`` (mean / std over images for each parameter); ``per_image_distance`` and
    ``per_image_cosine`` ``[N]`` (mean over the non-identity parameters of each image, NaN where the
    image could not be read). In real-world mode ``P = 0`` and the per-image values are per group
    (mean over all pairs of distinct views).

    Per-unit measures (:mod:`invfast.measure.units`; ``U`` units: the layer's channels, or its C x H x W
    activations with ``units='elements'``), over ``n_views`` views (the grid with the identity once) of
    ``n_images`` images, float64 ``[U]``: ``unit_view_std_sum`` (each image's standard deviation over its
    views, ddof 1, summed over images), ``unit_image_std_sum`` (each view's standard deviation over images,
    ddof 1, summed over views), ``unit_transform_variance`` (the variance over an image's views, ddof 0,
    averaged over images) and ``unit_sample_variance`` (the variance over images, ddof 0, averaged over
    views). None where not measured (results saved before issue 42 lack the standard deviations).

    ``linear_equivariance`` float64 ``[P]`` (measured with ``equivariance=True``, else None): per parameter, the
    cross-validated R² of the best affine map from an image's features to its view's
    (:func:`invfast.measure.equivariance.linear_equivariance`): 1 = the transform acts on the features as a
    linear map, 0 = no better than the views' mean.
    """

    name: str
    family: str
    mean_distance: float | None
    mean_cosine: float | None
    n_images: int
    params: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    identity: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.bool))
    distance: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    cosine: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    distance_std: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    cosine_std: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.float64))
    identity_distance: float | None = None
    identity_cosine: float | None = None
    per_image_distance: torch.Tensor | None = None
    per_image_cosine: torch.Tensor | None = None
    pair_scores: dict[str, str] | None = None
    n_pairs: int = 0
    unit_transform_variance: torch.Tensor | None = None
    unit_sample_variance: torch.Tensor | None = None
    unit_view_std_sum: torch.Tensor | None = None
    unit_image_std_sum: torch.Tensor | None = None
    n_views: int | None = None
    linear_equivariance: torch.Tensor | None = None
    unit_same_view_std_sum: torch.Tensor | None = None
    unit_same_image_std_sum: torch.Tensor | None = None

    @property
    def unit_same_equivariance(self) -> torch.Tensor | None:
        """float64 [U]: tmeasures's same-equivariance of every C x H x W element: the normalized variance of the
        feature maps after each view's maps are brought back by the transform's forward map
        (:mod:`invfast.measure.mapped_back`); 0 = the maps move exactly as the image does. None where not
        measured (``equivariance=True`` with ``units='elements'``, affine built-ins, [C, H, W] layers)."""
        return self._std_ratio(self.unit_same_view_std_sum, self.unit_same_image_std_sum)

    @property
    def same_equivariance(self) -> float | None:
        """The layer's same-equivariance: the mean of :attr:`unit_same_equivariance` where it is defined."""
        return _nanmean(self.unit_same_equivariance)

    @property
    def mean_linear_equivariance(self) -> float | None:
        """The mean of :attr:`linear_equivariance` over the non-identity parameters where it is defined (all
        of them when every parameter is the identity); None when not measured."""
        eq = self.linear_equivariance
        if eq is None:
            return None
        keep = ~self.identity if bool((~self.identity).any()) else torch.ones_like(self.identity)
        return _nanmean(eq[keep])

    @property
    def unit_normalized_variance(self) -> torch.Tensor | None:
        """float64 [U]: tmeasures's normalized variance of each unit (``NormalizedVarianceInvariance``,
        tmeasures 1.2.11): the mean over images of the standard deviation over the views over the mean over
        views of the standard deviation over images, both ddof 1. 0 = the unit is invariant to this
        transform. NaN where the denominator is 0 (tmeasures gives 1 there, or +inf when the numerator is
        > 0). None for results saved without the standard deviations."""
        return self._std_ratio(self.unit_view_std_sum, self.unit_image_std_sum)

    def _std_ratio(self, view_std_sum: torch.Tensor | None, image_std_sum: torch.Tensor | None) -> torch.Tensor | None:
        """The normalized variance from its two sums: mean over images of the standard deviation over the views
        over the mean over views of the standard deviation over images (NaN where the latter is 0)."""
        if view_std_sum is None or image_std_sum is None or not self.n_views:
            return None
        return ratio_of_means(view_std_sum / max(self.n_images, 1), image_std_sum / self.n_views)

    @property
    def normalized_variance(self) -> float | None:
        """The layer's normalized variance: the mean of :attr:`unit_normalized_variance` over the units where
        it is defined (tmeasures's ``per_layer_average`` also averages its 1 of the dead units in)."""
        return _nanmean(self.unit_normalized_variance)

    @property
    def unit_variance_ratio(self) -> torch.Tensor | None:
        """float64 [U]: each unit's transformational variance over its sample variance
        (:attr:`unit_transform_variance` / :attr:`unit_sample_variance`, ddof 0; NaN where the latter is 0):
        invfast's per-unit measure before issue 42, a ratio of variances where tmeasures's normalized
        variance is a ratio of standard deviations."""
        if self.unit_transform_variance is None or self.unit_sample_variance is None:
            return None
        return ratio_of_means(self.unit_transform_variance, self.unit_sample_variance)

    @property
    def variance_ratio(self) -> float | None:
        """The layer's variance ratio: the mean of :attr:`unit_variance_ratio` where it is defined."""
        return _nanmean(self.unit_variance_ratio)

    def to_dict(self, per_image: bool = True) -> dict[str, Any]:
        def lst(t: torch.Tensor | None) -> Any:
            return None if t is None else _nan_to_none(t.tolist())

        d = {
            "name": self.name,
            "family": self.family,
            "mean_distance": self.mean_distance,
            "mean_cosine": self.mean_cosine,
            "identity_distance": self.identity_distance,
            "identity_cosine": self.identity_cosine,
            "n_images": self.n_images,
            "n_pairs": self.n_pairs,
            "params": lst(self.params),
            "identity": self.identity.tolist(),
            "distance": lst(self.distance),
            "cosine": lst(self.cosine),
            "distance_std": lst(self.distance_std),
            "cosine_std": lst(self.cosine_std),
            "pair_scores": self.pair_scores,
            "normalized_variance": self.normalized_variance,
            "variance_ratio": self.variance_ratio,
            "n_views": self.n_views,
            "linear_equivariance": lst(self.linear_equivariance),
            "mean_linear_equivariance": self.mean_linear_equivariance,
            "same_equivariance": self.same_equivariance,
        }
        if per_image:
            d["unit_transform_variance"] = lst(self.unit_transform_variance)
            d["unit_sample_variance"] = lst(self.unit_sample_variance)
            d["unit_view_std_sum"] = lst(self.unit_view_std_sum)
            d["unit_image_std_sum"] = lst(self.unit_image_std_sum)
            d["unit_same_view_std_sum"] = lst(self.unit_same_view_std_sum)
            d["unit_same_image_std_sum"] = lst(self.unit_same_image_std_sum)
            d["per_image_distance"] = lst(self.per_image_distance)
            d["per_image_cosine"] = lst(self.per_image_cosine)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TransformResult:
        def ten(v: Any, dtype: torch.dtype = torch.float64) -> torch.Tensor | None:
            if v is None:
                return None
            return torch.tensor(_none_to_nan(v), dtype=dtype)

        def req(key: str) -> torch.Tensor:
            t = ten(d[key])
            if t is None:
                raise ValueError(f"transform {d['name']!r} of the result holds no {key!r} (null): the file is damaged")
            return t

        return cls(
            name=d["name"],
            family=d["family"],
            mean_distance=d["mean_distance"],
            mean_cosine=d["mean_cosine"],
            n_images=d["n_images"],
            params=req("params"),
            identity=torch.tensor(d["identity"], dtype=torch.bool),
            distance=req("distance"),
            cosine=req("cosine"),
            distance_std=req("distance_std"),
            cosine_std=req("cosine_std"),
            identity_distance=d.get("identity_distance"),
            identity_cosine=d.get("identity_cosine"),
            per_image_distance=ten(d.get("per_image_distance")),
            per_image_cosine=ten(d.get("per_image_cosine")),
            pair_scores=d.get("pair_scores"),
            n_pairs=d.get("n_pairs", 0),
            unit_transform_variance=ten(d.get("unit_transform_variance")),
            unit_sample_variance=ten(d.get("unit_sample_variance")),
            unit_view_std_sum=ten(d.get("unit_view_std_sum")),
            unit_image_std_sum=ten(d.get("unit_image_std_sum")),
            n_views=d.get("n_views"),
            linear_equivariance=ten(d.get("linear_equivariance")),
            unit_same_view_std_sum=ten(d.get("unit_same_view_std_sum")),
            unit_same_image_std_sum=ten(d.get("unit_same_image_std_sum")),
        )


@dataclass
class InvarianceResult:
    """How invariant one model is to each transformation.

    ``transforms`` maps transform name -> :class:`TransformResult` (in measurement order);
    ``stats`` describes the reference statistics (n, dim, shrinkage, λ); ``errors`` the images that
    could not be read; ``meta`` the run (data, grid size, device, timings, ``meta['config']``, and
    ``meta['images']``: the image set's identity, for comparing runs).

    ``layer`` names the layer these numbers are from ('output': what the model returns). When several
    layers were measured (``layers=...``), ``layers`` maps every layer name -> its own result (in depth
    order) and this result is the last (deepest) one's.
    """

    model: str
    transforms: dict[str, TransformResult]
    n_images: int
    stats: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, Any] = field(default_factory=lambda: {"count": 0, "examples": []})
    meta: dict[str, Any] = field(default_factory=dict)
    layer: str = "output"
    layers: dict[str, InvarianceResult] = field(default_factory=dict)

    def __getitem__(self, name: str) -> TransformResult:
        if name not in self.transforms:
            raise KeyError(f"no transform {name!r} in this result; it has {list(self.transforms)}")
        return self.transforms[name]

    def means(self, metric: str = "cosine") -> dict[str, float | None]:
        """Transform name -> mean ``metric`` ('distance' or 'cosine'), identity parameters excluded."""
        if metric not in ("distance", "cosine"):
            raise ValueError(f"metric must be 'distance' or 'cosine', got {metric!r}")
        return {k: getattr(v, f"mean_{metric}") for k, v in self.transforms.items()}

    @property
    def samples_per_dim(self) -> float | None:
        """N/D of the reference statistics (samples per feature dimension); at or below 1 the
        covariance is rank-deficient and the whitened cosine collapses towards 0. None if unknown."""
        n, d = self.stats.get("n"), self.stats.get("dim")
        return float(n) / float(d) if n and d else None

    # ------------------------------------------------------------------ export (tables live in invfast.report)
    def to_dict(self, per_image: bool = True) -> dict[str, Any]:
        return _resolved(self._outline(), per_image)

    def _outline(self) -> dict[str, Any]:
        """:meth:`to_dict` with each transform left as its :class:`TransformResult`."""
        meta = dict(self.meta)
        if self.samples_per_dim is not None:
            meta["reference_n_over_d"] = self.samples_per_dim
        d = {
            "format": RESULT_FORMAT,
            "model": self.model,
            "layer": self.layer,
            "n_images": self.n_images,
            "stats": self.stats,
            "errors": self.errors,
            "meta": meta,
            "transforms": list(self.transforms.values()),
        }
        if self.layers:
            d["layers"] = [
                {"layer": r.layer, "stats": r.stats, "transforms": list(r.transforms.values())}
                for r in self.layers.values()
            ]
        return d

    def to_json(self, path: str | os.PathLike | None = None, per_image: bool = True, indent: int | None = None) -> str:
        """JSON text of the result (strict JSON: NaN written as null); also written to ``path`` atomically."""
        text = json.dumps(self.to_dict(per_image=per_image), indent=indent, allow_nan=False)
        if path is not None:
            atomic_write_text(path, text)
        return text

    def write_json(self, path: str | os.PathLike, per_image: bool = True) -> None:
        """Write :meth:`to_json`'s text (byte for byte) to ``path`` atomically, one transform's per-image
        lists at a time: the memory it takes does not grow with the number of transforms."""
        with atomic_write(path, "w") as f:
            _write_streamed(self._outline(), per_image, f.write)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InvarianceResult:
        """The result saved by :meth:`to_dict`; ValueError naming the first missing or malformed field
        (:func:`invfast.measure.result_check.check_result_dict`)."""
        from invfast.measure.result_check import check_result_dict

        if not isinstance(d, dict) or d.get("format") != RESULT_FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not an invfast invariance result (format={got!r})")
        check_result_dict(d)

        def one(part: dict[str, Any]) -> InvarianceResult:
            trs = [TransformResult.from_dict(t) for t in part["transforms"]]
            return cls(
                model=d["model"],
                transforms={t.name: t for t in trs},
                n_images=d["n_images"],
                stats=part.get("stats", {}),
                errors=d.get("errors", {}),
                meta=d.get("meta", {}),
                layer=part.get("layer", "output"),
            )

        top = one(d)
        if d.get("layers"):
            top.layers = {r.layer: r for r in (one(part) for part in d["layers"])}
            top.layers[top.layer] = top
        return top

    @classmethod
    def from_json(cls, text_or_path: str | os.PathLike) -> InvarianceResult:
        s = os.fspath(text_or_path)
        if not s.lstrip().startswith("{"):
            with open(s) as f:
                s = f.read()
        return cls.from_dict(json.loads(s))

    def to_frame(self) -> Any:
        from invfast import report

        return report.to_frame([self])

    def to_markdown(self, **kw: Any) -> str:
        from invfast import report

        return report.to_markdown([self], **kw)

    def plot(self, kind: str = "curves", **kw: Any) -> Any:
        """'curves' (per-parameter), 'radar' (the two families) or 'heatmap'; returns a matplotlib Figure."""
        from invfast import report

        fns = {"curves": report.plot_curves, "radar": report.plot_radar, "heatmap": report.plot_heatmap}
        if kind not in fns:
            raise ValueError(f"kind must be one of {sorted(fns)}, got {kind!r}")
        return fns[kind]([self], **kw)

    def __repr__(self) -> str:
        lay = f", layers={list(self.layers)}" if self.layers else ""
        return (
            f"InvarianceResult(model={self.model!r}, n_images={self.n_images}, transforms={list(self.transforms)}{lay})"
        )


def _nanmean(v: torch.Tensor | None) -> float | None:
    """The mean of the non-NaN values of ``v``; None when there are none (or no ``v``)."""
    if v is None or not bool((~torch.isnan(v)).any()):
        return None
    return float(v[~torch.isnan(v)].mean())


def _nan_to_none(v: Any) -> Any:
    if isinstance(v, list):
        return [_nan_to_none(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _none_to_nan(v: Any) -> Any:
    if isinstance(v, list):
        return [_none_to_nan(x) for x in v]
    return float("nan") if v is None else v


def _resolved(value: Any, per_image: bool) -> Any:
    """``value`` with every :class:`TransformResult` inside replaced by its ``to_dict``."""
    if isinstance(value, TransformResult):
        return value.to_dict(per_image=per_image)
    if isinstance(value, dict):
        return {k: _resolved(v, per_image) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolved(v, per_image) for v in value]
    return value


def _write_streamed(value: Any, per_image: bool, write: Any) -> None:
    """Write ``json.dumps(_resolved(value))`` (default separators) through ``write`` in pieces, holding one
    transform's dictionary at a time."""
    if (
        isinstance(value, dict)
        and all(isinstance(k, str) for k in value)
        and any(isinstance(v, (dict, list)) for v in value.values())
    ):
        write("{")
        for i, (k, v) in enumerate(value.items()):
            write((", " if i else "") + json.dumps(k) + ": ")
            _write_streamed(v, per_image, write)
        write("}")
    elif isinstance(value, list) and any(isinstance(v, (TransformResult, dict)) for v in value):
        write("[")
        for i, v in enumerate(value):
            if i:
                write(", ")
            _write_streamed(v, per_image, write)
        write("]")
    else:
        write(json.dumps(_resolved(value, per_image), allow_nan=False))
