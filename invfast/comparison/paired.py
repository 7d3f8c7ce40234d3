"""Paired significance between every two rows (models or layers) per transform, from the per-image
values ``measure`` stores.

For one transform and two rows A, B the per-image values (each image's mean over the transform's grid)
refer to the same images in the same order when the two runs recorded the same image identity; images
unreadable (NaN) in either run are dropped and counted. On the differences d_i = A_i − B_i two tests run:

- the paired t-test (float64 numpy; t = mean(d) / (sd(d) / √n), two-sided, n − 1 degrees of freedom),
  which tests the quantity the table shows, the mean; a constant non-zero difference gives t = ±∞, p = 0
  and an all-zero one p = 1;
- the Wilcoxon signed-rank test (scipy, zero differences dropped, two-sided), robust to heavy tails.

One is the primary (``test='t'`` by default); both p-values are Holm–Bonferroni adjusted across all the
(transform, pair) tests of one metric's table, and a pair is significant when the primary's adjusted
p ≤ α. The direction (which row is more invariant) is the sign of the mean difference for the t-test
and of R⁺ − R⁻ (the signed-rank sums) for Wilcoxon, with cosine higher = more invariant and distance
lower = more invariant.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from invfast.comparison.inputs import Row, paired_runs
from invfast.comparison.table import HIGHER_IS_MORE_INVARIANT, METRICS, check_metric

__all__ = ["paired_t", "signed_rank", "holm", "PairedTest", "Paired", "check_test", "paired_tests", "PAIRED_TESTS"]

PAIRED_TESTS = ("t", "wilcoxon")


def paired_t(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(mean difference a − b, t statistic, two-sided p) of the paired t-test, in float64."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    n = d.shape[0]
    if n < 2:
        return (float(d.mean()) if n else math.nan), math.nan, math.nan
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0.0:
        return mean, (0.0 if mean == 0.0 else math.copysign(math.inf, mean)), (1.0 if mean == 0.0 else 0.0)
    from scipy.stats import t as student_t

    t = mean / (sd / math.sqrt(n))
    return mean, t, float(2.0 * student_t.sf(abs(t), n - 1))


def signed_rank(a: np.ndarray, b: np.ndarray) -> tuple[float, float, int]:
    """(Wilcoxon statistic min(R⁺, R⁻), two-sided p, sign of R⁺ − R⁻) of the signed-rank test on a − b
    (zero differences dropped; p = 1 when every difference is zero)."""
    from scipy.stats import rankdata, wilcoxon

    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    d = d[d != 0]
    if d.size == 0:
        return 0.0, 1.0, 0
    r = rankdata(np.abs(d))
    direction = int(np.sign(r[d > 0].sum() - r[d < 0].sum()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's notes on ties / small samples choosing the approximation
        res = wilcoxon(d)
    return float(res.statistic), float(res.pvalue), direction


def holm(p: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (step-down; NaN entries are not tests and stay NaN):
    the k-th smallest of m p-values becomes max_{j ≤ k} min(1, (m − j + 1) p_(j))."""
    p = np.asarray(p, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    if m == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    adj = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


@dataclass(frozen=True)
class PairedTest:
    """One paired comparison of rows ``a`` and ``b`` on ``transform`` by ``metric``.

    ``n`` images scored by both (``dropped``: NaN in either); ``mean_diff`` = mean(a − b) in the metric's
    units; ``p_*_holm`` adjusted across the metric's table; ``more_invariant``: the row the primary test
    says is more invariant when significant, else None; ``reason``: why no test ran (then the numbers are None).
    """

    metric: str
    transform: str
    a: str
    b: str
    n: int = 0
    dropped: int = 0
    mean_diff: float | None = None
    t: float | None = None
    p_t: float | None = None
    wilcoxon: float | None = None
    p_wilcoxon: float | None = None
    p_t_holm: float | None = None
    p_wilcoxon_holm: float | None = None
    direction_t: int = 0
    direction_wilcoxon: int = 0
    more_invariant: str | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            k: (
                None
                if isinstance(v, float) and math.isnan(v)
                else (str(v) if isinstance(v, float) and math.isinf(v) else v)
            )
            for k, v in asdict(self).items()
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PairedTest:
        names = {f.name for f in fields(cls)}
        kw: dict[str, Any] = {
            k: (float(v) if k == "t" and isinstance(v, str) else v) for k, v in d.items() if k in names
        }
        return cls(**kw)


@dataclass
class Paired:
    """Every paired test of a comparison, with the primary test and α used for the marks."""

    tests: list[PairedTest]
    test: str = "t"
    alpha: float = 0.05

    def of(self, metric: str, transform: str | None = None) -> list[PairedTest]:
        """The tests of ``metric`` (and ``transform``) that ran."""
        return [
            t
            for t in self.tests
            if t.metric == metric and t.reason is None and (transform is None or t.transform == transform)
        ]

    def beats(self, metric: str, transform: str) -> dict[str, list[str]]:
        """Row label -> the rows it is significantly more invariant than on ``transform``."""
        out: dict[str, list[str]] = {}
        for t in self.of(metric, transform):
            if t.more_invariant is not None:
                loser = t.b if t.more_invariant == t.a else t.a
                out.setdefault(t.more_invariant, []).append(loser)
        return out

    def matrix(self, metric: str, labels: Sequence[str]) -> np.ndarray:
        """int [R, R]: entry (i, j) = the number of transforms on which row i is significantly more
        invariant than row j (by ``metric``)."""
        pos = {lab: i for i, lab in enumerate(labels)}
        m = np.zeros((len(labels), len(labels)), dtype=np.int64)
        for t in self.of(metric):
            if t.more_invariant is not None:
                loser = t.b if t.more_invariant == t.a else t.a
                m[pos[t.more_invariant], pos[loser]] += 1
        return m

    def tested(self, metric: str, labels: Sequence[str]) -> np.ndarray:
        """int [R, R]: the number of transforms on which rows i and j were tested (symmetric)."""
        pos = {lab: i for i, lab in enumerate(labels)}
        m = np.zeros((len(labels), len(labels)), dtype=np.int64)
        for t in self.of(metric):
            m[pos[t.a], pos[t.b]] += 1
            m[pos[t.b], pos[t.a]] += 1
        return m

    def to_dict(self) -> dict[str, Any]:
        return {"test": self.test, "alpha": self.alpha, "tests": [t.to_dict() for t in self.tests]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Paired:
        return cls([PairedTest.from_dict(t) for t in d["tests"]], test=d["test"], alpha=float(d["alpha"]))


def _values(row: Row, transform: str, metric: str) -> np.ndarray | None:
    t = row.result.transforms.get(transform) if row.result is not None else None
    v = None if t is None else getattr(t, f"per_image_{metric}")
    return None if v is None else v.detach().cpu().double().numpy()


def _score_pair(rec: dict[str, Any], va: np.ndarray | None, vb: np.ndarray | None, sign: int) -> str | None:
    """Both paired tests on the images two rows scored (per-image values ``va``, ``vb`` [N]), written into
    ``rec``; returns the reason they cannot be run, or None."""
    if va is None or vb is None:
        return "no per-image values stored"
    if va.shape != vb.shape:
        return f"different numbers of images ({va.shape[0]} and {vb.shape[0]})"
    keep = np.isfinite(va) & np.isfinite(vb)
    n = int(keep.sum())
    rec.update(n=n, dropped=int(va.shape[0] - n))
    if n < 2:
        return f"{n} image(s) scored by both"
    a, b = va[keep], vb[keep]
    md, t, pt = paired_t(a, b)
    w, pw, dw = signed_rank(a, b)
    rec.update(
        mean_diff=md,
        t=t,
        p_t=pt,
        wilcoxon=w,
        p_wilcoxon=pw,
        direction_t=int(np.sign(md)) * sign,
        direction_wilcoxon=dw * sign,
    )
    return None


def check_test(test: str, alpha: float) -> None:
    """ValueError unless ``test`` is one of :data:`PAIRED_TESTS` and ``alpha`` is in (0, 1)."""
    if test not in PAIRED_TESTS:
        raise ValueError(f"test must be one of {PAIRED_TESTS}, got {test!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be a number in (0, 1), got {alpha!r}")


def paired_tests(rows: Sequence[Row], transforms: Sequence[str], *, test: str = "t", alpha: float = 0.05) -> Paired:
    """The paired tests of every two rows on every transform both measured, for both metrics; Holm
    across each metric's tests. Pairs whose runs scored different image sets (or lack per-image values)
    are listed with the reason and no numbers."""
    check_test(test, alpha)
    pairable = paired_runs(rows)
    out: list[PairedTest] = []
    for metric in METRICS:
        check_metric(metric)
        sign = 1 if HIGHER_IS_MORE_INVARIANT[metric] else -1
        raw: list[dict[str, Any]] = []
        for name in transforms:
            for i in range(len(rows)):
                for j in range(i + 1, len(rows)):
                    ra, rb = rows[i], rows[j]
                    if any(r.result is None or name not in r.result.transforms for r in (ra, rb)):
                        continue
                    rec: dict[str, Any] = {"metric": metric, "transform": name, "a": ra.label, "b": rb.label}
                    reason = pairable[ra.run, rb.run]
                    if reason is None:
                        reason = _score_pair(rec, _values(ra, name, metric), _values(rb, name, metric), sign)
                    if reason is not None:
                        rec["reason"] = reason
                    raw.append(rec)
        adj_t = holm([r.get("p_t", math.nan) for r in raw])
        adj_w = holm([r.get("p_wilcoxon", math.nan) for r in raw])
        for rec, at, aw in zip(raw, adj_t, adj_w):
            if "reason" not in rec:
                rec.update(p_t_holm=float(at), p_wilcoxon_holm=float(aw))
                p, d = (at, rec["direction_t"]) if test == "t" else (aw, rec["direction_wilcoxon"])
                if p <= alpha and d != 0:
                    rec["more_invariant"] = rec["a"] if d > 0 else rec["b"]
            out.append(PairedTest(**rec))
    return Paired(out, test=test, alpha=float(alpha))
