"""``invfast bench``: quick throughput of the compiled invariance ops against their torch
references on this machine (seconds, not the benchmark suite; see benchmarks/ for that)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from invfast import backend
from invfast.metrics import invariance_scores, uniformity
from invfast.stats import FeatureStats


def best_time(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best wall time in seconds of ``repeat`` (>= 1) calls of ``fn``."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run_bench(n: int = 200, p: int = 64, d: int = 512, n_uniform: int = 4000, repeat: int = 3) -> list[dict]:
    """Times of invariance_scores and uniformity, compiled vs reference; one dict per case."""
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(n, d, generator=gen)
    f_t = ref[:, None] + 0.5 * torch.randn(n, p, d, generator=gen)
    stats = FeatureStats().update(ref).finalize()
    x = torch.nn.functional.normalize(torch.randn(n_uniform, 128, generator=gen), dim=1)
    cases = {
        f"invariance_scores N={n} P={p} D={d}": (lambda: invariance_scores(ref, f_t, stats), n * p),
        f"uniformity N={n_uniform} D=128": (lambda: uniformity(x), n_uniform * (n_uniform - 1)),
    }
    rows = []
    for name, (fn, items) in cases.items():
        t_ref = None
        with backend.use("reference"):
            t_ref = best_time(fn, repeat)
        t_auto = best_time(fn, repeat)
        rows.append(
            {
                "case": name,
                "auto_s": t_auto,
                "reference_s": t_ref,
                "speedup": t_ref / t_auto,
                "items_per_s": items / t_auto,
            }
        )
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per case, best kept (>= 1; default 3)")


def run(args: argparse.Namespace) -> int:
    if args.repeat < 1:
        raise ValueError(f"--repeat must be >= 1 (timed calls per case), got {args.repeat}")
    info = backend.backend_info()
    print(f"compiled core: {info['cpp']}  cuda: {info['cuda']}  threads: {info['threads']}")
    print(f"{'case':<40} {'auto (s)':>10} {'reference (s)':>14} {'speedup':>8} {'items/s':>12}")
    for r in run_bench(repeat=args.repeat):
        print(
            f"{r['case']:<40} {r['auto_s']:>10.4f} {r['reference_s']:>14.4f} {r['speedup']:>7.2f}x "
            f"{r['items_per_s']:>12.3g}"
        )
    return 0
