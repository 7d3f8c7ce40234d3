"""``invfast probe``: cross-validated linear (or kernel) readout on saved features.

    invfast probe --features F.npy --targets Y.npy --task classification|regression

Several ``--features`` files are fused (concatenated) and the α grid shifts accordingly.
Prints the probe table (Ericsson et al. 2021, App. E): mean ± std over folds at the α (penalty λ) with the best mean.
Bad usage or input raises ValueError / FileNotFoundError, which ``invfast.cli`` turns into one line
and exit code 2; warnings print once each, one line, as ``warning: ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

import numpy as np


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--features",
        nargs="+",
        required=True,
        metavar="F.npy",
        help="feature matrix [n, d] (.npy); several files are fused by concatenation",
    )
    p.add_argument(
        "--targets",
        required=True,
        metavar="Y.npy",
        help="labels [n] (classification) or targets [n] / [n, t] (regression), .npy",
    )
    p.add_argument("--task", required=True, choices=["classification", "regression"])
    p.add_argument("--folds", type=int, default=None, help="number of CV folds (default 5)")
    p.add_argument(
        "--n-models",
        type=int,
        default=None,
        help="linear probes: shift the grid for this many fused models (default: the number of --features)",
    )
    p.add_argument("--kernel", action="store_true", help="regression: RBF kernel ridge over (alpha, gamma)")
    p.add_argument(
        "--loo",
        action="store_true",
        help="regression: exact leave-one-out instead of K-fold (ridge, or kernel ridge with --kernel)",
    )
    p.add_argument(
        "--no-stratify", action="store_true", help="classification: plain shuffled K-fold instead of stratified folds"
    )
    p.add_argument("--max-iter", type=int, default=None, help="classification: L-BFGS iterations per C value (500)")
    p.add_argument("--tol", type=float, default=None, help="classification: gradient tolerance (1e-4)")
    p.add_argument("--device", default="cpu", help="torch device for the solves (cpu, cuda, cuda:1, ...)")
    p.add_argument("--all", action="store_true", help="also print the score of every α value")
    p.add_argument("--json", metavar="OUT.json", help="write the summary and cv_results to this file (atomically)")
    p.add_argument("--seed", type=int, default=None, help="shuffle seed of --no-stratify's folds (default 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars (as every other command)")


def _load(path: str, what: str) -> np.ndarray:
    from invfast.io import require_regular

    require_regular(path, what)
    try:
        arr = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise FileNotFoundError(f"cannot read {what} {path!r}: no such file") from None
    except (OSError, EOFError, ValueError) as e:
        if "pickle" in str(e):  # not a .npy array file: never advise loading it unsafely
            why = "it is not a .npy array file (no numeric array header)"
        elif "Failed to read all data" in str(e):
            why = f"its header promises more data than the file holds ({e})"
        else:
            why = str(e)
        raise ValueError(
            f"cannot read {what} {path!r} as a .npy array: {why}; write it with numpy.save(path, array)"
        ) from None
    if not isinstance(arr, np.ndarray):  # np.load opens an .npz archive as a mapping of arrays
        arr.close()
        raise ValueError(f"{what} {path!r} is an .npz archive; save one array per file with numpy.save")
    return arr


def _check_options(args: argparse.Namespace) -> None:
    """Refuse options that do not apply to the chosen probe (nothing is silently ignored)."""
    if args.task == "classification":
        for flag, given in (("--kernel", args.kernel), ("--loo", args.loo)):
            if given:
                raise ValueError(
                    f"{flag} is for --task regression; classification runs stratified K-fold "
                    "logistic regression (--folds, --no-stratify)"
                )
    else:
        for flag, given in (
            ("--no-stratify", args.no_stratify),
            ("--max-iter", args.max_iter is not None),
            ("--tol", args.tol is not None),
        ):
            if given:
                raise ValueError(
                    f"{flag} is for --task classification (logistic regression); regression folds "
                    "are plain K-fold and solved exactly"
                )
    if args.seed is not None and not args.no_stratify:
        fix = "drop --seed or add --no-stratify" if args.task == "classification" else "drop --seed"
        raise ValueError(f"--seed shuffles --no-stratify's folds; {args.task}'s folds are not shuffled: {fix}")
    if args.loo and args.folds is not None:
        raise ValueError("give either --loo (leave-one-out) or --folds K, not both")
    if args.kernel and args.n_models is not None:
        raise ValueError("--n-models shifts the linear probes' λ grid; kernel ridge (--kernel) has its own (α, γ) grid")
    if args.folds is not None and args.folds < 2:
        raise ValueError(f"--folds must be at least 2, got {args.folds}")
    if args.json:  # before the fit: a probe that cannot be saved is refused before it runs
        from invfast.runtime.write_paths import check_output_file, refuse_input_as_output

        check_output_file(args.json, "--json", "probe.json")
        refuse_input_as_output(args.json, "--json", {"--features": list(args.features), "--targets": [args.targets]})
    if args.n_models is not None and args.n_models < 1:
        raise ValueError(f"--n-models must be at least 1, got {args.n_models}")
    if args.max_iter is not None and args.max_iter < 1:
        raise ValueError(f"--max-iter must be at least 1, got {args.max_iter}")
    if args.tol is not None and not args.tol > 0:
        raise ValueError(f"--tol must be > 0, got {args.tol}")
    import torch

    try:
        device = torch.device(args.device)
    except RuntimeError:
        raise ValueError(f"--device {args.device!r} is not a torch device (cpu, cuda, cuda:1, ...)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device}: this torch has no CUDA device available; use --device cpu")


def _features(x: np.ndarray, path: str) -> np.ndarray:
    """One --features file checked where it is read: a finite numeric matrix [n, d], n, d >= 1."""
    if x.dtype.kind not in "biuf":
        raise ValueError(
            f"--features {path} holds {x.dtype} values; features must be a numeric (integer or float) matrix "
            "[n, d] saved with numpy.save"
        )
    if x.ndim != 2 or 0 in x.shape:
        raise ValueError(
            f"--features {path} holds an array of shape {list(x.shape)}; features must be a matrix [n, d] with "
            "n, d >= 1 (one row per sample: x.reshape(len(x), -1))"
        )
    _finite(x, f"--features {path}", "remove those samples (from the targets too) or impute them")
    return x


def _finite(a: np.ndarray, what: str, fix: str) -> None:
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        raise ValueError(f"{what} holds {int((~np.isfinite(a)).sum())} NaN/Inf value(s); {fix}")


def _targets(y: np.ndarray, path: str, task: str, n: int) -> None:
    """The --targets file checked where it is read: one value (regression: or a row) per sample, finite;
    class labels integers, strings or booleans (whole-number floats too), at least two classes."""
    kinds = "biufUS" if task == "classification" else "biuf"
    if y.dtype.kind not in kinds:
        want = "class labels (integers or strings)" if task == "classification" else "numeric targets"
        other = "; use --task classification for class labels" if y.dtype.kind in "US" else ""
        raise ValueError(f"--task {task} needs {want}, but {path} holds {y.dtype} values{other}")
    one_column = y.ndim == 1 or (y.ndim == 2 and (task == "regression" or y.shape[1] == 1))
    if not one_column or y.size == 0:
        raise ValueError(
            f"--targets {path} holds an array of shape {list(y.shape)}; give one target per sample "
            f"([n]{', or [n, targets]' if task == 'regression' else ''})"
        )
    if y.shape[0] != n:
        raise ValueError(f"--targets {path} has {y.shape[0]} rows but the features have {n}; they must match")
    _finite(y, f"--targets {path}", "drop those samples (from the features too) or impute them")
    if task == "classification" and y.dtype.kind == "f" and not bool((y == np.round(y)).all()):
        frac = y[y != np.round(y)].ravel()[0].item()
        raise ValueError(
            f"--task classification needs class labels, but {path} holds fractional values (e.g. {frac!r}); "
            "round them to integer classes, or use --task regression for continuous targets"
        )
    if task == "classification" and np.unique(y).size < 2:
        raise ValueError(
            f"--targets {path} holds only one class ({y.ravel()[0].item()!r}); a classifier needs at least two"
        )


def _rare_classes(y: np.ndarray, folds: int) -> str | None:
    """The warning for classes with fewer members than stratified folds, in the command line's words."""
    classes, counts = np.unique(y, return_counts=True)
    rare = counts < folds
    if not rare.any():
        return None
    names = ", ".join(f"{c!r} ({k})" for c, k in zip(classes[rare][:5].tolist(), counts[rare][:5].tolist()))
    return (
        f"{int(rare.sum())} class(es) have fewer members than --folds {folds}: {names}; some test folds miss "
        "them. Lower --folds or drop those classes."
    )


