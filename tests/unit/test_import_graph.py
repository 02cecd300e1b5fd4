"""The import graph of evalkit/: the edge sits on top, nothing below it imports it, and no
two modules import each other at module level (a circle that an import written inside a
function hides breaks at call time when something moves)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "evalkit"

EDGE = ("evalkit.edge", "evalkit.web", "evalkit.cli", "evalkit.serve", "evalkit.demo")
"""The HTTP edge and what starts it: the API routes, the web pages, the CLI, process wiring."""
FORBIDDEN_BELOW_THE_EDGE = ("evalkit.edge", "evalkit.web", "evalkit.serve")
SERVE_MAY_BE_IMPORTED_BY = ("evalkit.cli", "evalkit.demo")


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@cache
def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The evalkit modules an import statement loads."""
    known = modules()
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            package = module.split(".")
            if modules()[module].name != "__init__.py":
                package = package[:-1]
            package = package[: len(package) - node.level + 1]
            base = ".".join([*package, base] if base else package)
        names = [f"{base}.{alias.name}" for alias in node.names]
        names = [n if n in known else base for n in names]
    return sorted({n for n in names if n in known})


def imports(module: str, *, module_level_only: bool) -> list[tuple[str, int]]:
    """(imported evalkit module, line) for each import of ``module``: at module level only,
    or anywhere but under ``if TYPE_CHECKING``."""
    tree = ast.parse(modules()[module].read_text())
    found: list[tuple[str, int]] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                found.extend((t, node.lineno) for t in _targets(node, module))
            elif isinstance(node, ast.If) and _is_type_checking(node):
                continue
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if not module_level_only:
                    visit(node.body)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    block = getattr(node, field, None)
                    if isinstance(block, list):
                        inner = [n.body if isinstance(n, ast.ExceptHandler) else [n] for n in block]
                        visit([s for group in inner for s in group])

    visit(tree.body)
    return found


def test_nothing_below_the_edge_imports_the_edge():
    wrong = [
        f"{module} imports {target} (line {line})"
        for module in sorted(modules())
        if not _within(module, EDGE)
        for target, line in imports(module, module_level_only=False)
        if _within(target, FORBIDDEN_BELOW_THE_EDGE)
    ]
    assert not wrong, (
        "below the edge, code must not reach up into the routes, pages or process wiring; "
        "move what it needs down (a store, evalkit.runs.engine, evalkit.config):\n"
        + "\n".join(wrong)
    )


def test_serve_is_imported_only_by_the_cli_and_the_demo():
    wrong = [
        f"{module} imports evalkit.serve (line {line})"
        for module in sorted(modules())
        if not _within(module, SERVE_MAY_BE_IMPORTED_BY) and module != "evalkit.serve"
        for target, line in imports(module, module_level_only=False)
        if target == "evalkit.serve"
    ]
    assert not wrong, "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_module_level_import_circle():
    graph = {
        module: {t for t, _ in imports(module, module_level_only=True) if t != module}
        for module in modules()
    }
    circles = _cycles(graph)
    assert not circles, "modules that import each other at module level:\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
