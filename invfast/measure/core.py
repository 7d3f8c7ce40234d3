"""Invariance measurement: model + images + transforms -> :class:`InvarianceResult` (Ericsson et al. 2021, App. C).

Two passes: reference statistics (:class:`invfast.FeatureStats` over the untransformed images)
unless the caller gives them, then scores. For each transform, every image batch is transformed
under all grid parameters in chunks, pushed through the model and scored with
:func:`invfast.invariance_scores`; only float64 per-parameter sums and per-image means are kept
(O(P + N) memory per transform), per-pair scores go to disk when asked. Images are sharded over
the ranks of an initialised ``torch.distributed`` group; partial state is written atomically so a
killed run resumes where it stopped.

Pipeline: a pass reads its image batches through ``source.batches`` (folders decode the next
batches in DataLoader worker processes meanwhile; page-locked when the device is CUDA), uploads
each batch once, transforms, extracts and scores on the device, and keeps its accumulators there:
the host reads them only when the state is saved (every ``save_every`` seconds) and at the end of
each transform. Model calls carry at most ``max(forward_batch, batch_size)`` images whatever N and k.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from invfast.data.protocol import Source, pin
from invfast.data.sources import as_source
from invfast.measure.extractor import FeatureExtractor, _model_checksum, _setup_model
from invfast.measure.result import InvarianceResult, TransformResult
from invfast.measure.protocol import PreprocessedExtractor, ResampledSource, get_protocol, resample_indices
from invfast.measure.selection import FAMILIES, resolve_transforms
from invfast.measure.state import (Shard, barrier, current_shard, files_fingerprint, gather_objects, load_state,
                                   merge_stats, save_state, state_file, sum_in_rank_order)
from invfast.metrics import invariance_scores
from invfast.stats import FeatureStats

__all__ = ["default_workers", "measure_invariance", "measure_real_world"]


def default_workers() -> int:
    """Decoding worker processes for image folders when none are asked: ``min(8, usable CPUs)``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


