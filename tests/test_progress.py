"""Progress: counts views (images x parameters), plain lines without escape codes when stderr is not a terminal."""

from __future__ import annotations

import io

import torch
from measure_helpers import HFlip, Rot90, small_net

from invfast.measure import measure_invariance
from invfast.runtime.progress import LineBar, bar


def test_line_bar_prints_plain_lines_with_eta():
    out = io.StringIO()
    b = LineBar(total=200, desc="measure", unit="view", every=0.0, file=out)
    b.update(50)
    b.update(50)
    b.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.strip().splitlines()
    assert lines[0].startswith("measure: 25% (50/200 view") and "ETA" in lines[0]
    assert lines[-1].startswith("measure: 50% (100/200 view") and lines[-1].rstrip().endswith(" s")


def test_line_bar_eta_follows_the_recent_rate(monkeypatch):
    """Work that slows down: 100 units in 10 s, then 10 in the next 10 s. The mean rate (5.5/s) would promise the
    remaining 890 in under 3 minutes; at the recent 1/s they take 890 s, which the ETA says."""
    clock = [0.0]
    monkeypatch.setattr("invfast.runtime.progress.time.monotonic", lambda: clock[0])
    out = io.StringIO()
    b = LineBar(total=1000, desc="probe", unit="fit", every=5.0, file=out)
    clock[0] = 10.0
    b.update(100)
    clock[0] = 20.0
    b.update(10)
    lines = out.getvalue().strip().splitlines()
    assert "ETA 1.5 min" in lines[0]  # 900 at 10/s
    assert "5.5 fit/s" in lines[1] and "ETA 14.8 min" in lines[1]  # the mean shown, the recent 1/s for the ETA


def test_bar_off_the_terminal_is_a_line_bar(capsys):
    assert isinstance(bar(10, desc="x"), LineBar)  # pytest's captured stderr is not a terminal
    assert type(bar(10, disable=True)).__name__ == "_Off"


def test_measure_progress_counts_views(capsys, monkeypatch):
    """The ETA is over views: the statistics pass (N) plus N x P per transform; the log has plain lines."""
    monkeypatch.setenv("INVFAST_PROGRESS_SECONDS", "0")
    x = torch.rand(6, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    measure_invariance(small_net(dim=4), x, [Rot90(), HFlip()], grid_size=4, batch_size=3, progress=True)
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    last = [ln for ln in err.splitlines() if ln.startswith(("measure", "rot90", "hflip", "reference"))][-1]
    assert "100% (42/42 view" in last  # 6 statistics + 6 x 4 rot90 + 6 x 2 hflip


def test_track_yields_every_item_and_reports_the_count_in_plain_lines(capsys):
    from invfast.runtime.progress import track

    items = list(range(7))
    assert list(track(iter(items), total=7, desc="folds", unit="fold")) == items
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err and "folds: 100% (7/7 fold" in err
    assert list(track(items, desc="quiet", disable=True)) == items and capsys.readouterr().err == ""


def test_no_module_uses_tqdm_directly():
    """Every progress display goes through invfast.runtime.progress, so logs never get tqdm's escape codes."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "invfast"
    users = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name != "progress.py" and "tqdm" in p.read_text(encoding="utf-8")
    ]
    assert users == [], users


def test_every_bar_method_invfast_calls_exists_on_every_kind_of_bar():
    """The bars off a terminal and switched off answer every tqdm method that invfast's code calls on a bar."""
    import pathlib
    import re

    from invfast.runtime.progress import _Off

    root = pathlib.Path(__file__).resolve().parents[1] / "invfast"
    called = {m for p in root.rglob("*.py") for m in re.findall(r"\bbar\.(\w+)\(", p.read_text(encoding="utf-8"))}
    assert {"update", "close"} <= called
    for kind in (LineBar(total=3, file=io.StringIO()), _Off()):
        missing = [m for m in sorted(called) if not callable(getattr(kind, m, None))]
        assert missing == [], (type(kind).__name__, missing)
    b = LineBar(total=3, every=0.0, file=io.StringIO())
    b.set_postfix(loss="0.5000", img_s="12")
    b.update(1)
    assert "loss=0.5000, img_s=12" in b.file.getvalue()
