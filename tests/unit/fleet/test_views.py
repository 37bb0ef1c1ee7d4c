"""fleet/views.py: every view of a fleet names each model that did not pass and why; the JUnit counts add up."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from export_check.fleet.result import USAGE, FleetReport, ModelResult
from export_check.fleet.views import SCHEMA, problem_lines, render_json, render_junit, render_markdown, render_text, settings_files


def report(rows: list[dict], files: list[str] | None = None) -> dict:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    passed = not any(r["status"] in ("fail", "error") for r in rows)
    return {"passed": passed, "exit_code": 0 if passed else 1, "counts": counts, "rows": rows,
            **({"settings_files": files} if files is not None else {})}


def row(name: str, status: str, *reasons: str, mae: float | None = 1e-7) -> dict:
    return {"name": name, "status": status, "reasons": list(reasons), "metrics": None if mae is None else {"mae": mae},
            "build_seconds": 1.0, "replay_seconds": 0.5}


FLEET = FleetReport(models=(
    ModelResult("resnet", "r.pth", report([row("eager", "pass"), row("onnx", "fail", "MAE 2.0e-04 > 1e-05", mae=2e-4),
                                           row("openvino", "not-applicable", "openvino is not installed", mae=None)],
                                          ["pyproject.toml"]), seconds=12.25, worker="host:1"),
    ModelResult("mlp|x", "m.pth", report([row("eager", "pass"), row("onnx", "pass")], ["pyproject.toml", "fleet.toml"]), seconds=3.0),
    ModelResult("broken", "b.pth", None, error="b.pth: checkpoint not found\x01", error_kind=USAGE),
), seconds=20.0, executor="processes x2", created="2026-01-01T00:00:00+00:00", tool_version="0.1.0", shard="1/2")


def test_problem_lines_name_each_failing_row_and_stopped_model() -> None:
    assert problem_lines(FLEET) == ["resnet / onnx: FAIL MAE 2.0e-04 > 1e-05", "broken: ERROR b.pth: checkpoint not found\x01"]
    assert settings_files(FLEET) == ("pyproject.toml", "fleet.toml")


def test_json_holds_the_verdict_and_every_model() -> None:
    doc = json.loads(render_json(FLEET))
    assert (doc["schema"], doc["passed"], doc["exit_code"], doc["shard"]) == (SCHEMA, False, 2, "1/2")
    assert doc["counts"] == {"pass": 1, "fail": 1, "error": 1} and doc["row_counts"]["not-applicable"] == 1
    assert [m["name"] for m in doc["models"]] == ["resnet", "mlp|x", "broken"]


def test_junit_counts_add_up_and_a_stopped_model_is_one_errored_check() -> None:
    root = ET.fromstring(render_junit(FLEET).split("\n", 1)[1])
    assert {k: root.get(k) for k in ("tests", "failures", "errors")} == {"tests": "6", "failures": "1", "errors": "1"}
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["resnet"].get("skipped") == "1" and suites["resnet"].find("testcase[@name='onnx']/failure") is not None
    failure = suites["resnet"].find("testcase[@name='onnx']/failure")
    assert failure is not None and failure.text == "MAE 2.00e-04\nMAE 2.0e-04 > 1e-05"
    error = suites["broken"].find("testcase[@name='check']/error")
    assert error is not None and error.get("type") == USAGE and "\ufffd" in (error.get("message") or "")  # no control byte in XML
    assert suites["resnet"].find("properties/property").get("value") == "pyproject.toml"  # type: ignore[union-attr]
    assert suites["resnet"].find("testcase[@name='onnx']").get("time") == "1.500"  # type: ignore[union-attr]


def test_text_and_markdown_views() -> None:
    text = render_text(FLEET)
    assert text.splitlines()[0] == "export-check fleet: 3 models: 1 passed, 1 failed, 1 error (shard 1/2)"
    assert "not passing:" in text and "  resnet / onnx: FAIL MAE 2.0e-04 > 1e-05" in text
    assert text.splitlines()[-1] == "FAIL: 3 models: 1 passed, 1 failed, 1 error; rows 3 passed, 1 failed, 0 errors; processes x2, 20.0 s"
    assert "1 passed, 1 failed, 0 errors, 1 n/a" in text
    md = render_markdown(FLEET)
    assert md.startswith("## export-check fleet: FAILED\n") and "| `mlp\\|x` | ✅ pass |" in md and "### Not passing" in md
