"""The runs a comparison sets side by side: loading saved ``measure`` results, one row per model (or
per measured layer), and the check that the runs are comparable.

Runs are comparable when they measured the same transforms, with the same parameter grids, under the
same protocol (and protocol seed), on the same image set: the image identity and count recorded by
``measure`` in ``meta['images']``. A run whose result holds several layers contributes one row per
layer, labelled ``model [layer]``; all its rows share its images and settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from invfast.measure.result import RESULT_FORMAT, InvarianceResult

RESULT_FILE = "result.json"
LAYER_CHOICES = ("all", "last")
_UNRECORDED = "<not recorded>"


@dataclass(frozen=True)
class Row:
    """One row of a comparison: a model, or one measured layer of a model.

    ``label`` is what tables show (``model`` or ``model [layer]``); ``run`` numbers the run the row
    came from (rows of one run share its images); ``source`` is the file it was loaded from, if any.
    """

    label: str
    model: str
    layer: str | None
    run: int
    source: str | None = None
    result: InvarianceResult | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "model": self.model, "layer": self.layer, "run": self.run, "source": self.source}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Row:
        return cls(label=d["label"], model=d["model"], layer=d.get("layer"), run=int(d["run"]), source=d.get("source"))


def load_result(path: str | os.PathLike) -> InvarianceResult:
    """The :class:`InvarianceResult` saved by ``invfast measure``: ``path`` is its folder or its ``result.json``.

    Raises ValueError naming the path when there is no result there or the file is not an invfast result.
    """
    p = os.fspath(path)
    f = os.path.join(p, RESULT_FILE) if os.path.isdir(p) else p
    if not os.path.exists(f):
        where = f"folder {p!r} holds no {RESULT_FILE}" if os.path.isdir(p) else f"no such file or folder {p!r}"
        raise ValueError(f"{where}; give an 'invfast measure' output folder or its {RESULT_FILE}")
    import json

    try:
        with open(f, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{f!r} is not readable JSON ({e}); give a result.json written by 'invfast measure'") from None
    if not isinstance(doc, dict) or doc.get("format") != RESULT_FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"{f!r} is not an invfast measurement result (format {got!r}, expected {RESULT_FORMAT!r})")
    try:  # every field is checked before it is used (invfast.measure.result_check)
        return InvarianceResult.from_dict(doc)
    except ValueError as e:
        raise ValueError(f"{f!r} is a damaged invfast result: {e}; measure again to rewrite it") from None


def _one(item: Any, what: str) -> tuple[InvarianceResult, str | None]:
    if isinstance(item, InvarianceResult):
        return item, None
    if isinstance(item, (str, os.PathLike)):
        return load_result(item), os.path.abspath(os.fspath(item))
    raise TypeError(f"{what} must be an InvarianceResult or the path of a saved result, got {type(item).__name__}")


def as_rows(results: Any, *, layers: str = "all") -> list[Row]:
    """The rows of a comparison.

    ``results``: a sequence of :class:`InvarianceResult` objects or saved results (folders or
    ``result.json`` paths), or a mapping label -> result/path (the label replaces the model name).
    ``layers``: 'all' (a per-layer result gives one row per layer) or 'last' (its deepest layer only).
    Raises ValueError for fewer than 2 rows or two rows with the same label.
    """
    if layers not in LAYER_CHOICES:
        raise ValueError(f"layers must be one of {LAYER_CHOICES}, got {layers!r}")
    if isinstance(results, (InvarianceResult, str, os.PathLike)):
        results = [results]
    items: list[tuple[str | None, Any]]
    if isinstance(results, Mapping):
        items = [(str(k), v) for k, v in results.items()]
    elif isinstance(results, Sequence):
        items = [(None, v) for v in results]
    else:
        raise TypeError(
            f"results must be a sequence of results/paths or a mapping label -> result, got {type(results).__name__}"
        )
    rows: list[Row] = []
    for run, (label, item) in enumerate(items):
        res, source = _one(item, f"results[{run}]")
        model = label if label is not None else res.model
        if res.layers and layers == "all":
            for name, lay in res.layers.items():
                rows.append(Row(f"{model} [{name}]", model, name, run, source, lay))
        else:
            rows.append(Row(model, model, res.layer if res.layers else None, run, source, res))
    if len(rows) < 2:
        raise ValueError(f"a comparison needs at least 2 models or layers, got {len(rows)}; give two or more runs")
    seen: dict[str, int] = {}
    for r in rows:
        if r.label in seen:
            raise ValueError(
                f"two runs are both labelled {r.label!r}; give each a distinct name (LABEL=PATH on the "
                "command line, a mapping label -> result in Python, or measure with --name)"
            )
        seen[r.label] = r.run
    return rows


# ------------------------------------------------------------------------------------------- comparability
def _run_fields(res: InvarianceResult) -> dict[str, Any]:
    """What must agree between two runs, by field name (values JSON-able)."""
    meta = res.meta or {}
    cfg = meta.get("config") or {}
    images = meta.get("images") or {}
    f: dict[str, Any] = {
        "mode": meta.get("mode", "transforms"),
        "transforms": sorted(res.transforms),
        "protocol": meta.get("protocol", cfg.get("protocol", _UNRECORDED)),
        "protocol_seed": cfg.get("protocol_seed", _UNRECORDED),
        "images.n": images.get("n", _UNRECORDED),
        "images.id": images.get("id", _UNRECORDED),
    }
    if f["mode"] == "transforms":
        f["grid_size"] = meta.get("grid_size", cfg.get("grid_size", _UNRECORDED))
        for name, t in res.transforms.items():
            f[f"grid of {name}"] = t.params
    return f


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and bool(torch.equal(a.double(), b.double()))
        )
    return a == b


def _show(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        flat = v.reshape(-1).tolist()
        head = ", ".join(f"{x:.4g}" for x in flat[:4])
        return f"{list(v.shape)} grid [{head}{', …' if len(flat) > 4 else ''}]"
    if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v):
        return repr(v[:12] + "…")  # a SHA-256
    return repr(v)


def differences(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Every way the runs behind ``rows`` differ from the first run: one dict per (field, run) with
    ``field``, ``a``/``b`` (the two row labels), ``a_value``/``b_value`` (as shown) and ``message``.
    A run without a recorded image identity counts as a difference (its images cannot be verified)."""
    runs: dict[int, Row] = {}
    for r in rows:
        runs.setdefault(r.run, r)
    fields: dict[int, dict[str, Any]] = {}
    for r in runs.values():
        if r.result is None:
            raise ValueError("rows without their results cannot be checked")
        fields[r.run] = _run_fields(r.result)
    first, *others = list(runs.values())
    out = []
    for r in runs.values():
        if fields[r.run]["images.id"] == _UNRECORDED:
            out.append(
                {
                    "field": "images.id",
                    "a": r.label,
                    "b": r.label,
                    "a_value": _UNRECORDED,
                    "b_value": _UNRECORDED,
                    "message": f"{r.label!r} has no recorded image identity "
                    "(meta['images']), so its images cannot be matched with the other runs'",
                }
            )
    ref = fields[first.run]
    for other in others:
        got = fields[other.run]
        for k in sorted(set(ref) | set(got), key=lambda k: (k.startswith("grid of"), k)):
            av, bv = ref.get(k, "<absent>"), got.get(k, "<absent>")
            if k.startswith("grid of") and (k not in ref or k not in got):
                continue  # a transform one run lacks: reported once under 'transforms'
            if (k == "images.id" and _UNRECORDED in (av, bv)) or _same(av, bv):  # unrecorded: reported above
                continue
            out.append(
                {
                    "field": k,
                    "a": first.label,
                    "b": other.label,
                    "a_value": _show(av),
                    "b_value": _show(bv),
                    "message": f"{k} differs: {first.label!r} has {_show(av)}, {other.label!r} has {_show(bv)}",
                }
            )
    return out


