"""The machinery of one measurement run: the image source, the feature extractor, this rank's shard,
the resumable state, the progress bar and the reference statistics.

Pipeline: a pass reads its image batches through ``source.batches`` (folders decode the next
batches in DataLoader worker processes meanwhile; page-locked when the device is CUDA), uploads
each batch once, and keeps accumulators on the device: the host reads them only when the state is
saved (every ``save_every`` seconds) and at the end of each transform.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

import torch

from invfast.data.folder import folder_listing
from invfast.data.protocol import Source, pin
from invfast.data.sources import as_source, folder_of
from invfast.measure.config import MeasureConfig
from invfast.measure.extractor import FeatureExtractor, model_checksum, setup_model
from invfast.measure.feature_cache import FeatureCache
from invfast.measure.host_memory import HeapTrim
from invfast.measure.protocol import ResampledSource
from invfast.measure.state import (
    StateMismatchError,
    barrier,
    from_first_rank,
    gather_objects,
    load_state,
    merge_stats,
    save_state,
    state_file,
    world_size_problem,
)
from invfast.metrics import whiten_rows
from invfast.runtime.launch import Rank, current_rank
from invfast.stats import FeatureStats

__all__ = ["Run", "default_workers", "check_stats", "stats_info", "open_progress", "count", "concat"]


def count(x: Any) -> int:
    """Images in a batch: a tensor [B, C, H, W] or a list of images as loaded."""
    return len(x) if isinstance(x, list) else int(x.shape[0])


def concat(xs: list[Any]) -> Any:
    """Batches joined: tensors concatenated, lists of images as loaded chained."""
    if len(xs) == 1:
        return xs[0]
    return [v for x in xs for v in x] if isinstance(xs[0], list) else torch.cat(xs)


def default_workers() -> int:
    """Decoding worker processes for image folders when none are asked: ``min(8, usable CPUs)``."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


