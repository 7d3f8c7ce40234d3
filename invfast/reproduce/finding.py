"""A finding of the papers as data (:class:`Finding`): the registry
:data:`invfast.reproduce.findings.FINDINGS` lists one record per finding of docs/findings.md that
``invfast reproduce`` tests; the pipeline runs the stages the selected findings need and the report
decides each finding on every seed with its ``judge`` (the rule: statistics with intervals, minimum effects,
controls and preconditions, :mod:`invfast.evidence`), after the learning precondition of every model the
verdict rests on (``models``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from invfast.evidence import NOT_TESTABLE, Precondition, SeedVerdict, not_testable

__all__ = ["Finding", "PAPERS", "NOT_RUN", "model_matches", "learning_preconditions"]

#: paper key -> (id letter, the paper(s) as cited in the report)
PAPERS: dict[str, tuple[str, str]] = {
    "ericsson": ("E", "Ericsson et al. 2021"),
    "speicher": ("S", "Speicher et al."),
    "chavhan": ("C", "Chavhan et al. 2023"),
}
NOT_RUN = "not run"


def model_matches(pattern: str, model: str) -> bool:
    """A finding's model key matches ``model`` exactly, or as a prefix when it ends in '-' ('s3-')."""
    return model == pattern or (pattern.endswith("-") and model.startswith(pattern))


@dataclass(frozen=True)
class Finding:
    """One headline result of the papers, checked on one seed's numbers.

    Attributes:
        id: its id in docs/findings.md ('E1', 'S4', 'C3': the paper's letter and a number).
        paper: 'ericsson', 'speicher' or 'chavhan' (:data:`PAPERS`).
        source: where the paper shows it ('§4.1, Fig. 2-3').
        claim: the finding in one sentence.
        rule: the verdict rule in one sentence, as docs/findings.md states it (shown in the report).
        stages: the stages whose results ``check`` reads (the pipeline runs them and what they need).
        check: ``check(results) -> dict`` with at least ``summary`` (what the report says of the numbers; it
            decides nothing); ``results`` maps stage names to one seed's stage results.
        section: the name of the report section that shows its table or figure.
        statistics: ``statistics(results, finding) -> {name: value}``: the seed-level numbers behind it,
            aggregated over seeds in the report (None: none).
        judge: ``judge(results) -> SeedVerdict``: the rule on one seed (docs/findings.md); a number it needs
            and the seed lacks raises :class:`invfast.reproduce.rules.common.Missing` (*not testable: needs …*).
        models: the model keys its verdict rests on (a key ending in '-' is a prefix: 's3-'); a seed where one
            of them did not learn (:mod:`invfast.reproduce.sections.learning`) is *not testable*.
        paper_value: the paper's value of the rule's statistic, in words ('' where the paper has a figure only).
        test_families: the families of test transforms its rule compares (``invfast.transforms`` families): a run
            selecting it needs ``measurement.transforms`` to hold one of each (checked with the configuration).

    ``check`` describes the numbers for the report (its summary); it decides nothing.
    """

    id: str
    paper: str
    source: str
    claim: str
    rule: str
    stages: tuple[str, ...]
    check: Callable[[dict[str, Any]], dict[str, Any]]
    section: str
    statistics: Callable[[dict[str, Any], dict[str, Any]], dict[str, float]] | None = None
    judge: Callable[[dict[str, Any]], SeedVerdict] | None = None
    models: tuple[str, ...] = ()
    paper_value: str = ""
    test_families: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.paper not in PAPERS:
            raise ValueError(f"finding {self.id!r}: paper must be one of {sorted(PAPERS)}, got {self.paper!r}")
        if not re.fullmatch(PAPERS[self.paper][0] + r"[1-9][0-9]*", str(self.id)):
            raise ValueError(f"finding id {self.id!r} must be {PAPERS[self.paper][0]}<number> for {self.paper}")
        if not self.stages or not all(isinstance(s, str) and s for s in self.stages):
            raise ValueError(f"finding {self.id}: stages must name at least one stage")
        from invfast.transforms import FAMILIES

        if not isinstance(self.test_families, tuple) or not set(self.test_families) <= set(FAMILIES):
            raise ValueError(
                f"finding {self.id}: test_families must be a tuple of {', '.join(FAMILIES)}, got {self.test_families!r}"
            )

    @property
    def cite(self) -> str:
        """'Speicher et al. 2023, §4.1, Fig. 2-3'."""
        return f"{PAPERS[self.paper][1]}, {self.source}"

    def verdict(self, results: dict[str, Any], learned: dict[str, dict[str, Any]] | None = None) -> SeedVerdict:
        """The rule on one seed's results, after the learning precondition of each model in ``models`` (``learned``:
        model -> ``{ratio, learned}``, :func:`invfast.reproduce.sections.learning.under_trained`)."""
        from invfast.reproduce.rules.common import Missing

        pre = learning_preconditions(learned or {}, self.models)
        if self.judge is None:
            v = not_testable("no rule is implemented for this finding yet")
        else:
            try:
                v = self.judge(results)
            except Missing as e:
                v = not_testable(f"needs {e.args[0]}")
            except (ValueError, FloatingPointError) as e:  # numbers the statistic cannot be computed on
                v = not_testable(f"cannot compute the rule's statistics: {e}")
        failed = [p for p in pre if not p.met]
        if failed:
            why = "; ".join(
                [*(f"{p.name} ({p.detail})" if p.detail else p.name for p in failed), *([v.why] if v.why else [])]
            )
            return SeedVerdict(NOT_TESTABLE, v.criteria, (*pre, *v.preconditions), why)
        return SeedVerdict(v.verdict, v.criteria, (*pre, *v.preconditions), v.why)

    def evaluate(self, results: dict[str, Any], learned: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
        """The finding on one seed's results: ``status`` (the seed's verdict word), ``verdict`` (its criteria,
        preconditions and reason), ``check``'s description (``summary`` and the numbers behind the tables), with
        ``id``, ``claim``, ``source`` and ``rule``; *not run* when a stage it needs did not run."""
        head = {"id": self.id, "paper": self.paper, "source": self.cite, "claim": self.claim, "rule": self.rule}
        if any(n not in results for n in self.stages):
            return {**head, "status": NOT_RUN, "summary": "a stage it needs did not run in this configuration"}
        described = {k: v for k, v in self.check(results).items() if k not in ("status", "checks", "tests")}
        v = self.verdict(results, learned)
        return {**described, **head, "status": v.verdict, "verdict": v.to_dict(), "paper_value": self.paper_value}


def learning_preconditions(learned: dict[str, dict[str, Any]], models: tuple[str, ...]) -> list[Precondition]:
    """'<model> learned' for every model of ``learned`` (model -> ``{ratio, learned}``) that one of ``models``
    matches; a pattern of ``models`` that no model of ``learned`` matches fails ('no learning number'): a verdict
    never rests on a model whose learning was not checked."""
    out = [
        Precondition(f"{key} learned", bool(v["learned"]), f"{v['ratio']:.2f}× its baseline")
        for key, v in learned.items()
        if any(model_matches(p, key) for p in models)
    ]
    for p in models:
        if not any(model_matches(p, key) for key in learned):
            out.append(Precondition(f"{p}{'*' if p.endswith('-') else ''} learned", False, "no learning number"))
    return out
