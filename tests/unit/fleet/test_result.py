"""fleet/result.py: a fleet's verdict and exit code from its models' reports and errors."""

from __future__ import annotations

import json

from export_check.fleet.result import INTERNAL, LOST, USAGE, FleetReport, ModelResult


def report(passed: bool, exit_code: int, **counts: int) -> dict:
    return {"passed": passed, "exit_code": exit_code, "counts": counts}


PASSED = ModelResult("a", "a.pth", report(True, 0, **{"pass": 5, "not-applicable": 1}), seconds=1.5, worker="h:1")
FAILED = ModelResult("b", "b.pth", report(False, 1, **{"pass": 3, "fail": 2}))
RECORDED = ModelResult("c", "c.pth", report(True, 0, **{"pass": 4}), golden_note="recorded the golden set in this session")
BAD_INPUT = ModelResult("d", "d.pth", None, error="d.pth: checkpoint not found", error_kind=USAGE)
CRASHED = ModelResult("e", "e.pth", None, error="worker died", error_kind=LOST, attempts=2)


def test_each_models_status_and_exit_code() -> None:
    assert [(m.status, m.exit_code) for m in (PASSED, FAILED, RECORDED, BAD_INPUT, CRASHED)] == [
        ("pass", 0), ("fail", 1), ("fail", 1), ("error", 2), ("error", 1)]
    assert ModelResult("f", "f", None, error="bug", error_kind=INTERNAL).exit_code == 1
    assert PASSED.row_counts() == {"pass": 5, "fail": 0, "error": 0, "not-applicable": 1}
    assert BAD_INPUT.row_counts() == {"pass": 0, "fail": 0, "error": 0, "not-applicable": 0}


def test_a_result_round_trips_through_json() -> None:
    for result in (PASSED, RECORDED, CRASHED):
        assert ModelResult.from_json(json.loads(json.dumps(result.to_json()))) == result


def fleet(*models: ModelResult) -> FleetReport:
    return FleetReport(models=models, seconds=3.0, executor="serial", created="2026-01-01T00:00:00+00:00", tool_version="0.1.0")


def test_the_fleet_exit_code_is_the_worst_models() -> None:
    assert fleet(PASSED).passed and fleet().exit_code == 0
    assert fleet(PASSED, FAILED).exit_code == 1 and fleet(PASSED, FAILED, BAD_INPUT).exit_code == 2
    assert not fleet(PASSED, RECORDED).passed


def test_counts_add_up_over_models_and_rows() -> None:
    everyone = fleet(PASSED, FAILED, RECORDED, BAD_INPUT, CRASHED)
    assert everyone.counts() == {"pass": 1, "fail": 2, "error": 2}
    assert everyone.row_counts() == {"pass": 12, "fail": 2, "error": 0, "not-applicable": 1}
    assert everyone.counts_text() == "5 models: 1 passed, 2 failed, 2 errors"
    assert fleet(PASSED).counts_text() == "1 model: 1 passed, 0 failed, 0 errors"
