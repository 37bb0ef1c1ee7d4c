"""The module map (docs/explanation/module-map.md) and the test map (docs/reference/test-map.md) are generated from the
tree when the site is built (docs/gen_maps.py, through the site's hook docs/gen_reference.py): they hold every module as it is now, a module added
appears with no other step, and the committed pages hold only their hand-written part and the marker (issue 42)."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from conftest import docs_script

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "exporter"
PAGES = {"modules": REPO / "docs" / "explanation" / "module-map.md", "tests": REPO / "docs" / "reference" / "test-map.md"}


def _gen_maps(root: Path = REPO) -> ModuleType:
    return docs_script("gen_maps", root)


def _rows(table: str) -> dict[str, list[str]]:
    """A map's rows by their first cell (the module's name, its path in the test map), each its cells."""
    cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in table.splitlines() if line.startswith("| `")]
    return {c[0].strip("`"): c for c in cells}


def _sections(module_map: str) -> dict[str, dict[str, list[str]]]:
    """The module map's tables by folder (``exporter/artifacts``), each its rows."""
    parts = re.split(r"^### `([^`]+)/`$", module_map, flags=re.M)
    return {parts[i]: _rows(parts[i + 1]) for i in range(1, len(parts), 2)}


def test_every_module_is_in_the_module_map_with_its_lines_and_its_first_sentence() -> None:
    sections = _sections(_gen_maps().module_map())
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100 and sum(len(rows) for rows in sections.values()) == len(modules), "each folder: one table"
    for path in modules:
        row = sections[str(path.parent.relative_to(REPO))][path.name]
        assert row[1] == str(len(path.read_text(encoding="utf-8").splitlines())), path
        doc = " ".join((ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "").split())
        assert doc.startswith(row[2].replace("\\|", "|")) if doc else row[2] == "(no docstring)", path
    assert sections["exporter/artifacts"]["base.py"][2].startswith("The artifact contract:")


def test_the_test_map_names_each_modules_mirror_and_only_test_files_that_exist() -> None:
    rows = _rows(_gen_maps().test_map())
    modules = sorted(p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py"))
    assert sorted(rows) == sorted(str(m) for m in modules)
    for module in modules:
        mirror = REPO / "tests" / "unit" / module.parent / f"test_{module.stem}.py"
        unit = rows[str(module)][1]
        assert unit == (f"`{mirror.relative_to(REPO / 'tests' / 'unit')}`" if mirror.is_file() else "-"), module
    named = {name for row in rows.values() for name in re.findall(r"`([^`]+\.py)`", row[2])}
    assert named and all((REPO / "tests" / name).is_file() for name in named), sorted(n for n in named if not (REPO / "tests" / n).is_file())
    assert rows["compare.py"][1] == "`test_compare.py`"
    shown = re.findall(r"`([^`]+\.py)`", rows["artifacts/runtimes.py"][2])  # test_kinds.py imports it, among others
    assert shown == sorted(shown) and ("unit/artifacts/test_kinds.py" in shown or "more" in rows["artifacts/runtimes.py"][2])


def test_a_module_added_to_the_tree_is_in_both_maps_with_no_other_step(tmp_path: Path) -> None:
    """The maps are what the tree is: a copy with one more module (and its test) names it, run as the script."""
    shutil.copytree(PACKAGE, tmp_path / "exporter", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(REPO / "tests", tmp_path / "tests", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (tmp_path / "docs").mkdir()
    shutil.copy2(REPO / "docs" / "gen_maps.py", tmp_path / "docs" / "gen_maps.py")
    (tmp_path / "exporter" / "newcomer.py").write_text('"""A module the maps have not met. It says more."""\n')
    (tmp_path / "tests" / "unit" / "test_newcomer.py").write_text("from export_check.newcomer import __doc__\n")
    (tmp_path / "tests" / "integration" / "test_uses_newcomer.py").write_text("import export_check.newcomer\n")

    def printed(name: str) -> str:
        done = subprocess.run([sys.executable, str(tmp_path / "docs" / "gen_maps.py"), name], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "| `newcomer.py` | 1 | A module the maps have not met. |" in printed("modules")
    assert "| `newcomer.py` | `test_newcomer.py` | `integration/test_uses_newcomer.py` |" in printed("tests")
    assert "newcomer" not in _gen_maps().module_map() + _gen_maps().test_map()  # the repository's own tree: not there


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_hook_puts_the_map_in_the_place_of_its_marker_and_the_page_commits_none(name: str) -> None:
    marker = f"<!-- generated: {'module-map' if name == 'modules' else 'test-map'} -->"
    page = PAGES[name].read_text(encoding="utf-8")
    assert page.count(marker) == 1 and "|---|" not in page, "the committed page holds the marker, not a map"
    built = docs_script("gen_reference").on_page_markdown(page, page=None, config=None, files=None)
    assert "<!-- generated" not in built
    assert built == page.replace(marker, _gen_maps().MAPS[name]())
    assert "| `compare.py` |" in built and built.count("\n| `") >= len(list(PACKAGE.rglob("*.py")))


def test_the_script_prints_one_map_by_name() -> None:
    done = subprocess.run([sys.executable, str(REPO / "docs" / "gen_maps.py"), "--check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "usage: python docs/gen_maps.py modules|tests" in done.stderr


def test_the_unit_readme_points_to_the_map_and_holds_none() -> None:
    readme = (REPO / "tests" / "unit" / "README.md").read_text(encoding="utf-8")
    assert "python docs/gen_maps.py tests" in readme and "docs/reference/test-map.md" in readme
    assert "|---|" not in readme and "<!-- generated" not in readme
