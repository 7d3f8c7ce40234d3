"""Real-world invariance (Ericsson et al. 2021 BMVC, §4.2): groups of views of the same object or scene,
scored over all pairs of views within each group; no transform, no reference image."""

from __future__ import annotations

import functools
import time
import warnings
from typing import Any

import numpy as np
import torch

from invfast.data.sources import as_source
from invfast.measure.config import MeasureConfig, fingerprint
from invfast.measure.engine import Run, check_stats, stats_fingerprint, stats_info
from invfast.measure.protocol import get_protocol, resize_center_crop
from invfast.measure.result import InvarianceResult, TransformResult
from invfast.measure.state import files_fingerprint, from_first_rank, gather_objects, sum_in_rank_order
from invfast.metrics import invariance_scores
from invfast.runtime.launch import Rank
from invfast.stats import FeatureStats

__all__ = ["measure_real_world"]


def measure_real_world(
    model: Any,
    data: Any,
    config: MeasureConfig | None = None,
    *,
    groups: Any = None,
    name: str = "real-world",
    family: str = "real-world",
    stats: FeatureStats | None = None,
    shard: Rank | None = None,
    model_name: str | None = None,
    **overrides: Any,
) -> InvarianceResult:
    """Real-world invariance (Ericsson et al. 2021 BMVC, §4.2): no reference image; for every group
    (object / scene folder, or ``groups`` ids for tensors) the scores of all pairs of distinct views
    are averaged, then the group means are averaged. Reference statistics come from all views
    unless ``stats`` is given (the original uses the ImageNet statistics of its synthetic evaluation: under
    ``protocol='ericsson'`` pass them, or a warning says the views' are used). Under ``protocol='ericsson'``
    the views are read as loaded (no EXIF turn) and given the original's ``Resize(224)`` +
    ``CenterCrop(224)``; otherwise ``resize`` px squares (then ``crop``). Per-group means are the result's
    per-image values (for significance); groups with fewer than two readable views are skipped and counted
    in ``meta['skipped_groups']``.

    ``config``/``overrides`` as in :func:`invfast.measure_invariance` (``grid_size`` and the transform
    options do not apply); ``name``/``family``: the label of the group set in tables; ``model_name``:
    the model's label (the same as ``name=`` of :class:`MeasureConfig`).
    """
    t0 = time.monotonic()
    if model_name is not None:
        overrides["name"] = model_name
    cfg = MeasureConfig.build(config, **overrides)
    if cfg.equivariance:
        raise ValueError("equivariance needs a transform with a grid of parameters; real-world groups have none")
    proto = get_protocol(cfg.protocol)
    src, post, native, px = _views(data, groups, cfg, proto, stats)
    run = Run(model, data, cfg, shard=shard, n_images=cfg.n_images, source=src, post=post, native=native, pixels=px)
    try:  # the user's model gets its hooks removed and its training flags back whatever happens
        layers = run.extract.layer_names
        if len(layers) != 1:
            raise ValueError(f"real-world mode measures one layer at a time; got layers {layers}")
        given = check_stats(stats, layers)
        members = _group_members(run)
        run.resume(_fingerprint(run, cfg, name, proto.real_world_self_pairs, members, given))
        shrinkage = proto.shrinkage if cfg.shrinkage is None else cfg.shrinkage
        ref_stats = run.reference_stats(given, shrinkage, cfg.eps)[layers[0]]
        acc = _score_groups(run, members, name, ref_stats, proto.real_world_self_pairs)
    finally:
        run.extract.close()
    run.checkpoint(force=True)
    (tr, extra), errors = _group_result(run, acc, name, family), run.errors()
    meta = _meta(run, cfg, proto, native, stats is not None, len(members), extra, time.monotonic() - t0)
    return InvarianceResult(
        model=cfg.name or run.model_name,
        transforms={name: tr},
        n_images=run.n - errors["count"],  # the images measured: unreadable files are listed, not counted
        layer=layers[0],
        stats=stats_info(ref_stats),
        errors=errors,
        meta=meta,
    )


