"""The scoring loop: every image of this rank under every grid parameter of a transform, in chunks
bounded by ``forward_batch``, pushed through the model and scored as :func:`invfast.invariance_scores`
scores them (each reference batch whitened once for every transform and chunk).
Only float64 per-parameter sums and per-image means are kept, on the device (O(P + N) memory per
transform); per-pair scores go to memory-mapped files when asked.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Generator, Iterator
from typing import Any

import numpy as np
import torch

from invfast.intra_op import at_threads
from invfast.measure import equivariance as eqv
from invfast.measure.engine import Run, concat, count
from invfast.measure.layers import OUTPUT
from invfast.measure.mapped_back import KEYS as MAPPED_KEYS
from invfast.measure.mapped_back import MappedBack
from invfast.measure.state import barrier
from invfast.measure.units import sample_std
from invfast.metrics import scores_of_whitened
from invfast.ops.invariance import merge_moments, merge_unit_moments_, moments
from invfast.runtime.launch import Rank
from invfast.runtime.write_paths import check_in_place
from invfast.stats import FeatureStats

__all__ = ["score_transform"]


def pair_file(dir_: str, name: str, layer: str, metric: str, layered: bool) -> str:
    """``<dir>/<transform>[.<layer>].<metric>.npy`` (the layer is named when layers other than the model's
    output are measured)."""
    return os.path.join(dir_, f"{name}.{layer}.{metric}.npy" if layered else f"{name}.{metric}.npy")


def _pair_files(
    dir_: str, name: str, layers: list[str], n: int, p: int, shard: Rank, fresh: bool
) -> dict[str, dict[str, np.memmap]]:
    os.makedirs(dir_, exist_ok=True)
    layered = layers != [OUTPUT]
    paths = {ly: {m: pair_file(dir_, name, ly, m, layered) for m in ("distance", "cosine")} for ly in layers}
    for per in paths.values():
        for path in per.values():
            check_in_place(path, "per-pair scores")  # memory-mapped in place: never through a link
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


def _flush_pairs(mm: dict[str, dict[str, np.memmap]]) -> None:
    for per in mm.values():
        for m in per.values():
            m.flush()


def _stats_dim(stats: FeatureStats, layer: str) -> int:
    if stats.dim is None:
        raise ValueError(f"the reference statistics of layer {layer!r} hold no features: update() them first")
    return stats.dim


_DEVICE_KEYS = ("sum_d", "sum_c", "sq_d", "sq_c", "img_d", "img_c", "u_mean", "u_m2", "tv", "ts")


def _fresh_layer(run: Run, p: int, views: int, dim: int) -> dict[str, torch.Tensor]:
    """Zeroed device accumulators of one layer: per-parameter sums [P], per-image means [n_rank] (NaN until
    scored) and, per unit (:mod:`invfast.measure.units`), each view's moments over this rank's images
    (mean and M2, [V, U]), the per-image view variance (ddof 0) and view standard deviation (ddof 1) summed
    over images ([U] each). ``dim``: the number of units, 0 when not known yet (``units='elements'``: the
    unit accumulators are made at the first chunk, :func:`_unit_accumulators`)."""
    dev, n = run.device, run.stop - run.start

    def z(*shape: int) -> torch.Tensor:
        return torch.zeros(*shape, dtype=torch.float64, device=dev)

    return {
        "sum_d": z(p),
        "sum_c": z(p),
        "sq_d": z(p),
        "sq_c": z(p),
        "img_d": torch.full((n,), float("nan"), dtype=torch.float64, device=dev),
        "img_c": torch.full((n,), float("nan"), dtype=torch.float64, device=dev),
        "u_mean": z(views, dim),
        "u_m2": z(views, dim),
        "tv": z(dim),
        "ts": z(dim),
    }


def _equivariance_sums(run: Run, t: Any, p: int, stats: dict[str, FeatureStats]) -> dict[str, dict[str, torch.Tensor]]:
    """Zeroed per-fold sums of the linear-equivariance fit of every layer (:func:`invfast.measure.equivariance.
    fold_sums`), shifted by the layer's reference mean; one ValueError first if they would not fit in
    ``equivariance_mb`` or there are fewer images than folds."""
    if run.n < eqv.FOLDS:
        raise ValueError(
            f"equivariance needs at least {eqv.FOLDS} images (its fit is {eqv.FOLDS}-fold cross-validated), got {run.n}"
        )
    dims = {ly: _stats_dim(s, ly) for ly, s in stats.items() if ly in run.extract.layer_names}
    need = sum(eqv.sums_bytes(eqv.FOLDS, p, d, d) for d in dims.values())
    if need > run.cfg.equivariance_mb * 2**20:
        raise ValueError(
            f"equivariance of transform {t.name!r} needs {need / 2**20:.0f} MiB of per-fold sums ({eqv.FOLDS} folds x "
            f"{p} parameters x D x D float64 for D = {sorted(set(dims.values()))}), more than equivariance_mb="
            f"{run.cfg.equivariance_mb:g}; raise equivariance_mb, measure fewer parameters (grid_size) or layers "
            "with fewer channels"
        )
    out = {}
    for ly, d in dims.items():
        shift = stats[ly].mean
        shift = torch.zeros(d, dtype=torch.float64, device=run.device) if shift is None else shift
        out[ly] = eqv.fold_sums(eqv.FOLDS, p, d, d, shift.to(run.device))
    return out


def _unit_accumulators(la: dict[str, torch.Tensor], units: int, layer: str) -> None:
    """Make the unit accumulators of ``la`` for ``units`` units where they are still empty (zero units)."""
    have = la["u_mean"].shape[1]
    if have == units:
        return
    if have:
        raise ValueError(f"layer {layer!r} gave {units} units where it gave {have} before; its output size changed")
    views = la["u_mean"].shape[0]
    for k, shape in (("u_mean", (views, units)), ("u_m2", (views, units)), ("tv", (units,)), ("ts", (units,))):
        la[k] = torch.zeros(shape, dtype=torch.float64, device=la[k].device)


def score_transform(
    run: Run,
    t: Any,
    params: torch.Tensor,
    ident: torch.Tensor,
    stats: dict[str, FeatureStats],
    pair_dir: Any,
    include_identity: bool = False,
) -> tuple[dict[str, Any], int]:
    """Score every image of this rank under every parameter of ``t``, at every measured layer; the
    accumulators stay on ``run.device`` (float64 sums [P], per-image means [n_rank], per-unit moments
    [V, U]) until a save or the end.

    Returns ``(accumulators, pairs)``: ``pairs`` is the number of image-parameter pairs this call
    computed (a resumed transform counts only what was left)."""
    p = params.shape[0]
    keep = torch.ones_like(ident) if include_identity else ~ident
    acc, fresh = _accumulators(run, t, p, not bool(ident.any()), stats)
    new_files = fresh and acc["next"] == run.start
    layers = run.extract.layer_names
    mm = None
    if pair_dir is not None:
        mm = _pair_files(os.fspath(pair_dir), t.name, layers, run.n, p, run.shard, new_files)
    flush = functools.partial(_flush_pairs, mm) if mm is not None else None
    bar = run.pass_bar((run.stop - run.start) * p, t.name, initial=(acc["next"] - run.start) * p)
    count0 = acc["count"]
    ctx = _Context(run, t, params, keep.to(run.device), int(keep.sum()), stats, acc, mm)
    with (
        contextlib.closing(_work(run, ctx)) as work,
        _ViewProducer(run) as producer,
        at_threads(1) if run.device.type == "cpu" else contextlib.nullcontext(),
    ):
        shown = 0  # image-parameter pairs of the current group already on the bar
        for group, ps, pe, views in producer.views(work):
            if views is not None:
                group.score_chunk(ps, pe, views)
                shown += (pe - ps) * (group.e - group.s)
                bar.update((pe - ps) * (group.e - group.s))  # within the group: a large grid takes minutes
            if pe is None or pe == p:  # the group's last piece: fold it into the accumulators, save now and then
                if views is not None:
                    group.finish()
                acc["next"] = group.e
                bar.update((group.e - group.s) * p - shown)
                shown = 0
                run.checkpoint(before=flush)
    bar.close()
    if flush is not None:
        flush()
    run.checkpoint(force=True)
    run.check_finite()
    return acc, (acc["count"] - count0) * p


def _accumulators(
    run: Run, t: Any, p: int, add_ref: bool, stats: dict[str, FeatureStats]
) -> tuple[dict[str, Any], bool]:
    """``(accumulators, fresh)`` of transform ``t``: zeroed ones on the device for a new pass (``add_ref``: the
    per-unit views include the identity once, the reference view when the grid has none), or the resumed
    state's, moved back to the device."""
    acc = run.state["transforms"].get(t.name)
    if acc is None:
        acc = {
            "count": 0,
            "next": run.start,
            "add_ref": add_ref,
            "layers": {
                ly: _fresh_layer(run, p, p + add_ref, 0 if run.extract.elements else _stats_dim(stats[ly], ly))
                for ly in run.extract.layer_names
            },
        }
        if run.cfg.equivariance:
            for ly, sums in _equivariance_sums(run, t, p, stats).items():
                acc["layers"][ly]["eq"] = sums
        run.state["transforms"][t.name] = acc
        return acc, True
    for la in acc["layers"].values():  # resumed: the saved host copies go back to the device
        for k in (*_DEVICE_KEYS, *MAPPED_KEYS):
            if k in la:
                la[k] = la[k].to(run.device)
        if "eq" in la:
            la["eq"] = {k: v.to(run.device) for k, v in la["eq"].items()}
    return acc, False


