"""The terminal table's layout rules, on reports judged from real metrics (numpy arrays through the
judge): every width from 40 to 300 columns, colour precedence, nothing left out unsaid."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.compare import compare
from export_check.files import FileInfo
from export_check.gates import Thresholds
from export_check.records import Observation
from export_check.report.text import AGREEMENT, COLUMNS, Style, render, use_colour
from export_check.report.views import agreement_heading
from export_check.results import GoldenSummary, Report
from export_check.run.judge import judge_rows

SGR = re.compile(r"\x1b\[[0-9;]*m")
LONG = "/very/long/path/" + "nested-folder/" * 12 + "model.pth"


def _report(thresholds: Thresholds) -> Report:
    rng = np.random.default_rng(0)
    reference = rng.normal(0, 4, (32, 10))
    pairs = thresholds.tolerances()
    observations = [
        Observation("eager", "eager", "golden", compare(reference, reference + 1e-7, tolerances=pairs)),
        Observation("torchscript-trace", "float", "eager", compare(reference, reference, tolerances=pairs),
                    artifact=FileInfo("a.pt", 389_000, "0" * 64)),
        Observation("onnx", "float", "eager", compare(reference, reference + rng.normal(0, 1e-3, reference.shape), tolerances=pairs),
                    artifact=FileInfo("a.onnx", 315_187, "1" * 64)),
        Observation("onnx-int8-dynamic", "int8", "eager", compare(reference, reference + rng.normal(0, 0.05, reference.shape),
                                                                   tolerances=pairs), artifact=FileInfo("b.onnx", 98_000, "2" * 64)),
        Observation("torchao-int8-dynamic", "int8", "eager", None, error="building failed: " + " ".join(["a long exporter message"] * 8)),
    ]
    rows = judge_rows(observations, thresholds)
    return Report(tool_version="0.1.0", created="2026-12-01T00:00:00+00:00", checkpoint=FileInfo(LONG, 1, "f" * 64),
                  golden=GoldenSummary(path="/golden", inputs=32, manifest_sha256="e" * 64, created="", recorded_checkpoint_sha256=None,
                                       recorded_with=(), label_accuracy=None),
                  thresholds=thresholds, settings=(), versions=(), rows=tuple(rows), seconds=1.5, out_dir="/tmp/" + "x" * 150)


PLAIN = _report(Thresholds())
TOLERANT = _report(Thresholds.from_options({"atol": 1e-4, "rtol": 1e-3, "int8-max-abs": 0.1}))


def _table(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("verdict"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("gates: "))
    return lines[start:end]


@settings(max_examples=80, deadline=None)
@given(width=st.integers(40, 300), verbose=st.booleans(), tolerant=st.booleans(), colour=st.booleans())
def test_every_line_fits_a_terminal_the_verdict_comes_first_and_nothing_is_left_out_unsaid(width, verbose, tolerant, colour) -> None:
    report = TOLERANT if tolerant else PLAIN
    text = render(report, Style(width=width, colour=colour, verbose=verbose, wrap=True))
    plain = SGR.sub("", text)
    assert all(len(line) <= width for line in plain.splitlines()), [line for line in plain.splitlines() if len(line) > width]
    assert bool(SGR.search(text)) == colour
    table = _table(plain)
    header = table[0].split()
    assert header[:3] == ["verdict", "artifact", "MAE"]
    rows = [line.split() for line in table[2:] if not line.startswith((" ", "(not shown"))]
    assert [(r[0], r[1]) for r in rows] == [({"pass": "PASS", "fail": "FAIL", "error": "ERROR"}[row.status], row.name)
                                           for row in report.rows]
    # per-pos: only beside a CTC output's decoded agreement, which these reports have none of
    # the agreement column is headed by what its figures count: top-1 agreements in these reports
    assert agreement_heading(report) == "top-1"
    title = {AGREEMENT: "top-1"}
    expected = {title.get(c.title, c.title) for c in COLUMNS
                if (verbose or not c.verbose) and (tolerant or c.title != "allclose") and c.title != "per-pos"}
    titles = {title.get(c.title, c.title) for c in COLUMNS}
    shown = {t for t in titles if re.search(rf"(^|  ){re.escape(t)}(  |$)", table[0])}
    if verbose:  # what does not fit is under each row, named
        under = {t for t in titles for line in table[2:] if line.startswith("    ") and f"{t} " in line}
        assert shown | under >= expected
    else:
        start = next((i for i, line in enumerate(table) if line.startswith(f"(not shown at {width} columns: ")), len(table))
        hint = " ".join(table[start:])
        assert shown | {t for t in titles if t in hint} >= expected
        if width >= 110:
            assert shown >= expected and not hint


def test_reasons_stay_whole_when_not_a_terminal_and_wrap_on_one() -> None:
    reason = next(r for r in PLAIN.rows if r.name == "torchao-int8-dynamic").reasons[0]
    assert f"ERROR torchao-int8-dynamic: {reason}" in render(PLAIN, Style(width=80)).splitlines()
    wrapped = render(PLAIN, Style(width=80, wrap=True))
    assert f"ERROR torchao-int8-dynamic: {reason}" not in wrapped and " ".join(wrapped.split()).count(" ".join(reason.split())) == 1


def test_colours_are_the_verdicts() -> None:
    text = render(PLAIN, Style(colour=True))
    assert "\x1b[32mPASS" in text and "\x1b[31mFAIL" in text and "\x1b[33mERROR" in text and "\x1b[1;31mFAILED:" in text


@pytest.mark.parametrize(
    "choice, isatty, env, expected",
    [
        ("auto", True, {}, True), ("auto", False, {}, False), ("auto", True, {"TERM": "dumb"}, False),
        ("auto", True, {"NO_COLOR": "1"}, False), ("auto", True, {"NO_COLOR": ""}, True), ("auto", False, {"FORCE_COLOR": "1"}, True),
        ("auto", False, {"FORCE_COLOR": ""}, False), ("auto", True, {"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),
        ("always", False, {"NO_COLOR": "1"}, True), ("never", True, {"FORCE_COLOR": "1"}, False), ("never", True, {}, False),
    ],
)
def test_colour_precedence_flag_then_no_color_then_force_color_then_the_terminal(choice, isatty, env, expected) -> None:
    assert use_colour(choice, isatty, env) is expected


def test_a_values_row_shows_no_top1_figure_in_any_view() -> None:
    """No argmax is taken on a ``values`` output (regression, energies): no view shows a top-1 figure for
    it (it once showed 100.0% and ``top1_agreement: 1.0``); the logits row beside it keeps its own."""
    import json

    import jsonschema

    from export_check.report import html, json_report, junit, markdown

    rng = np.random.default_rng(0)
    reference = rng.normal(0, 4, (32, 10))
    shifted = reference.copy()
    shifted[:3] = shifted[:3, ::-1]  # three samples' argmax moves: 29 of 32 agree
    observations = [
        Observation("eager", "eager", "golden", compare(reference, reference, kind="values")),
        Observation("onnx", "float", "eager", compare(reference, shifted, kind="logits"), artifact=FileInfo("a.onnx", 1000, "1" * 64)),
    ]
    report = Report(tool_version="0.1.0", created="2026-12-01T00:00:00+00:00", checkpoint=FileInfo("m.pth", 1, "f" * 64),
                    golden=GoldenSummary(path="/golden", inputs=32, manifest_sha256="e" * 64, created="", recorded_checkpoint_sha256=None,
                                         recorded_with=(), label_accuracy=None),
                    thresholds=Thresholds(), settings=(), versions=(), rows=tuple(judge_rows(observations, Thresholds())), seconds=1.0,
                    out_dir="/tmp/out")
    header, _, eager, onnx = _table(render(report, Style(width=200, colour=False)))[:4]
    top1 = header.index("top-1")
    assert eager[top1:].split()[0] == "-" and onnx[top1:].split()[0] == f"{29 / 32:.1%}"
    document = json.loads(json_report.render(report))
    jsonschema.validate(document, json_report.schema(), cls=jsonschema.Draft202012Validator)
    assert [r["metrics"]["top1_agreement"] for r in document["rows"]] == [None, 29 / 32]
    assert "100.0%" not in markdown.render(report) and "100.0%" not in html.render(report)
    assert "| - |" in markdown.render(report)
    assert "top1_agreement: -" in junit.render(report) and "top1_agreement: 1" not in junit.render(report)


def test_a_run_that_judged_nothing_never_passes_in_any_view() -> None:
    """Issue 47: every row not applicable (a replay on a target without any of the bundle's runtimes, say) judged
    nothing: exit 1 and a verdict that says so, never PASSED."""
    from export_check.report.markdown import render as render_markdown
    from export_check.results import NOT_APPLICABLE

    from .rows import report, row

    nothing = report(row("onnx", status=NOT_APPLICABLE), row("coreml", status=NOT_APPLICABLE))
    assert (nothing.passed, nothing.exit_code, nothing.judged) == (False, 1, False)
    text = render(nothing, Style(width=200))
    assert text.splitlines()[-1].startswith("FAILED: nothing judged (0 passed, 0 failed, 0 errors, 2 not applicable)")
    assert "FAILED" in render_markdown(nothing)
    judged = report(row("onnx"), row("coreml", status=NOT_APPLICABLE))
    assert (judged.passed, judged.exit_code) == (True, 0) and judged.counts_text() == "1 passed, 0 failed, 0 errors, 1 not applicable"
