"""Invariance measurement: model + images + transforms -> :class:`InvarianceResult` (Ericsson et al. 2021, App. C).

Two passes: reference statistics (:class:`invfast.FeatureStats` over the untransformed images)
unless the caller gives them, then scores (:mod:`invfast.measure.scoring`). Images are sharded over
the ranks of an initialised ``torch.distributed`` group; partial state is written atomically so a
killed run resumes where it stopped (:mod:`invfast.measure.engine`). How to measure is one
:class:`~invfast.measure.config.MeasureConfig`; the resume fingerprint derives from it.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

import torch

from invfast.measure.assemble import finish_transform
from invfast.measure.config import MeasureConfig, fingerprint
from invfast.measure.engine import Run, check_stats, open_progress, stats_fingerprint, stats_info
from invfast.measure.finished import finished_file, load_finished, save_finished
from invfast.measure.protocol import get_protocol, resample_indices, resize_center_crop
from invfast.measure.result import InvarianceResult, TransformResult
from invfast.measure.scoring import score_transform
from invfast.measure.selection import resolve_transforms
from invfast.measure.state import files_fingerprint, from_first_rank, sum_in_rank_order
from invfast.runtime.launch import Rank
from invfast.stats import FeatureStats
from invfast.transforms.transform import FAMILIES

__all__ = ["measure_invariance", "transform_grids"]


def transform_grids(
    transforms: Any, grid_size: int, protocol: Any, seed: int, grid_side: int | None = None
) -> list[tuple[Any, torch.Tensor, torch.Tensor]]:
    """``(transform, params [P] or [P, m], identity mask bool [P])`` for every transform, under ``protocol``; a grid
    given in pixels for ``t.pixel_reference``-px images is multiplied by ``grid_side / t.pixel_reference`` when
    ``grid_side`` is set (the identity mask is that of the scaled grid)."""
    out = []
    for t in (protocol.transform(t, seed) for t in resolve_transforms(transforms)):
        params = torch.as_tensor(t.grid(grid_size))
        reference = getattr(t, "pixel_reference", None)
        if grid_side is not None and reference:
            params = params * (grid_side / reference)
        ident = torch.as_tensor(t.is_identity(params), dtype=torch.bool).reshape(-1)
        if params.dim() not in (1, 2) or params.shape[0] == 0 or ident.shape[0] != params.shape[0]:
            raise ValueError(
                f"transform {t.name!r} gave a grid of shape {tuple(params.shape)} and an identity mask of "
                f"shape {tuple(ident.shape)}; expected [P] or [P, m] and [P]"
            )
        if bool(ident.all()) and not protocol.include_identity:
            raise ValueError(
                f"grid_size {grid_size} leaves transform {t.name!r} with only its identity parameter "
                f"(nothing to measure); use a larger grid size (--grid-size), e.g. {max(4, 2 * grid_size)}"
            )
        if t.family not in FAMILIES:
            raise ValueError(f"transform {t.name!r} has family {t.family!r}; expected one of {FAMILIES}")
        out.append((t, params, ident))
    return out


def measure_invariance(
    model: Any,
    data: Any,
    transforms: Any = "all",
    config: MeasureConfig | None = None,
    *,
    stats: FeatureStats | None = None,
    shard: Rank | None = None,
    **overrides: Any,
) -> InvarianceResult:
    """How invariant ``model`` is to each transform, on the images of ``data`` (Ericsson et al. 2021, App. C),
    at the model's output or at several of its layers at once (``layers=...``, one forward pass per view).

    Args:
        model: an ``nn.Module`` (or callable) mapping normalised images ``[B, 3, H, W]`` to pooled
            features ``[B, D]``, or an invfast model name (``invfast.models.create``) with ``checkpoint``.
        data: images ``[N, C, H, W]`` (uint8 0..255 or float 0..1), a folder path (``'folder:PATH'`` or
            PATH; read with PIL, shorter side resized to ``resize``, centre-cropped square),
            ``'synthetic:n=1000,split=test'``, a map-style dataset (``invfast.synthetic.Transforms2D``),
            or a source from :mod:`invfast.data`.
        transforms: 'all' | 'spatial' | 'appearance' | 'rotation,hue' | list of names or transform objects
            (:func:`invfast.transforms.register` adds a name of your own).
        config: how to measure (:class:`~invfast.measure.config.MeasureConfig`; defaults when None).
        stats: reference :class:`FeatureStats` (a dict layer -> FeatureStats when several layers are
            measured); by default a first pass over the untransformed images.
        shard: rank/world size; by default that of the initialised ``torch.distributed`` group.
        **overrides: fields of :class:`MeasureConfig` to change, e.g. ``grid_size=16, batch_size=8``.

    Returns:
        :class:`InvarianceResult` (identical on every rank). Means exclude identity parameters
        (include them under ``protocol='ericsson'``). ``meta['config']`` records every option. With
        several layers, the deepest layer's result with ``.layers`` holding every layer's.
    """
    t0 = time.monotonic()
    cfg = MeasureConfig.build(config, **overrides)
    proto = get_protocol(cfg.protocol)
    if proto.preprocess_after_transform and cfg.crop:  # the CenterCrop asked for (the resized crop's size too)
        proto = dataclasses.replace(proto, crop=cfg.crop)
    grids = transform_grids(transforms, cfg.grid_size, proto, cfg.protocol_seed, cfg.grid_side)
    post = None
    if proto.preprocess_after_transform:  # the transform sees the image as loaded; Resize + CenterCrop follow
        post = functools.partial(resize_center_crop, resize=proto.resize, crop=proto.crop)
    run = _open_run(model, data, cfg, proto, shard, post)
    try:  # the user's model gets its hooks removed and its training flags back whatever happens
        given = check_stats(stats, run.extract.layer_names)
        run.resume(_fingerprint(run, cfg, grids, given))
        results, ref_stats, n_new = _measure(run, cfg, proto, grids, given)
    finally:
        if run.progress_bar is not None:
            run.progress_bar.close()
        run.extract.close()
    n_new = int(sum_in_rank_order(torch.tensor([float(n_new)], dtype=torch.float64, device="cpu"), run.shard).item())
    return _result(run, cfg, results, ref_stats, _meta(run, cfg, proto, n_new, time.monotonic() - t0))


def _open_run(model: Any, data: Any, cfg: MeasureConfig, proto: Any, shard: Rank | None, post: Any) -> Run:
    """The measurement's :class:`Run`, reading ``data`` as ``proto`` says: under a draw with replacement every
    image (the draw picks ``n_images``), folder images as loaded when transforms come before the preprocessing,
    a folder listed (the list the draw indexes) and its files read by the protocol's rules."""
    return Run(
        model,
        data,
        cfg,
        shard=shard,
        n_images=None if proto.with_replacement else cfg.n_images,
        post=post,
        native=proto.preprocess_after_transform,
        listing=proto.folder_listing,
        pixels=proto.file_pixels,
    )


