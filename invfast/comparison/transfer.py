"""Which invariance predicts transfer: rank correlation, across the compared models, between each
transform's (and family's) invariance and each downstream task's probe score.

Direction convention: invariance is the standardised cosine (higher = more invariant) or the negated
Mahalanobis distance, and a task's score is oriented so that higher = better (negated when the task says
lower is better). A positive correlation therefore always reads "the more invariant models transfer better".

Spearman's ρ and Kendall's τ-b come from scipy (with scipy's p-values, not corrected for the many
(transform, task) pairs); their confidence intervals from a percentile bootstrap that resamples the models
with replacement (seeded; resamples in which the invariance or the score is constant have no correlation and
are left out, and their count is reported). With fewer than 3 models no correlation is reported; with fewer
than 8 the interval is rough (the resamples repeat few distinct models) and is not used to mark anything:
Kendall's p-value (scipy: exact for small samples without ties) is the guide there.

Probe scores come from ``invfast probe --json`` files (the headline score:
``cv_results.mean_test_score[best_index]``, accuracy for classification, R² for regression), or directly as
numbers.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from invfast.comparison.table import METRICS, Table, invariance

__all__ = [
    "MIN_MODELS",
    "MIN_MODELS_MARK",
    "TransferScores",
    "probe_score",
    "parse_probe_spec",
    "as_transfer_scores",
    "resolve_labels",
    "spearman_rows",
    "kendall_rows",
    "bootstrap_indices",
    "correlate",
    "Transfer",
    "check_bootstrap",
    "transfer_correlations",
]

MIN_MODELS = 3
#: below this many models the bootstrap resamples repeat too few distinct models for their interval to mark
#: anything (with 4 models in a perfect order every resample gives ρ = 1): no * is shown, Kendall's exact p is
MIN_MODELS_MARK = 8


# --------------------------------------------------------------------------------------------- the scores
@dataclass
class TransferScores:
    """Downstream scores: ``tasks[task][label]`` (higher = better unless ``higher_is_better[task]`` is
    False), and where each came from (``sources[task][label]``: a file, or 'given')."""

    tasks: dict[str, dict[str, float]] = field(default_factory=dict)
    higher_is_better: dict[str, bool] = field(default_factory=dict)
    sources: dict[str, dict[str, str]] = field(default_factory=dict)

    def add(self, task: str, label: str, score: float, source: str, higher_is_better: bool | None = None) -> None:
        if not task or not label:
            raise ValueError(f"a probe score needs a model and a task name, got model {label!r}, task {task!r}")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise ValueError(
                f"the score of {label!r} on task {task!r} ({source}) must be a finite number, got {score!r}"
            )
        if label in self.tasks.get(task, {}):
            raise ValueError(f"two scores for {label!r} on task {task!r} ({self.sources[task][label]} and {source})")
        self.tasks.setdefault(task, {})[label] = float(score)
        self.sources.setdefault(task, {})[label] = source
        if higher_is_better is not None:
            self.higher_is_better[task] = bool(higher_is_better)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "higher_is_better": {k: self.higher_is_better.get(k, True) for k in self.tasks},
            "sources": self.sources,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TransferScores:
        return cls(
            {k: dict(v) for k, v in d["tasks"].items()},
            dict(d.get("higher_is_better", {})),
            {k: dict(v) for k, v in d.get("sources", {}).items()},
        )


def probe_score(doc: Any, where: str) -> float:
    """The headline score of an ``invfast probe --json`` document: ``cv_results.mean_test_score[best_index]``."""
    top = doc if isinstance(doc, Mapping) else {}
    cv, b = top.get("cv_results"), top.get("best_index")
    scores = cv.get("mean_test_score") if isinstance(cv, Mapping) else None
    if isinstance(b, bool) or not isinstance(b, int) or not isinstance(scores, list) or not 0 <= b < len(scores):
        raise ValueError(
            f"{where} is not an 'invfast probe --json' file (it needs best_index and cv_results.mean_test_score)"
        )
    score = scores[b]
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise ValueError(f"{where}: the best probe score is not a finite number ({score!r})")
    return float(score)


def _read_json(path: str, what: str) -> Any:
    if not os.path.isfile(path):
        raise ValueError(f"{what} {path!r} {'is a folder, not a file' if os.path.isdir(path) else 'does not exist'}")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} {path!r} is not readable JSON ({e})") from None


def _value(v: Any, where: str) -> tuple[float, str]:
    """A score given as a number, a probe JSON document, or the path of one."""
    if isinstance(v, (str, os.PathLike)):
        p = os.fspath(v)
        return probe_score(_read_json(p, "probe file"), repr(p)), p
    if isinstance(v, Mapping):
        return probe_score(v, where), "given"
    return v, "given"


def _aggregate(doc: Any, scores: TransferScores, where: str) -> None:
    """``{"tasks": {TASK: {MODEL: score}}, "higher_is_better": {TASK: bool} | bool}``."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("tasks"), Mapping):
        raise ValueError(
            f'{where} must hold {{"tasks": {{TASK: {{MODEL: score}}}}}} (optionally '
            "\"higher_is_better\": {TASK: true|false}); for one 'invfast probe --json' file use "
            "MODEL:TASK=FILE"
        )
    hib = doc.get("higher_is_better", {})
    if not isinstance(hib, (bool, Mapping)):
        raise ValueError(f"{where}: higher_is_better must be true, false or {{TASK: true|false}}, got {hib!r}")
    for task, per in doc["tasks"].items():
        if not isinstance(per, Mapping):
            raise ValueError(f"{where}: task {task!r} must map model -> score, got {type(per).__name__}")
        up = hib if isinstance(hib, bool) else (hib.get(task) if isinstance(hib, Mapping) else None)
        if up is not None and not isinstance(up, bool):
            raise ValueError(f"{where}: higher_is_better of {task!r} must be true or false, got {up!r}")
        for label, v in per.items():
            val, src = _value(v, f"{where} ({label}, {task})")
            scores.add(str(task), str(label), val, where if src == "given" else src, up)


