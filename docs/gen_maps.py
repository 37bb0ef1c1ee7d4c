"""The module map and the test map, generated from the tree when the site is built, so that neither can go stale.

The site's one hook, docs/gen_reference.py, puts them in place of ``<!-- generated: module-map -->`` and
``<!-- generated: test-map -->`` (its ``TABLES`` read ``MAPS`` here); nothing generated is committed.

* ``modules`` (docs/explanation/module-map.md): every module of ``exporter/`` by folder, its lines and the first
  sentence of its docstring (a module without one is named so);
* ``tests`` (docs/reference/test-map.md): every module and the tests that exercise it: its mirror under
  ``tests/unit/`` and every test file that imports it.

Both are read off the files with ``ast`` (nothing is imported). ``python docs/gen_maps.py modules`` (or ``tests``)
prints one map; tests/unit/test_maps.py checks what they hold.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "exporter"
SHOWN = 4  # test files named per module; the rest counted


def modules() -> list[Path]:
    """Every module of the package, a folder's after the top level's, folder by folder, each folder's sorted."""
    return sorted(PACKAGE.rglob("*.py"), key=lambda p: (p.parent != PACKAGE, p.relative_to(PACKAGE).parent.parts, p.name))


def dotted(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    text = " ".join(doc.split())
    match = re.match(r"(.+?[.:!?])(\s|$)", text)
    sentence = (match.group(1) if match else text) or "(no docstring)"
    return sentence.replace("|", "\\|")


def module_map() -> str:
    rows, folder = [], None
    for path in modules():
        here = str(path.parent.relative_to(REPO))
        if here != folder:
            folder = here
            rows += ["", f"### `{folder}/`", "", "| module | lines | what it is |", "|---|---:|---|"]
        lines = len(path.read_text(encoding="utf-8").splitlines())
        rows.append(f"| `{path.name}` | {lines} | {first_sentence(path)} |")
    return "\n".join(rows).lstrip("\n") + "\n"


def _importers() -> dict[str, list[str]]:
    """Per dotted module, the test files (relative to tests/) that import it."""
    found: dict[str, list[str]] = {}
    names = {dotted(p) for p in modules()}
    for test in sorted((REPO / "tests").rglob("*.py")):
        tree = ast.parse(test.read_text(encoding="utf-8"))
        seen: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("export_check"):
                base = node.module.removeprefix("export_check").lstrip(".")
                seen |= {t for t in (base, *(f"{base}.{a.name}".lstrip(".") for a in node.names)) if t in names}
            elif isinstance(node, ast.Import):
                seen |= {a.name.removeprefix("export_check").lstrip(".") for a in node.names if a.name.startswith("export_check.")} & names
        for name in seen:
            found.setdefault(name, []).append(str(test.relative_to(REPO / "tests")))
    return found


def test_map() -> str:
    importers = _importers()
    rows = ["| module | its unit test | the tests that import it |", "|---|---|---|"]
    for path in modules():
        rel = path.relative_to(PACKAGE)
        mirror = REPO / "tests" / "unit" / rel.parent / f"test_{rel.stem}.py"
        unit = f"`{mirror.relative_to(REPO / 'tests' / 'unit')}`" if mirror.is_file() else "-"
        own = str(Path("unit") / rel.parent / f"test_{rel.stem}.py")
        users = [t for t in importers.get(dotted(path), []) if t != own]
        shown = ", ".join(f"`{t}`" for t in users[:SHOWN]) + (f", +{len(users) - SHOWN} more" if len(users) > SHOWN else "")
        rows.append(f"| `{rel}` | {unit} | {shown or '-'} |")
    return "\n".join(rows) + "\n"


MAPS: dict[str, Callable[[], str]] = {"modules": module_map, "tests": test_map}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in MAPS:
        print(f"usage: python docs/gen_maps.py {'|'.join(MAPS)}", file=sys.stderr)
        return 2
    print(MAPS[argv[0]](), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
