"""``invfast.compare``: models and layers side by side, paired significance and which invariance
predicts transfer, as one :class:`Comparison` (tables, JSON, pictures)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from invfast.comparison.inputs import Row, as_rows, check_comparable, setting_notes
from invfast.comparison.paired import Paired, check_test, paired_tests
from invfast.comparison.table import Table, check_metric
from invfast.comparison.transfer import (
    Transfer,
    as_transfer_scores,
    check_bootstrap,
    resolve_labels,
    transfer_correlations,
)

COMPARISON_FORMAT = "invfast.comparison/1"
PLOTS = ("radar", "heatmap", "significance", "correlation")


@dataclass
class Comparison:
    """Several models (or layers) measured on the same images and transforms, side by side.

    ``rows`` in table order (``labels``), ``table`` the mean scores per transform and family, ``paired``
    every paired test, ``transfer`` the invariance-vs-transfer correlations (None without probe scores),
    ``mismatch`` whether differences between the runs were overridden and which, ``notes`` settings that
    differ without making runs incomparable, ``images`` the image set(s) of the runs.
    Everything a table or picture needs is kept, so :meth:`from_json` gives back the same comparison
    (the per-image values stay in the runs' own result.json files).
    """

    rows: list[Row]
    table: Table
    paired: Paired
    transfer: Transfer | None = None
    mismatch: dict[str, Any] = field(default_factory=lambda: {"allowed": False, "differences": []})
    notes: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return [r.label for r in self.rows]

    # ------------------------------------------------------------------------------------------- tables
    def to_markdown(self, *, digits: int = 3, pictures: dict[str, str] | None = None) -> str:
        """The report: runs, comparability, Table 1 per metric with best and significance marks, ranks,
        the significance matrices, the transfer correlations; ``pictures`` (kind -> file) are linked."""
        from invfast.comparison.render import markdown

        return markdown(self, digits=digits, pictures=pictures)

    def to_rows(self, kind: str = "table") -> list[dict[str, Any]]:
        """Long-format rows: 'table' (row × column × metric: value, rank, best, significance), 'tests'
        (every paired test) or 'transfer' (every correlation)."""
        from invfast.comparison.render import long_rows

        return long_rows(self, kind)

    def to_frame(self, kind: str = "table") -> Any:
        """:meth:`to_rows` as a pandas DataFrame when pandas is installed, else the list of dicts."""
        rows = self.to_rows(kind)
        try:
            import pandas as pd
        except ImportError:
            return rows
        return pd.DataFrame(rows)

    def to_csv(self, path: str | os.PathLike | None = None, kind: str = "table") -> str:
        """CSV text of :meth:`to_rows` (written atomically to ``path`` when given)."""
        from invfast.comparison.render import csv_text
        from invfast.io import atomic_write_text

        text = csv_text(self.to_rows(kind))
        if path is not None:
            atomic_write_text(path, text)
        return text

    # --------------------------------------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": COMPARISON_FORMAT,
            "rows": [r.to_dict() for r in self.rows],
            "images": self.images,
            "mismatch": self.mismatch,
            "notes": self.notes,
            "table": self.table.to_dict(),
            "paired": self.paired.to_dict(),
            "transfer": None if self.transfer is None else self.transfer.to_dict(),
        }

    def to_json(self, path: str | os.PathLike | None = None, indent: int | None = 1) -> str:
        """Strict JSON (no NaN) of everything; written atomically to ``path`` when given."""
        from invfast.io import atomic_write_text

        text = json.dumps(self.to_dict(), indent=indent, allow_nan=False)
        if path is not None:
            atomic_write_text(path, text)
        return text

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Comparison:
        if not isinstance(d, dict) or d.get("format") != COMPARISON_FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(f"not an invfast comparison (format {got!r}, expected {COMPARISON_FORMAT!r})")
        return cls(
            rows=[Row.from_dict(r) for r in d["rows"]],
            table=Table.from_dict(d["table"]),
            paired=Paired.from_dict(d["paired"]),
            transfer=None if d.get("transfer") is None else Transfer.from_dict(d["transfer"]),
            mismatch=d.get("mismatch", {"allowed": False, "differences": []}),
            notes=list(d.get("notes", [])),
            images=list(d.get("images", [])),
        )

    @classmethod
    def from_json(cls, text_or_path: str | os.PathLike) -> Comparison:
        """A comparison from its JSON text, or from a file (``results.json`` of ``invfast compare``)."""
        s = os.fspath(text_or_path)
        if not s.lstrip().startswith("{"):
            with open(s, encoding="utf-8") as f:
                s = f.read()
        return cls.from_dict(json.loads(s))

    # ----------------------------------------------------------------------------------------- pictures
    def plot(self, kind: str = "heatmap", *, metric: str = "cosine", path: str | os.PathLike | None = None) -> Any:
        """A matplotlib Figure: 'radar' (one polygon per row, one radar per family), 'heatmap' (rows ×
        transforms), 'significance' (row i beats row j on k transforms) or 'correlation' (invariance ×
        task Spearman ρ, * where the bootstrap CI excludes 0 with enough models; needs probe scores). Saved to
        ``path`` if given."""
        from invfast import report

        check_metric(metric)
        if kind in ("radar", "heatmap"):
            fn = report.plot_radar if kind == "radar" else report.plot_heatmap
            return fn(self._as_results(), metric=metric, path=path)
        if kind == "significance":
            name = "paired t-test" if self.paired.test == "t" else "Wilcoxon signed-rank"
            return report.plot_significance_matrix(
                self.paired.matrix(metric, self.labels),
                self.labels,
                tested=self.paired.tested(metric, self.labels),
                title=f"significantly more invariant ({metric}; {name}, Holm, α = {self.paired.alpha:g})",
                path=path,
            )
        if kind == "correlation":
            if self.transfer is None:
                raise ValueError("the correlation picture needs probe scores: compare(results, probes=...)")
            cols = self.table.column_names
            names = [n for n, _ in self.table.columns] + [f"{f} (mean)" for f in self.table.families]
            return report.plot_correlation(
                self.transfer.matrix(metric, cols),
                names,
                list(self.transfer.scores.tasks),
                marks=self.transfer.marks(metric, cols),
                title=f"Spearman ρ across models: invariance ({'cosine' if metric == 'cosine' else '−distance'}) "
                "vs task score",
                path=path,
            )
        raise ValueError(f"kind must be one of {PLOTS}, got {kind!r}")

    def _as_results(self) -> list[Any]:
        """Light results holding the table's means, for the report's radar and heatmap."""
        from invfast.measure.result import InvarianceResult, TransformResult

        out = []
        for i, lab in enumerate(self.labels):
            trs = {}
            for j, (name, fam) in enumerate(self.table.columns):
                d, c = (float(self.table.values[m][i, j]) for m in ("distance", "cosine"))
                if d == d or c == c:  # not both NaN: the row measured it
                    trs[name] = TransformResult(
                        name=name,
                        family=fam,
                        mean_distance=None if d != d else d,
                        mean_cosine=None if c != c else c,
                        n_images=0,
                    )
            out.append(InvarianceResult(model=lab, transforms=trs, n_images=0))
        return out

    def __repr__(self) -> str:
        tr = "" if self.transfer is None else f", tasks={list(self.transfer.scores.tasks)}"
        return f"Comparison(rows={self.labels}, transforms={[n for n, _ in self.table.columns]}{tr})"


def compare(
    results: Any,
    probes: Any = None,
    *,
    layers: str = "all",
    allow_mismatch: bool = False,
    test: str = "t",
    alpha: float = 0.05,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> Comparison:
    """Models (or layers) side by side: Table 1 with best marks and ranks, paired significance between
    every two rows per transform, and (with ``probes``) which invariance predicts transfer.

    Args:
        results: InvarianceResult objects or saved results (``invfast measure`` folders / result.json
            paths), as a sequence or a mapping label -> result. A result with several layers gives one row
            per layer, labelled ``model [layer]`` (``layers='last'``: its deepest layer only).
        probes: downstream scores: ``{TASK: {MODEL: score | probe-json-path | probe-json-dict}}``,
            ``{"tasks": ..., "higher_is_better": {TASK: bool}}``, or ``MODEL:TASK=FILE`` strings (as
            ``invfast compare --probes``). MODEL is a row label or a model with one row.
        allow_mismatch: compare runs that differ in transforms, grid, protocol or images (recorded in
            ``mismatch``; pairs of runs on different images are not tested).
        test: the primary paired test, 't' (paired t-test) or 'wilcoxon' (signed-rank); both are computed.
        alpha: significance level after Holm–Bonferroni across each metric's (transform, pair) tests.
        n_boot, seed, level: bootstrap resamples of the models, their seed, and the CI level.

    Raises ValueError for fewer than 2 rows, duplicate labels, runs that are not comparable (naming the
    field and the two values), bad probe scores or a probe score for an unknown model.
    """
    check_test(test, alpha)
    check_bootstrap(n_boot, seed, level)
    rows = as_rows(results, layers=layers)
    diffs = check_comparable(rows, allow_mismatch=allow_mismatch)
    table = Table.from_results([r.label for r in rows], [r.result for r in rows])
    paired = paired_tests(rows, [n for n, _ in table.columns], test=test, alpha=alpha)
    transfer = None
    if probes is not None:
        models: dict[str, list[str]] = {}
        for r in rows:
            models.setdefault(r.model, []).append(r.label)
        scores = resolve_labels(as_transfer_scores(probes), table.labels, models)
        transfer = transfer_correlations(table, scores, n_boot=n_boot, seed=seed, level=level)
    return Comparison(
        rows=rows,
        table=table,
        paired=paired,
        transfer=transfer,
        mismatch={"allowed": bool(allow_mismatch), "differences": diffs},
        notes=setting_notes(rows),
        images=image_sets(rows),
    )


def image_sets(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The distinct image sets the rows were measured on, in first-seen order: ``{"id", "n", "measured", "rows":
    [labels]}`` (id and n, the files listed, from each result's metadata; measured: the readable images of the first
    row on it; None where a row has none)."""
    images: list[dict[str, Any]] = []
    seen: set[tuple[Any, Any]] = set()
    for r in rows:
        meta = r.result.meta if r.result is not None else None
        im = dict((meta or {}).get("images") or {})
        key = (im.get("id"), im.get("n"))
        if key not in seen:
            seen.add(key)
            measured = r.result.n_images if r.result is not None else None
            images.append({"id": im.get("id"), "n": im.get("n"), "measured": measured, "rows": []})
        next(x for x in images if (x["id"], x["n"]) == key)["rows"].append(r.label)
    return images


__all__ = ["Comparison", "compare"]
