"""The pytest plugin, driven end to end with pytester in a user's folder outside this repo:
their model file, their photos, their settings; real exports, real verdicts."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from export_check.cli import main
from export_check.golden.manifest import read_manifest
from user_project import UserModels, write_settings

pytest_plugins = ["pytester", "user_project_fixtures"]

@pytest.fixture(autouse=True)
def _local_workflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """These runs are a developer's: a missing golden set is recorded. Under CI=true the plugin never
    records one into the checkout (issue 16.6, test_plugin_record_policy.py), so CI is unset here."""
    monkeypatch.delenv("CI", raising=False)


TWO_KINDS = 'artifacts = ["torchscript-trace", "onnx"]\n'
MODELS_INI = 'export_check_models = ["model.pth"]\n'


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_declared_model_items_and_the_golden_workflow(pytester: pytest.Pytester, user_models: UserModels) -> None:
    folder = user_models.project(pytester.path)
    write_settings(folder, extra=TWO_KINDS, pytest_ini=MODELS_INI)

    # 1. no golden set yet: it is recorded from `inputs`, and every item fails saying so
    result = pytester.runpytest("-v")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(["model.pth::eager FAILED*", "model.pth::torchscript-trace FAILED*", "model.pth::onnx FAILED*"])
    result.stdout.fnmatch_lines(["*golden set */golden was missing: recorded 8 inputs from */photos with the logits of */model.pth*"])
    assert read_manifest(folder / "golden").model["checkpoint_sha256"] == _sha(user_models.v1)

    # 2. the next run checks against it and passes
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=3)
    assert result.ret == 0

    # 3. retrained weights: only the eager row fails, with its metrics, gate and how to regenerate
    shutil.copy(user_models.v2, folder / "model.pth")
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["model.pth::eager FAILED*", "model.pth::torchscript-trace PASSED*", "model.pth::onnx PASSED*"])
    result.stdout.fnmatch_lines(
        [
            "eager FAIL (vs golden, gate MAE<=1e-05)",
            "  MAE * > 1e-05",
            "*metrics over 8 inputs: MAE *, max |err| *, top-1 agreement *",
            "*export-check golden approve */model.pth* or `pytest --export-check-regen`*",
        ]
    )
    assert "Traceback" not in result.stdout.str() and "pytest_plugin.py" not in result.stdout.str()

    # 4. regenerate: the golden set adopts the new logits, the diff is shown, and the run still fails
    result = pytester.runpytest("-v", "--export-check-regen")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "--export-check-regen: golden set */golden re-approved from */model.pth:",
            f"checkpoint sha256 {_sha(user_models.v1)[:12]} -> {_sha(user_models.v2)[:12]}",
            "MAE old->new reference: * top-1 changes on * of 8 inputs",
            "Review the change, commit it, and rerun without --export-check-regen.",
            "eager passed against the new golden set",
        ]
    )
    assert read_manifest(folder / "golden").model["checkpoint_sha256"] == _sha(user_models.v2)

    # 5. and without the flag it passes; `-k` and node ids select single items
    pytester.runpytest().assert_outcomes(passed=3)
    pytester.runpytest("-k", "onnx").assert_outcomes(passed=1, deselected=2)
    pytester.runpytest("model.pth::torchscript-trace").assert_outcomes(passed=1)


def test_fixture_returns_the_report_and_explains_failures(pytester: pytest.Pytester, user_models: UserModels, monkeypatch) -> None:
    folder = user_models.project(pytester.path)
    write_settings(folder)
    monkeypatch.chdir(folder)
    assert main(["golden", "record", "model.pth", "-q"]) == 0
    pytester.makepyfile(
        test_models="""
        from pathlib import Path

        def test_report_is_typed(export_check):
            report = export_check("model.pth", artifacts=["onnx"])
            assert [row.name for row in report.rows] == ["eager", "onnx"]
            assert report.row("onnx").metrics.mae < 1e-5 and report.passed
            export_check.assert_passed(report)

        def test_strict_int8_gate(export_check):
            report = export_check("model.pth", artifacts=["torch-int8-dynamic"], int8_max_mae=1e-6)
            export_check.assert_passed(report)

        def test_missing_golden_is_recorded(export_check):
            export_check("model.pth", artifacts=["onnx"], golden="golden-new")
        """
    )
    result = pytester.runpytest("-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_strict_int8_gate*",
            "torch-int8-dynamic FAIL (vs eager, gate MAE<=1e-06 & relMAE<=5% & top1>=98%)",
            "  MAE * > 1e-06",
            "*metrics over 8 inputs*",
            "*artifact: *torch-int8-dynamic.pt (* bytes, sha256 *)",
            "*regenerating the golden set does not change this*int8-max-mae*",
        ]
    )
    result.stdout.fnmatch_lines(["*golden set */golden-new was missing: recorded 8 inputs*"])
    assert "pytest_plugin.py" not in result.stdout.str()
    assert read_manifest(folder / "golden-new").model["checkpoint_sha256"] == _sha(folder / "model.pth")


def test_declared_models_are_collected_beside_testpaths_and_typos_are_errors(pytester: pytest.Pytester, user_models: UserModels) -> None:
    folder = user_models.project(pytester.path)
    pytester.makepyfile(**{"tests/test_unit": "def test_unit():\n    assert 1 + 1 == 2\n"})
    write_settings(folder, extra=TWO_KINDS, pytest_ini='testpaths = ["tests"]\nexport_check_models = ["model.pth", "modle.pth"]\n')
    # a typo in the model list fails the collection instead of silently checking nothing
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*export-check: error: */modle.pth: checkpoint not found*"])
    # so does a typo in the settings: one line naming the file and the key, no traceback
    text = (folder / "pyproject.toml").read_text().replace(', "modle.pth"', "")
    (folder / "pyproject.toml").write_text(text.replace("[tool.export-check]\n", "[tool.export-check]\nmax-mea = 1\n"))
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*export-check: error: */pyproject.toml: unknown key 'max-mea' in [[]tool.export-check[]]*"])
    assert "Traceback" not in result.stdout.str()
    # a plain `pytest` checks the declared models although they are outside testpaths; naming paths narrows it
    (folder / "pyproject.toml").write_text(text)
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["tests/test_unit.py::test_unit", "model.pth::eager", "model.pth::torchscript-trace", "model.pth::onnx"])
    result = pytester.runpytest("--collect-only", "-q", "tests")
    assert "model.pth" not in result.stdout.str() and "1 test collected" in result.stdout.str()


def test_plugin_is_registered_and_loads_nothing_heavy(tmp_path: Path) -> None:
    code = (
        "import sys, importlib.metadata as md\n"
        "import export_check.pytest_plugin\n"
        "eps = [ep.value for ep in md.entry_points(group='pytest11') if ep.name == 'export_check']\n"
        "heavy = sorted(m for m in ('torch', 'numpy', 'onnx', 'onnxruntime', 'PIL') if m in sys.modules)\n"
        "print(eps, heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['export_check.pytest_plugin'] []"
    # `pytest --help` in one process: the plugin is loaded through its entry point, and still nothing heavy is
    probe = (
        "import contextlib, io, json, sys, pytest\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    code = pytest.main(['--help'])\n"
        "heavy = sorted(m for m in ('torch', 'numpy', 'onnx', 'onnxruntime', 'PIL') if m in sys.modules)\n"
        "loaded = 'export_check.pytest_plugin' in sys.modules\n"
        "print(json.dumps({'code': int(code), 'plugin': loaded, 'heavy': heavy, 'help': out.getvalue()}))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["code"] == 0 and shown["plugin"] and shown["heavy"] == []
    help_text = shown["help"]
    assert "export-check: exported-model regression checks:" in help_text and "--export-check-regen" in help_text
    assert "export_check_models (linelist):" in help_text
    # plain text: no terminal escapes or other control characters, only printable lines
    assert [c for c in help_text if c != "\n" and not c.isprintable()] == []
    # both help texts in full (pytest wraps them at the terminal width, so compare without whitespace)
    squashed = "".join(help_text.split())
    for text in (
        "re-approve each golden set from the current checkpoint (record missing ones), then fail those tests "
        "so that a regeneration never passes silently",
        "export-check: checkpoints to check, relative to the ini file; each (model, artifact) pair is a test item. "
        "Settings come from [tool.export-check] or export-check.toml of the rootdir's project (up to the folder holding .git), "
        "or from the file an entry names after it: 'zoo/a.pth --config zoo/a.toml'.",
    ):
        assert "".join(text.split()) in squashed, text


RELOADED = """
import sys, tempfile
from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN
import export_check.builder.builds  # keeps the BUILD_ORDER of this copy of export_check.artifacts
for name in [m for m in sys.modules if m.startswith("export_check.artifacts") or m == "export_check.run.observe"]:
    del sys.modules[name]
import export_check
report = export_check.check(DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN, artifacts=["torchscript-trace"],
                            out=tempfile.mkdtemp(), no_cache=True)
print([(r.name, r.status) for r in report.rows])
"""


def test_a_check_keeps_every_row_when_the_artifact_table_was_imported_twice() -> None:
    """pytester's in-process runs drop from sys.modules what the inner session imported, so the next
    one imports export_check.artifacts afresh while modules kept from before hold the old table. The
    rows are matched by kind name: this test file run alone used to fail every item with a KeyError."""
    tests = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", RELOADED], capture_output=True, text=True, timeout=600, cwd=tests,
                          env={**os.environ, "PYTHONPATH": str(tests)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[('eager', 'pass'), ('torchscript-trace', 'pass')]"
