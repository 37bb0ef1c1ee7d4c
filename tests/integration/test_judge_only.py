"""Re-judging without re-running (issue 30.3, from the cache): `check --judge-only` judges this check's
cached observations with the gates given now, builds and replays nothing and imports no torch; its
verdicts are a fresh run's with the same gates; a check that was never cached is refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, NO_TORCH, read_report
from export_check.cli import main
from export_check.report.seal import sealed

KINDS = "torchscript-trace,onnx,onnx-int8-dynamic"



def _rows(path: Path) -> dict[str, dict]:
    return {r["name"]: r for r in read_report(path)["rows"]}


TIGHT = ["--max-mae", "1e-9", "--int8-max-relative-mae", "0.001"]  # the ONNX file and dynamic int8 fail on any CPU


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """A check with its own gates (first.json, cached), and a fresh one with tighter gates (fresh.json)."""
    tmp_path = tmp_path_factory.mktemp("judge")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(tmp_path / "cache.key"))  # one key for the module: the cache and the reports' seals
        return _runs(tmp_path)


@pytest.fixture(autouse=True)
def module_key(runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(runs / "cache.key"))


def _runs(tmp_path: Path) -> Path:
    common = [str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", KINDS, "-q", "--out", str(tmp_path / "out"),
              "--cache-dir", str(tmp_path / "cache")]
    assert main([*common, "--json", str(tmp_path / "first.json")]) == 0
    assert main([*common, *TIGHT, "--no-cache", "--out", str(tmp_path / "fresh-out"), "--json", str(tmp_path / "fresh.json")]) == 1
    (tmp_path / "common.json").write_text(json.dumps(common))
    return tmp_path


def _without_torch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TORCH, *args], capture_output=True, text=True, timeout=300)


def _same_verdicts(fresh: dict[str, dict], again: dict[str, dict]) -> None:
    assert list(fresh) == list(again)
    for name, row in fresh.items():
        assert again[name]["status"] == row["status"], name
        assert again[name]["metrics"]["mae"] == row["metrics"]["mae"], name  # the same files replayed the same way
        # a full run also measures where a failing float row departs and its reduced subgraph; the judged one says it did not
        assert [r for r in again[name]["reasons"]] == [r for r in row["reasons"] if not r.startswith(("where:", "reduced:"))], name
    assert {"onnx", "onnx-int8-dynamic"} <= {n for n, r in fresh.items() if r["status"] == "fail"}  # (eager too, where it drifts)


def test_judge_only_gives_a_fresh_runs_verdicts_under_a_tighter_gate_without_torch(runs: Path) -> None:
    common = json.loads((runs / "common.json").read_text())
    judged = _without_torch(*common, *TIGHT, "--judge-only", "--json", str(runs / "judged.json"))
    assert judged.returncode == 1, judged.stdout + judged.stderr
    _same_verdicts(_rows(runs / "fresh.json"), _rows(runs / "judged.json"))
    assert "--judge-only: judged from the cache without a replay" in " ".join(judged.stdout.split())


def test_judge_report_gives_a_fresh_runs_verdicts_without_torch(runs: Path) -> None:
    """`export-check judge REPORT.json`: the report's own observations, judged with the gates given now."""
    judged = _without_torch("judge", str(runs / "first.json"), *TIGHT, "--json", str(runs / "report-judged.json"))
    assert judged.returncode == 1, judged.stdout + judged.stderr
    _same_verdicts(_rows(runs / "fresh.json"), _rows(runs / "report-judged.json"))
    shown = " ".join(judged.stdout.split())  # lines wrap to COLUMNS where it is set
    assert "judged again from" in shown and "gates changed: float MAE<=1e-09" in shown
    # with the report's own gates: its own verdicts, exit 0; and the judged report can be judged again
    again = _without_torch("judge", str(runs / "report-judged.json"), "--json", str(runs / "twice.json"))
    assert again.returncode == 1  # its gates are now the tight ones
    assert [r["status"] for r in _rows(runs / "twice.json").values()] == [r["status"] for r in _rows(runs / "fresh.json").values()]
    same = _without_torch("judge", str(runs / "first.json"), "--json", str(runs / "same.json"))
    assert same.returncode == 0, same.stdout + same.stderr
    first, same_rows = _rows(runs / "first.json"), _rows(runs / "same.json")
    assert {n: (r["status"], r["reasons"]) for n, r in first.items()} == {n: (r["status"], r["reasons"]) for n, r in same_rows.items()}


