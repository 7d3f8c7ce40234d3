"""``invfast reproduce``: the papers' findings (SPEC §5), end to end, on built-in synthetic data.

    invfast reproduce --quick --out report/          # ~15 minutes on 2 CPU cores (the README's main job)
    invfast reproduce --full --out report/           # adds the amortised model; see docs/reproduce.md
    invfast reproduce --preset tiny --out /tmp/t     # seconds: a smoke test of every stage
    invfast reproduce --quick --set pretrain_epochs=20 --out report/   # any config field overridden

Pretrains Default, Spatial and Appearance MoCo-v2 models (small ResNet, 32-px Transforms-2D data),
measures their invariance to the 18 test transforms (Table 1 with significance marks), probes them,
a random-init model and the fusions Spa+App and Def+Spa+App on object identity, position, rotation
and colour (mean ± std over folds), runs the same-vs-different transformation transfer experiment,
and in --full trains an amortised (Hyper-ResNet AI-MoCo) model, moves its descriptor i and learns i
per task. Writes ``report.md``, ``results.json`` and ``figures/``; the verdict on each finding is
computed from the numbers.

Every stage is cached (``<cache>/stages/*.json``, pretraining checkpoints, measurement state), so a
rerun after an interruption continues where it stopped and recomputes nothing finished. An existing
folder made with a different configuration is refused with the differing fields listed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["ReproduceConfig", "PRESETS", "preset", "reproduce", "add_arguments", "run", "ConfigMismatchError"]

CONFIG_FILE = "config.json"
FORMAT = "invfast.reproduce/1"


@dataclass
class ReproduceConfig:
    """Everything that determines the numbers of a reproduce run (recorded in ``config.json``).

    Sizes are numbers of images; epochs are passes over the pretraining images; images are
    ``size`` x ``size`` pixels. Seeds of every stage derive from ``seed``.
    """

    preset: str = "quick"
    seed: int = 0
    size: int = 32
    # main data: Transforms-2D objects under transformations of both families
    objects: int = 10
    data_transforms: tuple[str, ...] = ("translate", "rotate", "scale", "hue")
    n_pretrain: int = 2048
    n_probe: int = 1000
    n_measure: int = 96
    # models and MoCo-v2 pretraining
    arch: str = "resnet18-cifar"
    width: int = 16
    policies: tuple[str, ...] = ("default", "spatial", "appearance")
    pretrain_epochs: int = 20
    batch_size: int = 128
    lr: float = 0.06
    key_momentum: float = 0.99
    proj_dim: int = 64
    # invariance measurement
    test_transforms: str = "all"
    grid_size: int = 6
    # probes (SPEC §4: 45 penalties; logistic L-BFGS iterations per penalty value)
    folds: int = 5
    n_penalties: int = 23
    logistic_max_iter: int = 60
    # same-vs-different transfer (Speicher): supervised pretraining on a source, linear probe on the target
    transfer_objects: int = 10
    transfer_transforms: int = 3
    transfer_n_source: int = 1200
    transfer_n_target: int = 500
    transfer_epochs: int = 5
    # amortised model (--full)
    amortised: bool = False
    amortised_epochs: int = 10
    interp_points: int = 5
    ip_epochs: int = 10
    ip_n: int = 600

    def validate(self) -> None:
        """Raise ValueError naming a field whose value cannot work."""
        positive = ["size", "objects", "n_pretrain", "n_probe", "n_measure", "width", "pretrain_epochs", "batch_size",
                    "grid_size", "folds", "n_penalties", "logistic_max_iter", "transfer_objects",
                    "transfer_transforms", "transfer_n_source", "transfer_n_target", "transfer_epochs", "amortised_epochs", "interp_points", "ip_epochs", "ip_n"]
        for name in positive:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"config field {name} must be a positive int, got {v!r}")
        if self.size < 16:
            raise ValueError(f"size must be >= 16 pixels, got {self.size}")
        if self.folds < 2:
            raise ValueError(f"folds must be >= 2, got {self.folds}")
        if self.n_probe < self.folds * self.objects:
            raise ValueError(f"n_probe ({self.n_probe}) must hold at least folds x objects = "
                             f"{self.folds * self.objects} images (stratified folds need every class in every fold)")
        if self.transfer_n_target < self.folds * self.transfer_objects:
            raise ValueError(f"transfer_n_target ({self.transfer_n_target}) must be >= folds x transfer_objects = "
                             f"{self.folds * self.transfer_objects}")
        if 2 * self.transfer_objects > 61:
            raise ValueError(f"transfer_objects must be <= 30 (two disjoint sets from 61 built-in objects), "
                             f"got {self.transfer_objects}")
        if 2 * self.transfer_transforms > 18:
            raise ValueError(f"transfer_transforms must be <= 9 (two disjoint sets of the 18 types), "
                             f"got {self.transfer_transforms}")
        if self.n_pretrain < 2 * self.batch_size:
            raise ValueError(f"n_pretrain ({self.n_pretrain}) must be >= 2 x batch_size ({self.batch_size}) "
                             "(a MoCo queue needs two batches)")
        if self.transfer_n_source < self.batch_size:
            raise ValueError(f"transfer_n_source ({self.transfer_n_source}) must be >= batch_size ({self.batch_size})")
        if self.ip_n < 10:
            raise ValueError(f"ip_n must be >= 10, got {self.ip_n}")
        if set(self.policies) != {"default", "spatial", "appearance"} or len(self.policies) != 3:
            raise ValueError("policies must be ('default', 'spatial', 'appearance'): the findings compare exactly these")
        if not self.lr > 0 or not 0 <= self.key_momentum <= 1:
            raise ValueError(f"lr must be > 0 and key_momentum in [0, 1], got {self.lr}, {self.key_momentum}")
        from invfast.synthetic import TRANSFORMATIONS
        bad = [t for t in self.data_transforms if t not in TRANSFORMATIONS]
        if bad:
            raise ValueError(f"data_transforms {bad} are not Transforms-2D types ({', '.join(TRANSFORMATIONS)})")
        needed = {"translate", "rotate", "hue"}
        if not needed <= set(self.data_transforms):
            raise ValueError(f"data_transforms must include {sorted(needed)}: the probe tasks regress position, "
                             "rotation and colour, which only vary under these types")
        from invfast.models import ARCHITECTURES
        if self.arch not in ARCHITECTURES or self.arch.startswith(("hyper-", "prompt")):
            raise ValueError(f"arch must be a plain ResNet name from {ARCHITECTURES}, got {self.arch!r}")
        if self.amortised and f"hyper-{self.arch}" not in ARCHITECTURES:
            raise ValueError(f"the amortised model needs 'hyper-{self.arch}', which invfast.models does not have")

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


#: the named configurations; ``quick`` fits about 15 minutes on 2 CPU cores (see docs/reproduce.md)
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(objects=4, n_pretrain=96, n_probe=60, n_measure=12, width=4, pretrain_epochs=1, batch_size=32,
                 proj_dim=16, grid_size=3, folds=3, n_penalties=9, logistic_max_iter=100, transfer_objects=3,
                 transfer_n_source=64, transfer_n_target=30, transfer_epochs=1, amortised=True, amortised_epochs=1, interp_points=3, ip_epochs=1, ip_n=24),
    "quick": {},
    "full": dict(objects=30, n_pretrain=10000, n_probe=3000, n_measure=256, width=32, pretrain_epochs=30,
                 batch_size=256, grid_size=16, n_penalties=45, logistic_max_iter=500, transfer_objects=30, transfer_n_source=5000, transfer_n_target=2000,
                 transfer_epochs=15, amortised=True, amortised_epochs=30, interp_points=9, ip_epochs=20, ip_n=1500),
}


def preset(name: str, **overrides: Any) -> ReproduceConfig:
    """The configuration called ``name`` ('tiny', 'quick', 'full') with ``overrides`` applied."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    values = {**PRESETS[name], **overrides, "preset": name}
    fields = {f.name for f in dataclasses.fields(ReproduceConfig)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ValueError(f"unknown config field(s) {unknown}; fields are {', '.join(sorted(fields))}")
    cfg = ReproduceConfig(**values)
    cfg.validate()
    return cfg


def _parse_override(cfg_fields: dict[str, dataclasses.Field], text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise ValueError(f"--set takes KEY=VALUE, got {text!r}")
    key, raw = (s.strip() for s in text.split("=", 1))
    if key not in cfg_fields or key == "preset":
        raise ValueError(f"--set: unknown config field {key!r}; fields are "
                         f"{', '.join(sorted(k for k in cfg_fields if k != 'preset'))}")
    default = getattr(ReproduceConfig(), key)
    try:
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw)
            return key, raw.lower() in ("true", "1", "yes")
        if isinstance(default, int):
            return key, int(raw)
        if isinstance(default, float):
            return key, float(raw)
        if isinstance(default, tuple):
            return key, tuple(s.strip() for s in raw.replace("+", ",").split(",") if s.strip())
        return key, raw
    except ValueError:
        raise ValueError(f"--set {key}: cannot read {raw!r} as {type(default).__name__}") from None


# ---------------------------------------------------------------------------------------------- caching
class ConfigMismatchError(ValueError):
    """An output or cache folder holds a run made with another configuration."""


def config_difference(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human-readable list of the fields that differ between two config dicts."""
    keys = sorted(set(saved) | set(current))
    return [f"{k}: folder has {saved.get(k, '<absent>')!r}, this run has {current.get(k, '<absent>')!r}"
            for k in keys if saved.get(k) != current.get(k)]


def atomic_write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed into place."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def claim_folder(folder: str, config: dict[str, Any], what: str) -> None:
    """Make ``folder`` hold ``config.json`` for ``config``; refuse a folder made with another one.

    A folder with other content but no config.json is refused too (never mixed with unrelated files).
    """
    path = os.path.join(folder, CONFIG_FILE)
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigMismatchError(f"{what} {folder!r} holds an unreadable {CONFIG_FILE} ({e}); "
                                      "delete the folder or choose another one") from None
        saved_cfg = saved.get("config", {}) if saved.get("format") == FORMAT else {}
        diff = config_difference(saved_cfg, config)
        if diff:
            raise ConfigMismatchError(
                f"{what} {folder!r} was made by a different configuration, so it cannot be resumed:\n  "
                + "\n  ".join(diff) + "\nUse another folder, delete this one, or rerun with the same settings.")
        return
    if os.path.isdir(folder) and any(n for n in os.listdir(folder) if not n.startswith(".")):
        raise ConfigMismatchError(f"{what} {folder!r} exists and holds files that are not from invfast reproduce "
                                  f"(no {CONFIG_FILE}); choose an empty or new folder")
    atomic_write_text(path, json.dumps({"format": FORMAT, "config": config}, indent=2))


def check_disk(folder: str, need_mb: float) -> None:
    """Raise OSError when the file system of ``folder`` has less than ``need_mb`` MiB free."""
    probe = os.path.abspath(folder)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    free = shutil.disk_usage(probe).free / 2**20
    if free < need_mb:
        raise OSError(f"not enough disk space for {folder!r}: {free:.0f} MiB free, this configuration needs about "
                      f"{need_mb:.0f} MiB (checkpoints, features, measurement state); free some space or pass "
                      "--cache-dir on another disk")


def disk_estimate_mb(cfg: ReproduceConfig) -> float:
    """Rough disk need of the cache: checkpoints (model, key network, optimiser), features, images."""
    from invfast.models import create
    n_params = sum(p.numel() for p in create(cfg.arch, width=cfg.width).parameters())
    models = 3 + 4 + (1 if cfg.amortised else 0)
    ckpt = models * n_params * 4 * 6 / 2**20
    images = (cfg.n_pretrain + cfg.n_probe + cfg.n_measure + 4 * cfg.transfer_n_source) * 3 * cfg.size**2 / 2**20
    feats = 8 * cfg.n_probe * 8 * cfg.width * 4 / 2**20
    return 20 + ckpt + images + feats + (50 * n_params * 4 / 2**20 if cfg.amortised else 0)


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
def stage_names(cfg: ReproduceConfig) -> list[str]:
    """The stages of a run, in order (the progress display counts them)."""
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

    from invfast import reproduce_report as R
    from invfast import reproduce_stages as S

    cfg.validate()
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
    stages = Stages(cache, bar)
    ctx = S.Context(cfg=cfg, cache=cache, progress=progress)
    try:
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
        bar.set_description("reproduce [report]")
        doc = R.write_report(out, cfg, data=data, measure=measure, probes=probes, transfer=transfer,
                             amortised=amortised, timings=stages.timings, total_elapsed_s=time.perf_counter() - t_start,
                             cache=ctx.cache)
        bar.update(1)
    finally:
        bar.close()
    if log is not None:
        for f in doc["findings"]:
            log(f"SPEC §5.{f['id']}: {f['status']}")
        log(f"report: {os.path.join(out, 'report.md')} ({(time.perf_counter() - t_start) / 60:.1f} min)")
    return doc


# ---------------------------------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n\n", 1)[1]
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="preset", action="store_const", const="quick",
                      help="the quick configuration (default; about 15 minutes on 2 CPU cores)")
    mode.add_argument("--full", dest="preset", action="store_const", const="full",
                      help="larger data and models plus the amortised model (hours on a CPU; see docs/reproduce.md)")
    mode.add_argument("--preset", dest="preset", choices=sorted(PRESETS), help="a named configuration (tiny: smoke test)")
    parser.set_defaults(preset="quick")
    parser.add_argument("--out", required=True, help="output folder: report.md, results.json, figures/")
    parser.add_argument("--cache-dir", default=None,
                        help="where checkpoints, features and stage results go (default <out>/cache); keep it to resume")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config field (repeatable), e.g. --set pretrain_epochs=20")
    parser.add_argument("--seed", type=int, default=None, help="master seed (default 0; recorded in the report)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--print-config", action="store_true", help="print the configuration and exit")


def run(args: argparse.Namespace) -> int:
    import torch

    fields = {f.name: f for f in dataclasses.fields(ReproduceConfig)}
    try:
        overrides = dict(_parse_override(fields, s) for s in args.overrides)
        if args.seed is not None:
            overrides["seed"] = args.seed
        cfg = preset(args.preset, **overrides)
    except ValueError as e:
        print(f"invfast reproduce: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    if args.threads is not None:
        if args.threads < 1:
            print("invfast reproduce: --threads must be >= 1", file=sys.stderr)
            return 2
        torch.set_num_threads(args.threads)
    try:
        reproduce(cfg, args.out, cache_dir=args.cache_dir, progress=not args.no_progress, log=print)
    except (ConfigMismatchError, OSError) as e:
        print(f"invfast reproduce: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("invfast reproduce: interrupted; rerun the same command to continue (finished stages are kept)",
              file=sys.stderr)
        return 130
    return 0