def parse_probe_spec(spec: str, scores: TransferScores) -> None:
    """One ``--probes`` argument: ``MODEL:TASK=probe.json`` (MODEL a row label, TASK a name of your choosing;
    MODEL may itself contain ':', TASK may not), or the path of an aggregate JSON (no '=')."""
    if "=" not in spec or os.path.isfile(spec):
        _aggregate(_read_json(spec, "--probes file"), scores, repr(spec))
        return
    left, _, path = spec.partition("=")
    label, colon, task = left.rpartition(":")
    if not colon or not label.strip() or not task.strip() or not path:
        raise ValueError(
            f"--probes {spec!r}: expected MODEL:TASK=probe.json (or the path of a JSON "
            '{"tasks": {TASK: {MODEL: score}}})'
        )
    val, src = _value(path, spec)
    scores.add(task.strip(), label.strip(), val, src)


def as_transfer_scores(probes: Any) -> TransferScores:
    """Downstream scores from: a :class:`TransferScores`; ``--probes`` strings (one or a list); a mapping
    ``{"tasks": {...}, "higher_is_better": {...}}``; or a mapping ``{TASK: {MODEL: score}}`` where a score is
    a number, a probe JSON document or the path of one."""
    if isinstance(probes, TransferScores):
        return probes
    scores = TransferScores()
    if isinstance(probes, (str, os.PathLike)):
        probes = [os.fspath(probes)]
    if isinstance(probes, Mapping):
        _aggregate(probes if "tasks" in probes else {"tasks": probes}, scores, "probes")
    elif isinstance(probes, Sequence) and all(isinstance(p, (str, os.PathLike)) for p in probes):
        for p in probes:
            parse_probe_spec(os.fspath(p), scores)
    else:
        raise TypeError(
            f"probes must be a mapping {{TASK: {{MODEL: score}}}}, MODEL:TASK=FILE strings or a JSON path, "
            f"got {type(probes).__name__}"
        )
    if not scores.tasks:
        raise ValueError("probes holds no scores")
    return scores


def resolve_labels(scores: TransferScores, labels: Sequence[str], models: Mapping[str, list[str]]) -> TransferScores:
    """``scores`` keyed by row label: a key may be a row label, or a model name with exactly one row.
    ``models`` maps model name -> its row labels. Raises ValueError for an unknown or ambiguous name."""
    out = TransferScores(higher_is_better=dict(scores.higher_is_better))
    for task, per in scores.tasks.items():
        for key, v in per.items():
            if key in labels:
                label = key
            elif key in models and len(models[key]) == 1:
                label = models[key][0]
            elif key in models:
                raise ValueError(
                    f"probe score of {key!r} on task {task!r} is ambiguous: {key!r} has the rows "
                    f"{', '.join(map(repr, models[key]))}; name the row"
                )
            else:
                raise ValueError(
                    f"unknown model {key!r} in the probe scores (task {task!r}); the compared rows are "
                    f"{', '.join(map(repr, labels))}"
                )
            out.add(task, label, v, scores.sources[task][key])
    return out


