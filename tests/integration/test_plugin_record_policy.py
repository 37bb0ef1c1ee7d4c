"""The plugin's golden workflow under CI (issue 16.6): under ``CI=true`` or with
``--export-check-record=never`` a missing golden set fails every item of its model and nothing is
written into the checkout; ``--export-check-record=missing`` records it anyway; a regen prints its
diff once per model, every other item naming the one that shows it."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

import export_check.run.pipeline  # noqa: F401  (imported once here, as test_plugin.py does: pytester's in-process runs
from export_check.golden.manifest import read_manifest  # drop the modules a run imported, and the artifact table must stay one)
from user_project import UserModels, write_settings

pytest_plugins = ["pytester", "user_project_fixtures"]

ONE_KIND = 'artifacts = ["torchscript-trace"]\n'
MODELS_INI = 'export_check_models = ["model.pth"]\n'
NOT_RECORDED = "golden set not found; not recorded because"


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*")) if "__pycache__" not in p.parts}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("how", ["CI=true", "--export-check-record=never"])
def test_a_missing_golden_set_fails_every_item_and_writes_nothing(pytester: pytest.Pytester, user_models: UserModels,
                                                                  monkeypatch, how: str) -> None:
    folder = user_models.project(pytester.path)
    write_settings(folder, extra=ONE_KIND, pytest_ini=MODELS_INI)
    args = ["-v", "-p", "no:cacheprovider"]
    if how == "CI=true":
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
        args.append(how)
    before = _tree(pytester.path)
    result = pytester.runpytest(*args)
    result.assert_outcomes(failed=2)
    text = result.stdout.str()
    says = "CI=true is set" if how == "CI=true" else "--export-check-record=never"
    assert sum(f"{NOT_RECORDED} {says}" in line for line in result.stdout.lines if not line.startswith("FAILED ")) == 2, text
    assert "export-check golden record" in text and "--export-check-record=missing" in text  # says how to record it
    assert "Traceback" not in text and "export-check: error: export-check" not in text
    assert _tree(pytester.path) == before and not (folder / "golden").exists()


def test_record_missing_records_under_ci_and_a_regen_shows_its_diff_once(pytester: pytest.Pytester, user_models: UserModels,
                                                                         monkeypatch) -> None:
    folder = user_models.project(pytester.path)
    write_settings(folder, extra='artifacts = ["torchscript-trace", "onnx"]\n', pytest_ini=MODELS_INI)
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest("-v", "-p", "no:cacheprovider", "--export-check-record=missing")
    result.assert_outcomes(failed=3)
    assert read_manifest(folder / "golden").model["checkpoint_sha256"] == _sha(user_models.v1)

    shutil.copy(user_models.v2, folder / "model.pth")
    monkeypatch.delenv("CI")
    result = pytester.runpytest("-v", "-p", "no:cacheprovider", "--export-check-regen")
    result.assert_outcomes(failed=3)
    body = [line for line in result.stdout.lines if not line.startswith("FAILED ")]
    diff_line = f"checkpoint sha256 {_sha(user_models.v1)[:12]} -> {_sha(user_models.v2)[:12]}"
    assert sum(diff_line in line for line in body) == 1, result.stdout.str()  # once per model, not once per item
    assert sum("re-approved from" in line for line in body) == 3  # every item says why it fails
    assert sum("its diff is shown once, under model.pth::eager" in line for line in body) == 2
    assert read_manifest(folder / "golden").model["checkpoint_sha256"] == _sha(user_models.v2)


def test_the_plugins_error_lines_carry_the_prefix_once(pytester: pytest.Pytester, user_models: UserModels) -> None:
    """An unknown fixture option is refused by the option table with its own `export-check:` prefix;
    the failure shows `export-check: error:` once (issue 16.10)."""
    folder = user_models.project(pytester.path)
    write_settings(folder, extra=ONE_KIND)
    pytester.makepyfile(test_model="def test_it(export_check):\n    export_check('model.pth', bogus_option=1)\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*export-check: error: unrecognized arguments: --bogus-option 1 (see export-check --help)*"])
    assert "export-check: error: export-check" not in result.stdout.str()
