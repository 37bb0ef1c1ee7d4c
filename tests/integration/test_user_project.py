"""The issue's "done when": a model defined in a file outside this project, a golden set recorded
from a folder of photos outside it, settings in that folder's pyproject.toml; `export-check
model.pth` and a pytest run in that folder give the same verdicts, row by row."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from export_check.artifacts import DEFAULT_KINDS
from user_project import UserModels, write_settings

pytest_plugins = ["pytester", "user_project_fixtures"]


def _cli(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    # the user's command line: the console script, run in their folder, nothing but the checkpoint
    exe = Path(sys.executable).with_name("export-check")
    return subprocess.run([str(exe), *argv], cwd=folder, capture_output=True, text=True, timeout=600)


def _cli_verdicts(folder: Path) -> tuple[int, dict[str, str]]:
    result = _cli(folder, "model.pth", "-q", "--json", "report.json")
    assert result.returncode in (0, 1), result.stderr
    rows = json.loads((folder / "report.json").read_text())["rows"]
    return result.returncode, {row["name"]: row["status"] for row in rows}


def _pytest_verdicts(pytester: pytest.Pytester) -> tuple[int, dict[str, str]]:
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider")
    found = re.findall(r"^model\.pth::(\S+) (PASSED|FAILED|ERROR)", result.stdout.str(), re.M)
    return int(result.ret), {name: {"PASSED": "pass", "FAILED": "fail", "ERROR": "error"}[v] for name, v in found}


def test_cli_and_pytest_give_the_same_verdicts(pytester: pytest.Pytester, user_models: UserModels) -> None:
    folder = user_models.project(pytester.path)
    write_settings(folder, pytest_ini='export_check_models = ["model.pth"]\n')

    # the golden set, from the photos folder named in the settings: no flags at all
    recorded = _cli(folder, "golden", "record", "model.pth")
    assert recorded.returncode == 0, recorded.stderr
    assert "recorded 8 inputs and their reference logits (8, 10) into" in recorded.stdout
    assert _cli(folder, "golden", "verify", "golden").returncode == 0

    cli_code, cli_rows = _cli_verdicts(folder)
    py_code, py_rows = _pytest_verdicts(pytester)
    assert list(cli_rows) == ["eager", *DEFAULT_KINDS]
    assert py_rows == cli_rows
    assert cli_rows["eager"] == "pass"
    assert all(cli_rows[kind] == "pass" for kind in ("torchscript-trace", "torchscript-script", "onnx", "onnx-simplified"))
    assert (py_code == 0) == (cli_code == 0)

    # the retrained checkpoint: the eager row fails in both, the artifacts still match eager
    shutil.copy(user_models.v2, folder / "model.pth")
    cli_code, cli_rows = _cli_verdicts(folder)
    py_code, py_rows = _pytest_verdicts(pytester)
    assert cli_code == 1 and py_code == pytest.ExitCode.TESTS_FAILED
    assert py_rows == cli_rows
    assert cli_rows["eager"] == "fail" and cli_rows["onnx"] == "pass" and cli_rows["torchscript-script"] == "pass"