def _views(data: Any, groups: Any, cfg: MeasureConfig, proto: Any, stats: Any) -> tuple[Any, Any, bool, str]:
    """``(source, post, native, pixels)``: the in-memory source of grouped images (None: ``data`` is a folder the
    Run opens), the original's Resize + CenterCrop of every view as loaded under its protocol, and how a folder's
    16-bit and float files are read (the protocol's ``file_pixels``)."""
    if groups is not None and not isinstance(data, (torch.Tensor, np.ndarray)):
        raise ValueError("groups can only be given with in-memory images; folders group by subfolder")
    src = (
        as_source(data, n=cfg.n_images, resize=cfg.resize, strict=cfg.strict, groups=groups)
        if groups is not None
        else None
    )
    if proto.real_world_resize is None:
        return src, None, False, proto.file_pixels
    crop = proto.real_world_crop if proto.real_world_crop is not None else proto.real_world_resize
    if stats is None:
        warnings.warn(
            f"real-world invariance under protocol {proto.name!r}: reference statistics from the views; the "
            "original whitens with the statistics of its ImageNet evaluation (pass them as stats=...)",
            stacklevel=3,
        )
    return (
        src,
        functools.partial(resize_center_crop, resize=proto.real_world_resize, crop=crop),
        True,
        proto.file_pixels,
    )


def _group_members(run: Run) -> list[torch.Tensor]:
    """The image indices of every group of the run's source."""
    g = run.source.groups
    if g is None:
        raise ValueError(
            "real-world mode needs groups of views: a folder with one subfolder per object/scene, "
            "or groups=[group id per image] with in-memory images"
        )
    return [torch.nonzero(g == i).flatten() for i in range(int(g.max()) + 1)]


def _score_groups(
    run: Run, members: list[torch.Tensor], name: str, ref_stats: FeatureStats, self_pairs: bool
) -> dict[str, Any]:
    """Score this rank's groups (resuming where the state left off): per group the mean distance / cosine over
    its pairs of views, and the pair-weighted sums; host accumulators saved with the resumable state."""
    g0, g1 = run.shard.bounds(len(members))
    acc = run.state["transforms"].get(name)
    if acc is None:
        cpu = torch.device("cpu")
        acc = {
            "next": g0,
            "grp_d": torch.full((g1 - g0,), float("nan"), dtype=torch.float64, device=cpu),
            "grp_c": torch.full((g1 - g0,), float("nan"), dtype=torch.float64, device=cpu),
            "pair_d": torch.zeros(1, dtype=torch.float64, device=cpu),
            "pair_c": torch.zeros(1, dtype=torch.float64, device=cpu),
            "pairs": 0,
            "views": 0,
        }
        run.state["transforms"][name] = acc
    bar = run.bar(g1 - g0, name, initial=acc["next"] - g0, unit="group")
    with torch.inference_mode():
        for gi in range(acc["next"], g1):
            f = _group_features(run, members[gi])
            v = f.shape[0]
            if v >= 2:
                sd, sc = _pair_sums(f, ref_stats, run.cfg.pair_block, self_pairs)
                n_distinct = v * (v - 1)
                n_cos = v * v if self_pairs else n_distinct
                acc["grp_d"][gi - g0] = sd / n_distinct
                acc["grp_c"][gi - g0] = sc / n_cos
                acc["pair_d"] += sd
                acc["pair_c"] += sc * n_distinct / n_cos  # pair-weighted: per distinct pair, as the distance
                acc["pairs"] += n_distinct
                acc["views"] += v
            acc["next"] = gi + 1
            bar.update(1)
            run.checkpoint()
    bar.close()
    return acc


def _group_features(run: Run, idx: torch.Tensor) -> torch.Tensor:
    """Features [v, D] of a group's readable views (unreadable ones are counted as the run's bad images)."""
    feats = []
    for s in range(0, idx.numel(), run.batch_size):
        sub = idx[s : s + run.batch_size]
        x, ok = run.source.load(sub)
        for i in sub[~ok].tolist():
            run.bad.add(int(i))
        if bool(ok.any()):
            kept = [v for v, k in zip(x, ok.tolist()) if k] if isinstance(x, list) else x[ok]
            feats.append(run.extract(run.model_input(kept)))
    return torch.cat(feats) if feats else torch.zeros(0, 1)


