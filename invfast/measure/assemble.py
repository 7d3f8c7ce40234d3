"""Result assembly: a transform's accumulators (summed over ranks in rank order) -> one
:class:`TransformResult` per measured layer."""

from __future__ import annotations

import os
from typing import Any

import torch

from invfast.measure.engine import Run
from invfast.measure.equivariance import fit_from_sums
from invfast.measure.layers import OUTPUT
from invfast.measure.result import TransformResult
from invfast.measure.scoring import pair_file
from invfast.measure.state import gather_objects, sum_in_rank_order
from invfast.measure.units import sample_std
from invfast.ops.invariance import merge_moments

__all__ = ["finish_transform"]


def finish_transform(
    run: Run,
    t: Any,
    params: torch.Tensor,
    ident: torch.Tensor,
    acc: dict[str, Any],
    pair_dir: Any,
    include_identity: bool = False,
) -> dict[str, TransformResult]:
    """The result of transform ``t`` at every measured layer (by layer), its sums combined over ranks."""
    sh = run.shard
    count = int(sum_in_rank_order(torch.tensor([float(acc["count"])], dtype=torch.float64, device="cpu"), sh).item())
    if count == 0:
        raise ValueError(f"no image could be read for transform {t.name!r}")
    layers = list(acc["layers"])
    layered = layers != [OUTPUT]
    out = {}
    for ly in layers:
        pair = None
        if pair_dir is not None:
            pair = {
                m: os.path.abspath(pair_file(os.fspath(pair_dir), t.name, ly, m, layered))
                for m in ("distance", "cosine")
            }
        out[ly] = _layer_result(
            acc["layers"][ly], int(acc["count"]), count, t, params, ident, include_identity, pair, sh
        )
    return out


def _unit_moments(
    la: dict[str, Any], local: int, sh: Any, keys: tuple[str, str] = ("u_mean", "u_m2")
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each view's per-unit mean and M2 over all ranks' images ([V, U] float64, host), merged in rank order."""
    parts = gather_objects((local, la[keys[0]].cpu(), la[keys[1]].cpu()), sh)
    n, mean, m2 = parts[0][0], parts[0][1].clone(), parts[0][2].clone()
    for k, m, q in parts[1:]:
        merge_moments(n, mean, m2, k, m, q)
        n += k
    return mean, m2


def _same_equivariance_sums(
    la: dict[str, Any], local: int, count: int, sh: Any
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Same-equivariance's per-unit sums over all ranks, from the moments of the mapped-back maps
    (invfast.measure.mapped_back): (view std summed over views [U], image std summed over images [U]);
    (None, None) where the layer did not measure it."""
    if "se_mean" not in la:
        return None, None
    same_view = sum_in_rank_order(la["se_ts"], sh).cpu()
    same_image = sample_std(_unit_moments(la, local, sh, ("se_mean", "se_m2"))[1], count).sum(0)
    return same_view, same_image


def _linear_equivariance(la: dict[str, Any], sh: Any) -> torch.Tensor | None:
    """The cross-validated linear-equivariance fit [P] from the per-fold sums of every rank added up (the
    fold of an image does not depend on its rank); None where the layer did not measure it."""
    if "eq" not in la:
        return None
    fold_sums = {k: v if k == "shift" else sum_in_rank_order(v, sh) for k, v in la["eq"].items()}
    return fit_from_sums(fold_sums).cpu()


def _layer_result(
    la: dict[str, Any],
    local: int,
    count: int,
    t: Any,
    params: torch.Tensor,
    ident: torch.Tensor,
    include_identity: bool,
    pair: dict[str, str] | None,
    sh: Any,
) -> TransformResult:
    # float64 sums combined on the device (NCCL all-gathers CUDA tensors), then read once
    sums = {k: sum_in_rank_order(la[k], sh).cpu() for k in ("sum_d", "sum_c", "sq_d", "sq_c", "tv", "ts")}
    img_d = torch.cat(gather_objects(la["img_d"].cpu(), sh))
    img_c = torch.cat(gather_objects(la["img_c"].cpu(), sh))
    keep = torch.ones_like(ident) if include_identity else ~ident
    mean_d, mean_c = sums["sum_d"] / count, sums["sum_c"] / count
    std_d = (sums["sq_d"] / count - mean_d**2).clamp_min(0).sqrt()
    std_c = (sums["sq_c"] / count - mean_c**2).clamp_min(0).sqrt()
    # per unit (invfast.measure.units), the views being the grid with the identity once: over each view, the
    # moments over images; over each image, the view variance and standard deviation summed over images
    _, view_m2 = _unit_moments(la, local, sh)
    n_views = int(view_m2.shape[0])

    same_view, same_image = _same_equivariance_sums(la, local, count, sh)
    eq = _linear_equivariance(la, sh)

    def over(mask: torch.Tensor, key: str) -> float | None:
        return float(sums[key][mask].sum() / (count * int(mask.sum()))) if bool(mask.any()) else None

    return TransformResult(
        name=t.name,
        family=t.family,
        mean_distance=over(keep, "sum_d"),
        mean_cosine=over(keep, "sum_c"),
        n_images=count,
        params=params.double().cpu(),
        identity=ident.cpu(),
        distance=mean_d,
        cosine=mean_c,
        distance_std=std_d,
        cosine_std=std_c,
        identity_distance=over(ident, "sum_d"),
        identity_cosine=over(ident, "sum_c"),
        per_image_distance=img_d if bool(keep.any()) else None,
        per_image_cosine=img_c if bool(keep.any()) else None,
        pair_scores=pair,
        n_pairs=count * int(params.shape[0]),
        unit_transform_variance=sums["tv"] / count,
        unit_sample_variance=(view_m2 / count).mean(0),
        unit_view_std_sum=sums["ts"],
        unit_image_std_sum=sample_std(view_m2, count).sum(0),
        n_views=n_views,
        linear_equivariance=eq,
        unit_same_view_std_sum=same_view,
        unit_same_image_std_sum=same_image,
    )