def check_comparable(rows: Sequence[Row], *, allow_mismatch: bool = False) -> list[dict[str, Any]]:
    """The differences between the runs (:func:`differences`); raises ValueError naming the first one
    unless ``allow_mismatch`` (then they are returned, to be recorded in the output)."""
    diffs = differences(rows)
    if diffs and not allow_mismatch:
        more = f" (and {len(diffs) - 1} more difference(s))" if len(diffs) > 1 else ""
        raise ValueError(
            f"runs are not comparable: {diffs[0]['message']}{more}; compare runs of the same transforms, "
            "grid, protocol and images, or pass --allow-mismatch (allow_mismatch=True) to compare them "
            "anyway, recorded in the output"
        )
    return diffs


def paired_runs(rows: Sequence[Row]) -> dict[tuple[int, int], str | None]:
    """(run a, run b) -> None when their per-image values refer to the same images in the same order
    (same recorded image identity and count), else the reason they cannot be paired."""
    info: dict[int, tuple[Any, Any]] = {}
    for r in rows:
        images = (r.result.meta or {}).get("images") or {} if r.result is not None else {}
        info.setdefault(r.run, (images.get("id"), images.get("n")))
    out: dict[tuple[int, int], str | None] = {}
    for a in info:
        for b in info:
            ia, ib = info[a], info[b]
            if a == b:
                out[a, b] = None
            elif ia[0] is None or ib[0] is None:
                out[a, b] = "image identity not recorded"
            elif ia != ib:
                out[a, b] = "different image sets"
            else:
                out[a, b] = None
    return out


def setting_notes(rows: Sequence[Row]) -> list[str]:
    """Measurement settings that differ between runs without making them incomparable (crop, resize,
    normalisation, precision, shrinkage ...), one line each: worth knowing when reading the table."""
    keys = ("crop", "resize", "normalize", "dtype", "shrinkage", "eps", "n_images", "fingerprint_content")
    runs: dict[int, Row] = {}
    for r in rows:
        runs.setdefault(r.run, r)
    vals = {r.label: ((r.result.meta or {}).get("config") or {}) for r in runs.values() if r.result is not None}
    notes = []
    for k in keys:
        seen = {lab: cfg.get(k, _UNRECORDED) for lab, cfg in vals.items()}
        if len({repr(v) for v in seen.values()}) > 1:
            notes.append(f"{k}: " + ", ".join(f"{lab} {v!r}" for lab, v in seen.items()))
    return notes