class _Context:
    """What every group of one transform's pass shares."""

    def __init__(
        self,
        run: Run,
        t: Any,
        params: torch.Tensor,
        keep: torch.Tensor,
        n_keep: int,
        stats: dict[str, FeatureStats],
        acc: dict[str, Any],
        mm: dict[str, dict[str, np.memmap]] | None,
    ) -> None:
        self.run, self.t, self.params, self.keep, self.n_keep = run, t, params, keep, n_keep
        self.stats, self.acc, self.mm = stats, acc, mm
        self.p = params.shape[0]
        # transforms with few parameters take several image batches per model call, so every call
        # carries about forward_batch images (the reference features stay cached per image batch)
        self.group = max(1, run.extract.forward_batch // max(1, self.p * run.batch_size))
        self.mapped = MappedBack(run, t, params)  # same-equivariance, where it applies

    def job_threads(self) -> Any:
        """The block at the run's own intra-op threads (the CPU: the scoring loop runs torch's small work at one;
        the model's calls, the views and the compiled per-unit moments take the run's count back)."""
        threads = self.run.extract.threads
        return at_threads(threads) if threads else contextlib.nullcontext()


def _work(run: Run, ctx: _Context) -> Generator[tuple[_Group, int | None, int | None], None, None]:
    """``(group, ps, pe)`` for every chunk of parameters of every group of image batches, in order, reading the
    images as it goes; a group without readable images comes once with ``ps = pe = None``."""
    spans = list(run.batches(ctx.acc["next"]))
    with contextlib.closing(run.stream(spans)) as stream:
        for g in range(0, len(spans), ctx.group):
            span = spans[g : g + ctx.group]
            xs, idxs, starts = [], [], []
            for (bs, _), (xb, ib) in zip(span, stream):
                if count(xb):
                    xs.append(xb)
                    idxs.append(ib)
                    starts.append(bs)
            group = _Group(ctx, span[0][0], span[-1][1], xs, idxs, starts)
            if group.b == 0:
                yield group, None, None
                continue
            pc = max(1, run.extract.forward_batch // group.b)
            for ps in range(0, ctx.p, pc):
                yield group, ps, min(ctx.p, ps + pc)


def _spare_core() -> bool:
    """Whether this process may use more cores than torch's intra-op threads (a core for the view thread)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores > torch.get_num_threads()


class _ViewProducer:
    """Makes the transformed views of the next chunk on a background thread while the model runs on the
    current one (CPU: the transforms' work and the forward pass overlap); on CUDA the views are made in
    line (kernel launches are asynchronous already).

    By default (``overlap=None``) the CPU thread runs only where a core is left over by torch's threads:
    otherwise it preempts one of the model's threads, and every parallel layer waits for that thread
    (ResNet-50 at 56 px on 2 cores and 2 threads: the measurement ran at 0.54x the bare forward pass with
    the thread, 0.75x without it; docs/performance.md)."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.pool = None
        # the caller's default device (a thread-local setting) holds in the producer thread too
        self.default_device = torch.get_default_device()
        if run.device.type == "cpu" and (run.cfg.overlap or (run.cfg.overlap is None and _spare_core())):
            import concurrent.futures

            self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="invfast-views")

    def __enter__(self) -> _ViewProducer:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def _make(self, group: _Group, ps: int | None, pe: int | None) -> torch.Tensor | None:
        if ps is None:
            return None
        with torch.inference_mode(), torch.device(self.default_device):
            return self.run.views(group.ctx.t, group.x, group.ctx.params[ps:pe])

    def views(self, work: Iterator[tuple[_Group, int | None, int | None]]) -> Iterator[tuple[Any, Any, Any, Any]]:
        """``(group, ps, pe, views)`` for every item of ``work``, the next item's views made meanwhile."""
        if self.pool is None:
            for group, ps, pe in work:
                with group.view_threads(ps, pe):
                    views = self._make(group, ps, pe)
                yield group, ps, pe, views
            return
        nxt = next(work, None)
        pending = None if nxt is None else (nxt, self.pool.submit(self._make, *nxt))
        while pending is not None:
            item, fut = pending
            nxt = next(work, None)
            pending = None if nxt is None else (nxt, self.pool.submit(self._make, *nxt))
            yield (*item, fut.result())


#: values in one chunk of views below which they are made at one intra-op thread on the CPU (16 images of
#: 3 x 64 x 64 px under 16 rotations hold 3.1e6; the conv-net job's 32 px chunks 0.8e6)
PARALLEL_VIEW_VALUES = 2_000_000


class _Group:
    """One group of image batches of one transform: its images, reference features and the per-image sums
    that are complete only when every chunk of parameters has been scored."""

    def __init__(
        self, ctx: _Context, s: int, e: int, xs: list[Any], idxs: list[torch.Tensor], starts: list[int]
    ) -> None:
        self.ctx, self.s, self.e = ctx, s, e
        self.b = sum(count(x) for x in xs)
        if not self.b:
            return
        run = ctx.run
        refs = [run.reference_features(bs, xb) for bs, xb in zip(starts, xs)]
        self.x, self.idx = concat(xs), (idxs[0] if len(idxs) == 1 else torch.cat(idxs))
        self.layers = run.extract.layer_names
        # each image's fold of the equivariance fit: contiguous blocks of the indices of all ranks' images
        self.fold = eqv.fold_of(self.idx.cpu(), run.n, eqv.FOLDS) if run.cfg.equivariance else None
        self.f_ref = {ly: refs[0][ly] if len(refs) == 1 else torch.cat([r[ly] for r in refs]) for ly in self.layers}
        self.z_ref = {
            ly: concat([run.whitened_reference(bs, r[ly], ly, ctx.stats[ly]) for bs, r in zip(starts, refs)])
            for ly in self.layers
        }
        dev, b = run.device, self.b
        self.img_d = {ly: torch.zeros(b, dtype=torch.float64, device=dev) for ly in self.layers}
        self.img_c = {ly: torch.zeros(b, dtype=torch.float64, device=dev) for ly in self.layers}
        # per image, the moments of each unit over the image's views so far ([b, U]: mean, M2; made at the
        # first chunk), the reference view first when the grid has no identity
        add_ref = ctx.acc["add_ref"]
        self.u_ref: dict[str, torch.Tensor] = {}
        if add_ref:
            ref_units = (
                [run.extract.features_and_units(run.model_input(xb))[1] for xb in xs] if run.extract.elements else refs
            )
            self.u_ref = {ly: concat([u[ly] for u in ref_units]).double() for ly in self.layers}
        self.n_views = int(add_ref)
        # same-equivariance: per image, the moments of its mapped-back views (the view size is the model's input)
        self.image_hw = tuple(self.x.shape[-2:]) if isinstance(self.x, torch.Tensor) else None
        self.mapped = (
            {ly: MappedBack.start_group(self.u_ref.get(ly)) for ly in self.layers} if ctx.mapped.active else {}
        )
        self.v_mean: dict[str, torch.Tensor] = {ly: u.clone() for ly, u in self.u_ref.items()}
        self.v_m2: dict[str, torch.Tensor] = {ly: torch.zeros_like(u) for ly, u in self.u_ref.items()}
        self.pairs = (
            None
            if ctx.mm is None
            else {ly: torch.empty(2, b, ctx.p, dtype=torch.float32, device=dev) for ly in self.layers}
        )

    def view_threads(self, ps: int | None, pe: int | None) -> Any:
        """The block that makes the views of parameters ``ps..pe``: at the run's threads where they hold at least
        :data:`PARALLEL_VIEW_VALUES` values, else at the caller's (one, in the scoring loop on the CPU: the
        transforms' input checks are torch ops too small to fork for)."""
        if ps is None or pe is None or not isinstance(self.x, torch.Tensor):
            return contextlib.nullcontext()
        if self.x[0].numel() * self.b * (pe - ps) < PARALLEL_VIEW_VALUES:
            return contextlib.nullcontext()
        return self.ctx.job_threads()

    def score_chunk(self, ps: int, pe: int, views: torch.Tensor) -> None:
        """The model on the views of parameters ``ps..pe`` (``[b, pe - ps, C, H, W]``); adds into the
        accumulators on the device without reading back."""
        ctx, b = self.ctx, self.b
        feats, units = ctx.run.extract.features_and_units(views.flatten(0, 1))
        del views
        k = ctx.keep[ps:pe]
        for ly in self.layers:
            la = ctx.acc["layers"][ly]
            f_t = feats[ly].view(b, pe - ps, -1)
            # no per-chunk host check: non-finite scores are flagged on the device instead
            d, c = (v.double() for v in scores_of_whitened(self.z_ref[ly], f_t, ctx.stats[ly]))
            ctx.run.flag_nonfinite(ctx.t.name, d, c)
            la["sum_d"][ps:pe] += d.sum(0)
            la["sum_c"][ps:pe] += c.sum(0)
            la["sq_d"][ps:pe] += (d * d).sum(0)
            la["sq_c"][ps:pe] += (c * c).sum(0)
            self.img_d[ly] += d.masked_fill(~k, 0).sum(1)
            self.img_c[ly] += c.masked_fill(~k, 0).sum(1)
            if self.fold is not None:
                eqv.add_views(la["eq"], self.fold, self.f_ref[ly], f_t, ps)
            u = units[ly].view(b, pe - ps, -1)  # [b, c, U]: the chunk's views of every image, per unit
            _unit_accumulators(la, u.shape[2], ly)
            if ly not in self.v_mean:
                self.v_mean[ly] = torch.zeros(b, u.shape[2], dtype=torch.float64, device=u.device)
                self.v_m2[ly] = torch.zeros_like(self.v_mean[ly])
            # their moments over each image's views and over each view's images, merged into the running ones
            with ctx.job_threads():
                merge_unit_moments_(
                    u,
                    self.v_mean[ly],
                    self.v_m2[ly],
                    self.n_views,
                    la["u_mean"][ps:pe],
                    la["u_m2"][ps:pe],
                    ctx.acc["count"],
                )
            shape = ctx.run.extract.map_shapes.get(ly)
            if self.mapped and self.image_hw is not None and ctx.mapped.applies(shape):
                assert shape is not None
                hw = (int(self.image_hw[0]), int(self.image_hw[1]))
                ctx.mapped.chunk(la, self.mapped[ly], u, shape, hw, ps, self.n_views, ctx.acc["count"])
            if self.pairs is not None:
                self.pairs[ly][0, :, ps:pe] = d
                self.pairs[ly][1, :, ps:pe] = c
        self.n_views += pe - ps

    def finish(self) -> None:
        """Fold the group's per-image values into the accumulators (and the per-pair files)."""
        ctx, p, run = self.ctx, self.ctx.p, self.ctx.run
        acc = ctx.acc
        views = p + acc["add_ref"]  # == self.n_views: every chunk of parameters has been scored
        rows = (self.idx - run.start).to(run.device, non_blocking=True)
        for ly in self.layers:
            la = acc["layers"][ly]
            if acc["add_ref"]:  # the reference view's moments over images
                merge_moments(acc["count"], la["u_mean"][p], la["u_m2"][p], self.b, *moments(self.u_ref[ly], 0))
            if self.fold is not None:
                eqv.add_reference(la["eq"], self.fold, self.f_ref[ly])
            if self.mapped:
                MappedBack.finish(la, self.mapped[ly], self.u_ref.get(ly), p, views, acc["count"])
            la["tv"] += (self.v_m2[ly] / views).sum(0)
            la["ts"] += sample_std(self.v_m2[ly], views).sum(0)
            if ctx.n_keep:
                la["img_d"][rows] = self.img_d[ly] / ctx.n_keep
                la["img_c"][rows] = self.img_c[ly] / ctx.n_keep
        acc["count"] += self.b  # after the merges above, which weigh the images counted before this group
        if ctx.mm is not None and self.pairs is not None:  # both or neither
            rows_h = self.idx.numpy()
            for ly, per in ctx.mm.items():
                host = self.pairs[ly].cpu().numpy()  # per-pair scores asked for: one copy per group of batches
                per["distance"][rows_h] = host[0]
                per["cosine"][rows_h] = host[1]