def test_judge_report_says_what_a_gate_needs_that_the_report_never_measured(runs: Path, capsys) -> None:
    # top-3 agreement was not measured by the first check (no gate asked for it): never passed, and said how to get it
    code = main(["judge", str(runs / "first.json"), "--min-topk", "0.5", "--top-k", "3", "--json", str(runs / "topk.json")])
    out = " ".join(capsys.readouterr().out.split())  # lines wrap to COLUMNS where it is set
    assert code == 1
    rows = _rows(runs / "topk.json")
    assert rows["onnx"]["status"] == "fail" and "top-3 agreement was not measured for this output" in rows["onnx"]["reasons"]
    assert "the report lacks what these gates ask for: eager (top-k agreement)" in out
    assert "a check with these gates measures it" in out
    assert rows["onnx-int8-dynamic"]["status"] == "pass"  # --min-topk is the float family's; int8 has its own (--int8-min-topk)


def test_judge_report_of_a_fleet_judges_each_model(runs: Path, capsys) -> None:
    assert main(["merge", str(runs / "first.json"), "--json", str(runs / "merged.json")]) == 0
    assert main(["judge", str(runs / "merged.json"), *TIGHT, "--json", str(runs / "merged-judged.json")]) == 1
    capsys.readouterr()
    fleet = read_report(runs / "merged-judged.json")
    (model,) = fleet["models"]
    assert model["status"] == "fail"
    assert [r["status"] for r in model["report"]["rows"]] == [r["status"] for r in _rows(runs / "fresh.json").values()]


def test_judge_refuses_a_report_without_observations_and_an_edited_one(runs: Path, capsys) -> None:
    text = (runs / "first.json").read_text()  # its bytes: edited below
    data = read_report(runs / "first.json")
    del data["observations"]
    (runs / "old.json").write_text(sealed(json.dumps(data), None)[0])  # as an export-check before `judge` wrote it
    assert main(["judge", str(runs / "old.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "old.json: holds no observations to judge again" in err
    (runs / "edited.json").write_text(text.replace('"passed": true', '"passed": false', 1))
    assert main(["judge", str(runs / "edited.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "edited.json" in err


def test_judge_only_refuses_a_check_it_has_no_cache_of(tmp_path: Path, capsys) -> None:
    common = [str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx", "-q", "--out", str(tmp_path / "out"), "--judge-only"]
    assert main(common) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--judge-only: no cached run of this check" in err
    assert main([*common, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--judge-only judges a cached check" in err
def test_a_reports_observations_read_back_exactly_with_an_infinite_error(runs: Path) -> None:
    from dataclasses import asdict

    from export_check.cache.sealed import from_plain
    from export_check.records import Observation
    from export_check.results import lossless

    stored = read_report(runs / "first.json")["observations"]
    assert [o["name"] for o in stored] == list(_rows(runs / "first.json"))
    for data in stored:
        assert lossless(asdict(from_plain(Observation, data))) == data  # nothing lost or added on the way back
    broken = json.loads(json.dumps(stored[2]))
    broken["metrics"]["mae"] = "inf"  # how a non-finite error is written (JSON has no inf)
    obs = from_plain(Observation, broken)
    assert obs.metrics.mae == float("inf")
    assert json.dumps(lossless(asdict(obs)), allow_nan=False) == json.dumps(broken, allow_nan=False)
