"""The import graph of the package, read from its source (every import: module level, inside functions,
under TYPE_CHECKING): the run's middle keeps its order (nothing that observes, measures, builds or caches
asks the judge), and no module imports another that imports it back (issue 26)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "exporter"
MEASURING = ("run.observe", "records", "diagnostics", "cache", "builder", "artifacts", "compare")


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
                # each name that is a module is an arrow to it (``from . import a, b``: both); else the module named from
                named = [f"{stem}.{a.name}".lstrip(".") for a in node.names]
                targets = [t for t in named if t in modules] or [stem]
            elif isinstance(node, ast.Import):
                targets = [a.name.removeprefix("export_check").lstrip(".") for a in node.names if a.name.startswith("export_check")]
            for target in targets:
                ancestor = target == "" or name.startswith(target + ".")  # a parent package is imported first anyway
                if target in modules and target != name and not ancestor:
                    graph[name].add(target)
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


# --- the house's sizes (issue 42): no module over 450 lines and no function over 80 unless listed here with why --------

MODULE_LINES, FUNCTION_LINES = 450, 80
LONG_MODULES = {  # module (path under exporter/) -> why it is still one module
    "builder/server.py": "the build server's one process: its request loop, its build children and the load host it forks share "
                         "that process's state (the context unpickled, the lifeline, the replay channel); to split: the load host",
    "cli.py": "the argument parser and the command dispatch; to split: the parser's subcommand tables into cli_commands.py",
    "options.py": "ONE table of options (every flag and settings key of every command, a row each: STYLE.md): its rows are its "
                  "length, and a second table would be the thing to avoid",
    "golden/lifecycle.py": "record, approve and verify share the atomic write, the lock and the diff of a golden set",
    "signature.py": "the signature's parse, its settings and its JSON, which must round-trip each other",
}
LONG_FUNCTIONS = {  # module:function -> why it is one function
    "golden/discover.py:run_outputs": "one pass over the model's outputs that names, shapes and kinds each; to split",
    "golden/manifest.py:parse_manifest": "every field of the manifest checked in the order it is read, each with its own message",
}


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    modules, functions = {}, {}
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        text = path.read_text(encoding="utf-8")
        modules[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                functions[f"{rel}:{node.name}"] = max(functions.get(f"{rel}:{node.name}", 0), node.end_lineno - node.lineno + 1)
    return modules, functions


def test_no_module_over_450_lines_and_no_function_over_80_unless_listed_with_its_reason() -> None:
    modules, functions = _sizes()
    assert sorted(m for m, n in modules.items() if n > MODULE_LINES and m not in LONG_MODULES) == []
    assert sorted(f for f, n in functions.items() if n > FUNCTION_LINES and f not in LONG_FUNCTIONS) == []
    # and nothing is listed that no longer needs it: a split module leaves the list
    assert sorted(m for m in LONG_MODULES if modules.get(m, 0) <= MODULE_LINES) == []
    assert sorted(f for f in LONG_FUNCTIONS if functions.get(f, 0) <= FUNCTION_LINES) == []


# --- the folders' rules (issue 42): the views never import the options or the fleet, the kinds never import the diagnostics
# or the sentences, and no two folders import each other, directly or around a loop -----------------------------------

NEVER = {  # folder (or module) -> what it must never import, and why
    "report": (("options", "the views render a Report, whatever made it: a report replayed, merged or re-judged has no options"),
               ("fleet", "a fleet's views are the fleet's (fleet/views.py), built on the report's")),
    "artifacts": (("diagnostics", "a kind builds and reloads a file; what a row's checks measure comes after, from its row"),
                  ("sentences", "a kind raises what happened; the words a row says are the judge's")),
}


def _folder(module: str) -> str:
    return module.split(".")[0]


def test_the_views_never_import_options_or_the_fleet_and_the_kinds_never_the_diagnostics_or_the_sentences() -> None:
    graph = _graph()
    broken = sorted(f"{module} -> {target} ({why})" for module, targets in graph.items() for target in targets
                    for forbidden, why in NEVER.get(_folder(module), ()) if target == forbidden or target.startswith(forbidden + "."))
    assert broken == []


def test_no_two_folders_import_each_other_around_any_loop() -> None:
    graph = _graph()
    folders = {_folder(m) for m in graph if "." in m}
    folder_graph: dict[str, set[str]] = {f: set() for f in folders}
    for module, targets in graph.items():
        if _folder(module) in folders:
            folder_graph[_folder(module)] |= {_folder(t) for t in targets if _folder(t) in folders and _folder(t) != _folder(module)}
    assert _cycles(folder_graph) == []