# --------------------------------------------------------------------------------------------- correlations
def _pearson_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x = x - x.mean(1, keepdims=True)
    y = y - y.mean(1, keepdims=True)
    den = np.sqrt((x * x).sum(1) * (y * y).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (x * y).sum(1) / np.where(den > 0, den, 1.0), np.nan)


def spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's ρ of each row pair of ``x, y [B, n]`` (ties averaged; NaN where a row is constant)."""
    from scipy.stats import rankdata

    return _pearson_rows(rankdata(x, axis=1), rankdata(y, axis=1))


def kendall_rows(x: np.ndarray, y: np.ndarray, block: int = 1 << 22) -> np.ndarray:
    """Kendall's τ-b of each row pair of ``x, y [B, n]`` (NaN where a row is constant)."""
    b, n = x.shape
    iu = np.triu_indices(n, 1)
    n0 = n * (n - 1) / 2
    out = np.empty(b)
    step = max(1, block // max(1, n * n))
    for s in range(0, b, step):
        sx = np.sign(x[s : s + step, :, None] - x[s : s + step, None, :])[:, iu[0], iu[1]]
        sy = np.sign(y[s : s + step, :, None] - y[s : s + step, None, :])[:, iu[0], iu[1]]
        den = np.sqrt((n0 - (sx == 0).sum(1)) * (n0 - (sy == 0).sum(1)))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s : s + step] = np.where(den > 0, (sx * sy).sum(1) / np.where(den > 0, den, 1.0), np.nan)
    return out


