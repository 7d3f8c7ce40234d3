"""Issue 62: every command's --help reads as plain text: no docstring markup (``code``, :func:`name`)."""

import re

import pytest

from invfast.cli import COMMANDS, main, plain_text


def test_plain_text_drops_the_markup():
    assert plain_text("gets ``result.json`` from :func:`~invfast.measure.core.measure_invariance`") == (
        "gets result.json from measure_invariance"
    )
    assert plain_text(":class:`invfast.stats.FeatureStats` and ``a`` ``b``") == "invfast.stats.FeatureStats and a b"
    assert plain_text("a `single` quote stays") == "a `single` quote stays"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_has_no_docstring_markup(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and not re.search(r":(func|class|mod|meth|data|attr):`", out), out


def test_info_is_short_and_evidence_on_request(capsys):
    from invfast import dispatch

    assert main(["info"]) == 0
    short = capsys.readouterr().out
    assert main(["info", "--evidence"]) == 0
    full = capsys.readouterr().out
    rows = len(dispatch.table())
    assert len(short.splitlines()) <= 25 + rows  # one line per dispatch row
    assert "benchmarks/" not in short and "benchmarks/" in full and "--evidence" in short
    for e in dispatch.table():  # every row is there, with its decision
        assert any(line.split()[:2] == [e.op, e.device] for line in short.splitlines())
