"""Verdicts from intervals (docs/findings.md §5.1, restated in docs/findings.md).

A rule is a list of :class:`Criterion` (a statistic oriented so that the claim says "large", its interval,
the minimum effect and the null boundary) and a list of :class:`Precondition`. :func:`judge` gives one
seed's verdict:

- *not testable* — a precondition failed (each named);
- *reproduced* — every criterion's estimate is at least its minimum and its interval lies above its
  boundary (0 for an effect; −margin for non-inferiority);
- *contradicted* — some criterion's interval lies below its boundary;
- *inconclusive* — otherwise.

:func:`judge_over_seeds` combines seeds: *reproduced* when ≥ 3 seeds are testable and all of them
reproduce; *contradicted* when a majority of testable seeds contradict; *mixed* when some reproduce and
some contradict; *inconclusive* otherwise; *not testable* with fewer than 2 testable seeds. Every verdict
word carries its counts, and each criterion its seed-level mean with a t interval over testable seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from invfast.evidence.intervals import Interval, t_interval

__all__ = [
    "REPRODUCED",
    "CONTRADICTED",
    "INCONCLUSIVE",
    "NOT_TESTABLE",
    "MIXED",
    "SEED_VERDICTS",
    "OVER_SEED_VERDICTS",
    "Criterion",
    "Precondition",
    "SeedVerdict",
    "OverSeeds",
    "judge",
    "judge_over_seeds",
    "not_testable",
]

REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE, MIXED = (
    "reproduced",
    "contradicted",
    "inconclusive",
    "not testable",
    "mixed",
)
SEED_VERDICTS = (REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_TESTABLE)
OVER_SEED_VERDICTS = (REPRODUCED, CONTRADICTED, MIXED, INCONCLUSIVE, NOT_TESTABLE)


@dataclass(frozen=True)
class Criterion:
    """One part of a rule on one seed.

    Attributes:
        name: what it measures ('Δ_spa = spatial(Spatial) − spatial(Appearance)').
        interval: the statistic's estimate and 95 % interval, oriented so that the claim is "large".
        minimum: the smallest estimate that counts as the effect (the rule's "≥ m", docs/findings.md).
        boundary: the null value the interval must clear: 0 for an effect, −margin for non-inferiority.
        paper: the paper's value of the same statistic, where it gives one.
        control: the same statistic on the rule's control (shown beside it; the rule applied to the
            control must not reproduce), where the control is a separate number.
        on_estimate: decide on the point estimate alone (the interval is reported, not required to clear the
            boundary): for a rule that asks a value to lie in a range with its CI only reported.
    """

    name: str
    interval: Interval
    minimum: float
    boundary: float = 0.0
    paper: float | None = None
    control: Interval | None = None
    on_estimate: bool = False

    def __post_init__(self) -> None:
        if not math.isfinite(self.minimum) or not math.isfinite(self.boundary):
            raise ValueError(f"criterion {self.name!r}: minimum and boundary must be finite")
        if self.minimum < self.boundary:
            raise ValueError(f"criterion {self.name!r}: minimum {self.minimum} is below its boundary {self.boundary}")

    @property
    def verdict(self) -> str:
        iv = self.interval
        point = self.on_estimate or iv.method == "exact"
        low, high = (iv.estimate, iv.estimate) if point else (iv.low, iv.high)
        # an interval must lie above the boundary; a point value (exact, or decided on the estimate) may meet it
        clears = low > self.boundary or (point and low >= self.minimum)
        if iv.estimate >= self.minimum and clears:
            return REPRODUCED
        if high < self.boundary:
            return CONTRADICTED
        return INCONCLUSIVE

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "interval": self.interval.to_dict(),
            "minimum": self.minimum,
            "boundary": self.boundary,
            "paper": self.paper,
            "control": None if self.control is None else self.control.to_dict(),
            "on_estimate": self.on_estimate,
            "verdict": self.verdict,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Criterion:
        return cls(
            d["name"],
            Interval.from_dict(d["interval"]),
            float(d["minimum"]),
            float(d["boundary"]),
            d.get("paper"),
            None if d.get("control") is None else Interval.from_dict(d["control"]),
            bool(d.get("on_estimate", False)),
        )


@dataclass(frozen=True)
class Precondition:
    """A condition the seed must meet for the rule to test anything ('the Default model learned')."""

    name: str
    met: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "met": bool(self.met), "detail": self.detail}


@dataclass(frozen=True)
class SeedVerdict:
    """One seed's verdict with the criteria and preconditions it was decided from."""

    verdict: str
    criteria: tuple[Criterion, ...]
    preconditions: tuple[Precondition, ...] = ()
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "why": self.why,
            "criteria": [c.to_dict() for c in self.criteria],
            "preconditions": [p.to_dict() for p in self.preconditions],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SeedVerdict:
        return cls(
            d["verdict"],
            tuple(Criterion.from_dict(c) for c in d["criteria"]),
            tuple(Precondition(p["name"], bool(p["met"]), p.get("detail", "")) for p in d["preconditions"]),
            d.get("why", ""),
        )


