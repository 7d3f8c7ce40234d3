"""The findings' rules as code (docs/findings.md): one ``judge_<id>(results) -> SeedVerdict`` per finding, in a
module per paper (:mod:`~invfast.reproduce.rules.ericsson`, :mod:`~invfast.reproduce.rules.speicher`,
:mod:`~invfast.reproduce.rules.chavhan`), built from :mod:`invfast.evidence` intervals on the per-unit numbers
the stages keep (:mod:`~invfast.reproduce.rules.common`). Each finding's record
(:class:`invfast.reproduce.finding.Finding`) names its judge."""
