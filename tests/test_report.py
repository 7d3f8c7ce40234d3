"""invfast.report: Table-1 markdown, rows/frames, JSON, significance marks, plots."""

from __future__ import annotations

import json

import pytest
import torch
from measure_helpers import Brightness, HFlip, Rot90, Rot90Averaged, random_images, small_net

from invfast import most_invariant, report
from invfast.measure import InvarianceResult, TransformResult, measure_invariance


def _fake(model: str, cos: dict[str, float], n: int = 400, seed: int = 0, spread: float = 0.05) -> InvarianceResult:
    g = torch.Generator().manual_seed(seed)
    fams = {"rot90": "spatial", "hflip": "spatial", "brightness": "appearance", "hue": "appearance"}
    trs = {}
    for name in ["brightness", "rot90", "hue", "hflip"]:  # appearance first on purpose: tables reorder
        per = (cos[name] + spread * torch.randn(n, generator=g, dtype=torch.float64)).clamp(-1, 1)
        trs[name] = TransformResult(
            name=name,
            family=fams[name],
            mean_distance=10 * (1 - cos[name]),
            mean_cosine=float(per.mean()),
            n_images=n,
            params=torch.arange(3.0).double(),
            identity=torch.tensor([True, False, False]),
            distance=torch.ones(3).double(),
            cosine=torch.full((3,), cos[name]).double(),
            per_image_cosine=per,
            per_image_distance=10 * (1 - per),
        )
    return InvarianceResult(model=model, transforms=trs, n_images=n)


@pytest.fixture(scope="module")
def pair():
    a = _fake("A", {"rot90": 0.9, "hflip": 0.5, "brightness": 0.5, "hue": 0.5}, seed=1)
    b = _fake("B", {"rot90": 0.5, "hflip": 0.52, "brightness": 0.8, "hue": 0.5}, seed=2)
    return a, b


def test_markdown_layout_and_marks(pair):
    md = report.to_markdown(list(pair))
    lines = md.splitlines()
    header = [ln for ln in lines if ln.startswith("| model")][0]
    assert [c.strip() for c in header.strip("|").split("|")] == ["model", "rot90", "hflip", "brightness", "hue"]
    fam = [ln for ln in lines if ln.startswith("| *family*")][0]
    assert [c.strip() for c in fam.strip("|").split("|")] == ["*family*", "*spatial*", "", "*appearance*", ""]
    cos_rows = [ln for ln in lines if ln.startswith("| A") or ln.startswith("| B")][2:]
    a_cells = [c.strip() for c in cos_rows[0].strip("|").split("|")]
    b_cells = [c.strip() for c in cos_rows[1].strip("|").split("|")]
    assert a_cells[1].endswith("•") and not b_cells[1].endswith("•")  # A clearly wins rot90
    assert b_cells[3].endswith("•") and not a_cells[3].endswith("•")  # B clearly wins brightness
    assert not a_cells[2].endswith("•") and not b_cells[2].endswith("•")  # 0.50 vs 0.52 with n=400: not significant
    assert "•" not in "".join(lines[: lines.index("**standardised cosine similarity (1 = invariant)**")])


def test_significance_matches_most_invariant(pair):
    best = report.significance(list(pair))
    for name in ("rot90", "hflip", "brightness", "hue"):
        expect = most_invariant({r.model: r[name].per_image_cosine for r in pair}, bounds=(-2, 2))
        assert best[name] == expect
    assert best["rot90"] == "A" and best["brightness"] == "B" and best["hue"] is None


def test_rows_frame_json(pair, tmp_path):
    rows = report.to_rows(list(pair))
    assert len(rows) == 8 and {r["model"] for r in rows} == {"A", "B"}
    r0 = next(r for r in rows if r["model"] == "A" and r["transform"] == "rot90")
    assert (
        r0["best"] is True and r0["family"] == "spatial" and r0["cosine"] == pytest.approx(pair[0]["rot90"].mean_cosine)
    )
    frame = report.to_frame(list(pair))
    try:
        import pandas  # noqa: F401

        assert list(frame["transform"])[:4] == [r["transform"] for r in rows][:4]
    except ImportError:
        assert frame == rows
    text = report.to_json(list(pair), tmp_path / "r.json")
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc == json.loads(text) and doc["best"]["rot90"] == "A"
    assert InvarianceResult.from_dict(doc["results"][0]).model == "A"


