"""The folder exporter/ installs as the package export_check (issue 16): every sub-package is
listed for the build backend, nothing imports the folder's name, and a project with a package of
its own named ``exporter`` runs pytest with the plugin installed."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import export_check

REPO = Path(__file__).resolve().parents[2]


def test_every_sub_package_of_the_folder_is_installed() -> None:
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert settings["package-dir"] == {"export_check": "exporter"}
    on_disk = sorted(
        ".".join(("export_check", *p.parent.relative_to(REPO / "exporter").parts)) for p in (REPO / "exporter").rglob("__init__.py")
    )
    assert len(on_disk) >= 8
    assert sorted(settings["packages"]) == on_disk
    # and the installed package has them all, with its typing marker
    installed = Path(export_check.__file__).parent
    for name in on_disk:
        assert (installed.joinpath(*name.split(".")[1:]) / "__init__.py").is_file(), name
    assert (installed / "py.typed").is_file()


def test_no_source_file_imports_the_folder_name() -> None:
    offenders = []
    for root in ("exporter", "tests", "benchmarks", "models"):
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                else:
                    continue
                offenders += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if n == "exporter" or n.startswith("exporter.")]
    assert offenders == []


def test_a_project_with_its_own_exporter_package_runs_pytest_with_the_plugin(tmp_path: Path) -> None:
    (tmp_path / "exporter").mkdir()
    (tmp_path / "exporter" / "__init__.py").write_text("WHO = 'the user project'\n")
    (tmp_path / "test_mine.py").write_text(
        "import exporter\n"
        "def test_mine(pytestconfig):\n"
        "    assert exporter.WHO == 'the user project'\n"
        "    assert pytestconfig.pluginmanager.has_plugin('export_check')\n"
    )
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_python_dash_m_runs_the_installed_package(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "export_check", "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(export_check.__version__)
