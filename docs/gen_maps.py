"""The module map and the test map, generated from the tree so that neither can go stale.

Two files end in a generated part, below the line ``<!-- generated below by docs/gen_maps.py: do not edit -->``:

* docs/explanation/module-map.md: every module of ``exporter/`` by folder, its lines and the first sentence of its
  docstring (a module without one is named so);
* tests/unit/README.md: every module and the tests that exercise it: its mirror under ``tests/unit/`` and every
  test file that imports it.

``python docs/gen_maps.py`` rewrites both; ``python docs/gen_maps.py --check`` exits 1 naming a file that differs
(tests/unit/test_maps.py runs the same comparison).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "exporter"
MARK = "<!-- generated below by docs/gen_maps.py: do not edit -->"
SHOWN = 4  # test files named per module; the rest counted
MAPS = {REPO / "docs" / "explanation" / "module-map.md": "modules", REPO / "tests" / "unit" / "README.md": "tests"}


def modules() -> list[Path]:
    """Every module of the package, a folder's after the top level's, each folder's sorted."""
    return sorted(PACKAGE.rglob("*.py"), key=lambda p: (len(p.relative_to(PACKAGE).parts) > 1, p.relative_to(PACKAGE).parts))


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


def generated(path: Path) -> str:
    """``path``'s text with its generated part made afresh (what stands above the mark is kept)."""
    text = path.read_text(encoding="utf-8")
    head = text.split(MARK)[0].rstrip("\n")
    return f"{head}\n\n{MARK}\n\n{module_map() if MAPS[path] == 'modules' else test_map()}"


def main(argv: list[str]) -> int:
    stale = [path for path in MAPS if path.read_text(encoding="utf-8") != generated(path)]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(REPO)}: not what the tree generates; run python docs/gen_maps.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(generated(path), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