def bootstrap_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """int [n_boot, n]: the model resamples (with replacement) every correlation of n models uses."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def correlate(
    x: np.ndarray, y: np.ndarray, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> dict[str, Any]:
    """Spearman and Kendall correlation of ``x`` and ``y`` ([n], float64) with bootstrap CIs.

    Returns ``n``, ``spearman``, ``spearman_p``, ``spearman_ci`` [lo, hi], the same for ``kendall``,
    ``n_boot_valid`` and ``note`` (why a value is missing). Values are None where undefined.
    """
    from scipy.stats import kendalltau, spearmanr

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = int(x.shape[0])
    rec: dict[str, Any] = {
        "n": n,
        "spearman": None,
        "spearman_p": None,
        "spearman_ci": None,
        "kendall": None,
        "kendall_p": None,
        "kendall_ci": None,
        "n_boot_valid": 0,
        "note": None,
    }
    if n < MIN_MODELS:
        rec["note"] = f"{n} model(s): a rank correlation needs at least {MIN_MODELS}"
        return rec
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        rec["note"] = "the invariance or the score is the same for every model"
        return rec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, k = spearmanr(x, y), kendalltau(x, y)
    rec.update(
        spearman=float(s.statistic), spearman_p=float(s.pvalue), kendall=float(k.statistic), kendall_p=float(k.pvalue)
    )
    if n_boot > 0:
        idx = bootstrap_indices(n, n_boot, seed)
        bx, by = x[idx], y[idx]
        rho, tau = spearman_rows(bx, by), kendall_rows(bx, by)
        ok = np.isfinite(rho) & np.isfinite(tau)
        rec["n_boot_valid"] = int(ok.sum())
        if ok.sum() >= max(10, n_boot // 2):
            q = 100 * np.array([(1 - level) / 2, 1 - (1 - level) / 2])
            rec["spearman_ci"] = [float(v) for v in np.percentile(rho[ok], q)]
            rec["kendall_ci"] = [float(v) for v in np.percentile(tau[ok], q)]
        else:
            rec["note"] = f"only {int(ok.sum())} of {n_boot} resamples had varying values: no confidence interval"
    return rec


@dataclass
class Transfer:
    """The invariance-vs-transfer correlations of a comparison: one record per (metric, column, task)
    (``column`` a transform or a family, ``kind`` which), with the models used (``labels``) and
    :func:`correlate`'s numbers; the scores and bootstrap settings they came from."""

    scores: TransferScores
    records: list[dict[str, Any]]
    n_boot: int = 2000
    seed: int = 0
    level: float = 0.95

    def of(self, metric: str, task: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["metric"] == metric and r["task"] == task]

    @staticmethod
    def marked(record: dict[str, Any], stat: str = "spearman") -> bool:
        """Whether ``stat``'s bootstrap interval excludes 0 with at least :data:`MIN_MODELS_MARK` models."""
        ci = record.get(f"{stat}_ci")
        return ci is not None and record["n"] >= MIN_MODELS_MARK and (ci[0] > 0 or ci[1] < 0)

    def marks(self, metric: str, columns: Sequence[str], stat: str = "spearman") -> np.ndarray:
        """bool [C, K]: :meth:`marked` for every column and task (the layout of :meth:`matrix`)."""
        tasks = list(self.scores.tasks)
        m = np.zeros((len(columns), len(tasks)), dtype=bool)
        pos = {c: i for i, c in enumerate(columns)}
        for r in self.records:
            if r["metric"] == metric and r["column"] in pos:
                m[pos[r["column"]], tasks.index(r["task"])] = self.marked(r, stat)
        return m

    def matrix(self, metric: str, columns: Sequence[str], stat: str = "spearman") -> np.ndarray:
        """float64 [C, K]: ``stat`` ('spearman', 'kendall', their '_p', or '_ci_lo' / '_ci_hi') of every
        column (rows) and task (columns, ``scores.tasks`` order); NaN where undefined."""
        tasks = list(self.scores.tasks)
        m = np.full((len(columns), len(tasks)), np.nan)
        pos = {c: i for i, c in enumerate(columns)}
        key, end = (stat[:-3], {"_lo": 0, "_hi": 1}[stat[-3:]]) if stat.endswith(("_lo", "_hi")) else (stat, None)
        for r in self.records:
            v = r.get(key)
            if r["metric"] == metric and r["column"] in pos and v is not None:
                m[pos[r["column"]], tasks.index(r["task"])] = v if end is None else v[end]
        return m

    def to_dict(self) -> dict[str, Any]:
        return {
            "scores": self.scores.to_dict(),
            "n_boot": self.n_boot,
            "seed": self.seed,
            "level": self.level,
            "min_models": MIN_MODELS,
            "min_models_mark": MIN_MODELS_MARK,
            "records": self.records,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Transfer:
        return cls(
            TransferScores.from_dict(d["scores"]),
            list(d["records"]),
            int(d["n_boot"]),
            int(d["seed"]),
            float(d["level"]),
        )


def check_bootstrap(n_boot: int, seed: int, level: float) -> None:
    """ValueError unless ``n_boot`` and ``seed`` are integers >= 0 and ``level`` is in (0, 1)."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 0:
        raise ValueError(f"n_boot (--bootstrap) must be an integer >= 0, got {n_boot!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    if isinstance(level, bool) or not isinstance(level, (int, float)) or not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def transfer_correlations(
    table: Table, scores: TransferScores, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> Transfer:
    """Correlate every column of ``table`` (transforms, then families) with every task of ``scores``
    (keyed by row label) across the rows that have both."""
    check_bootstrap(n_boot, seed, level)
    kinds = ["transform"] * len(table.columns) + ["family"] * len(table.families)
    records = []
    for metric in METRICS:
        inv = invariance(table.all_values(metric), metric)
        for task, per in scores.tasks.items():
            sign = 1.0 if scores.higher_is_better.get(task, True) else -1.0
            for j, (col, kind) in enumerate(zip(table.column_names, kinds)):
                rows = [i for i, lab in enumerate(table.labels) if lab in per and np.isfinite(inv[i, j])]
                x = inv[rows, j]
                y = np.array([sign * per[table.labels[i]] for i in rows], dtype=np.float64)
                rec = {
                    "metric": metric,
                    "column": col,
                    "kind": kind,
                    "task": task,
                    "labels": [table.labels[i] for i in rows],
                }
                rec.update(correlate(x, y, n_boot=n_boot, seed=seed, level=level))
                records.append(rec)
    return Transfer(scores, records, n_boot=n_boot, seed=seed, level=float(level))
