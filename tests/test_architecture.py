"""The package structure's rules, read from the sources (docs/architecture.md).

- No import cycle between proctor's top-level packages (`proctor.hosted` and
  `proctor.server` used to import each other), counting imports inside functions too.
- Every exception class proctor defines lives in `proctor.errors`, the one tree, except the
  server's HTTP answers (`ServerError` and its family), which `proctor.server.errors` holds.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import proctor.errors
import proctor.server.errors

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "proctor"

# None left: the launcher moved into proctor.server.hosted, so hosted no longer imports server.
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def _part(path: Path) -> str:
    """`src/proctor/runs/_run.py` -> `runs`; `src/proctor/errors.py` -> `errors`."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def import_graph() -> dict[str, set[str]]:
    """Top-level part -> the other top-level parts it imports."""
    graph: dict[str, set[str]] = defaultdict(set)
    parts = {_part(path) for path in PACKAGE.iterdir() if not path.name.startswith("__")}
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue  # `proctor/__init__` re-exports the parts; it is no part itself
        part = _part(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
                if node.module == "proctor":  # `from proctor import runs`
                    modules += [f"proctor.{alias.name}" for alias in node.names]
            else:
                continue
            for module in modules:
                pieces = module.split(".")
                if pieces[0] == "proctor" and len(pieces) > 1 and pieces[1] in parts:
                    graph[part].add(pieces[1])
    for part in graph:
        graph[part].discard(part)
    return graph


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Each strongly connected group of two or more parts, as a sorted tuple (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[tuple[str, ...]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in graph.get(node, ()):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.add(tuple(sorted(group)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_top_level_packages() -> None:
    assert cycles(import_graph()) == KNOWN_CYCLES


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == {("a", "b", "c")}


def _is_exception(node: ast.ClassDef) -> bool:
    names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
    return any(n.endswith(("Error", "Exception")) or n in _TREE for n in names)


_TREE = {
    name
    for name, value in vars(proctor.errors).items()
    if isinstance(value, type) and issubclass(value, BaseException)
}


def test_every_public_exception_is_in_proctor_errors() -> None:
    outside = [
        f"{path.relative_to(SRC)}:{node.lineno} {node.name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in (PACKAGE / "errors.py", PACKAGE / "server" / "errors.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and _is_exception(node)
    ]
    assert outside == []


def test_the_tree_in_the_docstring_draws_every_exception() -> None:
    drawn = set((proctor.errors.__doc__ or "").split())
    server = {
        name
        for name, value in vars(proctor.server.errors).items()
        if isinstance(value, type) and issubclass(value, proctor.errors.ProctorError)
    }
    for name in (_TREE | server) - {"Exception", "BaseException"}:
        assert name in drawn, f"{name} is missing from proctor.errors' tree"


def test_only_transition_changes_a_status() -> None:
    """`evaluations.service.transition` is the one place an evaluation's status is written."""
    owner = PACKAGE / "server" / "evaluations" / "service.py"
    writes = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted((PACKAGE / "server").rglob("*.py"))
        if path != owner
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Attribute) and t.attr == "status" for t in node.targets)
    ]
    assert writes == []
