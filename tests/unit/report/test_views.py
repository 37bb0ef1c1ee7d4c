"""report/views.py: the small formatters of a row's diagnostics that every view shares."""

from __future__ import annotations

import pytest

from export_check.compare import compare
from export_check.gates import Gate
from export_check.records import BatchSizeRun, Latency
from export_check.report.views import (
    checks_description,
    diagnostic_lines,
    latency_ms,
    latency_text,
    output_lines,
    rerun_text,
    shapes_text,
    size_text,
    top1_text,
)
from export_check.results import FAIL, PASS, Diagnostics, OutputRow, Rerun, ShapeCheck

from .rows import PAIR, REFERENCE, candidate, report, row


@pytest.mark.parametrize(("size", "text"), [(None, "-"), (0, "0B"), (1023, "1023B"), (1024, "1.0KB"), (315_187, "307.8KB"),
                                            (5 * 1024**2, "5.0MB"), (3 * 1024**4, "3072.0GB")])
def test_size_text(size: int | None, text: str) -> None:
    assert size_text(size) == text


def test_top1_text_is_a_dash_where_nothing_was_counted() -> None:
    moved = compare(REFERENCE, candidate({(1, 0): 100.0}))
    assert top1_text(moved) == "75.0%" and top1_text(None) == "-"
    assert top1_text(compare(REFERENCE, REFERENCE, kind="values")) == "-"


def diagnostics(shapes_ok: bool = True, rerun_max: float = 0.0, rerun_ok: bool = True) -> Diagnostics:
    runs = (BatchSizeRun(1, 4, mae=0.0), BatchSizeRun(3, 4, mae=0.0), BatchSizeRun(16, 4, mae=0.0))
    return Diagnostics(shapes=ShapeCheck(16, 1e-5, runs, () if shapes_ok else ("batch 3 moves",)),
                       rerun=Rerun(2, 4, rerun_max, 1e-6, () if rerun_ok else ("differs",)),
                       latency=Latency(0.012345, 16, 7, 2, (0.01, 0.012)), notes=("fp16 ran on CPU",))


def test_diagnostic_cells() -> None:
    good = row(diagnostics=diagnostics())
    assert (shapes_text(good), rerun_text(good), latency_text(good), latency_ms(good)) == ("ok", "0", "0.0123", 0.012345)
    bad = row(diagnostics=diagnostics(shapes_ok=False, rerun_max=2.5e-5, rerun_ok=False))
    assert (shapes_text(bad), rerun_text(bad)) == ("FAIL", "2.5e-05 FAIL")
    assert rerun_text(row(diagnostics=diagnostics(rerun_max=3e-7))) == "3.0e-07"
    none = row()
    assert (shapes_text(none), rerun_text(none), latency_text(none), latency_ms(none)) == ("-", "-", "-", None)
    assert shapes_text(row(name="eager", family="eager", diagnostics=diagnostics())) == "-"


def test_output_lines_show_each_output_and_what_was_left_out() -> None:
    gate = Gate(max_mae=1e-5, atol=PAIR[0], rtol=PAIR[1])
    boxes = compare(REFERENCE, candidate({(0, 1): 0.5}), kind="values", tolerances=(PAIR,))
    scores = compare(REFERENCE, REFERENCE, tolerances=(PAIR,))
    multi = row(gate=gate, status=FAIL, outputs=(OutputRow("boxes", FAIL, boxes, ("MAE 1.25e-02 > 1e-05",)),
                                                   OutputRow("scores", PASS, scores, ())), not_compared=("debug",))
    assert output_lines(multi) == [
        "onnx / boxes: FAIL MAE 1.25e-02, max 5.00e-01, relative MAE 0.81%, allclose 1/40 outside (MAE 1.25e-02 > 1e-05)",
        "onnx / scores: PASS MAE 0.00e+00, max 0.00e+00, relative MAE 0.00%, top-1 agreement 100.0%, allclose 0/40 outside",
        "onnx: outputs not compared (excluded by a setting): debug",
    ]
    assert output_lines(row()) == []


def test_diagnostic_lines_and_the_footer_sentence() -> None:
    rows = (row(name="eager", family="eager"), row(notes=("TracerWarning: converting a tensor to a Python boolean", "DeprecationWarning: old"),
                                                   diagnostics=diagnostics()))
    assert diagnostic_lines(report(*rows)) == ["warn onnx: TracerWarning: converting a tensor to a Python boolean",
                                               "note onnx: fp16 ran on CPU"]
    assert checks_description(report(*rows)) == ("batch sizes 1, 3, 16, each against eager at the same batch size under the row's gate; "
                                                 "determinism: 2 runs differ by <= 1e-06; latency: median of 7 runs, 2 threads, never gates")
    assert checks_description(report(row())) == "diagnostics did not run"
