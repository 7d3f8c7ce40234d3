"""``invfast probe``: cross-validated linear (or kernel) readout on saved features.

    invfast probe --features F.npy --targets Y.npy --task classification|regression

Several ``--features`` files are fused (concatenated) and the α grid shifts accordingly.
Prints the probe table (Ericsson et al. 2021, App. E): mean ± std over folds at the α (penalty λ) with the best mean.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings

import numpy as np


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--features", nargs="+", required=True, metavar="F.npy",
                   help="feature matrix [n, d] (.npy); several files are fused by concatenation")
    p.add_argument("--targets", required=True, metavar="Y.npy",
                   help="labels [n] (classification) or targets [n] / [n, t] (regression), .npy")
    p.add_argument("--task", required=True, choices=["classification", "regression"])
    p.add_argument("--folds", type=int, default=5, help="number of CV folds (default 5)")
    p.add_argument("--n-models", type=int, default=None,
                   help="shift the grid for this many fused models (default: number of --features files)")
    p.add_argument("--kernel", action="store_true", help="regression: RBF kernel ridge over (alpha, gamma)")
    p.add_argument("--loo", action="store_true", help="regression: exact leave-one-out instead of K-fold")
    p.add_argument("--no-stratify", action="store_true",
                   help="classification: plain shuffled K-fold (fallback when a class is smaller than --folds)")
    p.add_argument("--max-iter", type=int, default=500, help="logistic: L-BFGS iterations per α value")
    p.add_argument("--tol", type=float, default=1e-4, help="logistic: gradient tolerance")
    p.add_argument("--device", default="cpu", help="torch device for the solves (cpu, cuda, cuda:1, ...)")
    p.add_argument("--all", action="store_true", help="also print the score of every α value")
    p.add_argument("--json", metavar="OUT.json", help="write the summary and cv_results to this file")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed (used with --no-stratify)")


def _load(path: str, what: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise SystemExit(f"invfast probe: cannot read {what} {path!r}: {e}") from None


def _fmt(v: float) -> str:
    return f"{v:.4f}"


def _numeric_targets(y: np.ndarray, path: str) -> str | None:
    """The one-line complaint when regression targets are not numbers (class names, say), else None."""
    if y.dtype.kind in "biuf":
        return None
    example = y.ravel()[:1].tolist()
    return (f"--task regression needs numeric targets, but {path} holds {y.dtype} values (e.g. {example[0]!r}); "
            "use --task classification for class labels")


def run(args: argparse.Namespace) -> int:
    import torch

    from invfast.probes import KernelRidgeCV, LogisticCV, RidgeCV, fuse

    feats = [_load(f, "features") for f in args.features]
    y = _load(args.targets, "targets")
    if args.task == "regression" and (problem := _numeric_targets(y, args.targets)):
        print(f"invfast probe: {problem}", file=sys.stderr)
        return 2
    n_models = args.n_models or len(feats)
    try:
        x = fuse(feats) if len(feats) > 1 else feats[0]
        xt = torch.as_tensor(np.ascontiguousarray(x)).to(args.device)
        if not xt.is_floating_point():
            xt = xt.double()
        yt = y
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if args.task == "classification":
                est = LogisticCV(cv=args.folds, n_models=n_models, stratify=not args.no_stratify,
                                 shuffle=args.no_stratify, random_state=args.seed, max_iter=args.max_iter,
                                 tol=args.tol, verbose=True)
            elif args.kernel:
                est = KernelRidgeCV(cv=args.folds, verbose=True)
            else:
                est = RidgeCV(cv="loo" if args.loo else args.folds, n_models=n_models, verbose=True)
            est.fit(xt, yt)
    except (ValueError, TypeError) as e:
        print(f"invfast probe: {e}", file=sys.stderr)
        return 2
    res = est.cv_results_
    b = est.best_index_
    rows: list[tuple[str, str, str]] = []
    if args.task == "classification":
        where = f"λ = {est.alpha_:.3g} (C = {est.C_:.3g})"
        for name, key in (("accuracy", "accuracy"), ("mean per-class accuracy", "mean_per_class_accuracy")):
            rows.append((name, f"{_fmt(res[f'mean_test_{key}'][b])} ± {_fmt(res[f'std_test_{key}'][b])}", where))
    else:
        where = (f"α = {est.alpha_:.3g}, γ = {est.gamma_:.3g}" if args.kernel
                 else f"λ = {est.alpha_:.3g} (Ridge alpha)")
        rows.append(("R² (mean over targets)", f"{_fmt(res['mean_test_score'][b])} ± {_fmt(res['std_test_score'][b])}",
                     where))
        per = est.cv_scores_per_target_.mean(1)[b]
        if per.size > 1:
            for t, v in enumerate(per):
                rows.append((f"R² target {t}", _fmt(v), where))
    model = type(est).__name__
    cvdesc = "leave-one-out" if args.loo and args.task == "regression" else f"{args.folds}-fold"
    print(f"{model}: n = {xt.shape[0]}, d = {xt.shape[1]} ({len(feats)} model(s)), {cvdesc} CV, "
          f"{len(res['params'])} values; mean ± std over folds at the best value")
    w = max(len(r[0]) for r in rows)
    print(f"| {'metric'.ljust(w)} | mean ± std      | best value |")
    print(f"|{'-' * (w + 2)}|-----------------|------------|")
    for name, val, where in rows:
        print(f"| {name.ljust(w)} | {val.ljust(15)} | {where} |")
    if args.all:
        print(f"\n{'value':<24} mean      std")
        names = [k for k in res if k.startswith("param_")]
        for i, (m_, s_) in enumerate(zip(res["mean_test_score"], res["std_test_score"])):
            label = ", ".join(f"{k[6:]}={res[k][i]:.3g}" for k in names)
            print(f"{label:<24} {m_:.4f}    {s_:.4f}")
    for wmsg in caught:
        print(f"warning: {wmsg.message}", file=sys.stderr)
    if args.json:
        out = {"model": model, "rows": rows, "best_index": b, "best_params": est.best_params_,
               "cv_results": {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in res.items()}}
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1, default=float)
    return 0
