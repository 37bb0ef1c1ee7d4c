"""A failing run's report ends with its next steps (issue 29.4), on reports judged from real metrics: the
approve command for a drifted checkpoint, the settings that would change an artifact's verdict, the
inputs whose top-1 changed (counted here with numpy, beside the tool), the documentation; every line
fits the width COLUMNS asks for, in a pipe too."""

from __future__ import annotations

import io
import re

import numpy as np

from export_check.compare import compare
from export_check.files import FileInfo
from export_check.gates import Thresholds
from export_check.records import Observation
from export_check.report.next_steps import next_steps
from export_check.report.text import DEFAULT_WIDTH, render, style_for
from export_check.results import GoldenSummary, Report
from export_check.run.judge import judge_rows

NAMES = [f"digit{i:02d}.png" for i in range(32)]


def _report(eager_shift: float, int8_noise: float, settings_files: tuple[str, ...] = ()) -> tuple[Report, np.ndarray]:
    rng = np.random.default_rng(0)
    reference = rng.normal(0, 4, (32, 10))
    eager = reference.copy()
    eager[:, 0] += eager_shift  # class 0 raised everywhere: the top-1 moves wherever the shift overtakes the top class
    observations = [
        Observation("eager", "eager", "golden", compare(reference, eager)),
        Observation("onnx", "float", "eager", compare(eager, eager), artifact=FileInfo("a.onnx", 1000, "1" * 64)),
        Observation("onnx-int8-dynamic", "int8", "eager", compare(eager, eager + rng.normal(0, int8_noise, eager.shape)),
                    artifact=FileInfo("b.onnx", 500, "2" * 64)),
    ]
    report = Report(tool_version="0.1.0", created="2026-12-01T00:00:00+00:00", checkpoint=FileInfo("new weights.pth", 1, "f" * 64),
                    golden=GoldenSummary(path="/no/such/golden", inputs=32, manifest_sha256="e" * 64, created="",
                                         recorded_checkpoint_sha256=None, recorded_with=(), label_accuracy=None),
                    thresholds=Thresholds(), settings=(("arch", "models/net.py:Net"),), versions=(),
                    rows=tuple(judge_rows(observations, Thresholds())), seconds=1.0, out_dir="out", settings_files=settings_files)
    changed = np.flatnonzero(eager.argmax(axis=1) != reference.argmax(axis=1))
    return report, changed


def test_a_drifted_checkpoint_gets_the_approve_command_and_the_inputs_whose_top1_changed() -> None:
    report, changed = _report(eager_shift=3.0, int8_noise=1e-4)
    assert 0 < len(changed) < 32 and [r.status for r in report.rows] == ["fail", "pass", "pass"]
    lines = next_steps(report, NAMES)
    assert lines[0].startswith("next: eager differs from the approved golden set")
    assert ("`export-check golden approve 'new weights.pth' --arch models/net.py:Net --golden /no/such/golden --dry-run`" in lines[0])
    shown = [NAMES[i] for i in changed[:8]]
    assert lines[1] == f"top-1 changed on eager: {', '.join(shown)}" + (f", … {len(changed)} in all" if len(changed) > 8 else "")
    assert lines[-1] == 'docs: docs/tutorials/your-own-model.md ("When the model changes")'
    # the settings file names the arch and the golden set: the command needs neither
    with_settings, _ = _report(eager_shift=3.0, int8_noise=1e-4, settings_files=("pyproject.toml",))
    assert "`export-check golden approve 'new weights.pth' --dry-run`" in next_steps(with_settings, NAMES)[0]


def test_a_drifting_artifact_names_the_settings_of_its_gate_and_a_passing_run_has_no_next_step() -> None:
    report, _ = _report(eager_shift=0.0, int8_noise=2.0)
    assert [r.status for r in report.rows] == ["pass", "pass", "fail"]
    lines = next_steps(report, NAMES)
    assert lines[0].startswith("next: onnx-int8-dynamic drifts from eager beyond its int8 gate (relMAE<=5% & top1>=98%)")
    assert "loosen int8-max-relative-mae / int8-min-top1 in [tool.export-check] (--int8-max-relative-mae / --int8-min-top1)" in lines[0]
    assert lines[-1] == "docs: docs/reference/gates.md"
    passing, _ = _report(eager_shift=0.0, int8_noise=1e-4)
    assert passing.passed and next_steps(passing, NAMES) == [] and "next:" not in render(passing)


def test_the_report_ends_with_the_next_steps_and_every_line_fits_the_columns_asked_for_in_a_pipe() -> None:
    report, _ = _report(eager_shift=3.0, int8_noise=2.0)
    for columns in (60, 100):
        style = style_for(io.StringIO(), "never", environ={"COLUMNS": str(columns)})
        assert (style.width, style.wrap) == (columns, True)
        text = render(report, style)
        assert all(len(line) <= columns for line in text.splitlines()), [line for line in text.splitlines() if len(line) > columns]
        tail = text[text.index("FAILED:"):]
        assert re.search(r"next: eager differs", tail) and re.search(r"next: onnx-int8-dynamic drifts", tail)
        assert text.rstrip().splitlines()[-1].strip().endswith("docs/reference/gates.md")
    unset = style_for(io.StringIO(), "never", environ={})
    assert (unset.width, unset.wrap) == (DEFAULT_WIDTH, False)  # a CI log without COLUMNS: each reason stays on one line
