"""The reproduce stage cache: a finished stage's record carries the SHA-256 of its result, and a record that is
damaged or edited is refused naming its file (it never decides a finding); a record of an earlier invfast
(no checksum) is recomputed."""

from __future__ import annotations

import json

import pytest

from invfast.io import DamagedFileError
from invfast.reproduce.pipeline import StageCache, result_digest


def _cache_with_one_stage(tmp_path):
    cache = StageCache(str(tmp_path))
    calls = []
    result = {"accuracy": [0.5, 0.25], "n": 3, "label": "x"}
    assert cache.run("s3-evaluate", lambda: (calls.append(1), result)[1]) == result
    return cache, calls, result


def test_a_record_round_trips_and_is_not_recomputed(tmp_path):
    cache, calls, result = _cache_with_one_stage(tmp_path)
    rec = json.loads(open(cache.path("s3-evaluate")).read())
    assert rec["sha256"] == result_digest(result) and rec["name"] == "s3-evaluate"
    again = StageCache(str(tmp_path))
    assert again.run("s3-evaluate", lambda: pytest.fail("a valid record must not be recomputed")) == result
    assert again.timings["s3-evaluate"]["cached"] and calls == [1]


def _edit(path, how):
    text = open(path).read()
    rec = json.loads(text)
    if how == "truncated":
        return text[: len(text) // 2]
    if how == "empty":
        return ""
    if how == "a list":
        return json.dumps([rec])
    if how == "no elapsed_s":
        rec.pop("elapsed_s")
    if how == "negative elapsed_s":
        rec["elapsed_s"] = -1
    if how == "NaN":
        rec["result"]["accuracy"][0] = float("nan")
        return json.dumps(rec)
    if how == "edited value":
        rec["result"]["accuracy"][0] = 0.9
    if how == "another stage's":
        rec["name"] = "s7-sensitivity"
    return json.dumps(rec)


@pytest.mark.parametrize(
    "how, words",
    [
        ("truncated", "is not valid JSON"),
        ("empty", "is not valid JSON"),
        ("a list", "holds a JSON list"),
        ("no elapsed_s", "lacks elapsed_s"),
        ("negative elapsed_s", "has elapsed_s -1"),
        ("NaN", "NaN or Infinity"),
        ("edited value", "does not match its checksum"),
        ("another stage's", "is the record of stage 's7-sensitivity'"),
    ],
)
def test_a_damaged_or_edited_record_is_refused_naming_the_file(tmp_path, how, words):
    cache, _, _ = _cache_with_one_stage(tmp_path)
    path = cache.path("s3-evaluate")
    text = _edit(path, how)
    with open(path, "w") as f:
        f.write(text)
    with pytest.raises(DamagedFileError) as e:
        StageCache(str(tmp_path)).run("s3-evaluate", lambda: pytest.fail("refused, not recomputed"))
    msg = str(e.value)
    assert words in msg and path in msg and "delete it to recompute the stage" in msg and "\n" not in msg


def test_a_record_without_a_checksum_is_recomputed(tmp_path):
    cache, _, result = _cache_with_one_stage(tmp_path)
    path = cache.path("s3-evaluate")
    rec = json.loads(open(path).read())
    rec.pop("sha256")
    rec["result"]["accuracy"][0] = 0.9  # unverifiable: never read as evidence
    with open(path, "w") as f:
        json.dump(rec, f)
    again = StageCache(str(tmp_path))
    assert again.run("s3-evaluate", lambda: result) == result and not again.timings["s3-evaluate"]["cached"]
    assert json.loads(open(path).read())["sha256"] == result_digest(result)


def test_a_record_names_the_code_that_computed_it(tmp_path):
    from invfast.reproduce.provenance import code_version

    cache, _, _ = _cache_with_one_stage(tmp_path)
    rec = json.loads(open(cache.path("s3-evaluate")).read())
    assert rec["computed_by"] == code_version() and rec["computed_by"].startswith("invfast ")
    assert cache.timings["s3-evaluate"]["computed_by"] == code_version()
    again = StageCache(str(tmp_path))
    again.run("s3-evaluate", lambda: pytest.fail("cached"))
    assert again.timings["s3-evaluate"]["computed_by"] == code_version()


def test_stages_from_other_code_are_named_and_the_others_are_not():
    from invfast.reproduce.provenance import describe, stale_line, stale_stages

    now = describe("0.4.0", "abc1234")
    timings = {
        "a": {"elapsed_s": 1.0, "cached": True, "computed_by": now},
        "b": {"elapsed_s": 1.0, "cached": True, "computed_by": describe("0.4.0", "0ld0000")},
        "c": {"elapsed_s": 1.0, "cached": True},  # a record written before records were stamped
        **{f"d{i}": {"elapsed_s": 1.0, "cached": True, "computed_by": None} for i in range(7)},
    }
    groups = stale_stages(timings, now)
    assert groups == {"invfast 0.4.0, commit 0ld0000": ["b"], "not recorded": ["c", *[f"d{i}" for i in range(7)]]}
    line = stale_line(timings, now)
    assert "commit 0ld0000: 1 (b)" in line and "not recorded: 8 (c, d0, d1, d2, d3, d4 and 2 more)" in line
    assert "\n" not in line and now in line
    assert stale_line({"a": timings["a"]}, now) is None
