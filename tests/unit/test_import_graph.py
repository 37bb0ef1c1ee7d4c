"""The import graph of the package, read from its source (every import: module level, inside functions,
under TYPE_CHECKING): the run's middle keeps its order (nothing that observes, measures, builds or caches
asks the judge), and no module imports another that imports it back (issue 26)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "exporter"
MEASURING = ("run.observe", "run.records", "diagnostics", "cache", "builder", "artifacts", "compare")


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".") if package else []
                    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                    stem = ".".join([*base, *([node.module] if node.module else [])])
                elif node.module and node.module.startswith("export_check"):
                    stem = node.module.removeprefix("export_check").lstrip(".")
                else:
                    continue
                targets = [f"{stem}.{a.name}".lstrip(".") for a in node.names] + [stem]
            elif isinstance(node, ast.Import):
                targets = [a.name.removeprefix("export_check").lstrip(".") for a in node.names if a.name.startswith("export_check")]
            for target in targets:
                ancestor = target == "" or name.startswith(target + ".")  # a parent package is imported first anyway
                if target in modules and target != name and not ancestor:
                    graph[name].add(target)
                    break
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_whole() -> None:
    graph = _graph()
    assert len(graph) > 100 and {"run.judge", "run.observe", "run.explain"} <= graph["run.pipeline"]
    assert "run.judge" in graph["run.explain"] and "cache.store" in graph["cache.runs"]


def test_nothing_that_observes_measures_builds_or_caches_imports_the_judge() -> None:
    graph = _graph()
    asking = sorted(m for m, targets in graph.items() if "run.judge" in targets)
    assert not [m for m in asking if m.startswith(MEASURING)], asking
    assert set(asking) <= {"run.explain", "run.pipeline", "replay", "rejudge"}, asking  # the runs and the explainer


def test_no_module_imports_another_that_imports_it_back() -> None:
    assert _cycles(_graph()) == []
