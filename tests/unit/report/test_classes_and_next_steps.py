"""Issue 44, item 8: every view says what to do next, and a model with several outputs keeps its classes' figures in the
tables and the chart when its worst output (its headline) is a ``values`` one; a gate sentence never reads "1 < 1"."""

from __future__ import annotations

import dataclasses

import numpy as np

from export_check.compare import ErrorAccumulator, compare
from export_check.gates import Gate
from export_check.records import Latency
from export_check.report import html, markdown
from export_check.report.html import tradeoff_point
from export_check.report.views import classes_metrics, labelled, row_accuracy_text, row_top1_text
from export_check.results import FAIL, PASS, Diagnostics, OutputRow

from .rows import REFERENCE, candidate, report, row


def _scores() -> object:
    """Class scores with labels: 3 of the 4 samples' labels are the reference's argmax, and the candidate flips one of those."""
    labels = np.argmax(REFERENCE, axis=1).copy()
    labels[3] = (labels[3] + 1) % 10
    flipped = REFERENCE.copy()
    flipped[0, 0] += 10.0  # sample 0's argmax moves to class 0
    accumulator = ErrorAccumulator("logits")
    accumulator.add(REFERENCE, flipped, labels)
    return accumulator.result()


def _detector(status: str = PASS):
    """A detector's row: boxes (values, its worst output: the headline) and scores (logits with labels)."""
    boxes = compare(REFERENCE, candidate({(0, 1): 0.5}), kind="values")
    scores = _scores()
    headline = dataclasses.replace(boxes, output="boxes")
    latency = Latency(ms_per_image=0.5, batch=4, repeats=5, threads=1, samples_ms=(0.5,) * 5)
    made = row(status=status, outputs=(OutputRow("boxes", status, boxes, ()), OutputRow("scores", PASS, scores, ())),
               reasons=("boxes: MAE 1.25e-02 > 1e-05",) if status == FAIL else (), diagnostics=Diagnostics(latency=latency))
    return dataclasses.replace(made, metrics=headline)


def test_the_classes_figures_come_from_the_output_that_holds_them_named() -> None:
    detector = _detector()
    m = classes_metrics(detector)
    assert m is not None and m.output == "scores" and m.labelled == 4
    # by hand: the reference gets 3 of 4 labels right, the candidate 2 (sample 0 flipped); top-1 agreement 3 of 4
    assert (m.label_correct, m.reference_label_correct) == (2, 3) and m.top1_agreement == 0.75
    assert row_top1_text(detector) == "75.0% (scores)" and row_accuracy_text(detector) == "50.0% (-25.0) (scores)"
    assert labelled(report(detector))
    point = tradeoff_point(detector)
    assert not isinstance(point, str) and point[1] == 50.0 and point[2] == "accuracy on the golden labels"
    # one output, or a headline that holds the classes itself: the headline's figures, unnamed
    plain = row()
    assert classes_metrics(plain) is plain.metrics and row_top1_text(plain) == "100.0%"
    boxes_only = row(kind="values")
    assert tradeoff_point(boxes_only) == "latency not measured" and row_top1_text(boxes_only) == "-"


def test_markdown_and_html_tables_and_chart_keep_the_detectors_accuracy() -> None:
    text = markdown.render(report(_detector(), row("eager", family="eager")))
    line = next(x for x in text.splitlines() if x.startswith("| ✅ | **onnx**"))
    assert "75.0% (scores)" in line and "50.0% (-25.0) (scores)" in line
    page = html.render(report(_detector(), row("eager", family="eager")))
    assert "<td class='n'>50.0% (-25.0) (scores)</td>" in page and "onnx 50.0%, 0.5 ms" in page
    assert "its output has no classes" not in page


def test_a_failing_run_ends_with_its_next_steps_in_markdown_and_html() -> None:
    failing = report(_detector(FAIL), row("eager", family="eager"))
    text = markdown.render(failing)
    steps = text[text.index("### Next steps"):]
    assert "- next: onnx drifts from eager beyond its float gate (MAE&lt;=1e-05)" in steps and "- docs: docs/reference/gates.md" in steps
    page = html.render(failing)
    assert "<h2>Next steps</h2><ul class='next'><li>next: onnx drifts from eager beyond its float gate (MAE&lt;=1e-05)" in page
    passing = report(row(), row("eager", family="eager"))
    assert "Next steps" not in markdown.render(passing) and "Next steps" not in html.render(passing)


def test_a_cosine_just_under_its_bound_says_the_gap_not_one_below_one() -> None:
    gate = Gate(max_mae=1.0, min_cosine=1.0)
    nearly = REFERENCE.copy()
    nearly[0, 1] += 1e-3  # one sample's cosine 1 - 3.6e-8: prints as 1 with 6 digits
    from export_check import gates

    reasons = gates.reasons(compare(REFERENCE, nearly, kind="values", streams=gates.STREAMS), gate)
    assert len(reasons) == 1 and reasons[0].startswith("cosine similarity 1 is below 1 by ") and " < " not in reasons[0]
    gap = float(reasons[0].split(" by ")[1].split()[0])
    assert 1e-9 < gap < 1e-6
