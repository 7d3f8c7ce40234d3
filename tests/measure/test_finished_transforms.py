"""Issue 59 (1): a finished transform's result leaves the live state for a file of its own, so the state (and
what every save rewrites) holds one transform's accumulators at most; a resumed run reads it back bit-equal."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from measure_helpers import Brightness, HFlip, Rot90, random_images

import invfast.measure.engine as engine
from invfast.io import DamagedFileError
from invfast.measure import measure_invariance
from invfast.measure.finished import finished_file
from invfast.measure.state import StateMismatchError
from invfast.models import create

TRANSFORMS = (Rot90(), Brightness(), HFlip())
KW = dict(grid_size=4, batch_size=5, layers="layer1,layer2", units="elements", equivariance=False, save_every=0)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return create("resnet18-cifar", width=4).eval()


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return random_images(15, size=8, seed=11)


@pytest.fixture(scope="module")
def uninterrupted(images):
    return measure_invariance(_model(), images, list(TRANSFORMS), **KW)


class _Stop(Exception):
    """A simulated kill, raised by a state save instead of saving."""


def _saves(monkeypatch, stop_when=None) -> list[dict]:
    """Every state the run saves, as saved (``stop_when(state)`` true: the save raises instead, a kill)."""
    seen: list[dict] = []
    real = engine.save_state

    def spy(path, state):
        if stop_when is not None and stop_when(state):
            raise _Stop
        real(path, state)
        seen.append({"finished": list(state.get("finished", [])), "live": sorted(state["transforms"]), "path": path})
        seen[-1]["bytes"] = os.path.getsize(path)

    monkeypatch.setattr(engine, "save_state", spy)
    return seen


def _equal(a, b) -> None:
    assert list(a.layers) == list(b.layers)
    for ly in a.layers:
        for name in a.layers[ly].transforms:
            ta, tb = a.layers[ly][name], b.layers[ly][name]
            for f in dataclasses.fields(ta):
                va, vb = getattr(ta, f.name), getattr(tb, f.name)
                if isinstance(va, torch.Tensor):
                    assert torch.equal(va.nan_to_num(-7.0), vb.nan_to_num(-7.0)), (ly, name, f.name)
                else:
                    assert va == vb, (ly, name, f.name)


def test_the_state_holds_the_accumulators_of_one_transform_at_most(images, tmp_path, monkeypatch, uninterrupted):
    saves = _saves(monkeypatch)
    r = measure_invariance(_model(), images, list(TRANSFORMS), state_path=tmp_path / "state.pt", **KW)
    _equal(uninterrupted, r)  # the results handed back are those of a run without a state
    assert max(len(s["live"]) for s in saves) == 1
    assert saves[-1]["finished"] == [t.name for t in TRANSFORMS] and saves[-1]["live"] == []
    assert {tuple(s["finished"]) for s in saves} == {
        (),
        ("rot90",),
        ("rot90", "brightness"),
        tuple(s.name for s in TRANSFORMS),
    }
    # hflip (2 views) scored after rot90 (4 views) and brightness: its saves are smaller than rot90's alone
    assert max(s["bytes"] for s in saves if s["live"] == ["hflip"]) < min(
        s["bytes"] for s in saves if s["live"] == ["rot90"]
    )
    for i in range(3):
        assert os.path.exists(finished_file(str(tmp_path / "state.pt"), i))


@pytest.mark.parametrize("where", ["mid-third", "between-file-and-state"])
def test_a_kill_after_finished_transforms_resumes_bit_equal_without_scoring_them_again(
    images, tmp_path, monkeypatch, uninterrupted, where
):
    state = tmp_path / "state.pt"
    if where == "mid-third":  # killed while hflip is scored, after rot90 and brightness finished

        def stop(s):
            return s.get("finished") == ["rot90", "brightness"] and s["transforms"].get("hflip", {}).get("next", 0) > 0

    else:  # killed after brightness's file was written, before the state that names it

        def stop(s):
            return "brightness" in s.get("finished", [])

    _saves(monkeypatch, stop)
    with pytest.raises(_Stop):
        measure_invariance(_model(), images, list(TRANSFORMS), state_path=state, **KW)
    monkeypatch.undo()
    resumed = measure_invariance(_model(), images, list(TRANSFORMS), state_path=state, **KW)
    _equal(uninterrupted, resumed)
    assert resumed.meta["resumed"]
    assert 0 < resumed.meta["pairs_computed"] <= 15 * 2  # at most hflip's pairs: nothing finished is scored again


def test_a_damaged_or_swapped_finished_file_is_refused_with_one_line(images, tmp_path, monkeypatch):
    state = str(tmp_path / "state.pt")
    _saves(monkeypatch, lambda s: s.get("finished") == ["rot90", "brightness"] and "hflip" in s["transforms"])
    with pytest.raises(_Stop):
        measure_invariance(_model(), images, list(TRANSFORMS), state_path=state, **KW)
    monkeypatch.undo()
    t0, t1 = finished_file(state, 0), finished_file(state, 1)
    good = open(t0, "rb").read()
    os.replace(t1, t0)  # brightness's result where rot90's belongs
    with pytest.raises(
        StateMismatchError, match=r"holds the result of transform 'brightness', not of transform 'rot90'"
    ):
        measure_invariance(_model(), images, list(TRANSFORMS), state_path=state, **KW)
    with open(t0, "wb") as f:
        f.write(good[: len(good) // 2])
    with pytest.raises(DamagedFileError) as e:
        measure_invariance(_model(), images, list(TRANSFORMS), state_path=state, **KW)
    assert "finished-transform file" in str(e.value) and "\n" not in str(e.value)
    os.remove(t0)  # gone: the state names a finished transform whose result is not there
    with pytest.raises(StateMismatchError, match=r"says transform 'rot90' finished, but its result file .* is gone"):
        measure_invariance(_model(), images, list(TRANSFORMS), state_path=state, **KW)
