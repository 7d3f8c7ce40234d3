"""The ``invfast reproduce`` job: cached, resumable stages in order, then the report."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from typing import Any, Callable, Iterator

from invfast.io import atomic_write_text
from invfast.reproduce.config import ReproduceConfig, check_disk, claim_folder, disk_estimate_mb

__all__ = ["Stages", "stage_names", "seed_configs", "deterministic", "reproduce"]


class Stages:
    """Runs named stages once: a finished stage's JSON result lives in ``<cache>/stages/<name>.json``
    (written atomically) and is returned as is on every later call, with its original elapsed time."""

    def __init__(self, cache: str, bar: Any = None) -> None:
        self.dir = os.path.join(cache, "stages")
        os.makedirs(self.dir, exist_ok=True)
        self.bar = bar
        self.timings: dict[str, dict[str, Any]] = {}

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name.replace("/", "_") + ".json")

    def done(self, name: str) -> bool:
        return os.path.exists(self.path(name))

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        if self.bar is not None:
            self.bar.set_description(f"reproduce [{name}]")
        p = self.path(name)
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                rec = json.load(f)
            self.timings[name] = {"elapsed_s": rec["elapsed_s"], "cached": True}
        else:
            t0 = time.perf_counter()
            result = fn()
            rec = {"name": name, "elapsed_s": time.perf_counter() - t0, "result": result,
                   "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            atomic_write_text(p, json.dumps(rec, indent=1, allow_nan=False))
            self.timings[name] = {"elapsed_s": rec["elapsed_s"], "cached": False}
        if self.bar is not None:
            self.bar.update(1)
        return rec["result"]


# ---------------------------------------------------------------------------------------------- job
@contextlib.contextmanager
def deterministic(cfg: ReproduceConfig) -> Iterator[None]:
    """Run with ``cfg.threads`` torch threads and deterministic algorithms (cuDNN autotuning off,
    deterministic cuBLAS workspace on CUDA); the previous settings come back afterwards.

    Float sums depend on how the work is split over threads, so the thread count is part of the
    configuration: the same machine, configuration and seed then give identical numbers."""
    import torch

    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    bench = torch.backends.cudnn.benchmark
    if cfg.device.startswith("cuda"):
        # must be set before the first cuBLAS call of the process
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        torch.backends.cudnn.benchmark = bench


def _run_seed(ctx: Any, stages: Stages) -> dict[str, Any]:
    """Every stage of one seed (cached in ``stages``): its data, measure, probes, transfer and amortised results."""
    from invfast.reproduce import stages as S

    cfg = ctx.cfg
    data = stages.run("data", lambda: S.make_data(ctx))
    for p in cfg.policies:
        stages.run(f"pretrain-{p}", lambda p=p: S.pretrain_policy(ctx, p))
    stages.run("features", lambda: S.features(ctx))
    measure = stages.run("measure", lambda: S.measure(ctx))
    probes = stages.run("probes", lambda: S.probes(ctx))
    stages.run("transfer-data", lambda: S.transfer_data(ctx))
    for s in ("same", "different", "superset"):
        stages.run(f"transfer-train-{s}", lambda s=s: S.transfer_train(ctx, s))
    transfer = stages.run("transfer-probe", lambda: S.transfer_probe(ctx))
    amortised = None
    if cfg.amortised:
        stages.run("pretrain-amortised", lambda: S.pretrain_amortised(ctx))
        interp = stages.run("amortised-interpolation", lambda: S.amortised_interpolation(ctx))
        learned = stages.run("amortised-learned-i", lambda: S.amortised_learned_i(ctx))
        amortised = {"interpolation": interp, "learned_i": learned}
    return {"seed": cfg.seed, "data": data, "measure": measure, "probes": probes, "transfer": transfer,
            "amortised": amortised}
def seed_configs(cfg: ReproduceConfig) -> list[ReproduceConfig]:
    """One configuration per master seed: ``cfg`` itself, then ``cfg.seed + 1``, ... (``cfg.seeds`` in all)."""
    return [cfg] + [dataclasses.replace(cfg, seed=cfg.seed + j) for j in range(1, cfg.seeds)]


def seed_prefix(cfg: ReproduceConfig, seed: int) -> str:
    """Stage-name prefix and cache subfolder of a seed: '' for the first, 'seed-N/' for the others."""
    return "" if seed == cfg.seed else f"seed-{seed}/"


def stage_names(cfg: ReproduceConfig) -> list[str]:
    """The stages of a run over every seed, in order (the progress display counts them)."""
    return [seed_prefix(cfg, c.seed) + n for c in seed_configs(cfg) for n in _seed_stage_names(cfg)]


def _seed_stage_names(cfg: ReproduceConfig) -> list[str]:
    names = ["data"] + [f"pretrain-{p}" for p in cfg.policies] + ["features", "measure", "probes"]
    names += ["transfer-data"] + [f"transfer-train-{s}" for s in ("same", "different", "superset")] + ["transfer-probe"]
    if cfg.amortised:
        names += ["pretrain-amortised", "amortised-interpolation", "amortised-learned-i"]
    return names


def reproduce(cfg: ReproduceConfig, out: str, *, cache_dir: str | None = None, progress: bool = True,
              log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run (or resume) the whole job; write ``report.md``, ``results.json`` and ``figures/`` to ``out``.

    Returns the results document (the content of ``results.json``). Raises
    :class:`ConfigMismatchError` when ``out`` or the cache holds another configuration and OSError
    when the disk is too small.
    """
    from tqdm.auto import tqdm

    from invfast.reproduce import report as R
    from invfast.reproduce import stages as S

    cfg.validate()
    if cfg.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(f"this configuration ({cfg.preset}) runs on {cfg.device!r}, but torch sees no CUDA device; "
                             "use --quick (CPU) or --set device=cpu")
    out = os.path.abspath(out)
    cache = os.path.abspath(cache_dir) if cache_dir is not None else os.path.join(out, "cache")
    conf = cfg.to_dict()
    claim_folder(out, conf, "output folder")
    if cache != out:
        claim_folder(cache, conf, "cache folder")
    check_disk(cache, disk_estimate_mb(cfg))
    t_start = time.perf_counter()
    names = stage_names(cfg)
    bar = tqdm(total=len(names) + 1, desc="reproduce", unit="stage", disable=not progress, position=0,
               dynamic_ncols=True)
    timings: dict[str, dict[str, Any]] = {}
    try:
        with deterministic(cfg):
            runs = []
            for c in seed_configs(cfg):
                prefix = seed_prefix(cfg, c.seed)
                seed_cache = os.path.join(cache, prefix) if prefix else cache
                stages = Stages(seed_cache, bar)
                runs.append(_run_seed(S.Context(cfg=c, cache=seed_cache, progress=progress), stages))
                timings.update({prefix + k: v for k, v in stages.timings.items()})
            first = runs[0]
            bar.set_description("reproduce [report]")
            doc = R.write_report(out, cfg, data=first["data"], measure=first["measure"], probes=first["probes"],
                                 transfer=first["transfer"], amortised=first["amortised"], timings=timings,
                                 total_elapsed_s=time.perf_counter() - t_start, cache=cache, other_seeds=runs[1:])
        bar.update(1)
    finally:
        bar.close()
    if log is not None:
        for f in doc["findings"]:
            log(f"finding {f['id']}: {f['status']}")
        log(f"report: {os.path.join(out, 'report.md')} ({(time.perf_counter() - t_start) / 60:.1f} min)")
    return doc