def _result(
    run: Run,
    cfg: MeasureConfig,
    results: dict[str, dict[str, TransformResult]],
    ref_stats: dict[str, FeatureStats],
    meta: dict[str, Any],
) -> InvarianceResult:
    """The deepest layer's result, holding every layer's in ``.layers`` when several were measured."""
    errors = run.errors()
    layers = run.extract.layer_names
    by_layer = {
        ly: InvarianceResult(
            model=cfg.name or run.model_name,
            transforms=results[ly],
            n_images=run.n - errors["count"],  # the images measured: unreadable files are listed, not counted
            stats=stats_info(ref_stats[ly]),
            errors=errors,
            meta=meta,
            layer=ly,
        )
        for ly in layers
    }
    top = by_layer[layers[-1]]
    if len(layers) > 1:
        top.layers = by_layer
    return top


def _fingerprint(run: Run, cfg: MeasureConfig, grids: list[Any], given: Any) -> dict[str, Any]:
    """What a resumed measurement must share with the run that saved its state."""
    return fingerprint(
        cfg,
        run.device,
        data=run.source.describe(),
        model=run.model_fp,
        layers=run.extract.layer_names,
        transforms=[[t.name, int(p.shape[0])] for t, p, _ in grids],
        stats=stats_fingerprint(given),
        world_size=run.shard.world_size,
        files=from_first_rank(
            lambda: files_fingerprint(run.source, cfg.fingerprint_content), run.shard, "fingerprinting the files"
        ),
    )


