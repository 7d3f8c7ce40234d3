"""The package's module graph, read from the source: no import cycles (function-local imports count),
and ``invfast.ops`` at the bottom (it imports nothing above it)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "invfast"
#: what the compiled-op layer may import besides itself: the loader, the backend switch, its dispatch table and plain
#: constants
OPS_MAY_IMPORT = {
    "invfast._loader",
    "invfast.backend",
    "invfast.dispatch",
    "invfast.constants",
    "invfast._validate",
    "invfast._C",
}


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _resolve(name: str, mods: dict[str, pathlib.Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """module -> the invfast modules it imports anywhere in its source (``from a import b`` names
    ``a.b`` when b is a module); edges to a module's own parent packages are left out, since
    importing a submodule always runs them."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                if not t.startswith("invfast"):
                    continue
                r = _resolve(t, mods)
                if r and r != mod and not mod.startswith(r + "."):
                    out.add(r)
        graph[mod] = out
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycle():
    cycle = _find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_ops_is_the_bottom_layer():
    graph = import_graph()
    bad = {
        m: sorted(t for t in deps if not (t == "invfast.ops" or t.startswith("invfast.ops.") or t in OPS_MAY_IMPORT))
        for m, deps in graph.items()
        if m == "invfast.ops" or m.startswith("invfast.ops.")
    }
    bad = {m: d for m, d in bad.items() if d}
    assert not bad, f"invfast.ops imports layers above it: {bad}"


def test_the_checker_sees_cycles():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


#: functions allowed over the 60-line budget, with why: (module, qualified name) -> (most lines, reason)
LONG_BY_DESIGN = {
    ("measure/cli.py", "add_arguments"): (170, "argparse declarations: the command's options as one flat list"),
    ("pretrain/cli.py", "add_arguments"): (105, "argparse declarations: the command's options as one flat list"),
    ("synthetic/cli.py", "add_arguments"): (61, "argparse declarations: the command's options as one flat list"),
    ("transforms/builtin.py", "_records"): (
        247,
        "data: the table of the 18 built-in records, one entry each (with their published and DALI versions)",
    ),
}
#: functions over the budget still to be split, each held at its length (empty since 0.4: add one only with a reason)
TO_SPLIT: dict[tuple[str, str], int] = {}
FUNCTION_BUDGET = 60


def _function_lengths() -> dict[tuple[str, str], int]:
    """(module under invfast/, qualified name) -> lines of every function and method (nested ones too)."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "invfast"
    out: dict[tuple[str, str], int] = {}

    def visit(node: ast.AST, module: str, prefix: str) -> None:
        for n in ast.iter_child_nodes(node):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[(module, prefix + n.name)] = n.end_lineno - n.lineno + 1
                visit(n, module, prefix + n.name + ".")
            elif isinstance(n, ast.ClassDef):
                visit(n, module, prefix + n.name + ".")

    for p in sorted(root.rglob("*.py")):
        visit(ast.parse(p.read_text()), str(p.relative_to(root)), "")
    return out


def test_functions_keep_to_the_budget():
    """Small functions (issue 38): none of invfast's functions over 60 lines, except those listed with a reason
    (LONG_BY_DESIGN, at most their listed length) and those still to be split (TO_SPLIT), which may not grow."""
    lengths = _function_lengths()
    allowed = {k: v[0] for k, v in LONG_BY_DESIGN.items()} | TO_SPLIT
    over = {k: n for k, n in lengths.items() if n > allowed.get(k, FUNCTION_BUDGET)}
    assert over == {}, (
        f"functions over the {FUNCTION_BUDGET}-line budget (split them, or list one with a reason): {over}"
    )
    stale = sorted(k for k in allowed if lengths.get(k, 0) <= FUNCTION_BUDGET)
    assert stale == [], f"listed as long but no longer over the budget (take them off the lists): {stale}"
    assert all(reason for _, reason in LONG_BY_DESIGN.values())


#: a speed figure: "3.5x faster", "1.3-1.7× slower", "12.9 ms", "40 us" (CONTRIBUTING: speed claims live in docs/ and
#: benchmarks/, with the machine and its load beside them, never in the code, where they go stale unseen); a
#: threshold stated as "N ms of one thread's work" defines a constant and is not a claim
_SPEED_FIGURE = r"\d(\.\d+)?(-\d+(\.\d+)?)? ?[x×] (faster|slower)|\d ?(ms|us|µs)\b(?! of one)"


def test_the_code_quotes_no_speed_figures():
    import re

    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in sorted(PKG.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(_SPEED_FIGURE, line)
    ]
    assert found == [], "speed figures in the code (move them to docs/performance.md):\n" + "\n".join(found)
    assert re.search(_SPEED_FIGURE, "measured 1.6x faster") and re.search(_SPEED_FIGURE, "took 12.9 ms")
