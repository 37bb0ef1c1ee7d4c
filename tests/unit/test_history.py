"""history.py: one JSON line per run, read back exactly; damaged lines named; the trend compares with the last real measurement."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.files import FileInfo
from export_check.history import (
    FORMAT,
    HistoryError,
    HistoryRow,
    HistoryRun,
    Provenance,
    append,
    git_commit,
    last_measured,
    load,
    parse_line,
    provenance,
    render_json,
    render_trend,
)
from export_check.records import Latency
from export_check.results import Diagnostics

from .report.rows import report, row

ORIGIN = Provenance(commit="a" * 40, ci_run="7", ci_url="https://ci/7")


def a_report(mae_error: float = 1e-3, cache: str | None = None):
    onnx = row(errors={(0, 0): mae_error * 40}, artifact=FileInfo("onnx.onnx", 315_187, "1" * 64), cache=cache,
               diagnostics=Diagnostics(latency=Latency(0.5, 16, 5, 1, (0.5,))))
    return report(row(name="eager", family="eager"), onnx)


def test_appended_runs_read_back(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "history.jsonl"
    append(a_report(), path, ORIGIN)
    append(a_report(2e-3, cache="hit"), path, Provenance())
    runs = load(path)
    assert len(runs) == 2 and path.read_bytes().count(b"\n") == 2
    first, second = runs
    assert (first.commit, first.ci_run, first.ci_url, second.commit) == ("a" * 40, "7", "https://ci/7", None)
    onnx = first.row("onnx")
    assert onnx is not None and onnx.mae == pytest.approx(1e-3) and onnx.size_bytes == 315_187 and onnx.latency_ms == 0.5
    assert onnx.top1_agreement == 1.0 and not onnx.cached and second.row("onnx").cached  # type: ignore[union-attr]
    assert first.row("eager").size_bytes is None and first.checkpoint_sha256 == "f" * 64  # type: ignore[union-attr]


def test_a_partial_last_line_of_a_killed_writer_is_kept_apart(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"format": "export-check-hist')
    append(a_report(), path, ORIGIN)
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["format"] == FORMAT
    with pytest.raises(HistoryError, match=r"h.jsonl:1: not valid JSON"):
        load(path)


def test_append_refuses_a_fifo_and_load_a_missing_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(HistoryError, match="is not a regular file"):
        append(a_report(), tmp_path / "fifo", ORIGIN)
    with pytest.raises(HistoryError, match="history file not found; write one with"):
        load(tmp_path / "none.jsonl")


GOOD = {"format": FORMAT, "version": 1, "time": "t", "rows": [{"name": "onnx", "status": "pass", "mae": 1e-6, "size_bytes": 3}]}


@pytest.mark.parametrize(("change", "says"), [
    ({"format": "other"}, "format is 'other'"),
    ({"version": 2}, "history version 2 is not one"),
    ({"rows": {}}, "'rows' must be a list"),
    ({"rows": [{"status": "pass"}]}, "rows[0] must be an object with a name"),
    ({"rows": [{"name": "a", "size_bytes": -1}]}, "rows[0].size_bytes must be an integer"),
    ({"rows": [{"name": "a", "size_bytes": True}]}, "rows[0].size_bytes must be an integer"),
    ({"rows": [{"name": "a", "cached": "yes"}]}, "rows[0].cached must be true or false"),
    ({"rows": [{"name": "a", "mae": "small"}]}, "mae must be a finite number or null"),
    ({"rows": [{"name": "a", "latency_ms": 1e300}]}, "latency_ms must be a finite number or null"),
    ({"time": 3}, "time must be a string"),
    ({"versions": []}, "versions must be an object"),
    ({"passed": "yes"}, "passed must be true, false or null"),
    ({"commit": 1}, "commit must be a string or null"),
])
def test_a_damaged_line_is_named_by_file_and_line(change: dict, says: str) -> None:
    with pytest.raises(HistoryError) as info:
        parse_line(json.dumps({**GOOD, **change}), "h.jsonl", 4)
    assert str(info.value).startswith("h.jsonl:4: ") and says in str(info.value) and "\n" not in str(info.value)


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["format", "version", "rows", "name", "mae", "size_bytes", "cached", "time", "versions"]), inner,
                        max_size=5), max_leaves=12))
def test_any_json_line_parses_or_is_one_history_error(data: object) -> None:
    if isinstance(data, dict):
        data = {**GOOD, **data}
    try:
        run = parse_line(json.dumps(data), "h", 1)
    except HistoryError as exc:
        assert str(exc).startswith("h:1: ")
    else:
        assert isinstance(run, HistoryRun)


def test_provenance_from_ci_variables() -> None:
    github = provenance({"GITHUB_SHA": "b" * 40, "GITHUB_RUN_ID": "42", "GITHUB_REPOSITORY": "o/r"})
    assert github == Provenance("b" * 40, "42", "https://github.com/o/r/actions/runs/42")
    gitlab = provenance({"CI_COMMIT_SHA": " c\nd ", "CI_PIPELINE_ID": "9", "CI_PIPELINE_URL": "https://gitlab/p/9"})
    assert gitlab.ci_run == "9" and gitlab.ci_url == "https://gitlab/p/9" and "\n" not in (gitlab.commit or "")


def test_git_commit_reads_head_and_is_none_outside_a_repository(tmp_path: Path) -> None:
    assert git_commit(tmp_path) is None
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, env=env)
    subprocess.run(["git", "-C", str(tmp_path), "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    assert git_commit(tmp_path) == head
    assert provenance({}, tmp_path).commit == head


def run(n: int, mae: float | None, cached: bool = False, latency: float | None = 1.0) -> HistoryRun:
    rows = (HistoryRow("onnx", "pass", mae, None, 1.0, latency, 100, cached), HistoryRow(f"only{n}", "fail", None, None, None, None, None))
    return HistoryRun(f"t{n}", "0.1.0", "c" * 64, "g" * 64, True, rows, (), commit=f"{n:040x}")


def test_the_trend_compares_with_the_last_run_that_measured() -> None:
    runs = [run(0, 1e-6), run(1, 2e-6, latency=1.5), run(2, 2e-6, cached=True), run(3, 1e-6, latency=0.75)]
    assert last_measured(runs, 3, "onnx") == runs[1].rows[0] and last_measured(runs, 0, "onnx") is None
    text = render_trend(runs, artifact="onnx")
    lines = text.splitlines()
    assert lines[0] == "4 runs recorded; showing the last 4" and lines[2] == "onnx"
    cells = [line.split() for line in lines[5:]]
    assert [c[0] for c in cells] == ["1", "2", "3", "4"]
    assert cells[1][7:10] == ["+1.0e-06", "1.5", "+50%"] and "cached" in cells[2] and cells[3][7:10] == ["-1.0e-06", "0.75", "-50%"]
    assert render_trend(runs, last=2).splitlines()[0] == "4 runs recorded; showing the last 2"
    with pytest.raises(HistoryError, match="no artifact 'tflite' in the history; recorded: onnx, only0"):
        render_trend(runs, artifact="tflite")
    assert render_trend([]) == "no runs recorded yet"


def test_render_json_holds_the_last_runs() -> None:
    runs = [run(n, n * 1e-6) for n in range(5)]
    data = json.loads(render_json(runs, last=2))
    assert [r["time"] for r in data] == ["t3", "t4"] and data[1]["rows"][0] == dataclasses.asdict(runs[4].rows[0])
    assert len(json.loads(render_json(runs, last=0))) == 5