def _read_batches(source: Any, index_batches: Sequence[torch.Tensor],
                  pin_memory: bool) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``(images, ok)`` per batch of indices through the source's ``batches`` (decoding ahead where the
    source can), page-locked when ``pin_memory``; plain ``load`` calls for sources without ``batches``."""
    if isinstance(source, ResampledSource):  # the draw with replacement reads the underlying source
        yield from _read_batches(source.source, [source.indices[b] for b in index_batches], pin_memory)
    elif isinstance(source, Source):
        yield from source.batches(index_batches, pin_memory=pin_memory)
    else:  # a user's source following the protocol
        it = source.batches(index_batches) if hasattr(source, "batches") else map(source.load, index_batches)
        for x, ok in it:
            yield (pin(x) if pin_memory else x), ok


class _Shared:
    """A pass's view of the run's single progress bar (closing it leaves the bar open)."""

    def __init__(self, bar: Any) -> None:
        self._bar = bar

    def update(self, n: int) -> None:
        self._bar.update(n)

    def close(self) -> None:
        pass


def _to_host(obj: Any) -> Any:
    """``obj`` with every tensor in it copied to the host (the saved state is device-independent)."""
    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return {k: _to_host(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_host(v) for v in obj)
    return obj


# ---------------------------------------------------------------------------------------------- engine
class _Run:
    """Shared machinery of one measurement: source, extractor, shard, state file, progress."""

    def __init__(self, model: Any, data: Any, *, n_images: int | None, batch_size: int, forward_batch: int,
                 device: Any, dtype: Any, channels_last: bool | None, crop: int | None, normalize: bool,
                 checkpoint: Any, resize: int, strict: bool, state_path: Any, save_every: float,
                 progress: bool, shard: Shard | None, feature_cache_mb: float = 512,
                 workers: int | None = None) -> None:
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if not isinstance(forward_batch, int) or forward_batch < 1:
            raise ValueError(f"forward_batch must be a positive integer, got {forward_batch!r}")
        if save_every < 0:
            raise ValueError(f"save_every must be >= 0 seconds, got {save_every}")
        self.device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model_name = model if isinstance(model, str) else type(model).__name__
        model, channels_last = _setup_model(model, checkpoint, self.device, dtype, channels_last)
        self.model_fp = _model_checksum(model)  # after the checkpoint is loaded: the weights measured
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
            raise ValueError(f"workers must be an int >= 0 (or None for the default), got {workers!r}")
        self.source = as_source(data, n=n_images, resize=resize, strict=strict,
                                workers=default_workers() if workers is None else workers)
        self.n = len(self.source)
        self.extract = FeatureExtractor(model, self.device, dtype, bool(channels_last), crop, normalize, forward_batch)
        self.batch_size = batch_size
        self.shard = shard or current_shard()
        self.start, self.stop = self.shard.bounds(self.n)
        self.state_path = None if state_path is None else state_file(state_path, self.shard)
        self.save_every = save_every
        self.progress = progress and self.shard.rank == 0
        self.bad: set[int] = set()
        self.cache_bytes = int(feature_cache_mb * 2**20)
        self._ref_cache: dict[int, torch.Tensor] = {}
        self._cached = 0
        self._last_save = time.monotonic()
        self.state: dict[str, Any] = {}
        self.progress_bar: Any = None  # one bar over every pass when set (measure_invariance)
        self._nonfinite: torch.Tensor | None = None  # device flag: a non-finite score was accumulated
        self._nonfinite_name = ""

    def batches(self, start: int | None = None) -> Iterable[tuple[int, int]]:
        s = self.start if start is None else start
        while s < self.stop:
            e = min(self.stop, s + self.batch_size)
            yield s, e
            s = e

    def stream(self, spans: list[tuple[int, int]]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(images on the device, their indices on the host) for each span ``(s, e)`` of images, in
        order, read through the source's ``batches`` so the next batches decode meanwhile."""
        pinned = self.device.type == "cuda"
        index_batches = [torch.arange(s, e, device="cpu") for s, e in spans]  # host bookkeeping
        for (s, _), idx, (x, ok) in zip(spans, index_batches, _read_batches(self.source, index_batches, pinned)):
            yield self._upload(s, idx, x, ok)

    def _upload(self, s: int, idx: torch.Tensor, x: torch.Tensor, ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        bad = torch.nonzero(~ok).flatten().tolist()  # ok is host bookkeeping
        if bad:  # rare: drop the unreadable rows on the host (the pinned buffer is given up)
            self.bad.update(s + i for i in bad)
            x, idx = x[ok], idx[ok]
        # once per batch; asynchronous from a pinned buffer (a fresh one each batch)
        return x.to(self.device, non_blocking=True), idx

    def load(self, s: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Images ``s..e`` on the device (readable ones) and their indices (host)."""
        return next(self.stream([(s, e)]))

    def flag_nonfinite(self, name: str, *scores: torch.Tensor) -> None:
        """Remember on the device whether any of ``scores`` is NaN/Inf (checked at saves, no sync here)."""
        bad = torch.stack([~torch.isfinite(v).all() for v in scores]).any()
        self._nonfinite = bad if self._nonfinite is None else self._nonfinite | bad
        self._nonfinite_name = name

    def check_finite(self) -> None:
        """Raise if a non-finite score was accumulated since the last check (one host read)."""
        if self._nonfinite is not None and bool(self._nonfinite):
            raise ValueError(f"transform {self._nonfinite_name!r} gave non-finite (NaN/Inf) scores: the model's features "
                             "are NaN/Inf on some transformed images, or too large for float32 whitening")
        self._nonfinite = None

    def reference_features(self, s: int, x: torch.Tensor) -> torch.Tensor:
        """Features of the untransformed batch starting at image ``s``, kept in memory while they fit
        ``feature_cache_mb`` so each transform does not recompute them."""
        f = self._ref_cache.get(s)
        if f is None or f.shape[0] != x.shape[0]:
            f = self.extract(x)
            nbytes = f.numel() * f.element_size()
            if self._cached + nbytes <= self.cache_bytes:
                self._ref_cache[s] = f
                self._cached += nbytes
        return f

    def bar(self, total: int, desc: str, initial: int = 0):
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit="img", disable=not self.progress, leave=True,
                    dynamic_ncols=True)

    def pass_bar(self, total: int, desc: str, initial: int) -> Any:
        """The bar a pass updates: the run's single bar (described as ``desc``), else a bar of its own."""
        if self.progress_bar is None:
            return self.bar(total, desc, initial)
        self.progress_bar.set_description(desc, refresh=False)
        return _Shared(self.progress_bar)

    def resample(self, indices: torch.Tensor) -> None:
        """Score the images ``indices`` of the source (repeats allowed) from now on."""
        self.source = ResampledSource(self.source, indices)
        self.n = len(self.source)
        self.start, self.stop = self.shard.bounds(self.n)
        self._ref_cache.clear()
        self._cached = 0

    def resume(self, fingerprint: dict[str, Any]) -> None:
        self.fingerprint = fingerprint
        if self.state_path is not None:
            st = load_state(self.state_path, fingerprint)
            if st is not None:
                self.state = st
                self.bad = set(st.get("bad", []))
        self.state.setdefault("transforms", {})

    def checkpoint(self, force: bool = False, before: Callable[[], Any] | None = None) -> None:
        """Save the state if ``save_every`` seconds passed (or ``force``); ``before`` runs first (flushes)."""
        if self.state_path is None:
            return
        now = time.monotonic()
        if force or now - self._last_save >= self.save_every:
            self.check_finite()  # never save sums with NaN in them
            if before is not None:
                before()
            # the accumulators live on the device: the host copy is made here, once per save
            save_state(self.state_path, _to_host({**self.state, "fingerprint": self.fingerprint, "bad": sorted(self.bad)}))
            self._last_save = now

    def reference_stats(self, stats: FeatureStats | None, shrinkage: Any, eps: float) -> FeatureStats:
        """Given stats (finalized if needed) or the first pass over this rank's images, merged over ranks."""
        if stats is not None:
            if not isinstance(stats, FeatureStats):
                raise TypeError(f"stats must be an invfast.FeatureStats, got {type(stats).__name__}")
            if stats.whitener_ is None:
                stats.finalize(shrinkage=shrinkage, eps=eps)
            return stats
        st = self.state.get("stats")
        local = FeatureStats() if st is None or st["local"] is None else FeatureStats.from_state_dict(st["local"])
        nxt = self.start if st is None else st["next"]
        bar = self.pass_bar(self.stop - self.start, "reference statistics", initial=nxt - self.start)
        spans = list(self.batches(nxt))

        def snapshot(e: int) -> None:  # host copy of the statistics, only when a state is saved
            self.state["stats"] = {"local": local.state_dict() if local.n else None, "next": e}

        with contextlib.closing(self.stream(spans)) as stream:
            for (s, e), (x, _) in zip(spans, stream):
                if x.shape[0]:
                    local.update(self.reference_features(s, x).double())
                bar.update(e - s)
                self.checkpoint(before=lambda e=e: snapshot(e))
        bar.close()
        if spans or "stats" not in self.state:
            snapshot(self.stop)
        self.checkpoint(force=True)
        merged = merge_stats(local, self.shard)
        if merged.n < 2:
            raise ValueError(f"only {merged.n} reference image(s) could be read; the statistics need at least 2")
        return merged.finalize(shrinkage=shrinkage, eps=eps)

    def errors(self) -> dict[str, Any]:
        """Unreadable images over all ranks: count and the first 20 (path, reason)."""
        files = getattr(self.source, "files", None)
        reasons = {p: r for p, r in getattr(getattr(self.source, "errors", None), "examples", [])}
        local = []
        for i in sorted(self.bad)[:20]:
            path = files[i] if files is not None else f"image {i}"
            local.append((i, path, reasons.get(path, "could not be read")))
        parts = gather_objects((sorted(self.bad), local), self.shard)
        bad = sorted(set().union(*(set(b) for b, _ in parts)))
        examples = sorted((e for _, ex in parts for e in ex), key=lambda e: e[0])[:20]
        return {"count": len(bad), "examples": [[p, r] for _, p, r in examples]}


def _open_progress(run: _Run, stats_pass: bool, names: list[str], n_scored: int) -> Any:
    """One bar with ETA over this rank's images x passes (the statistics pass, then each transform),
    starting from what a resumed state has done already."""
    n_stats = run.stop - run.start
    s0, s1 = run.shard.bounds(n_scored)
    done = 0
    st = run.state.get("stats")
    if stats_pass and st is not None:
        done += st["next"] - run.start
    for name in names:
        acc = run.state["transforms"].get(name)
        if acc is not None:
            done += acc["next"] - s0
    total = (n_stats if stats_pass else 0) + len(names) * (s1 - s0)
    return run.bar(total, "measure", initial=done)


def _check_stats(stats: Any) -> None:
    if stats is not None and not isinstance(stats, FeatureStats):
        raise TypeError(f"stats must be an invfast.FeatureStats (or None to compute them), got {type(stats).__name__}")
    if stats is not None and stats.n < 2:
        raise ValueError(f"the given stats hold {stats.n} sample(s); reference statistics need at least 2")


def _numeric_fingerprint(run: _Run, dtype: Any, channels_last: Any, resize: int, content: bool) -> dict[str, Any]:
    """The settings and file identities that change the numbers, beyond those named in each fingerprint."""
    return {"dtype": str(dtype), "channels_last": channels_last, "resize": resize,
            "files": files_fingerprint(run.source, content)}


def _stats_info(stats: FeatureStats) -> dict[str, Any]:
    return {"n": stats.n, "dim": stats.dim, "shrinkage": stats.shrinkage_, "lambda": stats.lambda_, "rho": stats.rho_}


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


def measure_invariance(model: Any, data: Any, transforms: Any = "all", *, stats: FeatureStats | None = None,
                       grid_size: int = 256, batch_size: int = 32, forward_batch: int = 256,
                       n_images: int | None = None, device: Any = None, dtype: torch.dtype | None = None,
                       channels_last: bool | None = None, crop: int | None = None, normalize: bool = True,
                       checkpoint: str | os.PathLike | None = None, shrinkage: str | float | None = None,
                       eps: float = 1e-6,
                       pair_scores_dir: str | os.PathLike | None = None, state_path: str | os.PathLike | None = None,
                       save_every: float = 60.0, strict: bool = False, resize: int = 256, progress: bool = False,
                       name: str | None = None, shard: Shard | None = None,
                       feature_cache_mb: float = 512, fingerprint_content: bool = False,
                       protocol: str | Any = "invfast", protocol_seed: int = 0,
                       workers: int | None = None) -> InvarianceResult:
    """How invariant ``model`` is to each transform, on the images of ``data`` (Ericsson et al. 2021, App. C).

    Args:
        model: an ``nn.Module`` (or callable) mapping normalised images ``[B, 3, H, W]`` to pooled
            features ``[B, D]``, or an invfast model name (``invfast.models.create``) with ``checkpoint``.
        data: images ``[N, C, H, W]`` (uint8 0..255 or float 0..1), a folder path (``'folder:PATH'`` or
            PATH; read with PIL, shorter side resized to ``resize``, centre-cropped square),
            ``'synthetic:n=1000,split=test'``, a map-style dataset (``invfast.synthetic.Transforms2D``),
            or a source from :mod:`invfast.data`.
        transforms: 'all' | 'spatial' | 'appearance' | 'rotation,hue' | list of names or transform objects.
        stats: reference :class:`FeatureStats`; by default a first pass over the untransformed images.
        grid_size: k of each transform's ``grid(k)``.
        batch_size: images per batch; ``forward_batch``: images x parameters per model call.
        n_images: keep the first n images of ``data``.
        device, dtype: where to run; ``dtype`` torch.bfloat16/float16 runs the model under autocast
            (features are scored in float32). ``channels_last`` defaults to True on CUDA.
        crop: centre crop (pixels) after the transform, before the model (224 for 256-px ImageNet loading).
        normalize: ImageNet mean/std normalisation before the model.
        shrinkage, eps: passed to ``FeatureStats.finalize`` when the stats are computed here
            (``None``: the protocol's, 'trace' for invfast, λ = 0 for ericsson).
        pair_scores_dir: write every per-pair score to ``<dir>/<transform>.{distance,cosine}.npy``
            (float32 [N, P] memory maps, NaN rows for unreadable images).
        state_path: resumable partial state (one file per rank); written atomically every
            ``save_every`` seconds and after each transform; a rerun with the same arguments resumes.
        strict: stop at the first unreadable image file instead of counting and skipping it.
        shard: rank/world size; by default that of the initialised ``torch.distributed`` group.
        feature_cache_mb: memory for the reference features of this rank's images (computed once,
            reused by every transform); beyond it they are recomputed per transform.
        fingerprint_content: recognise the images of a resumed run by their bytes (SHA-256) rather
            than by file size + modification time.

        protocol: 'invfast' (default) or 'ericsson' (the original evaluation code; see
            :mod:`invfast.measure.protocol` and the table in docs/measure.md); ``protocol_seed`` seeds
            its draws (images with replacement, elastic randomness).
        workers: DataLoader worker processes decoding a folder's images ahead of the measurement
            (``None``: :func:`default_workers`, min(8, usable CPUs); 0: in this process). Other
            sources are read as they are.

    Returns:
        :class:`InvarianceResult` (identical on every rank). Means exclude identity parameters
        (include them under ``protocol='ericsson'``).
    """
    t0 = time.monotonic()
    if not isinstance(grid_size, int) or grid_size < 1:
        raise ValueError(f"grid_size must be a positive integer, got {grid_size!r}")
    _check_stats(stats)
    proto = get_protocol(protocol)
    if shrinkage is None:
        shrinkage = proto.shrinkage
    tlist = [proto.transform(t, protocol_seed) for t in resolve_transforms(transforms)]
    run = _Run(model, data, n_images=None if proto.with_replacement else n_images, batch_size=batch_size, forward_batch=forward_batch, device=device,
               dtype=dtype, channels_last=channels_last, crop=crop, normalize=normalize, checkpoint=checkpoint,
               resize=resize, strict=strict, state_path=state_path, save_every=save_every, progress=progress,
               shard=shard, feature_cache_mb=feature_cache_mb, workers=workers)
    if proto.preprocess_after_transform:  # the transform sees the loaded image, Resize + CenterCrop follow
        run.extract.crop = None
        run.extract = PreprocessedExtractor(run.extract, proto.resize, crop or proto.crop)
    grids = []
    for t in tlist:
        params = torch.as_tensor(t.grid(grid_size))
        ident = torch.as_tensor(t.is_identity(params), dtype=torch.bool).reshape(-1)
        if params.dim() not in (1, 2) or params.shape[0] == 0 or ident.shape[0] != params.shape[0]:
            raise ValueError(f"transform {t.name!r} gave a grid of shape {tuple(params.shape)} and an identity mask of "
                             f"shape {tuple(ident.shape)}; expected [P] or [P, m] and [P]")
        if t.family not in FAMILIES:
            raise ValueError(f"transform {t.name!r} has family {t.family!r}; expected one of {FAMILIES}")
        grids.append((t, params, ident))
    fingerprint = {"data": run.source.describe(), "model": run.model_fp, "grid_size": grid_size,
                   "transforms": [[t.name, int(p.shape[0])] for t, p, _ in grids], "crop": crop, "normalize": normalize,
                   "stats": None if stats is None else [stats.n, stats.dim, float(stats.mean.double().sum())],
                   "shrinkage": [str(shrinkage), eps], "world_size": run.shard.world_size,
                   "pair_scores": None if pair_scores_dir is None else os.path.abspath(os.fspath(pair_scores_dir)),
                   **_numeric_fingerprint(run, dtype, channels_last, resize, fingerprint_content),
                   "protocol": [proto.name, protocol_seed, n_images]}
    run.resume(fingerprint)
    drawn = resample_indices(run.n, n_images, protocol_seed) if proto.with_replacement else None
    run.progress_bar = _open_progress(run, stats is None, [t.name for t, _, _ in grids],
                                      run.n if drawn is None else int(drawn.numel()))
    try:
        ref_stats = run.reference_stats(stats, shrinkage, eps)
        if drawn is not None:  # statistics from every image, scores on a draw with replacement
            run.resample(drawn)
        n_pairs_total = 0
        results: dict[str, TransformResult] = {}
        with torch.inference_mode():
            for t, params, ident in grids:
                acc = _score_transform(run, t, params, ident, ref_stats, pair_scores_dir, proto.include_identity)
                results[t.name] = _finish_transform(run, t, params, ident, acc, pair_scores_dir, proto.include_identity)
                n_pairs_total += results[t.name].n_pairs
    finally:
        run.progress_bar.close()
    errors = run.errors()
    elapsed = time.monotonic() - t0
    meta = {"data": run.source.describe(), "grid_size": grid_size, "device": str(run.device),
            "dtype": None if dtype is None else str(dtype), "world_size": run.shard.world_size, "crop": crop,
            "elapsed_s": elapsed, "pairs_per_s": n_pairs_total / elapsed if elapsed > 0 else None,
            "mode": "synthetic", "protocol": proto.name}
    return InvarianceResult(model=name or run.model_name, transforms=results, n_images=run.n,
                            stats=_stats_info(ref_stats), errors=errors, meta=meta)


def _score_transform(run: _Run, t: Any, params: torch.Tensor, ident: torch.Tensor, stats: FeatureStats,
                     pair_dir: Any, include_identity: bool = False) -> dict[str, Any]:
    """Score every image of this rank under every parameter of ``t``; the accumulators stay on
    ``run.device`` (float64 sums [P], per-image means [n_rank]) until a save or the end."""
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
    return acc


def _score_group(run: _Run, t: Any, x: torch.Tensor, idx: torch.Tensor, f_ref: torch.Tensor, params: torch.Tensor,
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


def _finish_transform(run: _Run, t: Any, params: torch.Tensor, ident: torch.Tensor, acc: dict[str, Any],
                      pair_dir: Any, include_identity: bool = False) -> TransformResult:
    sh = run.shard
    # float64 sums combined on the device (NCCL all-gathers CUDA tensors), then read once
    sums = {k: sum_in_rank_order(acc[k], sh).cpu() for k in ("sum_d", "sum_c", "sq_d", "sq_c")}
    count = int(sum_in_rank_order(torch.tensor([float(acc["count"])], dtype=torch.float64, device="cpu"), sh).item())
    img_d = torch.cat(gather_objects(acc["img_d"].cpu(), sh))
    img_c = torch.cat(gather_objects(acc["img_c"].cpu(), sh))
    keep = torch.ones_like(ident) if include_identity else ~ident
    if count == 0:
        raise ValueError(f"no image could be read for transform {t.name!r}")
    mean_d, mean_c = sums["sum_d"] / count, sums["sum_c"] / count
    std_d = (sums["sq_d"] / count - mean_d ** 2).clamp_min(0).sqrt()
    std_c = (sums["sq_c"] / count - mean_c ** 2).clamp_min(0).sqrt()

    def over(mask: torch.Tensor, key: str) -> float | None:
        return float(sums[key][mask].sum() / (count * int(mask.sum()))) if bool(mask.any()) else None

    pair = None
    if pair_dir is not None:
        pair = {m: os.path.abspath(os.path.join(os.fspath(pair_dir), f"{t.name}.{m}.npy")) for m in ("distance", "cosine")}
    return TransformResult(name=t.name, family=t.family, mean_distance=over(keep, "sum_d"), mean_cosine=over(keep, "sum_c"),
                           n_images=count, params=params.double().cpu(), identity=ident.cpu(), distance=mean_d,
                           cosine=mean_c, distance_std=std_d, cosine_std=std_c, identity_distance=over(ident, "sum_d"),
                           identity_cosine=over(ident, "sum_c"), per_image_distance=img_d if bool(keep.any()) else None,
                           per_image_cosine=img_c if bool(keep.any()) else None, pair_scores=pair,
                           n_pairs=count * int(params.shape[0]))


# ---------------------------------------------------------------------------------------------- real world
def measure_real_world(model: Any, data: Any, *, groups: Any = None, name: str = "real-world", family: str = "real-world",
                       stats: FeatureStats | None = None, batch_size: int = 32, forward_batch: int = 256,
                       n_images: int | None = None, device: Any = None, dtype: torch.dtype | None = None,
                       channels_last: bool | None = None, crop: int | None = None, normalize: bool = True,
                       checkpoint: Any = None, shrinkage: str | float = "trace", eps: float = 1e-6,
                       state_path: Any = None, save_every: float = 60.0, strict: bool = False, resize: int = 256,
                       progress: bool = False, model_name: str | None = None, shard: Shard | None = None,
                       pair_block: int = 64, fingerprint_content: bool = False,
                       protocol: str | Any = "invfast", workers: int | None = None) -> InvarianceResult:
    """Real-world invariance (Ericsson et al. 2021 BMVC, §4.2): no reference image; for every group
    (object / scene folder, or ``groups`` ids for tensors) the scores of all pairs of distinct views
    are averaged, then the group means are averaged. Reference statistics come from all views
    unless ``stats`` is given. Per-group means are the result's per-image values (for significance);
    groups with fewer than two readable views are skipped and counted in ``meta['skipped_groups']``.
    ``workers``: folder decoding processes, as in :func:`measure_invariance`.
    """
    t0 = time.monotonic()
    _check_stats(stats)
    self_pairs = get_protocol(protocol).real_world_self_pairs  # the original: each view with itself too
    if groups is not None and not isinstance(data, (torch.Tensor, np.ndarray)):
        raise ValueError("groups can only be given with in-memory images; folders group by subfolder")
    src = as_source(data, n=n_images, resize=resize, strict=strict, groups=groups) if groups is not None else data
    run = _Run(model, src, n_images=None if groups is not None else n_images, batch_size=batch_size,
               forward_batch=forward_batch, device=device, dtype=dtype, channels_last=channels_last, crop=crop,
               normalize=normalize, checkpoint=checkpoint, resize=resize, strict=strict, state_path=state_path,
               save_every=save_every, progress=progress, shard=shard, workers=workers)
    g = run.source.groups
    if g is None:
        raise ValueError("real-world mode needs groups of views: a folder with one subfolder per object/scene, "
                         "or groups=[group id per image] with in-memory images")
    n_groups = int(g.max()) + 1
    members = [torch.nonzero(g == i).flatten() for i in range(n_groups)]
    fingerprint = {"data": run.source.describe(), "model": run.model_fp, "mode": "real-world", "name": name, "self_pairs": self_pairs,
                   "groups": [int(m.numel()) for m in members], "crop": crop, "normalize": normalize,
                   "stats": None if stats is None else [stats.n, stats.dim, float(stats.mean.double().sum())],
                   "shrinkage": [str(shrinkage), eps], "world_size": run.shard.world_size,
                   **_numeric_fingerprint(run, dtype, channels_last, resize, fingerprint_content)}
    run.resume(fingerprint)
    ref_stats = run.reference_stats(stats, shrinkage, eps)
    g0, g1 = run.shard.bounds(n_groups)
    acc = run.state["transforms"].get(name)
    if acc is None:
        cpu = torch.device("cpu")  # host accumulators: saved with the resumable state
        acc = {"next": g0, "grp_d": torch.full((g1 - g0,), float("nan"), dtype=torch.float64, device=cpu),
               "grp_c": torch.full((g1 - g0,), float("nan"), dtype=torch.float64, device=cpu),
               "pair_d": torch.zeros(1, dtype=torch.float64, device=cpu),
               "pair_c": torch.zeros(1, dtype=torch.float64, device=cpu),
               "pairs": 0, "views": 0}
        run.state["transforms"][name] = acc
    bar = run.bar(g1 - g0, name, initial=acc["next"] - g0)
    bar.unit = "group"
    with torch.inference_mode():
        for gi in range(acc["next"], g1):
            idx = members[gi]
            feats = []
            for s in range(0, idx.numel(), run.batch_size):
                sub = idx[s:s + run.batch_size]
                x, ok = run.source.load(sub)
                for i in sub[~ok].tolist():
                    run.bad.add(int(i))
                if bool(ok.any()):
                    feats.append(run.extract(x[ok]))
            f = torch.cat(feats) if feats else torch.zeros(0, 1)
            v = f.shape[0]
            if v >= 2:
                sums = torch.zeros(2, dtype=torch.float64, device=f.device)  # read once per group
                for r in range(0, v, pair_block):
                    re = min(v, r + pair_block)
                    out = invariance_scores(f[r:re], f.unsqueeze(0).expand(re - r, v, f.shape[1]), ref_stats)
                    off = torch.ones(re - r, v, dtype=torch.bool, device=f.device)
                    rows = torch.arange(re - r, device=f.device)
                    off[rows, rows + r] = self_pairs
                    sums += torch.stack([out["distance"].double()[off].sum(), out["cosine"].double()[off].sum()])
                sd, sc = sums.tolist()
                npairs = v * v if self_pairs else v * (v - 1)
                acc["grp_d"][gi - g0] = sd / npairs
                acc["grp_c"][gi - g0] = sc / npairs
                acc["pair_d"] += sd
                acc["pair_c"] += sc
                acc["pairs"] += npairs
                acc["views"] += v
            acc["next"] = gi + 1
            bar.update(1)
            run.checkpoint()
    bar.close()
    run.checkpoint(force=True)
    sh = run.shard
    grp_d = torch.cat(gather_objects(acc["grp_d"], sh))
    grp_c = torch.cat(gather_objects(acc["grp_c"], sh))
    tot = sum_in_rank_order(torch.cat([acc["pair_d"], acc["pair_c"],
                                       torch.tensor([float(acc["pairs"]), float(acc["views"])], dtype=torch.float64,
                                                    device="cpu")]), sh)
    valid = ~torch.isnan(grp_d)
    if not bool(valid.any()):
        raise ValueError("no group has two readable views; real-world mode compares views within a group")
    tr = TransformResult(name=name, family=family, mean_distance=float(grp_d[valid].mean()),
                         mean_cosine=float(grp_c[valid].mean()), n_images=int(tot[3]), per_image_distance=grp_d,
                         per_image_cosine=grp_c, n_pairs=int(tot[2]))
    elapsed = time.monotonic() - t0
    meta = {"data": run.source.describe(), "mode": "real-world", "device": str(run.device), "groups": n_groups,
            "skipped_groups": int((~valid).sum()), "pair_weighted_distance": float(tot[0] / tot[2]),
            "pair_weighted_cosine": float(tot[1] / tot[2]), "world_size": sh.world_size, "elapsed_s": elapsed,
            "group_names": list(getattr(run.source, "group_names", []))}
    return InvarianceResult(model=model_name or run.model_name, transforms={name: tr}, n_images=run.n,
                            stats=_stats_info(ref_stats), errors=run.errors(), meta=meta)
