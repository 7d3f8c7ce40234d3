"""The records the report is made of: a :class:`Finding` (a claim of the papers checked on one seed's
stage results) and a :class:`Section` (a part of ``report.md`` and of ``results.json``), the
:class:`ReportView` they read, the statuses, and small helpers shared by the sections.

Every verdict is a function of the measured numbers; nothing in the report text is decided in
advance. Comparisons of probe scores are paired over the cross-validation folds (the same folds
for every model): a claim "A beats B" counts as *reproduced* when the mean fold difference is
positive and its one-sided paired t statistic reaches the 95% critical value, as *direction only*
when the difference is positive but not significant, and as *not reproduced* otherwise.
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
    "NOT_RUN",
    "MODEL_ORDER",
    "PRETRAINED",
    "SeedRun",
    "ReportView",
    "Finding",
    "Section",
    "paired",
    "combine_statuses",
    "best_of",
    "pm",
    "figure",
]

REPRODUCED, PARTLY, DIRECTION, NOT, NOT_RUN = (
    "reproduced",
    "partly reproduced",
    "direction only",
    "not reproduced",
    "not run",
)
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
class Finding:
    """A claim of the papers, checked on one seed's numbers.

    Attributes:
        id: its number in the report. source: the paper. claim: one sentence.
        needs: the stages whose results ``check`` reads.
        check: ``check(results) -> dict`` with at least ``status`` (one of the statuses) and
            ``summary``; ``results`` maps stage names to results (one seed).
        statistics: ``statistics(results, finding) -> {name: value}``: the seed-level numbers behind
            the finding, aggregated over seeds in the report (None: none).
    """

    id: int
    source: str
    claim: str
    needs: tuple[str, ...]
    check: Callable[[dict[str, Any]], dict[str, Any]]
    statistics: Callable[[dict[str, Any], dict[str, Any]], dict[str, float]] | None = None

    def evaluate(self, results: dict[str, Any]) -> dict[str, Any]:
        """The finding on one seed's results: ``check``'s dict with ``id`` and ``claim``; *not run*
        when a stage it needs did not run in this configuration."""
        head = {"id": self.id, "source": self.source, "claim": self.claim}
        if any(n not in results for n in self.needs):
            return {**head, "status": NOT_RUN, "summary": "a stage it needs did not run in this configuration"}
        return {**self.check(results), **head}


@dataclass(frozen=True)
class Section:
    """A part of the report.

    Attributes:
        name: a short name (tests and cross-references).
        markdown: ``markdown(view) -> list of lines`` of ``report.md``.
        content: ``content(view) -> {key: value}`` merged into ``results.json`` (None: nothing).
        figures: ``figures(view) -> {name: path relative to the output folder}``: writes the
            section's figures (None: none); the names go to ``results.json`` (``figures``).
    """

    name: str
    markdown: Callable[[ReportView], list[str]]
    content: Callable[[ReportView], dict[str, Any]] | None = None
    figures: Callable[[ReportView], dict[str, str]] | None = None


# ---------------------------------------------------------------------------------------------- statistics
def paired(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Is A better than B over paired folds? Mean difference, one-sided paired t and a status."""
    from scipy import stats as st

    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    k = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if k > 1 else 0.0
    if sd > 0:
        t = mean / (sd / math.sqrt(k))
    else:
        t = math.copysign(math.inf, mean) if mean != 0 else 0.0
    crit = float(st.t.ppf(0.95, k - 1)) if k > 1 else math.inf
    status = REPRODUCED if mean > 0 and t >= crit else DIRECTION if mean > 0 else NOT
    return {
        "diff": mean,
        "t": t if math.isfinite(t) else (1e9 if t > 0 else -1e9 if t < 0 else 0.0),
        "t_crit": crit,
        "status": status,
    }


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
