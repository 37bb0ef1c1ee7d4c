"""The plugin under pytest-xdist (issue 14): a user project declaring 4 models, run with ``-n 2`` and
serially, in a subprocess as the user runs pytest. The verdicts must be the serial run's item by
item; a missing golden set fails every item of its model on every worker; a regen happens once."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from export_check.golden.manifest import read_manifest
from fleet_project import Zoo, break_model, make_zoo

pytest_plugins = ["pytester"]

ITEM = re.compile(r"^\[(gw\d)\] \[\s*\d+%\] (PASSED|FAILED|ERROR) (mlp\d)/model\.pth::(\S+)", re.M)
SERIAL_ITEM = re.compile(r"^(mlp\d)/model\.pth::(\S+) (PASSED|FAILED|ERROR)", re.M)


@pytest.fixture(autouse=True)
def _local_workflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """These runs are a developer's: a missing golden set is recorded. Under CI=true the plugin never
    records one into the checkout (issue 16.6, test_plugin_record_policy.py), so CI is unset here."""
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 models without golden sets, made once. (Made before pytester's fixture too: pytester drops
    the modules a test imported when it ends, and torch cannot be imported twice in one process.)"""
    folder = tmp_path_factory.mktemp("xdist-zoo")
    make_zoo(folder, 4, record=False)  # no golden sets yet: the first run records them
    return folder


def _project(template: Path, pytester: pytest.Pytester, count: int) -> Zoo:
    shutil.copytree(template, pytester.path, dirs_exist_ok=True)
    zoo = Zoo(pytester.path, tuple(f"mlp{i}" for i in range(count)), ())
    # each model's own settings file named beside it (issue 47: a checkpoint's folder is never read by itself)
    models = ", ".join(f'"{name}/model.pth --config {name}/export-check.toml"' for name in zoo.names)
    (pytester.path / "pyproject.toml").write_text(f"[tool.pytest.ini_options]\nexport_check_models = [{models}]\n")
    return zoo


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, list[tuple[str, str, str, str]]]:
    result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider", "-p", "xdist", *args, timeout=600)
    return result, ITEM.findall(result.stdout.str())


def _verdicts(items: list[tuple[str, str, str, str]]) -> dict[tuple[str, str], str]:
    return {(model, row): verdict for _, verdict, model, row in items}



def _failure_bodies_saying(result, text: str) -> int:
    """How many failure reports say ``text``: the short summary's FAILED lines repeat it (in full
    under CI, where pytest does not truncate them), so they are not counted."""
    return sum(line.count(text) for line in result.stdout.lines if not line.startswith("FAILED "))

