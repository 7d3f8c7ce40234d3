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

from invfast.measure.engine import Run
from invfast.measure.state import Shard, barrier
from invfast.metrics import invariance_scores
from invfast.stats import FeatureStats

__all__ = ["score_transform"]


def _pair_files(dir_: str, name: str, n: int, p: int, shard: Shard, fresh: bool) -> dict[str, np.memmap]:
    os.makedirs(dir_, exist_ok=True)
    paths = {m: os.path.join(dir_, f"{name}.{m}.npy") for m in ("distance", "cosine")}
    if shard.rank == 0:
        for path in paths.values():
            if fresh or not os.path.exists(path):
                mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, p))
                mm[:] = np.nan
                mm.flush()
                del mm
    barrier(shard)
    return {m: np.lib.format.open_memmap(path, mode="r+") for m, path in paths.items()}


def score_transform(run: Run, t: Any, params: torch.Tensor, ident: torch.Tensor, stats: FeatureStats,
                    pair_dir: Any, include_identity: bool = False) -> tuple[dict[str, Any], int]:
    """Score every image of this rank under every parameter of ``t``; the accumulators stay on
    ``run.device`` (float64 sums [P], per-image means [n_rank]) until a save or the end.

    Returns ``(accumulators, pairs)``: ``pairs`` is the number of image-parameter pairs this call
    computed (a resumed transform counts only what was left)."""
    p = params.shape[0]
    dev = run.device
    keep = torch.ones_like(ident) if include_identity else ~ident
    n_keep = int(keep.sum())
    keep_dev = keep.to(dev)
    acc = run.state["transforms"].get(t.name)
    fresh = acc is None
    if fresh:
        z = lambda: torch.zeros(p, dtype=torch.float64, device=dev)  # noqa: E731
        acc = {"sum_d": z(), "sum_c": z(), "sq_d": z(), "sq_c": z(), "count": 0, "next": run.start,
               "img_d": torch.full((run.stop - run.start,), float("nan"), dtype=torch.float64, device=dev),
               "img_c": torch.full((run.stop - run.start,), float("nan"), dtype=torch.float64, device=dev)}
        run.state["transforms"][t.name] = acc
    else:  # resumed: the saved host copies go back to the device
        for k in ("sum_d", "sum_c", "sq_d", "sq_c", "img_d", "img_c"):
            acc[k] = acc[k].to(dev)
    mm = _pair_files(os.fspath(pair_dir), t.name, run.n, p, run.shard, fresh and acc["next"] == run.start) \
        if pair_dir is not None else None
    flush = (lambda: [m.flush() for m in mm.values()]) if mm is not None else None
    bar = run.pass_bar(run.stop - run.start, t.name, initial=acc["next"] - run.start)
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
                if xb.shape[0]:
                    xs.append(xb)
                    idxs.append(ib)
                    refs.append(run.reference_features(bs, xb))
            b = sum(xb.shape[0] for xb in xs)
            if b:
                x, idx = (xs[0], idxs[0]) if len(xs) == 1 else (torch.cat(xs), torch.cat(idxs))
                f_ref = refs[0] if len(refs) == 1 else torch.cat(refs)
                _score_group(run, t, x, idx, f_ref, params, keep_dev, n_keep, stats, acc, mm)
            acc["next"] = e
            bar.update(e - s)
            run.checkpoint(before=flush)
    bar.close()
    if flush is not None:
        flush()
    run.checkpoint(force=True)
    run.check_finite()
    return acc, (acc["count"] - count0) * p


def _score_group(run: Run, t: Any, x: torch.Tensor, idx: torch.Tensor, f_ref: torch.Tensor, params: torch.Tensor,
                 keep: torch.Tensor, n_keep: int, stats: FeatureStats, acc: dict[str, Any],
                 mm: dict[str, np.memmap] | None) -> None:
    """Images ``x [b, C, H, W]`` (device; indices ``idx`` on the host) under every parameter, in chunks
    of at most ``forward_batch // b`` parameters; adds into ``acc`` on the device without reading back."""
    b, p, dev = x.shape[0], params.shape[0], x.device
    pc = max(1, run.extract.forward_batch // b)
    img_d = torch.zeros(b, dtype=torch.float64, device=dev)
    img_c = torch.zeros(b, dtype=torch.float64, device=dev)
    pairs = None if mm is None else torch.empty(2, b, p, dtype=torch.float32, device=dev)  # one read per group
    for ps in range(0, p, pc):
        pe = min(p, ps + pc)
        xt = t.apply(x, params[ps:pe])
        if xt.dim() != 5 or xt.shape[:2] != (b, pe - ps):
            raise ValueError(f"transform {t.name!r}.apply returned shape {tuple(xt.shape)}, expected "
                             f"[{b}, {pe - ps}, C, H, W]")
        f_t = run.extract(xt.flatten(0, 1)).view(b, pe - ps, -1)
        del xt
        # 'propagate': no per-chunk host check; non-finite scores are flagged on the device instead
        sc = invariance_scores(f_ref, f_t, stats, nan_policy="propagate")
        d, c = sc["distance"].double(), sc["cosine"].double()
        run.flag_nonfinite(t.name, d, c)
        acc["sum_d"][ps:pe] += d.sum(0)
        acc["sum_c"][ps:pe] += c.sum(0)
        acc["sq_d"][ps:pe] += (d * d).sum(0)
        acc["sq_c"][ps:pe] += (c * c).sum(0)
        k = keep[ps:pe]
        img_d += d.masked_fill(~k, 0).sum(1)
        img_c += c.masked_fill(~k, 0).sum(1)
        if pairs is not None:
            pairs[0, :, ps:pe] = d
            pairs[1, :, ps:pe] = c
    acc["count"] += b
    if n_keep:
        rows = (idx - run.start).to(dev, non_blocking=True)
        acc["img_d"][rows] = img_d / n_keep
        acc["img_c"][rows] = img_c / n_keep
    if mm is not None:
        host = pairs.cpu().numpy()  # per-pair scores asked for: one copy per group of batches
        rows_h = idx.numpy()
        mm["distance"][rows_h] = host[0]
        mm["cosine"][rows_h] = host[1]
