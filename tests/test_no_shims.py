"""0.4 removed every compatibility shim (issue 38); these scans keep them from coming back: no text promising
a later removal, no ``_compat`` / ``_renamed`` helper modules, and no module that re-exports, with a
``noqa: F401``, a private name defined in another invfast module (import private names from their home)."""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "invfast"
#: the texts a deprecation shim leaves behind
PROMISES = re.compile(r"removed in (the next|a later) release|will be removed", re.IGNORECASE)
#: helper modules that existed only to keep old names working
SHIM_MODULES = ("_compat.py", "_renamed.py")


def _sources() -> list[pathlib.Path]:
    return sorted(PKG.rglob("*.py"))


def _is_module(dotted: str, root: pathlib.Path) -> bool:
    """Whether ``dotted`` (``invfast.x.y``) names a module or package under ``root`` (a compiled one included)."""
    path = root.joinpath(*dotted.split("."))
    return (
        path.with_suffix(".py").is_file()
        or (path / "__init__.py").is_file()
        or any(path.parent.glob(path.name + ".*.so"))
    )


def _private_reexports(path: pathlib.Path, root: pathlib.Path = ROOT, public: bool = False) -> list[str]:
    """``from invfast.a import _b  # noqa: F401`` in ``path``: a private name of another module kept importable
    through this one (the noqa says this module does not use it); ``public``: any name, private or not."""
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text, str(path))):
        if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("invfast"):
            continue
        statement = "\n".join(lines[node.lineno - 1 : (node.end_lineno or node.lineno)])
        if not re.search(r"noqa:[^\n]*F401", statement):
            continue
        for alias in node.names:
            if (public or alias.name.startswith("_")) and not _is_module(f"{node.module}.{alias.name}", root):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {alias.name} from {node.module}")
    return found


def test_no_removal_promises():
    """An alias "removed in the next release" is removed in this one: none may survive."""
    hits = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in _sources()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if PROMISES.search(line)
    ]
    assert not hits, "deprecation shims left:\n" + "\n".join(hits)


def test_no_shim_modules():
    left = [name for name in SHIM_MODULES if (PKG / name).exists()]
    assert not left, f"compatibility modules left in invfast/: {left}"


def test_no_private_reexports():
    """Private names are imported from the module that defines them, never through an old path."""
    hits = [hit for p in _sources() for hit in _private_reexports(p)]
    assert not hits, "private names re-exported through another module:\n" + "\n".join(hits)


def test_scan_finds_a_private_reexport(tmp_path):
    """The scan itself: a planted re-export of a private name is found, a side-effect module import is not."""
    pkg = tmp_path / "invfast"
    pkg.mkdir()
    (pkg / "stats.py").write_text("_x = 1\n")
    (pkg / "_C.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    planted = pkg / "planted.py"
    planted.write_text("from invfast.stats import (  # noqa: F401\n    _x,\n)\nfrom invfast import _C  # noqa: F401\n")
    assert _private_reexports(planted, tmp_path) == ["invfast/planted.py:1: _x from invfast.stats"]


def _all_reexports(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """Names a plain module (not a package's ``__init__``) lists in ``__all__`` without defining them, imported
    from another invfast module: a name that moved, still offered at its old address."""
    tree = ast.parse(path.read_text(), str(path))
    imported: dict[str, str] = {}
    listed: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("invfast"):
            imported.update({a.asname or a.name: node.module or "" for a in node.names})
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                listed = [e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)]
    return [f"{path.relative_to(root)}: {name} from {imported[name]}" for name in listed if name in imported]


def test_no_module_offers_a_moved_name_in_its_all():
    """A package's ``__init__`` is its front door and gathers names; any other module lists only its own."""
    hits = [hit for p in _sources() if p.name != "__init__.py" for hit in _all_reexports(p)]
    assert not hits, "modules re-exporting names defined elsewhere:\n" + "\n".join(hits)


def test_no_plain_module_keeps_unused_imports_for_others():
    """Outside a package's ``__init__``, a name imported from another invfast module with ``noqa: F401`` (this
    module does not use it) is there only for old importers: import it from its home instead."""
    hits = [hit for p in _sources() if p.name != "__init__.py" for hit in _private_reexports(p, public=True)]
    assert not hits, "names kept importable through a module that does not use them:\n" + "\n".join(hits)


def _second_homes(init: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """Names a package's ``__init__`` offers in its ``__all__`` that it imports from outside the package."""
    package = ".".join(init.parent.relative_to(root).parts)
    tree = ast.parse(init.read_text(), str(init))
    offered: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            offered = {e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)}
    return [
        f"{init.relative_to(root)}: {alias.asname or alias.name} from {node.module}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("invfast")
        and node.module != package
        and not (node.module or "").startswith(package + ".")
        for alias in node.names
        if (alias.asname or alias.name) in offered
    ]


def test_a_package_offers_only_its_own_names():
    """A subpackage's ``__all__`` lists what lives inside it, not another package's names under a second home
    (issue 60: ``invfast.measure.load_checkpoint``, ``invfast.pretrain.ArraySource``, ...); the package root, the
    public front door, is exempt."""
    found = [hit for p in sorted(PKG.rglob("__init__.py")) if p.parent != PKG for hit in _second_homes(p)]
    assert found == [], "names offered by a package that is not their home:\n" + "\n".join(found)


def test_the_second_home_scan_finds_one(tmp_path):
    pkg = tmp_path / "invfast" / "measure"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from invfast.models.registry import load_checkpoint\nfrom invfast.measure.core import run\n"
        '__all__ = ["load_checkpoint", "run"]\n'
    )
    assert _second_homes(pkg / "__init__.py", tmp_path) == [
        "invfast/measure/__init__.py: load_checkpoint from invfast.models.registry"
    ]