def _convergence(est: Any) -> str | None:
    """The logistic convergence warning, in the command line's words."""
    summary = est.unconverged_summary()
    if summary is None:
        return None
    return f"logistic regression: {summary} (--tol {est.tol:g}, --max-iter {est.max_iter}); raise --max-iter"


def _estimator(args: argparse.Namespace, n_models: int, folds: int) -> Any:
    from invfast.probes import KernelRidgeCV, LogisticCV, RidgeCV

    cv: Any = "loo" if args.loo else folds
    if args.task == "classification":
        return LogisticCV(
            cv=folds,
            n_models=n_models,
            stratify=not args.no_stratify,
            shuffle=args.no_stratify,
            random_state=0 if args.seed is None else args.seed,
            max_iter=500 if args.max_iter is None else args.max_iter,
            tol=1e-4 if args.tol is None else args.tol,
            verbose=not args.no_progress,
        )
    if args.kernel:
        return KernelRidgeCV(cv=cv, verbose=not args.no_progress)
    return RidgeCV(cv=cv, n_models=n_models, verbose=not args.no_progress)


def _rows(args: argparse.Namespace, est: Any) -> list[tuple[str, str, str]]:
    res, b = est.cv_results_, est.best_index_

    def mean_std(key: str) -> str:
        return f"{res[f'mean_test_{key}'][b]:.4f} ± {res[f'std_test_{key}'][b]:.4f}"

    if args.task == "classification":
        where = f"λ = {est.alpha_:.3g} (C = {est.C_:.3g})"
        return [
            ("accuracy", mean_std("accuracy"), where),
            ("mean per-class accuracy", mean_std("mean_per_class_accuracy"), where),
        ]
    where = f"α = {est.alpha_:.3g}, γ = {est.gamma_:.3g}" if args.kernel else f"λ = {est.alpha_:.3g} (Ridge alpha)"
    rows = [("R² (mean over targets)", mean_std("score"), where)]
    per = est.cv_scores_per_target_.mean(1)[b]
    if per.size > 1:
        rows += [(f"R² target {t}", f"{v:.4f}", where) for t, v in enumerate(per)]
    return rows


