"""The report of ``invfast reproduce``, one module per section, as data: :data:`SECTIONS` lists the parts
of ``report.md`` / ``results.json`` in order (each a :class:`Section`; a section whose stages did not run
is left out). The modules of the findings' sections also hold their checks and
:class:`~invfast.reproduce.finding.Finding` records, which :mod:`invfast.reproduce.findings` registers.
Adding a finding is adding its stages to :data:`invfast.reproduce.stages.STAGES`, a module here with its
Finding and Section, and one entry in :data:`SECTIONS` and in the registry.
:mod:`invfast.reproduce.document` assembles the report from them.

(The general tables and plots of invariance results are :mod:`invfast.report`.)
"""

from __future__ import annotations

from invfast.reproduce.sections import (
    amortised,
    categories,
    class_transfer,
    environment,
    equivariance,
    factors,
    invariances,
    irrelevant,
    learning,
    nested,
    over_seeds,
    probes_table,
    specialisation,
    summary,
    transformers,
)
from invfast.reproduce.sections.base import (
    DIRECTION,
    MODEL_ORDER,
    NOT,
    PARTLY,
    PRETRAINED,
    REPRODUCED,
    ReportView,
    Section,
    SeedRun,
    paired,
)

__all__ = [
    "SECTIONS",
    "Section",
    "SeedRun",
    "ReportView",
    "REPRODUCED",
    "PARTLY",
    "DIRECTION",
    "NOT",
    "MODEL_ORDER",
    "PRETRAINED",
    "paired",
]

#: the parts of the report, in order
SECTIONS: tuple[Section, ...] = (
    summary.HEADER,
    over_seeds.SECTION,
    summary.SETUP,
    learning.SECTION,
    invariances.SECTION,
    probes_table.SECTION,
    *specialisation.SECTIONS,
    factors.SECTION,
    equivariance.SECTION,
    *irrelevant.SECTIONS,
    class_transfer.SECTION,
    *categories.SECTIONS,
    nested.SECTION,
    amortised.SECTION,
    transformers.SECTION,
    summary.DETAILS,
    environment.SECTION,
)