def not_testable(why: str, preconditions: Sequence[Precondition] = ()) -> SeedVerdict:
    """A seed on which the rule cannot be applied, with the reason (a missing model or number)."""
    return SeedVerdict(NOT_TESTABLE, (), tuple(preconditions), why)


def judge(criteria: Sequence[Criterion], preconditions: Sequence[Precondition] = ()) -> SeedVerdict:
    """One seed's verdict from its criteria (every part must hold) and preconditions."""
    pre = tuple(preconditions)
    failed = [p for p in pre if not p.met]
    crit = tuple(criteria)
    if failed:
        why = "; ".join(f"{p.name}{': ' + p.detail if p.detail else ''}" for p in failed)
        return SeedVerdict(NOT_TESTABLE, crit, pre, why)
    if not crit:
        raise ValueError("a rule needs at least one criterion")
    parts = [c.verdict for c in crit]
    if all(v == REPRODUCED for v in parts):
        return SeedVerdict(REPRODUCED, crit, pre)
    if CONTRADICTED in parts:
        names = [c.name for c in crit if c.verdict == CONTRADICTED]
        return SeedVerdict(CONTRADICTED, crit, pre, "opposite direction: " + "; ".join(names))
    names = [c.name for c in crit if c.verdict != REPRODUCED]
    return SeedVerdict(INCONCLUSIVE, crit, pre, "not shown: " + "; ".join(names))


@dataclass(frozen=True)
class OverSeeds:
    """The verdict over seeds: the word, the per-verdict seed counts, and each criterion's seed-level mean
    with its t interval over the testable seeds (None with fewer than two)."""

    verdict: str
    counts: dict[str, int]
    seeds: tuple[int, ...]
    per_seed: tuple[str, ...]
    effects: dict[str, Interval | None] = field(default_factory=dict)

    @property
    def testable(self) -> int:
        return sum(n for v, n in self.counts.items() if v != NOT_TESTABLE)

    @property
    def label(self) -> str:
        """'reproduced, 3 of 3 seeds' / 'mixed: 1 reproduced, 1 contradicted, 1 not testable of 3 seeds'."""
        total = len(self.per_seed)
        if self.verdict in (REPRODUCED, CONTRADICTED):
            return f"{self.verdict}, {self.counts.get(self.verdict, 0)} of {total} seeds"
        parts = ", ".join(f"{n} {v}" for v, n in self.counts.items() if n)
        return f"{self.verdict}: {parts} of {total} seeds"

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "label": self.label,
            "counts": dict(self.counts),
            "seeds": list(self.seeds),
            "per_seed": list(self.per_seed),
            "effects": {k: None if v is None else v.to_dict() for k, v in self.effects.items()},
        }


def judge_over_seeds(seeds: Sequence[int], verdicts: Sequence[SeedVerdict]) -> OverSeeds:
    """Combine per-seed verdicts (docs/findings.md, *over seeds*)."""
    if len(seeds) != len(verdicts) or not verdicts:
        raise ValueError(f"need one verdict per seed, got {len(verdicts)} for {len(seeds)} seeds")
    words = tuple(v.verdict for v in verdicts)
    for w in words:
        if w not in SEED_VERDICTS:
            raise ValueError(f"unknown seed verdict {w!r}; expected one of {SEED_VERDICTS}")
    counts = {w: words.count(w) for w in SEED_VERDICTS}
    n_testable = len(words) - counts[NOT_TESTABLE]
    if n_testable < 2:
        verdict = NOT_TESTABLE
    elif n_testable >= 3 and counts[REPRODUCED] == n_testable:
        verdict = REPRODUCED
    elif counts[CONTRADICTED] > n_testable / 2:
        verdict = CONTRADICTED
    elif counts[REPRODUCED] and counts[CONTRADICTED]:
        verdict = MIXED
    else:
        verdict = INCONCLUSIVE
    effects: dict[str, Interval | None] = {}
    names = dict.fromkeys(c.name for v in verdicts for c in v.criteria)
    for name in names:
        testable = [v for v in verdicts if v.verdict != NOT_TESTABLE]
        vals = [c.interval.estimate for v in testable for c in v.criteria if c.name == name]
        effects[name] = t_interval(vals) if len(vals) >= 2 else None
    return OverSeeds(verdict, counts, tuple(int(s) for s in seeds), words, effects)