def run(args: argparse.Namespace) -> int:
    import torch

    from invfast.io import atomic_write_text
    from invfast.probes import ConvergenceWarning, fuse

    _check_options(args)
    folds = 5 if args.folds is None else args.folds
    feats = [_features(_load(f, "features"), f) for f in args.features]
    y = _load(args.targets, "targets")
    _targets(y, args.targets, args.task, feats[0].shape[0])
    n_models = args.n_models or len(feats)
    x = fuse(feats) if len(feats) > 1 else feats[0]
    xt = torch.as_tensor(np.ascontiguousarray(x)).to(args.device)
    if not xt.is_floating_point():
        xt = xt.double()
    notes = []
    if args.task == "classification" and not args.no_stratify and y.ndim == 1 and y.shape[0] == xt.shape[0]:
        notes.append(_rare_classes(y, folds))
    est = _estimator(args, n_models, folds)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="The least populated class")  # said above in CLI words
        est.fit(xt, y)
    notes += [str(w.message) for w in caught if not issubclass(w.category, ConvergenceWarning)]
    if args.task == "classification":
        notes.append(_convergence(est))
    res, b = est.cv_results_, est.best_index_
    rows = _rows(args, est)
    model = type(est).__name__
    cvdesc = "leave-one-out" if args.loo else f"{folds}-fold"
    print(
        f"{model}: n = {xt.shape[0]}, d = {xt.shape[1]} ({len(feats)} model(s)), {cvdesc} CV, "
        f"{len(res['params'])} values; mean ± std over folds at the best value"
    )
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
    for note in dict.fromkeys(n for n in notes if n):  # once each, in order
        print(f"warning: {' '.join(note.split())}", file=sys.stderr)
    if args.json:
        out = {
            "model": model,
            "rows": rows,
            "best_index": b,
            "best_params": est.best_params_,
            "cv_results": {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in res.items()},
        }
        atomic_write_text(args.json, json.dumps(out, indent=1, default=float))
    return 0
