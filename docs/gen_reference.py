"""The reference tables of the documentation, generated from the code's own tables so they cannot go stale.

An MkDocs hook (``hooks:`` in mkdocs.yml): a page holding ``<!-- generated: NAME -->`` gets the table
NAME in its place when the site is built (``on_page_markdown``). The tables are read off

* ``export_check.artifacts.KINDS`` and ``GROUPS``          -> ``kinds``, ``groups``
* each kind's ``ACCOUNTS`` in its module (read with ``ast``) and its row -> ``kind-accounts`` (docs/explanation/artifacts-and-gates.md)
* ``export_check.gates.GATE_METRICS``                      -> ``gate-metrics``
* ``export_check.gates.GATE_FAMILIES``                     -> ``gate-families``
* ``export_check.options.OPTIONS``                         -> ``settings``, ``options`` (every command's)
* the tree, read by docs/gen_maps.py                       -> ``module-map``, ``test-map``

``python docs/gen_reference.py NAME`` prints one table (what tests/integration/test_docs.py checks
against the code's tables too).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!-- generated: ([a-z-]+) -->")


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(items: Any) -> str:
    return ", ".join(f"`{i}`" for i in items) or "–"


def _table(head: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def kinds() -> str:
    from export_check.artifacts import KINDS
    from export_check.gates import FAMILIES

    rows = [(f"`{k.name}`", f"`{k.suffix}`", f"`{k.family}` ({FAMILIES[k.family].default.describe()})", f"`{k.source}`" if k.source else "–",
             k.runtime, _code(k.groups) if k.groups else "`all` only", _code(k.packages), k.layers or "none",
             _code(k.options), "yes" if k.calibrated else "no", k.description) for k in KINDS]
    return _table(("kind", "file", "gate family (default gate)", "built from", "runtime", "groups", "packages (cache key)",
                   "per-layer method", "settings it reads", "calibrated", "what it is"), rows)


def account(kind: Any) -> str | None:
    """The account of ``kind`` (Markdown, one paragraph): ``ACCOUNTS[kind.name]`` in the module its row names, read with
    ``ast`` so that the kind's heavy imports are never made; None when the module holds none for it."""
    spec = importlib.util.find_spec(kind.module)
    if spec is None or spec.origin is None:
        return None
    for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and "ACCOUNTS" in [getattr(t, "id", None) for t in _targets(node)]:
            assert node.value is not None
            found = ast.literal_eval(node.value).get(kind.name)
            return found if isinstance(found, str) else None
    return None


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


def gate_words(gate: Any) -> str:
    """A default gate in words: ``MAE ≤ 1e-5``, ``relative MAE ≤ 5% **and** top-1 agreement ≥ 98%`` (one that sets another
    bound is shown as ``Gate.describe()`` says it)."""
    from export_check.gates import Gate

    words = {"max_mae": ("MAE ≤ {:g}", gate.max_mae), "max_relative_mae": ("relative MAE ≤ {:.0%}", gate.max_relative_mae),
             "min_top1": ("top-1 agreement ≥ {:.0%}", gate.min_top1 or None)}
    said = {field: value for field, (_, value) in words.items() if value is not None}
    if Gate(**said) != gate:
        return f"`{gate.describe()}`"
    return " **and** ".join(words[field][0].format(value).replace("e-0", "e-") for field, value in said.items())


def _needs(kind: Any) -> str:
    """What the kind needs, read off its row. A kind whose runtime comes with the base install (``installs="core"`` in
    ``artifacts.runtimes.RUNTIMES``) names its packages that the base install holds (an extra its build needs beyond them
    is said in its account); any other names its packages and the extra (or tox environment) that installs its runtime.
    torch is named only when it is all."""
    import tomllib

    from export_check.artifacts.runtimes import RUNTIMES_BY_NAME

    def beyond_torch(packages: list[str]) -> str:
        return ", ".join([p for p in packages if p != "torch"] or ["torch"])

    runtime = RUNTIMES_BY_NAME[kind.runtime]
    if runtime.installs == "core":
        project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))["project"]
        base = {re.split(r"[^A-Za-z0-9._-]", d, maxsplit=1)[0].lower() for d in project["dependencies"]}
        return beyond_torch([p for p in kind.packages if p in base])
    where = runtime.installs if " " in runtime.installs else f"[{runtime.installs}]"
    return f"{beyond_torch(list(kind.packages))} (`{where}`)"


