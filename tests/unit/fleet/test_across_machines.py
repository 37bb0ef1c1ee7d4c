"""The merged report's comparison of the build machine and the targets (fleet/views.py, issue 28.5):
per artifact both verdicts and MAEs, and a flag where the verdict differs."""

from __future__ import annotations

from export_check.fleet.result import FleetReport, ModelResult
from export_check.fleet.views import across_machines, render_markdown, render_text


def _report(target: str | None, rows: list[tuple[str, str, float | None]]) -> dict:
    return {"checkpoint": {"path": "m.pth", "sha256": "ab" * 32}, "target": target, "passed": True, "exit_code": 0, "counts": {},
            "rows": [{"name": n, "status": s, "metrics": None if mae is None else {"mae": mae}, "reasons": []} for n, s, mae in rows]}


def _fleet(*reports: dict) -> FleetReport:
    models = tuple(ModelResult(name=r["checkpoint"]["path"] + (f" @ {r['target']}" if r["target"] else ""), checkpoint="m.pth", report=r,
                               seconds=1.0) for r in reports)
    return FleetReport(models=models, seconds=2.0, executor="merge of 2 reports", created="2026-12-02T00:00:00+00:00", tool_version="0")


def test_a_verdict_that_differs_on_a_target_is_flagged_in_every_view() -> None:
    build = _report(None, [("eager", "pass", 0.0), ("onnx", "pass", 8.5e-7), ("onnx-int8-dynamic", "pass", 0.041),
                           ("torchscript-trace", "pass", 0.0)])
    board = _report("arm-board", [("onnx", "pass", 8.5e-7), ("onnx-int8-dynamic", "fail", 0.093), ("torchscript-trace", "not-applicable", None)])
    fleet = _fleet(build, board)
    found = {c["artifact"]: c for c in across_machines(fleet)}
    assert [c["differs"] for c in found.values()] == [False, True, False]  # not applicable there is no differing verdict
    assert found["onnx-int8-dynamic"] == {"artifact": "onnx-int8-dynamic", "target": "arm-board", "target_status": "fail",
                                          "target_mae": "9.30e-02", "build_status": "pass", "build_mae": "4.10e-02", "differs": True}
    text = render_text(fleet)
    assert "onnx-int8-dynamic: build PASS MAE 4.10e-02; arm-board FAIL MAE 9.30e-02  <- verdict differs" in text
    assert "- onnx-int8-dynamic: build PASS MAE 4.10e-02; arm-board FAIL MAE 9.30e-02  <- verdict differs" in render_markdown(fleet)


def test_a_target_without_its_build_in_the_merge_says_so() -> None:
    (only,) = across_machines(_fleet(_report("edge", [("onnx", "pass", 1e-7)])))
    assert only["build_status"] is None and not only["differs"]
    assert "onnx: build not in the merged build report; edge PASS MAE 1.00e-07" in render_text(_fleet(_report("edge", [("onnx", "pass", 1e-7)])))


def test_the_targets_of_one_build_stand_side_by_side_on_one_line_per_artifact() -> None:
    """The build, a CPU target and a browser (replay --target node|browser): one line per artifact, the targets in merge order."""
    build = _report(None, [("onnx", "pass", 8.52e-7), ("onnx-int8-dynamic", "pass", 0.0579)])
    node = _report("node", [("onnx", "pass", 8.52e-7), ("onnx-int8-dynamic", "pass", 0.0579)])
    browser = _report("browser", [("onnx", "pass", 6.5e-7), ("onnx-int8-dynamic", "error", None)])
    fleet = _fleet(build, node, browser)
    lines = render_text(fleet).splitlines()
    assert "  onnx: build PASS MAE 8.52e-07; node PASS MAE 8.52e-07; browser PASS MAE 6.50e-07" in lines
    assert "  onnx-int8-dynamic: build PASS MAE 5.79e-02; node PASS MAE 5.79e-02; browser ERROR MAE -  <- verdict differs on browser" in lines
    assert [(c["artifact"], c["target"]) for c in across_machines(fleet)] == [("onnx", "node"), ("onnx-int8-dynamic", "node"),
                                                                             ("onnx", "browser"), ("onnx-int8-dynamic", "browser")]