def test_pytest_n2_gives_the_serial_verdicts_keeps_each_model_on_one_worker_and_writes_one_report(template: Path, pytester: pytest.Pytester) -> None:
    zoo = _project(template, pytester, 4)

    # 1. no golden sets: each is recorded once, and all 12 items fail, on whichever worker they ran
    result, items = _run(pytester, "-n", "2", "--export-check-json", "session.json")
    assert len(items) == 12 and {v for _, v, _, _ in items} == {"FAILED"}, result.stdout.str()[-3000:]
    assert _failure_bodies_saying(result, "was missing: recorded 12 inputs") == 12
    assert "export-check: --dist load would split a model's items over the workers" in result.stdout.str()
    workers = {model: {w for w, _, m, _ in items if m == model} for model in zoo.names}
    assert all(len(w) == 1 for w in workers.values()), workers  # every model's 3 items on one worker
    assert len(set().union(*workers.values())) == 2  # and both workers used
    session = json.loads((pytester.path / "session.json").read_text())
    assert [m["name"] for m in session["models"]] == [f"{n}/model.pth" for n in zoo.names]
    assert {m["status"] for m in session["models"]} == {"fail"} and session["exit_code"] == 1
    assert all(m["report"]["settings"]["jobs"] == 1 for m in session["models"])  # 2 workers on 2 cores: one build at a time each
    for name in zoo.names:
        assert read_manifest(zoo.folder / name / "golden").model["checkpoint_sha256"]

    # 2. mlp1 retrained: -n 2 and a serial run agree item by item, and so do their session reports
    break_model(zoo.folder, "mlp1")
    result, items = _run(pytester, "-n", "2", "--export-check-json", "parallel.json", "--export-check-junit", "parallel.xml")
    parallel = _verdicts(items)
    serial_result = pytester.runpytest_subprocess("-v", "-p", "no:cacheprovider", "-p", "no:xdist", "--export-check-json", "serial.json",
                                                  timeout=600)
    serial = {(m, r): v for m, r, v in SERIAL_ITEM.findall(serial_result.stdout.str())}
    assert len(serial) == 12 and parallel == serial
    assert {k for k, v in serial.items() if v == "FAILED"} == {("mlp1", "eager")}
    serial_result.assert_outcomes(passed=11, failed=1)
    result.assert_outcomes(passed=11, failed=1)
    reports = [json.loads((pytester.path / name).read_text()) for name in ("parallel.json", "serial.json")]
    assert [[(m["name"], m["status"]) for m in r["models"]] for r in reports] == [[(f"{n}/model.pth", "fail" if n == "mlp1" else "pass")
                                                                                  for n in zoo.names]] * 2
    assert reports[1]["models"][0]["report"]["settings"]["jobs"] == 2  # serial on 2 cores: the pipeline's own 2 jobs
    assert (pytester.path / "parallel.xml").read_text().count("<testcase") == 12


def test_with_every_worker_running_every_item_a_golden_set_is_recorded_and_regenerated_once(template: Path, pytester: pytest.Pytester) -> None:
    """``--dist each``: both workers run every item, the worst case for a once-only golden workflow.
    Without the session lock the second worker would find the set just recorded and pass, and a
    regen would re-approve twice (the second time saying "left unchanged")."""
    zoo = _project(template, pytester, 1)
    golden = zoo.folder / "mlp0" / "golden"
    result, items = _run(pytester, "-n", "2", "--dist", "each")
    assert len(items) == 6 and {v for _, v, _, _ in items} == {"FAILED"} and {w for w, *_ in items} == {"gw0", "gw1"}
    assert _failure_bodies_saying(result, "was missing: recorded 12 inputs") == 6  # 3 items x 2 workers
    first = (golden / "manifest.json").read_bytes()

    break_model(zoo.folder, "mlp0")
    result, items = _run(pytester, "-n", "2", "--dist", "each", "--export-check-regen")
    out = result.stdout.str()
    assert len(items) == 6 and {v for _, v, _, _ in items} == {"FAILED"}
    assert _failure_bodies_saying(result, f"golden set {golden} re-approved from") == 6
    assert _failure_bodies_saying(result, "checkpoint sha256 ") == 1  # the diff, once per model over both workers (issue 16.6)
    assert _failure_bodies_saying(result, "its diff is shown once, under mlp0/model.pth::") == 5
    assert "left unchanged" not in out
    assert (golden / "manifest.json").read_bytes() != first


def test_a_declared_model_that_cannot_be_collected_is_a_collection_error_under_xdist_too(template: Path, pytester: pytest.Pytester) -> None:
    """A declared checkpoint whose settings cannot be found (no --config, its own folder never read) fails its collection:
    under -n 2 that is pytest's collection error naming why, not an INTERNALERROR (the report's CallInfo could not cross)."""
    zoo = _project(template, pytester, 1)
    (pytester.path / "pyproject.toml").write_text(f'[tool.pytest.ini_options]\nexport_check_models = ["{zoo.names[0]}/model.pth"]\n')
    result, _ = _run(pytester, "-n", "2")
    text = result.stdout.str()
    assert "INTERNALERROR" not in text and "INTERNALERROR" not in result.stderr.str(), text[-3000:]
    assert result.ret != 0 and "no architecture given and no settings file read" in text, text[-3000:]

