"""The scoring loop: every image of this rank under every grid parameter of a transform, in chunks
bounded by ``forward_batch``, pushed through the model and scored with :func:`invfast.invariance_scores`.
Only float64 per-parameter sums and per-image means are kept, on the device (O(P + N) memory per
transform); per-pair scores go to memory-mapped files when asked.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any

import numpy as np
import torch

from invfast.measure.engine import Run, concat, count
from invfast.measure.layers import OUTPUT
from invfast.measure.state import Shard, barrier
from invfast.metrics import invariance_scores
from invfast.stats import FeatureStats

__all__ = ["score_transform"]


def pair_file(dir_: str, name: str, layer: str, metric: str, layered: bool) -> str:
    """``<dir>/<transform>[.<layer>].<metric>.npy`` (the layer is named when layers other than the model's
    output are measured)."""
    return os.path.join(dir_, f"{name}.{layer}.{metric}.npy" if layered else f"{name}.{metric}.npy")


def _pair_files(dir_: str, name: str, layers: list[str], n: int, p: int, shard: Shard,
                fresh: bool) -> dict[str, dict[str, np.memmap]]:
    os.makedirs(dir_, exist_ok=True)
    layered = layers != [OUTPUT]
    paths = {ly: {m: pair_file(dir_, name, ly, m, layered) for m in ("distance", "cosine")} for ly in layers}
    if shard.rank == 0:
        for per in paths.values():
            for path in per.values():
                if fresh or not os.path.exists(path):
                    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, p))
                    mm[:] = np.nan
                    mm.flush()
                    del mm
    barrier(shard)
    return {ly: {m: np.lib.format.open_memmap(path, mode="r+") for m, path in per.items()} for ly, per in paths.items()}


_DEVICE_KEYS = ("sum_d", "sum_c", "sq_d", "sq_c", "img_d", "img_c", "u_s1", "u_s2", "tv")


def _fresh_layer(run: Run, p: int, views: int, dim: int) -> dict[str, torch.Tensor]:
    """Zeroed device accumulators of one layer: per-parameter sums [P], per-image means [n_rank] (NaN until
    scored), per-unit sums over images for each view [V, D] and the summed per-image view variance [D]."""
    dev, n = run.device, run.stop - run.start

    def z(*shape: int) -> torch.Tensor:
        return torch.zeros(*shape, dtype=torch.float64, device=dev)

    return {"sum_d": z(p), "sum_c": z(p), "sq_d": z(p), "sq_c": z(p),
            "img_d": torch.full((n,), float("nan"), dtype=torch.float64, device=dev),
            "img_c": torch.full((n,), float("nan"), dtype=torch.float64, device=dev),
            "u_s1": z(views, dim), "u_s2": z(views, dim), "tv": z(dim)}


def score_transform(run: Run, t: Any, params: torch.Tensor, ident: torch.Tensor, stats: dict[str, FeatureStats],
                    pair_dir: Any, include_identity: bool = False) -> tuple[dict[str, Any], int]:
    """Score every image of this rank under every parameter of ``t``, at every measured layer; the
    accumulators stay on ``run.device`` (float64 sums [P], per-image means [n_rank], per-unit sums
    [V, D]) until a save or the end.

    Returns ``(accumulators, pairs)``: ``pairs`` is the number of image-parameter pairs this call
    computed (a resumed transform counts only what was left)."""
    p = params.shape[0]
    dev = run.device
    keep = torch.ones_like(ident) if include_identity else ~ident
    n_keep = int(keep.sum())
    keep_dev = keep.to(dev)
    add_ref = not bool(ident.any())  # the per-unit views include the identity once: the reference view if need be
    layers = run.extract.layer_names
    acc = run.state["transforms"].get(t.name)
    fresh = acc is None
    if fresh:
        acc = {"count": 0, "next": run.start, "add_ref": add_ref,
               "layers": {ly: _fresh_layer(run, p, p + add_ref, stats[ly].dim) for ly in layers}}
        run.state["transforms"][t.name] = acc
    else:  # resumed: the saved host copies go back to the device
        for la in acc["layers"].values():
            for k in _DEVICE_KEYS:
                la[k] = la[k].to(dev)
    mm = _pair_files(os.fspath(pair_dir), t.name, layers, run.n, p, run.shard, fresh and acc["next"] == run.start) \
        if pair_dir is not None else None
    flush = (lambda: [m.flush() for per in mm.values() for m in per.values()]) if mm is not None else None
    bar = run.pass_bar((run.stop - run.start) * p, t.name, initial=(acc["next"] - run.start) * p)
    # transforms with few parameters take several image batches per model call, so every call
    # carries about forward_batch images (the reference features stay cached per image batch)
    group = max(1, run.extract.forward_batch // max(1, p * run.batch_size))
    spans = list(run.batches(acc["next"]))
    count0 = acc["count"]
    with contextlib.closing(run.stream(spans)) as stream:
        for g in range(0, len(spans), group):
            span = spans[g:g + group]
            s, e = span[0][0], span[-1][1]
            xs, idxs, refs = [], [], []
            for (bs, _), (xb, ib) in zip(span, stream):
                if count(xb):
                    xs.append(xb)
                    idxs.append(ib)
                    refs.append(run.reference_features(bs, xb))
            b = sum(count(xb) for xb in xs)
            if b:
                x, idx = concat(xs), (idxs[0] if len(idxs) == 1 else torch.cat(idxs))
                f_ref = {ly: refs[0][ly] if len(refs) == 1 else torch.cat([r[ly] for r in refs]) for ly in layers}
                _score_group(run, t, x, idx, f_ref, params, keep_dev, n_keep, stats, acc, mm)
            acc["next"] = e
            bar.update((e - s) * p)
            run.checkpoint(before=flush)
    bar.close()
    if flush is not None:
        flush()
    run.checkpoint(force=True)
    run.check_finite()
    return acc, (acc["count"] - count0) * p


def _score_group(run: Run, t: Any, x: Any, idx: torch.Tensor, f_ref: dict[str, torch.Tensor],
                 params: torch.Tensor, keep: torch.Tensor, n_keep: int, stats: dict[str, FeatureStats],
                 acc: dict[str, Any], mm: dict[str, dict[str, np.memmap]] | None) -> None:
    """Images ``x [b, C, H, W]`` (or a list of images as loaded; device; indices ``idx`` on the host) under
    every parameter, in chunks of at most ``forward_batch // b`` parameters; adds into ``acc`` on the
    device without reading back."""
    b, p, dev = count(x), params.shape[0], run.device
    pc = max(1, run.extract.forward_batch // b)
    layers = list(f_ref)
    img_d = {ly: torch.zeros(b, dtype=torch.float64, device=dev) for ly in layers}
    img_c = {ly: torch.zeros(b, dtype=torch.float64, device=dev) for ly in layers}
    # per-image sums over the views of each unit (the transformational variance of each image)
    v1 = {ly: f_ref[ly].double() if acc["add_ref"] else torch.zeros_like(f_ref[ly], dtype=torch.float64)
          for ly in layers}
    v2 = {ly: v1[ly] * v1[ly] for ly in layers}
    pairs = None if mm is None else {ly: torch.empty(2, b, p, dtype=torch.float32, device=dev) for ly in layers}
    for ps in range(0, p, pc):
        pe = min(p, ps + pc)
        xt = run.views(t, x, params[ps:pe])
        feats = run.extract.features(xt.flatten(0, 1))
        del xt
        k = keep[ps:pe]
        for ly in layers:
            la = acc["layers"][ly]
            f_t = feats[ly].view(b, pe - ps, -1)
            # 'propagate': no per-chunk host check; non-finite scores are flagged on the device instead
            sc = invariance_scores(f_ref[ly], f_t, stats[ly], nan_policy="propagate")
            d, c = sc["distance"].double(), sc["cosine"].double()
            run.flag_nonfinite(t.name, d, c)
            la["sum_d"][ps:pe] += d.sum(0)
            la["sum_c"][ps:pe] += c.sum(0)
            la["sq_d"][ps:pe] += (d * d).sum(0)
            la["sq_c"][ps:pe] += (c * c).sum(0)
            img_d[ly] += d.masked_fill(~k, 0).sum(1)
            img_c[ly] += c.masked_fill(~k, 0).sum(1)
            f64 = f_t.double()
            sq = f64 * f64
            la["u_s1"][ps:pe] += f64.sum(0)
            la["u_s2"][ps:pe] += sq.sum(0)
            v1[ly] += f64.sum(1)
            v2[ly] += sq.sum(1)
            if pairs is not None:
                pairs[ly][0, :, ps:pe] = d
                pairs[ly][1, :, ps:pe] = c
    acc["count"] += b
    views = p + acc["add_ref"]
    rows = (idx - run.start).to(dev, non_blocking=True)
    for ly in layers:
        la = acc["layers"][ly]
        if acc["add_ref"]:
            r = f_ref[ly].double()
            la["u_s1"][p] += r.sum(0)
            la["u_s2"][p] += (r * r).sum(0)
        mean = v1[ly] / views
        la["tv"] += (v2[ly] / views - mean * mean).clamp_min_(0).sum(0)
        if n_keep:
            la["img_d"][rows] = img_d[ly] / n_keep
            la["img_c"][rows] = img_c[ly] / n_keep
    if mm is not None:
        rows_h = idx.numpy()
        for ly, per in mm.items():
            host = pairs[ly].cpu().numpy()  # per-pair scores asked for: one copy per group of batches
            per["distance"][rows_h] = host[0]
            per["cosine"][rows_h] = host[1]
