"""Issue 62: every command's --help reads as plain text: no docstring markup (``code``, :func:`name`)."""

import re

import pytest

from invfast.cli import COMMANDS, _available, main, plain_text


def test_plain_text_drops_the_markup():
    assert plain_text("gets ``result.json`` from :func:`~invfast.measure.core.measure_invariance`") == (
        "gets result.json from measure_invariance"
    )
    assert plain_text(":class:`invfast.stats.FeatureStats` and ``a`` ``b``") == "invfast.stats.FeatureStats and a b"
    assert plain_text("a `single` quote stays") == "a `single` quote stays"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_has_no_docstring_markup(command, capsys):
    if command not in _available():
        pytest.skip(f"{command} is not in this checkout")
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out and not re.search(r":(func|class|mod|meth|data|attr):`", out), out
