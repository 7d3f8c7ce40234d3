"""`invfast reproduce` is built on the library's public names: every name it imports from outside
invfast.reproduce is in its module's ``__all__`` (issue 60: it had grown on 29 private names)."""

import ast
import importlib
import pathlib

import invfast

ROOT = pathlib.Path(invfast.__file__).parent


def _imports_from_outside():
    for path in sorted((ROOT / "reproduce").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mod = node.module
                if mod.startswith("invfast") and not mod.startswith("invfast.reproduce"):
                    for alias in node.names:
                        yield path.relative_to(ROOT).as_posix(), mod, alias.name


def _private(imports):
    """The imports ``(file, module, name)`` of a name its module does not list in ``__all__`` (a submodule of a
    package is public by its own path)."""
    out = []
    for where, mod, name in imports:
        m = importlib.import_module(mod)
        submodule = hasattr(m, "__path__") and importlib.util.find_spec(f"{mod}.{name}") is not None
        if name not in getattr(m, "__all__", ()) and not submodule:
            out.append(f"{where}: from {mod} import {name}")
    return out


def test_reproduce_imports_only_public_names():
    private = _private(_imports_from_outside())
    assert not private, "\n".join(private)


def test_the_check_finds_a_private_import():
    imports = [
        ("a.py", "invfast.measure.state", "state_file"),  # defined there, not in its __all__
        ("b.py", "invfast.measure", "InvarianceResult"),  # a package's public name
        ("c.py", "invfast.synthetic", "families"),  # a submodule
    ]
    assert _private(imports) == ["a.py: from invfast.measure.state import state_file"]
