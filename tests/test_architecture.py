"""The package's import graph: no circle, and each layer imports only the layers below it.

Layers (each may import those before it): models and errors; storage (warehouse); the engine (SQL
library, connections, executor); the analyses' Python side (queries); ingest (which derives ``op_stats``
with the engine's SQL and, compacting, the job tables with the queries); the facade (Run, CLI, report,
cupti, the package itself).
The graph is read from the source (every import statement, including those inside functions), so
an import moved into a function to dodge a circle still counts.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xprosql"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The xprosql modules ``name`` imports (``from pkg import sub`` is an import of ``pkg.sub``)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*kept, *([node.module] if node.module else [])])
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in out if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def _layer(module: str) -> int:
    if module in ("xprosql._version", "xprosql.errors", "xprosql._duckdb", "xprosql._numba") or module.startswith(
            ("xprosql.models", "xprosql.protos")):
        return 0
    if module == "xprosql.warehouse":
        return 1
    if module.startswith("xprosql.engine"):
        return 2
    if module.startswith("xprosql.queries"):
        return 3
    if module.startswith("xprosql.ingest"):
        return 4
    return 5  # the facade: xprosql, run, cli, report, cupti


def test_the_graph_reader_sees_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle() -> None:
    graph = _graph()
    assert "xprosql.engine.executor" in graph and graph["xprosql.run"], "the import graph was not read"
    assert _cycles(graph) == []


def test_layers_import_only_those_below() -> None:
    upward = sorted(f"{module} -> {imported}" for module, imports in _graph().items() for imported in imports
                    if _layer(imported) > _layer(module))
    assert upward == []


def test_storage_never_imports_the_engine() -> None:
    """Compaction gets the rows of stored tables through a callback."""
    assert not {m for m in _graph()["xprosql.warehouse"] if m.startswith(("xprosql.engine", "xprosql.queries"))}