def kind_accounts() -> str:
    """Every kind's line of docs/explanation/artifacts-and-gates.md: its account from its module, the rest from its row."""
    from export_check.artifacts import KINDS
    from export_check.gates import FAMILIES

    rows: list[tuple[object, ...]] = [("`eager`", "–", "the checkpoint in eager PyTorch vs the golden reference logits",
                                       gate_words(FAMILIES["eager"].default), "–", "always")]
    for k in KINDS:
        gate = gate_words(FAMILIES[k.family].default) + (", on the uncalibrated samples" if k.calibrated else "")
        text = account(k)
        if not text:
            raise ValueError(f"{k.module} holds no account of the kind {k.name}: add ACCOUNTS = {{{k.name!r}: ...}} (Markdown, one paragraph)")
        rows.append((f"`{k.name}`", f"`{k.suffix}`", text, gate, _needs(k), ", ".join(k.groups) or "all"))
    return _table(("row", "file", "what it is", "gate (default)", "needs", "group"), rows)


def groups() -> str:
    from export_check.artifacts import GROUPS

    return _table(("group", "kinds"), [(f"`{g}`", _code(names)) for g, names in GROUPS.items()])


def gate_metrics() -> str:
    from export_check.gates import GATE_METRICS

    rows = []
    for m in GATE_METRICS:
        options = ", ".join(f"`--{b.option}` {b.metavar}" for b in m.bounds)
        families = "every family" if m.families == "all" else "int8, fp16, bf16 (`--int8-…`, `--fp16-…`, `--bf16-…`)"
        rows.append((m.name, options, families, "yes" if m.at_batch_sizes else "no (the replay's values)", m.column or "–"))
    return _table(("metric", "options (float family; other families prefix them)", "offered by", "judged at every batch size",
                   "`-v` column"), rows)


def gate_families() -> str:
    from export_check.gates import GATE_FAMILIES

    rows = [(f"`{f.name}`", f.label, f"`{f.default.describe()}`", f"follows `{f.follows}`" if f.follows else
             (", ".join(f"`--{o.name}`" for o in f.options) or "–"), f.layers, f"`{f.fix_hint}`") for f in GATE_FAMILIES]
    return _table(("family", "rows", "default gate", "options", "per-layer tables", "a failing row suggests"), rows)


def _default(option: Any) -> str:
    value = option.default
    if option.kind == "switch":
        return "off"
    if callable(value):
        return "computed (see help)" if value.__name__ != "dict" else "`{}`"
    if value is None or value == "":
        return "–"
    if isinstance(value, tuple):
        return _code(value)
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _flag(option: Any) -> str:
    if option.positional:
        return f"`{option.name.upper()}`"
    flag = f"`--{option.name}`"
    return f"`{option.short}`, {flag}" if option.short else flag


def settings() -> str:
    from export_check.options import OPTIONS

    seen: set[str] = set()
    rows = []
    for o in OPTIONS:
        if o.settings and o.name not in seen:
            seen.add(o.name)
            rows.append((f"`{o.name}`", o.kind, _default(o), ", ".join(f"`{c}`" for c in o.commands) or "settings only", o.help_text()))
    return _table(("key", "type", "default", "commands that read it", "meaning"), rows)


def options() -> str:
    from export_check.options import COMMANDS, OPTIONS

    parts = []
    for command in COMMANDS:
        rows = [(_flag(o), f"`{o.python}`", _default(o), "yes" if o.settings else "no", o.help_text()) for o in OPTIONS if command in o.commands]
        parts.append(f"### `export-check {command}`\n\n" + _table(("option", "Python keyword", "default", "settings key", "meaning"), rows))
    return "\n".join(parts)


def _maps() -> Any:
    """docs/gen_maps.py, beside this file (a hook is loaded by its path, not as a package)."""
    spec = importlib.util.spec_from_file_location("gen_maps", Path(__file__).with_name("gen_maps.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TABLES: dict[str, Callable[[], str]] = {"kinds": kinds, "groups": groups, "kind-accounts": kind_accounts, "gate-metrics": gate_metrics,
                                        "gate-families": gate_families, "settings": settings, "options": options,
                                        "module-map": lambda: _maps().module_map(), "test-map": lambda: _maps().test_map()}


def expand(markdown: str) -> str:
    """``markdown`` with every ``<!-- generated: NAME -->`` replaced by the table NAME (an unknown NAME is an error)."""
    def table(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in TABLES:
            raise ValueError(f"unknown generated table {name!r}; choose from {', '.join(TABLES)}")
        return TABLES[name]()
    return MARKER.sub(table, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:  # the MkDocs hook
    return expand(markdown)


if __name__ == "__main__":
    print(TABLES[sys.argv[1]]())