def test_bad_report_input(pair):
    with pytest.raises(ValueError, match="distinct model names"):
        report.to_markdown([pair[0], pair[0]])
    with pytest.raises(TypeError, match="InvarianceResult"):
        report.to_markdown([{"model": "x"}])
    with pytest.raises(ValueError, match="no results"):
        report.to_rows([])
    with pytest.raises(ValueError, match="metric"):
        report.plot_heatmap(list(pair), metric="accuracy")


def test_plots_write_files(pair, tmp_path):
    figs = {
        "curves": report.plot_curves(list(pair), path=tmp_path / "c.png"),
        "radar": report.plot_radar(list(pair), path=tmp_path / "r.png", metric="distance"),
        "heatmap": report.plot_heatmap(list(pair), path=tmp_path / "h.png"),
    }
    for name, fig in figs.items():
        assert fig.axes, name
    assert len(figs["curves"].axes[0].lines) >= 2
    assert {ax.get_title().split(" ")[0] for ax in figs["radar"].axes} == {"spatial", "appearance"}
    for f in ("c.png", "r.png", "h.png"):
        assert (tmp_path / f).stat().st_size > 1000


def test_real_measurement_marks_the_invariant_model():
    x = random_images(60, seed=11)
    tfs = [Rot90(), HFlip(), Brightness()]
    inv = measure_invariance(Rot90Averaged(small_net(seed=3, dim=6)), x, tfs, grid_size=3, batch_size=20, name="avg")
    plain = measure_invariance(small_net(seed=3, dim=6), x, tfs, grid_size=3, batch_size=20, name="plain")
    assert report.significance([inv, plain])["rot90"] == "avg"
    md = inv.to_markdown()
    assert "| avg |" in md and "•" not in md  # one model: nothing to compare
    assert isinstance(inv.plot("heatmap"), object)


@pytest.mark.parametrize(
    "shrinkage, says", [("trace", "collapses towards 0"), ("ledoit-wolf", "Ledoit–Wolf shrinkage")]
)
def test_reference_line_says_what_n_le_d_does_under_the_shrinkage_used(shrinkage, says):
    r = _fake("A", {"rot90": 0.9, "hflip": 0.5, "brightness": 0.5, "hue": 0.5})
    r.stats = {"n": 100, "dim": 512, "shrinkage": shrinkage, "lambda": 0.002}
    line = [ln for ln in report.to_markdown([r]).splitlines() if ln.startswith("Reference statistics of A")][0]
    assert "N/D = 0.20" in line and says in line
    r.stats = {"n": 1000, "dim": 512, "shrinkage": shrinkage, "lambda": 0.002}
    line = [ln for ln in report.to_markdown([r]).splitlines() if ln.startswith("Reference statistics of A")][0]
    assert "N ≤ D" not in line


def test_curves_share_one_scale_and_show_a_two_value_grid_as_points(pair, tmp_path):
    """Issue 62: panels are compared, so they share the y-scale; a flip's grid (off, on) has nothing between its
    two values, so it is drawn as points, not a line."""
    import dataclasses

    a, b = pair
    flip = dataclasses.replace(
        a["hflip"],
        params=torch.tensor([0.0, 1.0]).double(),
        identity=torch.tensor([True, False]),
        cosine=torch.tensor([1.0, 0.2]).double(),
        distance=torch.ones(2).double(),
    )
    one = InvarianceResult(model="A", transforms={**a.transforms, "hflip": flip}, n_images=a.n_images)
    fig = report.plot_curves([one], path=tmp_path / "c.png")
    panels = {ax.get_title().split(" ")[0]: ax for ax in fig.axes if ax.get_visible()}
    assert len({ax.get_ylim() for ax in panels.values()}) == 1  # one y-scale
    flip_lines = [ln for ln in panels["hflip"].lines if len(ln.get_xdata()) == 2]
    assert flip_lines and all(ln.get_linestyle() == "None" for ln in flip_lines)
    assert all(ln.get_linestyle() == "-" for ln in panels["rot90"].lines if len(ln.get_xdata()) == 3)