def _read_batches(
    source: Any, index_batches: Sequence[torch.Tensor], pin_memory: bool
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
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


def _listed_once(data: Any, listing: str, n: int | None, shard: Rank) -> Any:
    """A distributed run's listing of the folder ``data`` names, made on rank 0 and sent to the others (None:
    one process, or not a folder; the source lists it itself)."""
    root = folder_of(data) if shard.distributed else None
    if root is None:
        return None
    return from_first_rank(lambda: folder_listing(root, listing, None, n), shard, "listing the data folder on rank 0")


def _open(data: Any, cfg: MeasureConfig, n: int | None, native: bool, listing: str, pixels: str, shard: Rank) -> Any:
    """The source of ``data`` read with ``cfg``'s loading options (a folder listed once, on rank 0)."""
    return as_source(
        data,
        n=n,
        resize=cfg.resize,
        strict=cfg.strict,
        native=native,
        listing=listing,
        pixels=pixels,
        workers=default_workers() if cfg.workers is None else cfg.workers,
        listed=_listed_once(data, listing, n, shard),
    )


# ---------------------------------------------------------------------------------------------- engine
def _extractor(model: Any, device: torch.device, channels_last: bool, cfg: MeasureConfig, post: Any) -> Any:
    """The measurement's :class:`FeatureExtractor` (with ``post``, the crop is post's)."""
    return FeatureExtractor(
        model,
        device,
        cfg.torch_dtype,
        channels_last,
        None if post is not None else cfg.crop,
        cfg.normalize,
        cfg.forward_batch,
        cfg.layers,
        cfg.units,
        cfg.split_forward,
        torch.get_num_threads() if device.type == "cpu" else None,
    )


class Run:
    """Shared machinery of one measurement: source, extractor, shard, state file, progress."""

    def __init__(
        self,
        model: Any,
        data: Any,
        cfg: MeasureConfig,
        *,
        shard: Rank | None = None,
        n_images: int | None = None,
        source: Any = None,
        post: Callable[[torch.Tensor], torch.Tensor] | None = None,
        native: bool = False,
        listing: str = "invfast",
        pixels: str = "range",
    ) -> None:
        """``data`` is read with ``cfg``'s loading options (the first ``n_images`` of it; folder images as
        loaded when ``native``, a folder listed and its files read as ``listing`` and ``pixels`` say:
        :class:`~invfast.data.folder.FolderSource`), unless ``source`` gives the source already made. ``post``:
        preprocessing applied after the transform, before the model (the published protocol's Resize +
        CenterCrop)."""
        self.cfg = cfg
        self.device = torch.device(
            cfg.device if cfg.device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
        )
        self.model_name = model if isinstance(model, str) else type(model).__name__
        model, channels_last = setup_model(model, cfg.checkpoint, self.device, cfg.torch_dtype, cfg.channels_last)
        self.model_fp = model_checksum(model)  # after the checkpoint is loaded: the weights measured
        self.shard = shard or current_rank()
        self.source = source if source is not None else _open(data, cfg, n_images, native, listing, pixels, self.shard)
        self.post = post
        self.n = len(self.source)
        self.extract = _extractor(model, self.device, bool(channels_last), cfg, post)
        self.batch_size = cfg.batch_size
        self.start, self.stop = self.shard.bounds(self.n)
        self.cfg_state_path = cfg.state_path
        self.state_path = None if cfg.state_path is None else state_file(cfg.state_path, self.shard)
        self.save_every = cfg.save_every
        self.progress = cfg.progress and self.shard.rank == 0
        self.bad: set[int] = set()
        self.cache = FeatureCache(int(cfg.feature_cache_mb * 2**20), self.stop - self.start)
        self._last_save = time.monotonic()
        self.heap = HeapTrim()
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

    def stream(self, spans: list[tuple[int, int]]) -> Generator[tuple[torch.Tensor, torch.Tensor], None, None]:
        """(images on the device, their indices on the host) for each span ``(s, e)`` of images, in
        order, read through the source's ``batches`` so the next batches decode meanwhile."""
        pinned = self.device.type == "cuda"
        index_batches = [torch.arange(s, e, device="cpu") for s, e in spans]  # host bookkeeping
        for (s, _), idx, (x, ok) in zip(spans, index_batches, _read_batches(self.source, index_batches, pinned)):
            yield self._upload(s, idx, x, ok)

    def _upload(self, s: int, idx: torch.Tensor, x: Any, ok: torch.Tensor) -> tuple[Any, torch.Tensor]:
        bad = torch.nonzero(~ok).flatten().tolist()  # ok is host bookkeeping
        if bad:  # rare: drop the unreadable rows on the host (the pinned buffer is given up)
            self.bad.update(s + i for i in bad)
            x = [v for v, k in zip(x, ok.tolist()) if k] if isinstance(x, list) else x[ok]
            idx = idx[ok]
        if isinstance(x, list):  # images as loaded, each at its own size
            return [v.to(self.device, non_blocking=True) for v in x], idx
        # once per batch; asynchronous from a pinned buffer (a fresh one each batch)
        return x.to(self.device, non_blocking=True), idx

    def model_input(self, x: Any) -> torch.Tensor:
        """Untransformed images as the model sees them: ``post`` applied (to each image of a list)."""
        if isinstance(x, list):
            return torch.cat([self.post(v[None]) for v in x]) if self.post is not None else torch.stack(x)
        return self.post(x) if self.post is not None else x

    def views(self, t: Any, x: Any, params: torch.Tensor) -> torch.Tensor:
        """``[b, P, C, h, w]``: every parameter of ``params`` applied to every image of ``x``, then ``post``.
        Images as loaded (a list) are transformed one at a time at their own resolution."""
        if isinstance(x, list):
            return torch.stack([self._views(t, v[None], params)[0] for v in x])
        return self._views(t, x, params)

    def _views(self, t: Any, x: torch.Tensor, params: torch.Tensor) -> torch.Tensor:
        b, p = x.shape[0], params.shape[0]
        xt = t.apply(x, params)
        if xt.dim() != 5 or xt.shape[:2] != (b, p):
            raise ValueError(
                f"transform {t.name!r}.apply returned shape {tuple(xt.shape)}, expected [{b}, {p}, C, H, W]"
            )
        if self.post is None or getattr(t, "includes_preprocessing", False):  # e.g. the original's resized crop
            return xt
        out = self.post(xt.flatten(0, 1))
        return out.view(b, p, *out.shape[1:])

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
            raise ValueError(
                f"transform {self._nonfinite_name!r} gave non-finite (NaN/Inf) scores: the model's features "
                "are NaN/Inf on some transformed images, or too large for float32 whitening"
            )
        self._nonfinite = None

    def reference_features(self, s: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Features (by layer) of the untransformed batch starting at image ``s``, kept in memory while
        they fit ``feature_cache_mb`` so each transform does not recompute them."""
        rows = count(x)
        kept = {ly: self.cache.get(s, "f:" + ly, rows) for ly in self.extract.layer_names}
        if all(v is not None for v in kept.values()):
            return kept  # type: ignore[return-value]
        f = self.extract.features(self.model_input(x))
        for ly, v in f.items():
            if (s, "f:" + ly) not in self.cache.where:
                self.cache.put(s, "f:" + ly, v)
        return f

    def whitened_reference(self, s: int, f: torch.Tensor, layer: str, stats: FeatureStats) -> torch.Tensor:
        """The reference features ``f`` of ``layer`` for the batch starting at image ``s`` (from
        :meth:`reference_features`) whitened (:func:`whiten_rows`, float32 unless they are float64), kept like
        the features themselves, so every transform and chunk of parameters scores against them without
        whitening them again. ``stats`` are the run's statistics."""
        z = self.cache.get(s, "z:" + layer, f.shape[0])
        if z is None:
            z = whiten_rows(f, stats, torch.float64 if f.dtype == torch.float64 else torch.float32)
            if (s, "z:" + layer) not in self.cache.where:
                self.cache.put(s, "z:" + layer, z)
        return z

    def bar(self, total: int, desc: str, initial: int = 0, unit: str = "view") -> Any:
        """A progress bar (:func:`invfast.runtime.progress.bar`: live on a terminal, plain lines in a log)."""
        from invfast.runtime.progress import bar

        return bar(total, desc=desc, unit=unit, initial=initial, disable=not self.progress)

    def pass_bar(self, total: int, desc: str, initial: int) -> Any:
        """The bar a pass updates (in views: images x parameters through the model): the run's single bar
        (described as ``desc``), else a bar of its own."""
        if self.progress_bar is None:
            return self.bar(total, desc, initial)
        self.progress_bar.set_description(desc, refresh=False)
        return _Shared(self.progress_bar)

    def resample(self, indices: torch.Tensor) -> None:
        """Score the images ``indices`` of the source (repeats allowed) from now on."""
        self.source = ResampledSource(self.source, indices)
        self.n = len(self.source)
        self.start, self.stop = self.shard.bounds(self.n)
        self.cache = FeatureCache(self.cache.budget, self.stop - self.start)

    def resume(self, fingerprint: dict[str, Any]) -> None:
        """Continue from the saved state of the run described by ``fingerprint``, if there is one."""
        self.fingerprint = fingerprint
        self.resumed = False
        if self.state_path is not None and self.cfg_state_path is not None:
            # every rank reads the folder before any rank can write to it, and all reach the same verdict
            problem = world_size_problem(self.cfg_state_path, self.shard)
            barrier(self.shard)
            if problem is not None:
                raise StateMismatchError(problem)
            st = load_state(self.state_path, fingerprint)
            if st is not None:
                self.state = st
                self.bad = set(st.get("bad", []))
                self.resumed = True
        self.state.setdefault("transforms", {})

    def checkpoint(self, force: bool = False, before: Callable[[], Any] | None = None) -> None:
        """Save the state if ``save_every`` seconds passed (or ``force``); ``before`` runs first (flushes). Called
        after every batch, it also hands the allocator's free host memory back now and then (:class:`HeapTrim`)."""
        self.heap.maybe()
        if self.state_path is None:
            return
        now = time.monotonic()
        if force or now - self._last_save >= self.save_every:
            self.check_finite()  # never save sums with NaN in them
            if before is not None:
                before()
            # the accumulators live on the device: the host copy is made here, once per save
            save_state(
                self.state_path, _to_host({**self.state, "fingerprint": self.fingerprint, "bad": sorted(self.bad)})
            )
            self._last_save = now

    def reference_stats(
        self, stats: dict[str, FeatureStats] | None, shrinkage: Any, eps: float
    ) -> dict[str, FeatureStats]:
        """Reference statistics by layer: the given ones (finalized if needed), or a first pass over this
        rank's images, merged over ranks. A layer with N <= D samples is named in its warning."""
        if stats is not None:
            for st in stats.values():
                if st.whitener_ is None:
                    st.finalize(shrinkage=shrinkage, eps=eps)
            return stats
        layers = self.extract.layer_names
        resumed: dict[str, Any] | None = self.state.get("stats")
        saved = {} if resumed is None else resumed["local"]
        # the state file's checksum was verified on load: its moments are the ones this run saved
        local = {
            n: FeatureStats(device=self.device)
            if saved.get(n) is None
            else FeatureStats.from_state_dict(saved[n], device=self.device, check_moments=False)
            for n in layers
        }
        nxt = self.start if resumed is None else resumed["next"]
        bar = self.pass_bar(self.stop - self.start, "reference statistics", initial=nxt - self.start)
        spans = list(self.batches(nxt))

        def snapshot(e: int) -> None:  # host copy of the statistics, only when a state is saved
            self.state["stats"] = {"local": {n: v.state_dict() if v.n else None for n, v in local.items()}, "next": e}

        # no autograd graph: a model whose parameters require grad would otherwise record one per batch
        with contextlib.closing(self.stream(spans)) as stream, torch.no_grad():
            for (s, e), (x, _) in zip(spans, stream):
                if count(x):
                    for n, f in self.reference_features(s, x).items():
                        local[n].update(f.double())
                bar.update(e - s)
                self.checkpoint(before=functools.partial(snapshot, e))
        bar.close()
        if spans or "stats" not in self.state:
            snapshot(self.stop)
        self.checkpoint(force=True)
        out = {}
        for n in layers:
            merged = merge_stats(local[n], self.shard)
            if merged.n < 2:
                raise ValueError(f"only {merged.n} reference image(s) could be read; the statistics need at least 2")
            out[n] = _finalize_named(merged, n if len(layers) > 1 else None, shrinkage, eps)
        return out

    def source_identity(self) -> str:
        """The image set's identity (:meth:`invfast.data.Source.identity`; a user's source without one: its
        description)."""
        ident = getattr(self.source, "identity", None)
        if callable(ident):
            return str(ident())
        import hashlib
        import json

        return hashlib.sha256(json.dumps(self.source.describe(), sort_keys=True, default=str).encode()).hexdigest()

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


def open_progress(run: Run, stats_pass: bool, sizes: dict[str, int], n_scored: int) -> Any:
    """One bar with ETA over this rank's views (model inputs): one per image for the statistics pass, then
    P per image for a transform of P parameters (``sizes``: name -> P), starting from what a resumed
    state has done already."""
    n_stats = run.stop - run.start
    s0, s1 = run.shard.bounds(n_scored)
    done = 0
    st = run.state.get("stats")
    if stats_pass and st is not None:
        done += st["next"] - run.start
    finished = run.state.get("finished", ())
    for name, p in sizes.items():
        acc = run.state["transforms"].get(name)
        if name in finished:
            done += (s1 - s0) * p
        elif acc is not None:
            done += (acc["next"] - s0) * p
    total = (n_stats if stats_pass else 0) + sum(sizes.values()) * (s1 - s0)
    return run.bar(total, "measure", initial=done)


def check_stats(stats: Any, layers: list[str]) -> dict[str, FeatureStats] | None:
    """Given reference statistics by layer: a FeatureStats (one layer measured) or a dict layer ->
    FeatureStats naming every measured layer, each of at least 2 samples (else one clear error)."""
    if stats is None:
        return None
    if isinstance(stats, FeatureStats):
        if len(layers) != 1:
            raise ValueError(
                f"{len(layers)} layers are measured: give stats as a dict layer -> FeatureStats "
                f"for {layers}, or leave stats=None to compute them"
            )
        stats = {layers[0]: stats}
    if not isinstance(stats, dict) or not all(isinstance(v, FeatureStats) for v in stats.values()):
        raise TypeError(
            f"stats must be an invfast.FeatureStats (or a dict layer -> FeatureStats, or None to compute "
            f"them), got {type(stats).__name__}"
        )
    if sorted(stats) != sorted(layers):
        raise ValueError(f"stats are given for layers {sorted(stats)} but the measured layers are {layers}")
    for n, st in stats.items():
        if st.n < 2:
            raise ValueError(
                f"the given stats of layer {n!r} hold {st.n} sample(s); reference statistics need at least 2"
            )
    return stats


def stats_fingerprint(stats: dict[str, FeatureStats] | None) -> Any:
    """What identifies given reference statistics in a resume fingerprint (None: computed by the run)."""
    if stats is None:
        return None
    return {n: [st.n, st.dim, None if st.mean is None else float(st.mean.double().sum())] for n, st in stats.items()}


def stats_info(stats: FeatureStats) -> dict[str, Any]:
    """The reference statistics as ``result.json`` describes them."""
    return {"n": stats.n, "dim": stats.dim, "shrinkage": stats.shrinkage_, "lambda": stats.lambda_, "rho": stats.rho_}


def _finalize_named(stats: FeatureStats, layer: str | None, shrinkage: Any, eps: float) -> FeatureStats:
    """``stats.finalize``; with several layers measured, its warnings name the layer they are about."""
    if layer is None:
        return stats.finalize(shrinkage=shrinkage, eps=eps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = stats.finalize(shrinkage=shrinkage, eps=eps)
    for w in caught:
        warnings.warn(f"layer {layer!r}: {w.message}", w.category, stacklevel=3)
    return out
