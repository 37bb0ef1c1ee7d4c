"""Every report format is a view of the same Report: JUnit (schema-valid), Markdown, HTML (rendered in
headless Chromium), history; and progress lines that stay clean in CI logs."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO, TESTS
from export_check.artifacts import DEFAULT_KINDS
from export_check.cli import main
from export_check.config import RunConfig
from export_check.gates import Gate, Thresholds
from export_check.history import HistoryError, load, parse_line, render_trend
from export_check.progress import ProgressLine
from export_check.report import html, junit, markdown
from export_check.run.pipeline import run_check

XSD = TESTS / "data" / "junit-10.xsd"


@pytest.fixture(scope="module")
def passing(tmp_path_factory):
    """The bundled default: the default kinds, everything passes; with --diagnose, so the passing int8 rows
    carry their per-layer tables too."""
    return run_check(RunConfig(checkpoint=DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN,
                               out_dir=tmp_path_factory.mktemp("pass"), diagnose=True))


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    """The same model held to MAE 1e-9: ONNX's real float drift (~1e-6) fails, with a divergence
    diagnosis; plus one artifact row turned into an error to exercise that view."""
    strict = Gate(max_mae=1e-9)
    report = run_check(RunConfig(checkpoint=DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN,
                                 out_dir=tmp_path_factory.mktemp("fail"), kinds=("torchscript-trace", "onnx"),
                                 thresholds=Thresholds().with_gates(float=strict)))
    trace = report.row("torchscript-trace")
    broken = dataclasses.replace(trace, status="error", metrics=None, diagnostics=None,
                                 reasons=('reloading x.pt failed: RuntimeError: <bad> & "quoted" \x07 bell | pipe',))
    return dataclasses.replace(report, rows=tuple(broken if r is trace else r for r in report.rows))


def _schema():
    from lxml import etree

    return etree.XMLSchema(etree.parse(str(XSD)))


def _validate(text: str):
    from lxml import etree

    doc = etree.fromstring(text.encode())
    schema = _schema()
    assert schema.validate(doc), schema.error_log
    return doc


def test_junit_of_the_default_run_validates_and_has_one_testcase_per_row(passing) -> None:
    doc = _validate(junit.render(passing))
    cases = doc.findall(".//testcase")
    assert [c.get("name") for c in cases] == [r.name for r in passing.rows]
    assert doc.find("testsuite").get("tests") == str(1 + len(DEFAULT_KINDS)) and doc.find("testsuite").get("failures") == "0"
    assert not doc.findall(".//failure") and not doc.findall(".//error")
    onnx_out = next(c for c in cases if c.get("name") == "onnx").find("system-out").text
    assert f"mae: {passing.row('onnx').metrics.mae:.6g}" in onnx_out and "latency_ms_per_image:" in onnx_out
    props = {p.get("name"): p.get("value") for p in doc.findall(".//property")}
    assert props["checkpoint_sha256"] == passing.checkpoint.sha256 and props["gate_float"] == "MAE<=1e-05"


def test_junit_failures_carry_the_metrics_and_errors_are_errors(failing) -> None:
    doc = _validate(junit.render(failing))
    onnx = next(c for c in doc.findall(".//testcase") if c.get("name") == "onnx")
    failure = onnx.find("failure")
    mae = failing.row("onnx").metrics.mae
    assert failure.get("type") == "drift" and f"MAE {mae:.3g} > 1e-09" in failure.get("message")
    assert f"mae: {mae:.6g}" in failure.text and "where it diverges" not in failure.text
    assert "divergence: first departs at" in failure.text
    error = next(c for c in doc.findall(".//testcase") if c.get("name") == "torchscript-trace").find("error")
    assert error.get("type") == "artifact-error"
    assert error.get("message") == 'reloading x.pt failed: RuntimeError: <bad> & "quoted" \ufffd bell | pipe'
    assert doc.find("testsuite").get("failures") == "1" and doc.find("testsuite").get("errors") == "1"


@settings(max_examples=60, deadline=None)
@given(reason=st.text(max_size=80), name=st.text(min_size=1, max_size=20))
def test_junit_stays_schema_valid_for_any_text(failing, reason: str, name: str) -> None:
    row = dataclasses.replace(failing.row("onnx"), name=name, reasons=(reason,))
    _validate(junit.render(dataclasses.replace(failing, rows=(row,)), hostname="h"))


def test_markdown_summary_shows_verdicts_thresholds_and_reasons(passing, failing) -> None:
    text = markdown.render(passing)
    assert text.startswith(f"## ✅ export-check passed: {1 + len(DEFAULT_KINDS)} passed, 0 failed, 0 errors")
    table = [line for line in text.splitlines() if line.startswith("| ✅") or line.startswith("| ❌")]
    assert len(table) == 1 + len(DEFAULT_KINDS)
    assert "**Thresholds:** float artifacts MAE≤1e-05 · int8 artifacts relMAE≤5% & top1≥98%" in text
    assert "torch-int8-dynamic: int8 error per layer: worst layers (lowest SQNR): fc" in text
    bad = markdown.render(failing)
    assert bad.startswith("## ❌ export-check FAILED: 1 passed, 1 failed, 1 error")
    assert "- ❌ **onnx** (fail)" in bad and "  - where: first departs at" in bad
    assert "RuntimeError: &lt;bad&gt; & \"quoted\" \x07 bell \\| pipe" in bad  # the pipe cannot break the table
    assert "<details><summary>onnx: where it diverges: first departs at" in bad


def test_a_failing_run_ends_with_the_terminals_next_steps_in_markdown_and_html(passing, failing) -> None:
    """Issue 44, item 8: the Markdown the README sends to the CI job summary, and the HTML page, say what to do next, the same
    lines as the terminal's report (report.next_steps), and a passing run has none."""
    from export_check.report.next_steps import next_steps

    steps = next_steps(failing)
    assert steps and steps[0].startswith("next: onnx drifts from eager beyond its float gate (MAE<=1e-09)")
    bad = markdown.render(failing)
    assert [line[2:] for line in bad[bad.index("### Next steps"):].splitlines()[2 : 2 + len(steps)]] == [
        markdown.cell(step) for step in steps]
    page = html.render(failing)
    assert all(html._e(step) in page for step in steps) and page.index("<h2>Next steps</h2>") < page.index("<h2>Cost</h2>")
    assert "Next steps" not in markdown.render(passing) and "Next steps" not in html.render(passing)


