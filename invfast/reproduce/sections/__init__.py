"""The report of ``invfast reproduce``, one module per section, as data: :data:`FINDINGS` lists the
papers' claims the report checks (each a :class:`Finding`: what it needs, how it is decided from one
seed's numbers, the statistics behind it) and :data:`SECTIONS` the parts of ``report.md`` /
``results.json`` in order (each a :class:`Section`). Adding a finding is adding a stage to
:data:`invfast.reproduce.stages.STAGES`, a module here with its Finding and Section, and one entry
in each list below. :mod:`invfast.reproduce.document` assembles the report from them.

(The general tables and plots of invariance results are :mod:`invfast.report`.)
"""

from __future__ import annotations

from invfast.reproduce.sections import (
    amortised,
    environment,
    fusion,
    invariances,
    learning,
    over_seeds,
    probes_table,
    summary,
    task_preferences,
    transfer,
)
from invfast.reproduce.sections.base import (
    DIRECTION,
    MODEL_ORDER,
    NOT,
    NOT_RUN,
    PARTLY,
    PRETRAINED,
    REPRODUCED,
    Finding,
    ReportView,
    Section,
    SeedRun,
    paired,
)

__all__ = [
    "FINDINGS",
    "SECTIONS",
    "Finding",
    "Section",
    "SeedRun",
    "ReportView",
    "REPRODUCED",
    "PARTLY",
    "DIRECTION",
    "NOT",
    "NOT_RUN",
    "MODEL_ORDER",
    "PRETRAINED",
    "paired",
]

#: the checked claims, in report order (their ids number them)
FINDINGS: tuple[Finding, ...] = (
    invariances.FINDING,
    task_preferences.FINDING,
    fusion.FINDING,
    transfer.FINDING,
    amortised.FINDING,
)

#: the parts of the report, in order
SECTIONS: tuple[Section, ...] = (
    summary.HEADER,
    over_seeds.SECTION,
    summary.SETUP,
    learning.SECTION,
    invariances.SECTION,
    probes_table.SECTION,
    transfer.SECTION,
    amortised.SECTION,
    summary.DETAILS,
    environment.SECTION,
)