def _measure(
    run: Run, cfg: MeasureConfig, proto: Any, grids: list[Any], given: Any
) -> tuple[dict[str, dict[str, TransformResult]], dict[str, FeatureStats], int]:
    """The reference statistics, then every transform's pass: ``(results by layer and transform, reference
    statistics by layer, image-parameter pairs this call computed)``."""
    drawn = resample_indices(run.n, cfg.n_images, cfg.protocol_seed) if proto.with_replacement else None
    run.progress_bar = open_progress(
        run,
        given is None,
        {t.name: int(p.shape[0]) for t, p, _ in grids},
        run.n if drawn is None else int(drawn.numel()),
    )
    shrinkage = proto.shrinkage if cfg.shrinkage is None else cfg.shrinkage
    ref_stats = run.reference_stats(given, shrinkage, cfg.eps)
    if drawn is not None:  # statistics from every image, scores on a draw with replacement
        run.resample(drawn)
    results: dict[str, dict[str, TransformResult]] = {ly: {} for ly in run.extract.layer_names}
    n_new = 0
    with torch.inference_mode():
        for i, (t, params, ident) in enumerate(grids):
            done = _finished(run, i, t.name)
            if done is None:
                acc, new = score_transform(
                    run, t, params, ident, ref_stats, cfg.pair_scores_dir, proto.include_identity
                )
                n_new += new
                done = finish_transform(run, t, params, ident, acc, cfg.pair_scores_dir, proto.include_identity)
                del acc  # freed before the next transform's accumulators are made
                _keep_finished(run, i, t.name, done)
            for ly, tr in done.items():
                results[ly][t.name] = tr
    return results, ref_stats, n_new


def _finished(run: Run, index: int, name: str) -> dict[str, TransformResult] | None:
    """A resumed run's result of its ``index``-th transform ``name`` (by layer), read back from its file; None
    where the transform has not finished."""
    if run.state_path is None or name not in run.state.get("finished", ()):
        return None
    return load_finished(finished_file(run.state_path, index), name, run.fingerprint)


def _keep_finished(run: Run, index: int, name: str, results: dict[str, TransformResult]) -> None:
    """Transform ``name``'s accumulators leave the live state: its result goes to a file of its own
    (:mod:`invfast.measure.finished`), written before the state that names it, so a kill in between only
    assembles the result again."""
    if run.state_path is not None:
        save_finished(finished_file(run.state_path, index), name, run.fingerprint, results)
        run.state.setdefault("finished", []).append(name)
    run.state["transforms"].pop(name, None)
    run.checkpoint(force=True)


def _meta(run: Run, cfg: MeasureConfig, proto: Any, n_new: int, elapsed: float) -> dict[str, Any]:
    """``result.meta`` of a measurement."""
    return {
        "data": run.source.describe(),
        "images": {"n": run.n, "id": run.source_identity()},
        "grid_size": cfg.grid_size,
        "grid_side": cfg.grid_side,
        "device": str(run.device),
        "dtype": cfg.dtype,
        "world_size": run.shard.world_size,
        "crop": cfg.crop,
        "elapsed_s": elapsed,
        "pairs_computed": n_new,
        "pairs_per_s": n_new / elapsed if elapsed > 0 and n_new else None,
        "resumed": run.resumed,
        "mode": "transforms",
        "data_kind": run.source.describe().get("kind"),
        "protocol": proto.name,
        "layers": run.extract.layer_names,
        "config": cfg.to_dict(),
    }
