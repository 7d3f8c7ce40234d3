"""The papers' findings that ``invfast reproduce`` tests, one :class:`~invfast.reproduce.finding.Finding`
record per finding of docs/findings.md, and how a run selects them.

:data:`FINDINGS` is the registry (in the order of docs/findings.md); :data:`SPEC_IDS` lists every finding id with its
title (every one has a record); :func:`select` turns ``--findings`` / ``--paper`` into the ids a run
tests, :func:`stages_for` into the stages it needs. A finding's verdict rule and check live beside
its report section (:mod:`invfast.reproduce.sections`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from invfast.reproduce.config_sections import DEFAULT_FINDINGS
from invfast.reproduce.finding import PAPERS, Finding, model_matches

__all__ = [
    "FINDINGS",
    "SPEC_IDS",
    "DEFAULT",
    "by_id",
    "check_ids",
    "select",
    "stages_for",
    "check_families",
    "listing",
    "resting_on",
]

#: every finding of docs/findings.md: id -> short title
SPEC_IDS: dict[str, str] = {
    "E1": "Spatial / Appearance models more invariant to their own family",
    "E2": "identity prefers Default/Spatial, pose Appearance, colour Spatial",
    "E3": "Spa+App(+Def) fusion most consistent over tasks",
    "E4": "invariances specialise during pretraining",
    "E5": "invariance predicts transfer (block structure)",
    "S1": "invariance matters more than size, architecture and classes",
    "S2": "invariance matters more than equivariance",
    "S3": "irrelevant features make harmful invariances",
    "S4": "relevance matters more than availability",
    "S5": "invariance transfers between classes",
    "S6": "some invariances are harder to acquire",
    "S7": "invariance transfers out of distribution",
    "S8": "a superset of invariances does not hurt, a subset does",
    "C1": "an amortised model moves its invariances smoothly with i",
    "C2": "one amortised model matches the specialists",
    "C3": "the learned i differs between recognition and regression",
    "C4": "amortised with learned i ≥ fixed policies downstream",
    "C5": "five invariances ≥ two",
    "C6": "one amortised model costs less than the specialists",
    "C7": "the same holds for transformers",
}


def _registry() -> tuple[Finding, ...]:
    from invfast.reproduce.sections import (
        amortised,
        categories,
        class_transfer,
        equivariance,
        factors,
        fusion,
        invariances,
        irrelevant,
        nested,
        specialisation,
        task_preferences,
        transformers,
    )

    found = (
        invariances.FINDING,
        task_preferences.FINDING,
        fusion.FINDING,
        *specialisation.FINDINGS,
        factors.FINDING,
        equivariance.FINDING,
        *irrelevant.FINDINGS,
        class_transfer.FINDING,
        *categories.FINDINGS,
        nested.FINDING,
        *amortised.FINDINGS,
        transformers.FINDING,
    )
    return tuple(sorted(found, key=lambda f: list(SPEC_IDS).index(f.id)))


#: the registry, in the order of docs/findings.md
FINDINGS: tuple[Finding, ...] = _registry()
#: the selection of a run without --findings / --paper (ReproduceConfig's run.findings default)
DEFAULT = DEFAULT_FINDINGS


def by_id(fid: str) -> Finding:
    """The record of finding ``fid``; ValueError naming the problem for any other id."""
    for f in FINDINGS:
        if f.id == fid:
            return f
    raise ValueError(f"unknown finding {fid!r}; SPEC §5 ids are {', '.join(SPEC_IDS)}")


def check_ids(ids: Sequence[str]) -> tuple[str, ...]:
    """``ids`` validated (each tested here, no repeats, at least one), in the order of docs/findings.md."""
    if isinstance(ids, str) or not isinstance(ids, (tuple, list)) or not ids:
        raise ValueError(f"findings must be a non-empty list of finding ids such as ('S2', 'S3'), got {ids!r}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"findings lists an id twice: {list(ids)}")
    for fid in ids:
        by_id(fid)
    return tuple(f.id for f in FINDINGS if f.id in ids)


def select(findings: str | None = None, paper: str | None = None) -> tuple[str, ...]:
    """The ids a run tests: ``findings`` ('S2,S3') or ``paper`` ('ericsson', 'speicher', 'chavhan', 'all')
    — at most one of them — else :data:`DEFAULT`."""
    if findings is not None and paper is not None:
        raise ValueError("give --findings or --paper, not both")
    if findings is not None:
        return check_ids([s.strip().upper() for s in findings.split(",") if s.strip()])
    if paper is not None:
        if paper == "all":
            return tuple(f.id for f in FINDINGS)
        if paper not in PAPERS:
            raise ValueError(f"--paper must be one of {', '.join([*PAPERS, 'all'])}, got {paper!r}")
        return tuple(f.id for f in FINDINGS if f.paper == paper)
    return DEFAULT


def check_families(ids: Sequence[str], test_transforms: str) -> None:
    """The findings ``ids`` that compare families of test transforms (their records' ``test_families``: E1 and
    C1) need ``test_transforms`` (``measurement.transforms``) to hold one transform of each: one ValueError naming them
    and what is missing."""
    from invfast.measure.selection import resolve_transforms

    have = {t.family for t in resolve_transforms(test_transforms)}
    users = [f for f in FINDINGS if f.id in ids and not set(f.test_families) <= have]
    if users:
        wanted = list(dict.fromkeys(fam for f in users for fam in f.test_families))
        missing = ", ".join(fam for fam in wanted if fam not in have)
        raise ValueError(
            f"measurement.transforms={test_transforms!r} has no {missing} transform; "
            f"{' and '.join(f.id for f in users)} compare{'s' if len(users) == 1 else ''} the {' and '.join(wanted)} "
            f"famil{'ies' if len(wanted) > 1 else 'y'}: add one of each, or select other findings (--findings)"
        )


def stages_for(ids: Iterable[str]) -> tuple[str, ...]:
    """The stages the findings ``ids`` read (the pipeline adds what those stages need)."""
    return tuple(dict.fromkeys(s for fid in ids for s in by_id(fid).stages))


def listing() -> list[str]:
    """One line per finding: id, title, where the paper shows it, whether a run tests it by default
    (``--list-findings``)."""
    return [f"{f.id:<3} {SPEC_IDS[f.id]} ({f.cite}{'; default' if f.id in DEFAULT else ''})" for f in FINDINGS]


def resting_on(model: str) -> tuple[str, ...]:
    """The findings whose verdicts rest on ``model`` (the records whose ``models`` match it)."""
    return tuple(f.id for f in FINDINGS if any(model_matches(p, model) for p in f.models))
