"""Models and layers side by side: :func:`invfast.compare` and ``invfast compare``.

The function is ``invfast.compare`` (``ivf.compare(results, probes=None)``); this subpackage is
``invfast.comparison`` (the name ``invfast.compare`` is the function, not a module):

- :mod:`~invfast.comparison.inputs`: saved results -> rows (one per model or layer), comparability checks;
- :mod:`~invfast.comparison.table`: Table 1 across rows (per transform and family), best marks, ranks;
- :mod:`~invfast.comparison.paired`: paired t / Wilcoxon tests per transform, Holm–Bonferroni;
- :mod:`~invfast.comparison.transfer`: probe scores, Spearman/Kendall with bootstrap CIs across models;
- :mod:`~invfast.comparison.core`: :func:`compare` and :class:`Comparison` (JSON, frames, pictures);
- :mod:`~invfast.comparison.render`: the markdown report and CSV rows;
- :mod:`~invfast.comparison.output`: the output folder; :mod:`~invfast.comparison.cli`: ``invfast compare``.
"""

from invfast.comparison.core import COMPARISON_FORMAT, Comparison, compare
from invfast.comparison.inputs import Row, load_result
from invfast.comparison.output import write_comparison
from invfast.comparison.paired import PairedTest, holm, paired_t, signed_rank
from invfast.comparison.transfer import TransferScores, correlate, probe_score

__all__ = [
    "COMPARISON_FORMAT",
    "Comparison",
    "PairedTest",
    "Row",
    "TransferScores",
    "compare",
    "correlate",
    "holm",
    "load_result",
    "paired_t",
    "probe_score",
    "signed_rank",
    "write_comparison",
]
