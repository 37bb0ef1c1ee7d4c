"""The module map (docs/explanation/module-map.md) and the test map (tests/unit/README.md) are what the tree
generates (docs/gen_maps.py): a module added, moved or removed without regenerating them fails here (issue 42)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_module_map_and_the_test_map_are_what_the_tree_generates() -> None:
    result = subprocess.run([sys.executable, str(REPO / "docs" / "gen_maps.py"), "--check"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_a_module_the_maps_do_not_name_makes_them_stale(tmp_path: Path) -> None:
    """The check can fail: a copy of the tree with one more module is stale until regenerated."""
    import shutil

    for part in ("exporter", "docs", "tests"):
        shutil.copytree(REPO / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (tmp_path / "exporter" / "newcomer.py").write_text('"""A module the maps have not met."""\n')
    check = [sys.executable, str(tmp_path / "docs" / "gen_maps.py"), "--check"]
    stale = subprocess.run(check, capture_output=True, text=True, timeout=120)
    assert stale.returncode == 1 and "docs/explanation/module-map.md: not what the tree generates" in stale.stderr
    assert subprocess.run([sys.executable, str(tmp_path / "docs" / "gen_maps.py")], timeout=120).returncode == 0
    assert subprocess.run(check, capture_output=True, text=True, timeout=120).returncode == 0
    assert "| `newcomer.py` | 1 | A module the maps have not met. |" in (tmp_path / "docs" / "explanation" / "module-map.md").read_text()