def _pair_sums(f: torch.Tensor, ref_stats: FeatureStats, pair_block: int, self_pairs: bool) -> tuple[float, float]:
    """The sums of the distances over distinct pairs of the views ``f [v, D]`` and of the cosines over the
    same pairs (with each view and itself too when ``self_pairs``, as the original's), ``pair_block`` rows at a
    time; read once per group."""
    v = f.shape[0]
    sums = torch.zeros(2, dtype=torch.float64, device=f.device)
    for r in range(0, v, pair_block):
        re = min(v, r + pair_block)
        out = invariance_scores(f[r:re], f.unsqueeze(0).expand(re - r, v, f.shape[1]), ref_stats)
        distinct = torch.ones(re - r, v, dtype=torch.bool, device=f.device)
        rows = torch.arange(re - r, device=f.device)
        distinct[rows, rows + r] = False
        # distance: distinct pairs (the original's torch.pdist too); cosine: with self pairs under its protocol
        cos_pairs = torch.ones_like(distinct) if self_pairs else distinct
        sums += torch.stack([out["distance"].double()[distinct].sum(), out["cosine"].double()[cos_pairs].sum()])
    sd, sc = sums.tolist()
    return sd, sc


def _group_result(run: Run, acc: dict[str, Any], name: str, family: str) -> tuple[TransformResult, dict[str, Any]]:
    """The group set's result from every rank's accumulators, and its counts for the metadata."""
    sh = run.shard
    grp_d = torch.cat(gather_objects(acc["grp_d"], sh))
    grp_c = torch.cat(gather_objects(acc["grp_c"], sh))
    tot = sum_in_rank_order(
        torch.cat(
            [
                acc["pair_d"],
                acc["pair_c"],
                torch.tensor([float(acc["pairs"]), float(acc["views"])], dtype=torch.float64, device="cpu"),
            ]
        ),
        sh,
    )
    valid = ~torch.isnan(grp_d)
    if not bool(valid.any()):
        raise ValueError("no group has two readable views; real-world mode compares views within a group")
    tr = TransformResult(
        name=name,
        family=family,
        mean_distance=float(grp_d[valid].mean()),
        mean_cosine=float(grp_c[valid].mean()),
        n_images=int(tot[3]),
        per_image_distance=grp_d,
        per_image_cosine=grp_c,
        n_pairs=int(tot[2]),
    )
    extra = {
        "skipped_groups": int((~valid).sum()),
        "pair_weighted_distance": float(tot[0] / tot[2]),
        "pair_weighted_cosine": float(tot[1] / tot[2]),
    }
    return tr, extra


def _meta(
    run: Run,
    cfg: MeasureConfig,
    proto: Any,
    native: bool,
    given: bool,
    n_groups: int,
    extra: dict[str, Any],
    elapsed: float,
) -> dict[str, Any]:
    """``result.meta`` of a real-world run."""
    return {
        "data": run.source.describe(),
        "mode": "real-world",
        "protocol": proto.name,
        "preprocessing": (
            f"Resize({proto.real_world_resize}) + CenterCrop of each view as loaded"
            if native
            else "the source's images (folders: resize px squares), then crop"
        ),
        "reference_stats": "given" if given else "the views",
        "exif_transpose": getattr(run.source, "exif", None),  # folders: were photos turned upright (None: no files)
        "device": str(run.device),
        "groups": n_groups,
        **extra,
        "world_size": run.shard.world_size,
        "elapsed_s": elapsed,
        "group_names": list(getattr(run.source, "group_names", [])),
        "config": cfg.to_dict(),
        "images": {"n": run.n, "id": run.source_identity()},
    }


def _fingerprint(
    run: Run, cfg: MeasureConfig, name: str, self_pairs: bool, members: list[torch.Tensor], given: Any
) -> dict[str, Any]:
    """What a resumed real-world run must share with the run that saved its state."""
    return fingerprint(
        cfg,
        run.device,
        data=run.source.describe(),
        model=run.model_fp,
        mode="real-world",
        name=name,
        self_pairs=self_pairs,
        groups=[int(m.numel()) for m in members],
        stats=stats_fingerprint(given),
        world_size=run.shard.world_size,
        files=from_first_rank(
            lambda: files_fingerprint(run.source, cfg.fingerprint_content), run.shard, "fingerprinting the files"
        ),
    )
