"""report/trend.py: the history page: one marker per measured value, hollow when cached, red-ringed when failed."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from export_check.history import HistoryRow, HistoryRun
from export_check.report.trend import BAD, render, trend_chart, write


def run(n: int, mae: float | None, status: str = "pass", cached: bool = False, latency: float | None = 2.0) -> HistoryRun:
    return HistoryRun(f"t{n}", "0.1.0", "c" * 64, "g" * 64, status == "pass",
                      (HistoryRow("onnx", status, mae, None, 1.0, latency, 10, cached),), (), ci_run=str(n), ci_url=f"https://ci/{n}")


RUNS = [run(0, 1e-6), run(1, 0.0), run(2, 2e-4, status="fail"), run(3, 3e-6, cached=True), run(4, None), run(5, float("inf"))]


def circles(svg: str) -> list[ET.Element]:
    return list(ET.fromstring(svg).iter("circle"))


def test_a_marker_per_finite_value_filled_hollow_or_red() -> None:
    svg = trend_chart("MAE", RUNS, ["onnx"], lambda r: r.mae, log=True, unit="")
    marks = circles(svg)
    assert len(marks) == 4  # None and inf are not drawn
    assert [m.get("data-cached") for m in marks] == ["false", "false", "false", "true"]
    assert marks[3].get("fill") == "#ffffff" and marks[2].get("stroke") == BAD and marks[0].get("stroke") != BAD
    tips = [m.find("title").text for m in marks]  # type: ignore[union-attr]
    assert tips[3].startswith("onnx run 4: 3e-06") and tips[3].endswith("(cached), pass")


def test_log_scale_draws_zero_at_the_floor_and_larger_values_higher() -> None:
    marks = circles(trend_chart("MAE", RUNS, ["onnx"], lambda r: r.mae, log=True, unit=""))
    y = [float(m.get("cy") or 0) for m in marks]
    assert y[1] > y[0] > y[3] > y[2]  # 0 lowest, then 1e-6, 3e-6, 2e-4 (svg y grows downwards)
    xs = [float(m.get("cx") or 0) for m in marks]
    assert xs == sorted(xs)


def test_linear_scale_is_proportional() -> None:
    runs = [run(0, 1e-6, latency=1.0), run(1, 1e-6, latency=2.0), run(2, 1e-6, latency=4.0)]
    y = [float(m.get("cy") or 0) for m in circles(trend_chart("latency", runs, ["onnx"], lambda r: r.latency_ms, log=False, unit="ms"))]
    base = 260
    assert abs((base - y[1]) / (base - y[0]) - 2.0) < 0.02
    assert abs((base - y[2]) / (base - y[0]) - 4.0) < 0.02


def test_the_page_is_self_contained_and_escapes_names(tmp_path: Path) -> None:
    runs = [HistoryRun("t", "0.1.0", "c" * 64, "g" * 64, None, (HistoryRow("<b>&", "pass", 1e-6, None, None, None, None),), ())]
    page = render(runs + RUNS, last=3)
    assert "<script" not in page and "&lt;b&gt;&amp;" in page and "<b>&" not in page
    assert "7 runs, the last 3 shown" in page
    assert len(re.findall(r"<tr><td>", page)) == 3 and "<td>5</td>" in page
    assert "<a href='https://ci/4'>4</a>" in page
    write(RUNS, tmp_path / "h.html", artifact="onnx")
    assert (tmp_path / "h.html").read_text().startswith("<!DOCTYPE html>")
