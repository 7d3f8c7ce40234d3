"""A finding of the papers as data (:class:`Finding`): the registry
:data:`invfast.reproduce.findings.FINDINGS` lists one record per ``../shared/SPEC.md`` §5 id that
``invfast reproduce`` tests; the pipeline runs the stages the selected findings need and the report
decides each finding on every seed with its ``check``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Finding", "PAPERS", "NOT_RUN"]

#: paper key -> (id letter, the paper(s) as cited in the report)
PAPERS: dict[str, tuple[str, str]] = {
    "ericsson": ("E", "Ericsson et al. 2021"),
    "speicher": ("S", "Speicher et al."),
    "chavhan": ("C", "Chavhan et al. 2023"),
}
NOT_RUN = "not run"


@dataclass(frozen=True)
class Finding:
    """One headline result of the papers, checked on one seed's numbers.

    Attributes:
        id: its SPEC §5 id ('E1', 'S4', 'C3': the paper's letter and a number).
        paper: 'ericsson', 'speicher' or 'chavhan' (:data:`PAPERS`).
        source: where the paper shows it ('§4.1, Fig. 2-3').
        claim: the finding in one sentence.
        rule: the verdict rule in one sentence, as SPEC §5 states it (shown in the report).
        stages: the stages whose results ``check`` reads (the pipeline runs them and what they need).
        check: ``check(results) -> dict`` with at least ``status`` and ``summary``; ``results`` maps
            stage names to one seed's stage results.
        section: the name of the report section that shows its table or figure.
        statistics: ``statistics(results, finding) -> {name: value}``: the seed-level numbers behind it,
            aggregated over seeds in the report (None: none).
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

    def __post_init__(self) -> None:
        if self.paper not in PAPERS:
            raise ValueError(f"finding {self.id!r}: paper must be one of {sorted(PAPERS)}, got {self.paper!r}")
        if not re.fullmatch(PAPERS[self.paper][0] + r"[1-9][0-9]*", str(self.id)):
            raise ValueError(f"finding id {self.id!r} must be {PAPERS[self.paper][0]}<number> for {self.paper}")
        if not self.stages or not all(isinstance(s, str) and s for s in self.stages):
            raise ValueError(f"finding {self.id}: stages must name at least one stage")

    @property
    def cite(self) -> str:
        """'Speicher et al. 2023, §4.1, Fig. 2-3'."""
        return f"{PAPERS[self.paper][1]}, {self.source}"

    def evaluate(self, results: dict[str, Any]) -> dict[str, Any]:
        """The finding on one seed's results: ``check``'s dict with ``id``, ``claim``, ``source`` and
        ``rule``; *not run* when a stage it needs did not run."""
        head = {"id": self.id, "paper": self.paper, "source": self.cite, "claim": self.claim, "rule": self.rule}
        if any(n not in results for n in self.stages):
            return {**head, "status": NOT_RUN, "summary": "a stage it needs did not run in this configuration"}
        return {**self.check(results), **head}
