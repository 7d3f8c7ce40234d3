"""Evidence: intervals of a statistic (a percentile bootstrap over one seed's images, pairs or out-of-fold
predictions; a t interval over seeds) and the verdicts a rule gives from them (docs/findings.md).

``invfast reproduce`` decides every finding with these; they work on any numbers::

    from invfast.evidence import Criterion, difference_interval, judge
    iv = difference_interval(cos_model_a, cos_model_b)          # per-image scores on the same images
    judge([Criterion("A − B", iv, minimum=0.05)]).verdict      # 'reproduced' / 'contradicted' / 'inconclusive'
"""

from invfast.evidence.intervals import (
    DEFAULT_RESAMPLES,
    Interval,
    accuracy_statistic,
    bootstrap,
    difference_interval,
    mean_interval,
    r2_statistic,
    t_interval,
)
from invfast.evidence.verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    MIXED,
    NOT_TESTABLE,
    OVER_SEED_VERDICTS,
    REPRODUCED,
    SEED_VERDICTS,
    Criterion,
    OverSeeds,
    Precondition,
    SeedVerdict,
    judge,
    judge_over_seeds,
    not_testable,
)

__all__ = [
    "DEFAULT_RESAMPLES",
    "Interval",
    "accuracy_statistic",
    "bootstrap",
    "difference_interval",
    "mean_interval",
    "r2_statistic",
    "t_interval",
    "CONTRADICTED",
    "INCONCLUSIVE",
    "MIXED",
    "NOT_TESTABLE",
    "OVER_SEED_VERDICTS",
    "REPRODUCED",
    "SEED_VERDICTS",
    "Criterion",
    "OverSeeds",
    "Precondition",
    "SeedVerdict",
    "judge",
    "judge_over_seeds",
    "not_testable",
]
