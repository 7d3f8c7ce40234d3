"""`invfast reproduce` is built on the library's public names: every name it imports from outside
invfast.reproduce is in its module's ``__all__`` (issue 60: it had grown on 29 private names)."""

import ast
import importlib
import pathlib

import invfast

ROOT = pathlib.Path(invfast.__file__).parent


#: the root's own modules (invfast/*.py), counted as one package: they import the subpackages' names
ROOT_MODULES = "(root)"


def _files(package: str) -> list[pathlib.Path]:
    return sorted(ROOT.glob("*.py")) if package == ROOT_MODULES else sorted((ROOT / package).rglob("*.py"))


def _outside(mod: str, package: str) -> bool:
    """Whether module ``mod`` lies outside ``package`` (for the root's modules: in a subpackage)."""
    if not mod.startswith("invfast."):
        return False
    if package == ROOT_MODULES:
        return (ROOT / mod.split(".")[1] / "__init__.py").is_file()
    return not (mod + ".").startswith(f"invfast.{package}.")


def _imports_from_outside(package="reproduce"):
    """``(file, module, name)`` of every ``from invfast.X import name`` in ``invfast/<package>`` with X outside it."""
    for path in _files(package):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _outside(node.module, package):
                for alias in node.names:
                    yield path.relative_to(ROOT).as_posix(), node.module, alias.name


def _private(imports):
    """The imports ``(file, module, name)`` of a name its module does not list in ``__all__`` (a submodule of a
    package is public by its own path, a dunder such as ``__version__`` by convention)."""
    out = []
    for where, mod, name in imports:
        m = importlib.import_module(mod)
        submodule = hasattr(m, "__path__") and importlib.util.find_spec(f"{mod}.{name}") is not None
        dunder = name.startswith("__") and name.endswith("__")
        if name not in getattr(m, "__all__", ()) and not submodule and not dunder:
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


def test_each_package_s_lines_and_private_imports():
    """The table issue 60 asked for, printed (``pytest -s``): each package's lines of Python and its imports of
    names other packages keep private — none from any package (each module's ``__all__`` declares what the
    others may take)."""
    rows = []
    for pkg in [ROOT_MODULES, *sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())]:
        lines = sum(len(f.read_text(encoding="utf-8").splitlines()) for f in _files(pkg))
        rows.append((pkg, lines, len(_private(_imports_from_outside(pkg)))))
    print(f"\n{'package':<12} {'lines':>7} {'private imports':>16}")
    for pkg, lines, private in rows:
        print(f"{pkg:<12} {lines:>7} {private:>16}")
    table = {pkg: private for pkg, _, private in rows}
    assert len(table) >= 10
    offenders = {pkg: _private(_imports_from_outside(pkg)) for pkg, n in table.items() if n}
    assert not offenders, offenders
