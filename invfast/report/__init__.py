"""Tables and plots of invariance results: one model or several side by side.

``results`` everywhere is an :class:`invfast.measure.InvarianceResult` or a sequence of them
(one per model, measured on the same images and transforms for significance marks).
"""

from invfast.report.matrices import plot_correlation, plot_matrix, plot_significance_matrix
from invfast.report.plots import plot_curves, plot_depth, plot_heatmap, plot_radar
from invfast.report.tables import significance, to_frame, to_json, to_markdown, to_rows

__all__ = [
    "plot_correlation",
    "plot_curves",
    "plot_depth",
    "plot_heatmap",
    "plot_matrix",
    "plot_radar",
    "plot_significance_matrix",
    "significance",
    "to_frame",
    "to_json",
    "to_markdown",
    "to_rows",
]
