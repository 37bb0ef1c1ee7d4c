"""History lines say where a run came from and what was measured anew (issue 16.8): the commit (the
CI's variable, else git), the CI run, rows served from the cache marked ``cached`` and left out of the
trend's changes; ``export-check history --html`` draws the trend as inline SVG."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN
from export_check.cli import main
from export_check.history import COMMIT_VARIABLES, RUN_VARIABLES, HistoryRow, HistoryRun, load, provenance, render_trend
from export_check.report.trend import render

SHA = "0123456789abcdef0123456789abcdef01234567"
CI_VARIABLES = (*COMMIT_VARIABLES, *RUN_VARIABLES, "GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "CI_PIPELINE_URL", "BUILD_URL")


@pytest.fixture()
def no_ci(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_commit_comes_from_git_in_the_working_directory(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    (repo / "f").write_text("x")
    subprocess.run([*git, "add", "f"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "c"], cwd=repo, check=True)
    head = (repo / ".git" / "refs" / "heads" / "main").read_text().strip()  # the commit as git stored it
    assert provenance({}, cwd=repo).commit == head and len(head) == 40
    assert provenance({"GITHUB_SHA": SHA}, cwd=repo).commit == SHA  # the CI's checkout wins over git
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    assert provenance({}, cwd=outside) == provenance({}, cwd=outside).__class__(None, None, None)


@pytest.mark.parametrize(("commit_var", "run_var"), list(zip(COMMIT_VARIABLES, RUN_VARIABLES + ("BUILD_ID",) * 9, strict=False)))
def test_every_ci_system_s_variables(commit_var: str, run_var: str, tmp_path: Path) -> None:
    found = provenance({commit_var: f" {SHA}\n", run_var: "9876"}, cwd=tmp_path)
    assert found.commit == SHA and found.ci_run == "9876"


def test_github_actions_run_url(tmp_path: Path) -> None:
    env = {"GITHUB_SHA": SHA, "GITHUB_RUN_ID": "42", "GITHUB_REPOSITORY": "team/models", "GITHUB_SERVER_URL": "https://ghe.example"}
    assert provenance(env, cwd=tmp_path).ci_url == "https://ghe.example/team/models/actions/runs/42"
    assert provenance({"CI_PIPELINE_ID": "7", "CI_PIPELINE_URL": "https://gl/p/7"}, cwd=tmp_path).ci_url == "https://gl/p/7"


@given(st.text(max_size=400))
def test_any_variable_value_is_one_bounded_line(value: str) -> None:
    found = provenance({"GITHUB_SHA": value, "GITHUB_RUN_ID": value}, cwd=Path("/"))
    for field in (found.commit, found.ci_run):
        assert field is None or (len(field) <= 200 and "\n" not in field and field.isprintable())


def _run(n: int, mae: float, ms: float, cached: bool, status: str = "pass") -> HistoryRun:
    row = HistoryRow(name="onnx", status=status, mae=mae, max_abs=mae * 4, top1_agreement=1.0, latency_ms=ms, size_bytes=1000, cached=cached)
    return HistoryRun(time=f"2026-12-0{n}T00:00:00+00:00", tool_version="0.1.0", checkpoint_sha256="c" * 64, golden_manifest_sha256="g" * 64,
                      passed=status == "pass", rows=(row,), versions=(), commit=f"{n}" * 40, ci_run=str(100 + n), ci_url=None)


def test_a_cached_value_is_not_a_new_measurement_in_the_trend() -> None:
    runs = [_run(1, 1e-6, 2.0, False), _run(2, 3e-6, 4.0, False), _run(3, 1e-6, 2.0, True), _run(4, 2e-6, 3.0, False, "fail")]
    lines = [line.split() for line in render_trend(runs).splitlines()[1:] if line[:1].isdigit()]
    assert [line[0] for line in lines] == ["1", "2", "3", "4"]
    assert lines[1][2] == "2" * 12 and lines[1][5:10] == ["pass", "3.00e-06", "+2.0e-06", "4", "+100%"]
    assert lines[2][5:11] == ["pass", "(cached)", "1.00e-06", "cached", "2", "cached"]
    # run 4 changed from run 2, the last run that measured the row, not from run 3's cached copy of run 1
    assert lines[3][5:10] == ["fail", "2.00e-06", "-1.0e-06", "3", "-25%"]


def test_the_html_trend_is_inline_svg_with_cached_values_hollow() -> None:
    from lxml import html as lxml_html

    runs = [_run(1, 1e-6, 2.0, False), _run(2, 1e-4, 4.0, False), _run(3, 1e-6, 2.0, True), _run(4, 0.0, 3.0, False, "fail")]
    page = render(runs)
    assert "<script" not in page and "src=" not in page
    doc = lxml_html.fromstring(page)
    mae_plot, latency_plot = doc.findall(".//svg")
    circles = mae_plot.findall(".//circle")
    assert [c.get("data-cached") for c in circles] == ["false", "false", "true", "false"]
    assert [c.get("fill") for c in circles] == ["#1f77b4", "#1f77b4", "#ffffff", "#1f77b4"]
    assert circles[3].get("stroke") == "#cf222e"  # the failing run's ring
    ys = [float(c.get("cy")) for c in circles]
    assert ys[1] < ys[0] == ys[2] < ys[3]  # log scale: 1e-4 above 1e-6 above 0 (drawn at the floor)
    xs = [float(c.get("cx")) for c in circles]
    assert xs == sorted(xs) and len(set(xs)) == 4
    lat = [float(c.get("cy")) for c in latency_plot.findall(".//circle")]
    # linear: 2 ms and 4 ms are twice as far from the axis as each other (axis at y = 260)
    assert math.isclose((260 - lat[1]) / (260 - lat[0]), 2.0, rel_tol=1e-3)
    table = [[cell.text_content() for cell in tr.findall("td")] for tr in doc.findall(".//table//tr")[1:]]
    assert [row[2] for row in table] == ["1" * 12, "2" * 12, "3" * 12, "4" * 12] and table[2][6] == "onnx"


def test_check_history_lines_on_real_runs_with_ci_variables(tmp_path: Path, no_ci, capsys) -> None:
    no_ci.setenv("GITHUB_SHA", SHA)
    no_ci.setenv("GITHUB_RUN_ID", "555")
    no_ci.setenv("GITHUB_REPOSITORY", "team/models")
    history = tmp_path / "history.jsonl"
    common = [str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--artifacts", "torchscript-trace",
              "--cache-dir", str(tmp_path / "cache"), "--history", str(history), "-q"]
    assert main([*common, "--out", str(tmp_path / "o1")]) == 0
    assert main([*common, "--out", str(tmp_path / "o2")]) == 0  # served whole from the cache
    capsys.readouterr()
    first, second = (json.loads(line) for line in history.read_text().splitlines())
    for line in (first, second):
        assert (line["commit"], line["ci_run"], line["ci_url"]) == (SHA, "555", "https://github.com/team/models/actions/runs/555")
    assert [r["cached"] for r in first["rows"]] == [False, False]
    assert [r["cached"] for r in second["rows"]] == [True, True]
    assert [r["mae"] for r in second["rows"]] == [r["mae"] for r in first["rows"]]  # the stored measurement, marked
    assert main(["history", str(history), "--html", str(tmp_path / "trend.html")]) == 0
    out = capsys.readouterr().out
    assert f"  {SHA[:12]}  " in out and "pass (cached)" in out
    page = (tmp_path / "trend.html").read_text()
    # eager and the trace, in the MAE plot and the latency plot
    assert page.count('data-cached="true"') == 4 and page.count('data-cached="false"') == 4
    runs = load(history)
    assert [r.commit for r in runs] == [SHA, SHA] and runs[1].rows[0].cached