@given(st.text(max_size=40))
def test_markdown_cells_never_split_a_table_row(text: str) -> None:
    cell = markdown.cell(text)
    assert "\n" not in cell and "<" not in cell
    assert not re.search(r"(?<!\\)\|", cell.replace("\\\\", ""))


def test_html_is_self_contained_with_every_plot(passing, failing) -> None:
    for report in (passing, failing):
        page = html.render(report)
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)|url\(\s*["']?(https?:|//)|<script|<link|@import""", page, re.I)
        assert page.count('aria-label="error distribution of') == sum(r.metrics is not None for r in report.rows)
        for label in ("latency per image (median, ms)", "file size (KB)", "per-image error"):
            assert f'aria-label="{label}"' in page
    assert "layers.2" in html.render(passing)  # the int8 per-layer tables
    assert "first departs at" in html.render(failing)


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_html_renders_in_headless_chromium_with_the_plot_colours(passing, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        message = "chromium is not installed: apt-get update && apt-get install -y chromium"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + " (CI must install it: .ci/run)")
        pytest.skip(message)
    page = tmp_path / "report.html"
    html.write(passing, page)
    shot = tmp_path / "shot.png"
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0 and shot.is_file(), result.stderr[-2000:]
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape == (2000, 1200, 3)
    white = np.all(pixels == 255, axis=2)
    assert white.mean() < 0.95  # not a blank page

    def count(colour: str, region=np.s_[:, :]) -> int:
        rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
        return int(np.all(pixels[region] == rgb, axis=2).sum())

    # every row's colour fills its latency bar, size bar, per-image points and histogram bars
    counts = {c: count(c) for c in html.PALETTE[: len(passing.rows)]}
    assert all(n > 300 for n in counts.values()), counts
    # the histograms sit in the lower half of the window: the eager row's bar (#1f77b4) is drawn there
    assert count(html.PALETTE[0], np.s_[1000:, :]) > 100


def test_history_appends_one_line_per_run_and_shows_the_trend(passing, failing, tmp_path: Path, capsys) -> None:
    from export_check.history import append

    path = tmp_path / "history.jsonl"
    append(passing, path)
    append(failing, path)
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["checkpoint_sha256"] == passing.checkpoint.sha256
    assert first["golden_manifest_sha256"] == passing.golden.manifest_sha256
    assert [r["name"] for r in first["rows"]] == [r.name for r in passing.rows]
    assert first["versions"]["torch"].startswith("2.") and first["passed"] is True
    runs = load(path)
    trend = render_trend(runs, artifact="onnx")
    onnx_lines = [line for line in trend.splitlines() if re.match(r"^\d+ +\d{4}-", line)]
    assert len(onnx_lines) == 2 and " pass " in onnx_lines[0] and " fail " in onnx_lines[1]
    mae_now, mae_before = failing.row("onnx").metrics.mae, passing.row("onnx").metrics.mae
    assert (f"{mae_now - mae_before:+.1e}" if mae_now != mae_before else "=") in onnx_lines[1]
    assert main(["history", str(path), "--last", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 runs recorded; showing the last 1") and "torch-int8-dynamic" in out


def test_history_names_a_broken_line(tmp_path: Path, capsys) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text('{"format": "export-check-history", "version": 1, "rows": []}\n{"format": "export-che')
    assert main(["history", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"export-check: error: {path}:2: not valid JSON") and err.count("\n") == 1


@given(st.text(max_size=200) | st.dictionaries(st.sampled_from(["format", "version", "rows", "time", "versions", "passed"]),
                                               st.none() | st.integers() | st.text(max_size=5) | st.lists(st.integers(), max_size=2)))
def test_history_parser_fails_only_with_history_errors(data) -> None:
    text = data if isinstance(data, str) else json.dumps(data)
    try:
        parse_line(text, "h.jsonl", 3)
    except HistoryError as exc:
        assert str(exc).startswith("h.jsonl:3: ")


def test_progress_is_plain_lines_in_ci_and_one_rewritten_line_on_a_terminal() -> None:
    plain = io.StringIO()
    progress = ProgressLine(plain, interactive=False)
    progress("building onnx")
    progress("replaying\n64 inputs")
    progress.close()
    lines = plain.getvalue().splitlines()
    assert "\r" not in plain.getvalue() and "\x1b" not in plain.getvalue()
    assert len(lines) == 2 and re.fullmatch(r"\[export-check +\d+\.\ds\] replaying 64 inputs", lines[1])
    tty = io.StringIO()
    progress = ProgressLine(tty, interactive=True)
    progress("building onnx")
    progress.close()
    assert tty.getvalue().startswith("\r\x1b[K[export-check") and tty.getvalue().endswith("\r\x1b[K")


def test_cli_writes_every_format_and_keeps_stderr_clean(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = subprocess.run(
        [sys.executable, "-m", "export_check", str(DEFAULT_CHECKPOINT), "--artifacts", "onnx", "--out", str(tmp_path / "a"),
         "--no-cache", "--junit", str(out / "junit.xml"), "--markdown", str(out / "summary.md"),
         "--html", str(out / "report.html"), "--history", str(out / "history.jsonl"), "--json", str(out / "report.json")],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "\r" not in result.stderr and "[export-check" in result.stderr and "diagnosing: batch sizes 1, 7, 16, 64" in result.stderr
    data = json.loads((out / "report.json").read_text())
    onnx = data["rows"][1]
    assert onnx["diagnostics"]["shapes"]["passed"] is True and onnx["diagnostics"]["determinism"]["max_abs"] == 0.0
    assert onnx["diagnostics"]["latency"]["ms_per_image"] > 0
    _validate((out / "junit.xml").read_text())
    assert (out / "summary.md").read_text().startswith("## ✅")
    assert len((out / "history.jsonl").read_text().splitlines()) == 1
    assert "ms/img" in result.stdout and "batch" in result.stdout


def test_report_path_that_is_a_directory_is_a_usage_error(tmp_path: Path, capsys) -> None:
    code = main([str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--junit", str(tmp_path)])
    assert code == 2
    assert f"{tmp_path}: is a directory; --junit takes a file path" in capsys.readouterr().err


def test_colour_codes_of_exporters_never_reach_a_reason_or_a_note(tmp_path: Path, capsys) -> None:
    """An exporter's coloured error (a row's reason) and coloured warning (a row's note) reach every
    report as plain text; its multi-line log dump is one line under -v and whole in the JSON (issue 25)."""
    import numpy as np
    import torch

    from arches import DUMP, ColouredMessages

    torch.manual_seed(0)
    checkpoint = tmp_path / "m.pth"
    torch.save(ColouredMessages().state_dict(), checkpoint)
    samples = tmp_path / "samples"
    samples.mkdir()
    for i, x in enumerate(np.random.default_rng(0).standard_normal((8, 12)).astype(np.float32)):
        np.save(samples / f"s{i}.npy", x)
    arch, golden = f"{TESTS / 'arches.py'}:ColouredMessages", str(tmp_path / "golden")
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(samples), "--golden", golden]) == 0
    out = {suffix: tmp_path / f"r.{suffix}" for suffix in ("json", "xml", "md", "html")}
    capsys.readouterr()
    code = main(["check", str(checkpoint), "--arch", arch, "--golden", golden, "--out", str(tmp_path / "out"), "--no-cache", "-v",
                 "--artifacts", "torchscript-trace,onnx", "--json", str(out["json"]), "--junit", str(out["xml"]),
                 "--markdown", str(out["md"]), "--html", str(out["html"])])
    rows = {r["name"]: r for r in json.loads(out["json"].read_text())["rows"]}
    assert code == 1 and rows["torchscript-trace"]["status"] == "error"
    assert rows["torchscript-trace"]["reasons"] == ["build failed: RuntimeError: cannot be traced"]
    assert "UserWarning: coloured exporter warning" in rows["onnx"]["notes"]
    assert f"log exporter.dump: {DUMP}" in rows["onnx"]["notes"]  # the whole table, its 41 lines, in the JSON
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note onnx: log exporter.dump: ")]
    assert len(shown) == 1 and shown[0].startswith("note onnx: log exporter.dump: calibration table: fc.0 int8 scale 0.0100 zero point 0 fc.1")
    whole = len(" ".join(f"log exporter.dump: {DUMP}".split()))
    assert shown[0].endswith(f"… (41 lines, {whole} characters: in full in the JSON report's notes)")
    for path in out.values():
        text = path.read_text()
        assert "\x1b" not in text and "u001b" not in text and "x1b" not in text, path.name
