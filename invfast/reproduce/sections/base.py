"""The records the report is made of: a :class:`Section` (a part of ``report.md`` and of ``results.json``),
the :class:`ReportView` it reads, the statuses, and the statistics shared by the findings' checks
(:class:`~invfast.reproduce.finding.Finding`, registered in :mod:`invfast.reproduce.findings`).

Every verdict is a function of the measured numbers; nothing in the report text is decided in
advance. Comparisons of probe scores on the same data are paired over the cross-validation folds (the
same folds for every model): a claim "A beats B" counts as *reproduced* when the mean fold difference
is positive and its one-sided paired t statistic reaches the 95% critical value, as *direction only*
when the difference is positive but not significant, and as *not reproduced* otherwise. Scores on
different data are compared the same way with Welch's t over the folds (:func:`unpaired`), rank
trends with Spearman's ρ and its two-sided p < 0.05 (:func:`trend`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from invfast.reproduce.config import ReproduceConfig
from invfast.reproduce.stages.context import FUSIONS, LABELS

__all__ = [
    "REPRODUCED",
    "PARTLY",
    "DIRECTION",
    "NOT",
    "MODEL_ORDER",
    "PRETRAINED",
    "SeedRun",
    "ReportView",
    "Section",
    "paired",
    "unpaired",
    "trend",
    "at_least",
    "combine_statuses",
    "best_of",
    "pm",
    "figure",
]

REPRODUCED, PARTLY, DIRECTION, NOT = ("reproduced", "partly reproduced", "direction only", "not reproduced")
#: the models of the probe tables, in order: the single models, then the fusions
MODEL_ORDER = [*LABELS.values(), *(label for label, _ in FUSIONS.values())]
PRETRAINED = ["Default", "Spatial", "Appearance", "Spa+App", "Def+Spa+App"]


@dataclass(frozen=True)
class SeedRun:
    """The stage results of one master seed: ``results`` maps a stage name to its result; ``cache``
    is the seed's cache folder (measurement results, metrics logs)."""

    seed: int
    cache: str
    results: dict[str, Any]


@dataclass
class ReportView:
    """What a section reads: the configuration, every seed's run (the first is the one the tables and
    figures show), the output folder and the results document built so far (``results.json``)."""

    cfg: ReproduceConfig
    runs: list[SeedRun]
    out: str
    doc: dict[str, Any] = field(default_factory=dict)

    @property
    def first(self) -> SeedRun:
        return self.runs[0]


@dataclass(frozen=True)
class Section:
    """A part of the report.

    Attributes:
        name: a short name (tests and cross-references).
        markdown: ``markdown(view) -> list of lines`` of ``report.md``.
        content: ``content(view) -> {key: value}`` merged into ``results.json`` (None: nothing).
        figures: ``figures(view) -> {name: path relative to the output folder}``: writes the
            section's figures (None: none); the names go to ``results.json`` (``figures``).
        needs: the stages whose results it shows; without them (findings not selected) it is left out.
    """

    name: str
    markdown: Callable[[ReportView], list[str]]
    content: Callable[[ReportView], dict[str, Any]] | None = None
    figures: Callable[[ReportView], dict[str, str]] | None = None
    needs: tuple[str, ...] = ()

    def shown(self, view: ReportView) -> bool:
        """Whether the run has what the section shows: every stage of ``needs`` ran."""
        return all(n in view.first.results for n in self.needs)


# ---------------------------------------------------------------------------------------------- statistics
def paired(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Is A better than B over paired folds? Mean difference, one-sided paired t
    (:func:`invfast.comparison.paired.paired_t`) and a status."""
    from scipy import stats as st

    from invfast.comparison.paired import paired_t

    k = len(a)
    mean, t, _ = paired_t(np.asarray(a), np.asarray(b))
    if k < 2:
        t = math.copysign(math.inf, mean) if mean != 0 else 0.0
    crit = float(st.t.ppf(0.95, k - 1)) if k > 1 else math.inf
    status = REPRODUCED if mean > 0 and t >= crit else DIRECTION if mean > 0 else NOT
    return {
        "diff": mean,
        "t": t if math.isfinite(t) else (1e9 if t > 0 else -1e9 if t < 0 else 0.0),
        "t_crit": crit,
        "status": status,
    }


def unpaired(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Is A better than B, scores on different data? Mean difference over the folds, one-sided Welch t
    (Welch-Satterthwaite degrees of freedom) and a status, as :func:`paired`."""
    from scipy import stats as st

    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    diff = float(x.mean() - y.mean())
    vx, vy = x.var(ddof=1) / x.size if x.size > 1 else 0.0, y.var(ddof=1) / y.size if y.size > 1 else 0.0
    se = math.sqrt(vx + vy)
    if se > 0:
        t = diff / se
        dof = (vx + vy) ** 2 / ((vx**2 / (x.size - 1) if vx else 0.0) + (vy**2 / (y.size - 1) if vy else 0.0))
        crit = float(st.t.ppf(0.95, dof))
    else:
        t, crit = (math.copysign(1e9, diff) if diff else 0.0), 0.0
    status = REPRODUCED if diff > 0 and t >= crit else DIRECTION if diff > 0 else NOT
    return {"diff": diff, "t": float(t), "t_crit": crit, "status": status}


def trend(x: Sequence[float], y: Sequence[float]) -> dict[str, Any]:
    """Does y rise with x? Spearman's ρ and its two-sided p: *reproduced* when ρ > 0 with p < 0.05,
    *direction only* when ρ > 0, else *not reproduced* (fewer than three points: no p, direction at most)."""
    from scipy import stats as st

    xa, ya = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if xa.size < 2 or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return {"rho": 0.0, "p": 1.0, "status": NOT}
    r = st.spearmanr(xa, ya)
    rho, p = float(r.statistic), float(r.pvalue) if xa.size > 2 else 1.0
    status = REPRODUCED if rho > 0 and p < 0.05 else DIRECTION if rho > 0 else NOT
    return {"rho": rho, "p": p if math.isfinite(p) else 1.0, "status": status}


def at_least(ok: bool) -> str:
    """A check without a test statistic: *reproduced* or *not reproduced*."""
    return REPRODUCED if ok else NOT


def combine_statuses(statuses: Sequence[str]) -> str:
    """*reproduced* when every part is, *partly* when some part shows at least a direction, else *not*."""
    if statuses and all(s == REPRODUCED for s in statuses):
        return REPRODUCED
    if any(s in (REPRODUCED, DIRECTION, PARTLY) for s in statuses):
        return PARTLY
    return NOT


def best_of(scores: dict[str, Any], names: Sequence[str]) -> str:
    """The name in ``names`` with the highest mean score."""
    return max(names, key=lambda n: scores[n]["mean"])


# ---------------------------------------------------------------------------------------------- formatting
def pm(s: dict[str, Any]) -> str:
    """'mean ± std' of a probe score."""
    return f"{s['mean']:.3f} ± {s['std']:.3f}"


def figure(w: float, h: float) -> Any:
    """A matplotlib Figure (no pyplot state), constrained layout, ``w`` x ``h`` inches."""
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), layout="constrained")
