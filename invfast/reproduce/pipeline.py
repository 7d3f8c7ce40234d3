"""The ``invfast reproduce`` job: the :class:`Stage` records of :data:`invfast.reproduce.stages.STAGES`
put in order (:func:`plan`), each run once and cached (:class:`StageCache`), for every seed; then the
report (:mod:`invfast.reproduce.document`)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from invfast.io import DamagedFileError, atomic_write_text
from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.folders import check_disk, claim_folder
from invfast.reproduce.provenance import code_version
from invfast.reproduce.stage import Stage

__all__ = [
    "StageCache",
    "plan",
    "selected_plan",
    "run_seed",
    "run_parallel",
    "StageWorkerDied",
    "stage_names",
    "seed_configs",
    "deterministic",
    "reproduce",
]


def plan(stages: Sequence[Stage], cfg: ReproduceConfig, targets: Sequence[str] | None = None) -> list[Stage]:
    """The stages ``cfg`` runs, each after every stage it needs (list order among the others): with
    ``targets``, only those stages and what they need (directly or not); without, every active stage.

    Raises ValueError for a duplicated name, a need no stage of the list provides, a need on a stage
    this configuration does not run, an unknown target, or a cycle."""
    by_name: dict[str, Stage] = {}
    for st in stages:
        if st.name in by_name:
            raise ValueError(f"two stages are called {st.name!r}")
        by_name[st.name] = st
    active = [st for st in stages if st.active(cfg)]
    if targets is not None:
        wanted = _closure(by_name, targets)
        active = [st for st in active if st.name in wanted]
    names = {st.name for st in active}
    for st in active:
        for need in st.needs:
            if need not in by_name:
                raise ValueError(f"stage {st.name!r} needs {need!r}, which no stage provides")
            if need not in names:
                raise ValueError(f"stage {st.name!r} needs {need!r}, which this configuration does not run")
    order: list[Stage] = []
    done: set[str] = set()
    pending = list(active)
    while pending:
        ready = [st for st in pending if all(n in done for n in st.needs)]
        if not ready:
            raise ValueError("the stages' needs form a cycle: " + ", ".join(st.name for st in pending))
        st = ready[0]
        order.append(st)
        done.add(st.name)
        pending.remove(st)
    return order


def _closure(by_name: dict[str, Stage], targets: Sequence[str]) -> set[str]:
    """``targets`` and every stage they need, directly or through others."""
    out: set[str] = set()
    todo = list(targets)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        if name not in by_name:
            raise ValueError(f"no stage is called {name!r}")
        out.add(name)
        todo.extend(by_name[name].needs)
    return out


def owner_of(stages: Sequence[Stage], relpath: str) -> str | None:
    """The stage whose ``writes`` cover ``relpath`` (a path under a seed's cache folder, '/'-separated): of
    several, the one whose path is the longest ('features/vit-' before 'features/')."""
    covering = [(len(w), -i, st.name) for i, st in enumerate(stages) for w in st.writes if relpath.startswith(w)]
    return max(covering)[2] if covering else None


def selected_plan(stages: Sequence[Stage], cfg: ReproduceConfig) -> list[Stage]:
    """The stages the findings ``cfg`` selects need, and every stage no registered finding needs (a stage
    of its own, such as a diagnostic a user adds), in :func:`plan` order."""
    from invfast.reproduce.findings import FINDINGS, stages_for

    by_name = {st.name: st for st in stages}
    known = {n for n in stages_for(f.id for f in FINDINGS) if n in by_name}
    anyone = _closure(by_name, sorted(known))
    free = [st.name for st in stages if st.name not in anyone]
    return plan(stages, cfg, [*stages_for(cfg.run.findings), *free])


def result_digest(result: Any) -> str:
    """SHA-256 of a stage result's canonical JSON (sorted keys, no spaces): what a cached record carries so
    that an edited or damaged result is never read as a finding's evidence."""
    text = json.dumps(result, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_stage_record(path: str, name: str) -> dict[str, Any] | None:
    """The cached record of stage ``name`` at ``path``, checked: a JSON object with its name, a finite elapsed
    time >= 0 and a result matching its ``sha256``. None for a record of an earlier invfast (no checksum:
    it cannot be verified, so the stage runs again); :class:`DamagedFileError` naming the file otherwise."""

    def damaged(why: str) -> DamagedFileError:
        return DamagedFileError(
            f"the cached stage result {path!r} {why}: it was damaged or edited; delete it to recompute the stage"
        )

    try:
        with open(path, encoding="utf-8") as f:
            rec = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise damaged(f"is not valid JSON ({e})") from None
    if not isinstance(rec, dict):
        raise damaged(f"holds a JSON {type(rec).__name__}, not a stage record")
    missing = [k for k in ("name", "elapsed_s", "result") if k not in rec]
    if missing:
        raise damaged(f"lacks {', '.join(missing)}")
    if rec["name"] != name:
        raise damaged(f"is the record of stage {rec['name']!r}, not {name!r}")
    t = rec["elapsed_s"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise damaged(f"has elapsed_s {t!r} (a finite number of seconds >= 0 is needed)")
    if "sha256" not in rec:
        return None
    try:
        digest = result_digest(rec["result"])
    except ValueError:
        raise damaged("holds NaN or Infinity") from None
    if digest != rec["sha256"]:
        raise damaged("does not match its checksum")
    return rec


def _top_level_parts(text: str) -> list[str]:
    """``text`` split at the '; ' outside parentheses (a reason's details may hold their own '; ')."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ";" and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def console_why(whys: Sequence[str], width: int = 160) -> str:
    """One short line of the reasons behind a finding's seeds (each seed's ``why``: reasons joined by '; '):
    the models that did not learn named once, every other reason once without its details, cut at ``width``
    characters; report.md has each seed's reasons in full."""
    unlearned: list[str] = []
    other: list[str] = []
    for why in whys:
        for item in _top_level_parts(why or ""):
            head = item.split(" (")[0].split(": ")[0].strip()
            if not head:
                continue
            if head.endswith(" learned"):
                name = head[: -len(" learned")]
                if name not in unlearned:
                    unlearned.append(name)
            elif head not in other:
                other.append(head)
    parts = ([f"not learned: {', '.join(unlearned)}"] if unlearned else []) + other
    text = "; ".join(parts)
    if len(text) > width:
        text = text[: width - 1].rsplit(" ", 1)[0] + " …"
    return text + ("; details in report.md" if text else "")


class StageCache:
    """Runs stages once: a finished stage's JSON result lives in ``<cache>/stages/<name>.json``
    (written atomically, with the SHA-256 of the result and the code that computed it, ``computed_by``) and is
    returned as is on every later call, with its original elapsed time; a record that fails its checks is
    refused naming the file."""

    def __init__(self, cache: str, bar: Any = None) -> None:
        self.dir = os.path.join(cache, "stages")
        os.makedirs(self.dir, exist_ok=True)
        self.bar = bar
        self.timings: dict[str, dict[str, Any]] = {}

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name + ".json")

    def done(self, name: str) -> bool:
        return os.path.exists(self.path(name))

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        if self.bar is not None:
            self.bar.set_description(f"reproduce [{name}]")
        p = self.path(name)
        rec = read_stage_record(p, name) if os.path.exists(p) else None
        if rec is not None:
            self.timings[name] = {"elapsed_s": rec["elapsed_s"], "cached": True, "computed_by": rec.get("computed_by")}
        else:
            t0 = time.perf_counter()
            result = fn()
            rec = {
                "name": name,
                "elapsed_s": time.perf_counter() - t0,
                "result": result,
                "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "computed_by": code_version(),
                "sha256": result_digest(result),
            }
            atomic_write_text(p, json.dumps(rec, indent=1, allow_nan=False))
            self.timings[name] = {"elapsed_s": rec["elapsed_s"], "cached": False, "computed_by": rec["computed_by"]}
        if self.bar is not None:
            self.bar.update(1)
        return rec["result"]


# ---------------------------------------------------------------------------------------------- job
@contextlib.contextmanager
def deterministic(cfg: ReproduceConfig) -> Iterator[None]:
    """Run with ``cfg.run.threads`` torch threads and deterministic algorithms (cuDNN autotuning off,
    deterministic cuBLAS workspace on CUDA); the previous settings come back afterwards.

    Float sums depend on how the work is split over threads, so the thread count is part of the
    configuration: the same machine, configuration and seed then give identical numbers."""
    import torch

    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    bench = torch.backends.cudnn.benchmark
    if cfg.run.device.startswith("cuda"):
        # must be set before the first cuBLAS call of the process
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.set_num_threads(cfg.run.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        torch.backends.cudnn.benchmark = bench


def run_seed(ctx: Any, cache: StageCache, stages: Sequence[Stage]) -> dict[str, Any]:
    """Every stage of ``stages`` (in :func:`plan` order) for one seed, each cached in ``cache``:
    ``{stage name: result}``."""
    return {st.name: cache.run(st.name, functools.partial(st.run, ctx)) for st in plan(stages, ctx.cfg)}


def _stage_in_worker(cfg: ReproduceConfig, seed_cache: str, stage: Stage) -> tuple[Any, dict[str, Any]]:
    """``stage`` of one seed in a worker process, with the configuration's threads and deterministic
    settings; it writes the stage's cache file. Returns (result, timing)."""
    from invfast.reproduce.stages import Context

    cache = StageCache(seed_cache)
    with deterministic(cfg):
        result = cache.run(stage.name, functools.partial(stage.run, Context(cfg=cfg, cache=seed_cache, progress=False)))
    return result, cache.timings[stage.name]


def _dependents(stages: Sequence[Stage], name: str) -> set[str]:
    """The stages of ``stages`` that need ``name``, directly or through others."""
    out: set[str] = set()
    frontier = {name}
    while frontier:
        frontier = {st.name for st in stages if frontier & set(st.needs)} - out
        out |= frontier
    return out


def run_parallel(
    jobs: Sequence[tuple[ReproduceConfig, str, Sequence[Stage]]], workers: int, bar: Any = None
) -> tuple[list[dict[str, Any]], list[dict[str, dict[str, Any]]]]:
    """The stages of several seeds in ``workers`` processes at once.

    ``jobs``: per seed (its configuration, its cache folder, its stages in :func:`plan` order). A stage
    starts once the stages it needs (of its own seed) have finished; among the ready ones, those more
    stages depend on (directly or not) start first, then earlier jobs and stages;
    cached stages are read here. Each stage runs as in :func:`run_seed`, so its numbers do not depend
    on ``workers``; its ``run`` must be picklable (a module-level function or a partial of one). The
    first stage that fails stops the others and its error is raised here.
    Returns per seed ``{stage name: result}`` and ``{stage name: timing}``.
    """
    import multiprocessing

    run = _ParallelRun(jobs, workers, bar)
    # spawn, not fork: a forked child of a process whose OpenMP pool has run can hang
    from concurrent.futures import ProcessPoolExecutor

    from invfast.runtime.launch import die_with_parent

    # a kill of this process ends the workers too (die_with_parent); a worker that dies (a crash in
    # native code) breaks the pool, which multiprocessing.Pool would have hidden by waiting forever
    pool = ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=die_with_parent,
        initargs=(os.getpid(),),
    )
    try:
        run.drive(pool)
    finally:
        _stop_workers(pool)
    return run.in_plan_order()


class _ParallelRun:
    """The stages of one :func:`run_parallel` call: those waiting (in start priority), those running in
    the pool (futures by (job index, stage name)) and the results and timings of those finished."""

    def __init__(self, jobs: Sequence[tuple[ReproduceConfig, str, Sequence[Stage]]], workers: int, bar: Any) -> None:
        self.jobs, self.workers, self.bar = jobs, workers, bar
        self.results: list[dict[str, Any]] = [{} for _ in jobs]
        self.timings: list[dict[str, dict[str, Any]]] = [{} for _ in jobs]
        # stages that more stages wait for go first (the pretraining runs before the small stages that
        # read them), then earlier seeds: the small stages are left to fill both workers at the end
        self.pending = sorted(
            ((i, st) for i, (_, _, stages) in enumerate(jobs) for st in stages),
            key=lambda item: (-len(_dependents(jobs[item[0]][2], item[1].name)), item[0]),
        )
        self.running: dict[tuple[int, str], Any] = {}

    def drive(self, pool: Any) -> None:
        """Run every stage in ``pool`` (a ProcessPoolExecutor), polling the running ones every 0.2 s."""
        from concurrent.futures import FIRST_COMPLETED, wait

        while self.pending or self.running:
            self.start_ready(pool)
            if self.bar is not None and self.running:
                self.bar.set_description("reproduce [" + self.describe(list(self.running)) + "]")
            if self.running:
                wait(self.running.values(), timeout=0.2, return_when=FIRST_COMPLETED)
            self.collect_done()

    def start_ready(self, pool: Any) -> None:
        """Read the cached stages whose needs have finished, and submit the others while a worker is free."""
        for item in list(self.pending):
            i, st = item
            cfg, seed_cache, _ = self.jobs[i]
            if len(self.running) >= self.workers or not all(n in self.results[i] for n in st.needs):
                continue
            self.pending.remove(item)
            cache = StageCache(seed_cache)
            if cache.done(st.name):
                self.finish(i, st.name, cache.run(st.name, lambda: None), cache.timings[st.name])
            else:
                self.running[(i, st.name)] = pool.submit(_stage_in_worker, cfg, seed_cache, st)

    def collect_done(self) -> None:
        """Record the stages whose worker has returned; a worker's exception is raised here, and a dead
        worker as :class:`StageWorkerDied` (one line)."""
        from concurrent.futures.process import BrokenProcessPool

        for key in [key for key, r in self.running.items() if r.done()]:
            try:
                result, timing = self.running.pop(key).result()  # a worker's exception is raised here
            except BrokenProcessPool:
                stages_then = self.describe([key, *self.running])
                raise StageWorkerDied(
                    f"a stage worker process died (a crash in native code, or killed) while running "
                    f"[{stages_then}]; finished stages are cached: run the same command again to resume"
                ) from None
            self.finish(*key, result, timing)

    def describe(self, keys: Sequence[tuple[int, str]]) -> str:
        """``seed S: stage, ...`` for (job index, stage name) ``keys``."""
        return ", ".join(f"seed {self.jobs[i][0].run.seed}: {n}" for i, n in keys)

    def finish(self, i: int, name: str, result: Any, timing: dict[str, Any]) -> None:
        """Record a finished stage of job ``i`` and advance the progress bar."""
        self.results[i][name], self.timings[i][name] = result, timing
        if self.bar is not None:
            self.bar.update(1)

    def in_plan_order(self) -> tuple[list[dict[str, Any]], list[dict[str, dict[str, Any]]]]:
        """Per job ``{stage name: result}`` and ``{stage name: timing}``, in plan order."""
        order = [[st.name for st in stages] for _, _, stages in self.jobs]  # whatever order they finished in
        return (
            [{n: r[n] for n in names} for r, names in zip(self.results, order)],
            [{n: t[n] for n in names} for t, names in zip(self.timings, order)],
        )


class StageWorkerDied(RuntimeError):
    """A worker process of :func:`run_parallel` ended without a result (a signal, a native crash)."""


def _stop_workers(pool: Any) -> None:
    """Shut ``pool`` (a ProcessPoolExecutor) down now: pending stages cancelled, running ones killed."""
    procs = list(getattr(pool, "_processes", {}).values())  # no public way before Python 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(5)


@contextlib.contextmanager
def _naming_owner(stages: Sequence[Stage]) -> Iterator[None]:
    """A damaged cache file raised inside names the stage that wrote it (its result must go too)."""
    from invfast.reproduce.stages.context import DamagedCacheError

    try:
        yield
    except DamagedCacheError as exc:
        rel = os.path.relpath(exc.path, exc.cache).replace(os.sep, "/")
        seed_dir = rel.split("/", 1)
        if len(seed_dir) == 2 and seed_dir[0].startswith("seed-"):  # another seed's cache: <cache>/seed-N/...
            exc.cache, rel = os.path.join(exc.cache, seed_dir[0]), seed_dir[1]
        exc.owner = owner_of(stages, rel)
        raise


def seed_configs(cfg: ReproduceConfig) -> list[ReproduceConfig]:
    """One configuration per master seed: ``cfg`` itself, then ``cfg.run.seed + 1``, ... (``cfg.run.seeds`` in all)."""
    return [cfg] + [cfg.with_values({"run.seed": cfg.run.seed + j}) for j in range(1, cfg.run.seeds)]


def seed_prefix(cfg: ReproduceConfig, seed: int) -> str:
    """Stage-name prefix and cache subfolder of a seed: '' for the first, 'seed-N/' for the others."""
    return "" if seed == cfg.run.seed else f"seed-{seed}/"


def disk_estimate_mb(cfg: ReproduceConfig, stages: Sequence[Stage]) -> float:
    """MiB the cache will hold after the run: what each stage the run selects writes (its ``disk_mb``,
    :mod:`invfast.reproduce.disk`, the same on every seed) on every seed, plus 20 MiB of stage records and
    reports. Building the models a stage writes is part of the estimate, so a configuration under which a
    selected stage cannot make its model (an architecture without a Hyper-ResNet for the amortised models)
    raises one ValueError naming the stage, before any work."""
    per_stage: dict[str, float] = {}
    total = 20.0
    for c in seed_configs(cfg):
        for st in selected_plan(stages, c):
            if st.name not in per_stage:
                try:
                    per_stage[st.name] = st.disk_mb(cfg) if st.disk_mb is not None else 0.0
                except ValueError as e:
                    raise ValueError(f"stage {st.name!r} cannot make its model under this configuration: {e}") from e
            total += per_stage[st.name]
    return total


def stage_names(cfg: ReproduceConfig, stages: Sequence[Stage] | None = None) -> list[str]:
    """The stages of a run over every seed, in order (the progress display counts them)."""
    if stages is None:
        from invfast.reproduce.stages import STAGES

        stages = STAGES
    names = [st.name for st in selected_plan(stages, cfg)]
    return [seed_prefix(cfg, c.run.seed) + n for c in seed_configs(cfg) for n in names]


def reproduce(
    cfg: ReproduceConfig,
    out: str,
    *,
    cache_dir: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the whole job; write ``report.md``, ``results.json`` and ``figures/`` to ``out``.

    Returns the results document (the content of ``results.json``). Raises
    :class:`ConfigMismatchError` when ``out`` or the cache holds another configuration and OSError
    when the disk is too small.
    """
    from invfast.reproduce.findings import check_families, check_ids
    from invfast.reproduce.folders import hold

    check_ids(cfg.run.findings)
    check_families(cfg.run.findings, cfg.measurement.transforms)
    if cfg.run.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                f"this configuration ({cfg.run.preset}) runs on {cfg.run.device!r}, but torch sees no CUDA device; "
                "use --quick (CPU) or --set run.device=cpu"
            )
    from invfast.reproduce import stages as S

    need_mb = disk_estimate_mb(cfg, S.STAGES)  # before any folder is claimed: it also builds the stages' models
    out = os.path.abspath(out)
    cache = os.path.abspath(cache_dir) if cache_dir is not None else os.path.join(out, "cache")
    conf = cfg.claim_dict()
    with contextlib.ExitStack() as held:  # each folder locked, free of links, then claimed
        held.enter_context(hold(out, "--out", "output folder"))
        claim_folder(out, conf, "output folder", ReproduceConfig.added_fields(), ReproduceConfig.removed_at())
        if cache != out:
            held.enter_context(hold(cache, "--cache-dir", "cache folder"))
            claim_folder(cache, conf, "cache folder", ReproduceConfig.added_fields(), ReproduceConfig.removed_at())
        return _reproduce(cfg, out, cache, need_mb, progress, log)


def _reproduce(
    cfg: ReproduceConfig, out: str, cache: str, need_mb: float, progress: bool, log: Callable[[str], None] | None
) -> dict[str, Any]:
    """:func:`reproduce` in its held and claimed folders."""
    from invfast.reproduce import document
    from invfast.reproduce import stages as S
    from invfast.reproduce.sections import SeedRun
    from invfast.runtime.progress import bar as progress_bar

    check_disk(cache, need_mb)
    t_start = time.perf_counter()
    names = stage_names(cfg, S.STAGES)
    selected = {c.run.seed: selected_plan(S.STAGES, c) for c in seed_configs(cfg)}
    bar = progress_bar(total=len(names) + 1, desc="reproduce", unit="stage", disable=not progress, position=0)
    timings: dict[str, dict[str, Any]] = {}
    try:
        with deterministic(cfg), _naming_owner(S.STAGES):
            configs = seed_configs(cfg)
            prefixes = [seed_prefix(cfg, c.run.seed) for c in configs]
            caches = [os.path.join(cache, p) if p else cache for p in prefixes]
            if cfg.run.workers > 1:
                jobs = [(c, sc, selected[c.run.seed]) for c, sc in zip(configs, caches)]
                per_seed, per_timings = run_parallel(jobs, cfg.run.workers, bar)
            else:
                per_seed, per_timings = [], []
                for c, sc in zip(configs, caches):
                    stage_cache = StageCache(sc, bar)
                    ctx = S.Context(cfg=c, cache=sc, progress=progress)
                    per_seed.append(run_seed(ctx, stage_cache, selected[c.run.seed]))
                    per_timings.append(stage_cache.timings)
            runs = [SeedRun(seed=c.run.seed, cache=sc, results=r) for c, sc, r in zip(configs, caches, per_seed)]
            for p, t in zip(prefixes, per_timings):
                timings.update({p + k: v for k, v in t.items()})
            bar.set_description("reproduce [report]")
            doc = document.write_report(out, cfg, runs, timings=timings, total_elapsed_s=time.perf_counter() - t_start)
        bar.update(1)
    finally:
        bar.close()
    if log is not None:
        for line in console_lines(doc["findings"], cfg.run.preset):
            log(line)
        log(f"report: {os.path.join(out, 'report.md')} ({(time.perf_counter() - t_start) / 60:.1f} min)")
    return doc


#: what a preset's verdicts are, said on the console before them where they are not evidence
PRESET_CAVEATS = {
    "tiny": "preset tiny: toy data and models that barely train, a smoke test of every stage; its verdicts are not "
    "evidence (--quick or --full for that)",
}


def console_lines(findings: Sequence[dict[str, Any]], preset: str) -> list[str]:
    """The console's summary of a run: the preset's caveat (if it has one), then one line per finding with its
    verdict over seeds and the short reasons behind its seeds (:func:`console_why`)."""
    lines = [PRESET_CAVEATS[preset]] if preset in PRESET_CAVEATS else []
    for f in findings:
        why = console_why([v.get("why", "") for v in (f.get("per_seed_verdict") or {}).values()])
        lines.append(f"finding {f['id']}: {f.get('label', f['status'])}" + (f" ({why})" if why else ""))
    return lines
