"""Re-judging without re-running (issue 30.3, from the cache): `check --judge-only` judges this check's
cached observations with the gates given now, builds and replays nothing and imports no torch; its
verdicts are a fresh run's with the same gates; a check that was never cached is refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, NO_TORCH
from export_check.cli import main

KINDS = "torchscript-trace,onnx,onnx-int8-dynamic"



def _rows(path: Path) -> dict[str, dict]:
    text = path.read_text()
    return {r["name"]: r for r in json.loads("{" + text[text.index('"schema"'):])["rows"]}


def test_judge_only_gives_a_fresh_runs_verdicts_under_a_tighter_gate_without_torch(tmp_path: Path, capsys) -> None:
    common = [str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", KINDS, "-q", "--out", str(tmp_path / "out")]
    assert main([*common, "--json", str(tmp_path / "first.json")]) == 0
    tight = ["--max-mae", "1e-9", "--int8-max-relative-mae", "0.001"]  # the ONNX file and dynamic int8 fail on any CPU
    judged = subprocess.run([sys.executable, "-c", NO_TORCH, *common, *tight, "--judge-only", "--json", str(tmp_path / "judged.json")],
                            capture_output=True, text=True, timeout=300)
    assert judged.returncode == 1, judged.stdout + judged.stderr
    assert main([*common, *tight, "--no-cache", "--out", str(tmp_path / "fresh-out"), "--json", str(tmp_path / "fresh.json")]) == 1
    capsys.readouterr()
    fresh, again = _rows(tmp_path / "fresh.json"), _rows(tmp_path / "judged.json")
    assert list(fresh) == list(again)
    for name, row in fresh.items():
        assert again[name]["status"] == row["status"], name
        assert again[name]["metrics"]["mae"] == row["metrics"]["mae"], name  # the same files replayed the same way
        # a full run also measures where a failing float row departs; the judged one says it did not
        assert [r for r in again[name]["reasons"]] == [r for r in row["reasons"] if not r.startswith("where:")], name
    assert {"onnx", "onnx-int8-dynamic"} <= {n for n, r in fresh.items() if r["status"] == "fail"}  # (eager too, where it drifts)
    assert "--judge-only: judged from the cache without a replay" in judged.stdout


def test_judge_only_refuses_a_check_it_has_no_cache_of(tmp_path: Path, capsys) -> None:
    common = [str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx", "-q", "--out", str(tmp_path / "out"), "--judge-only"]
    assert main(common) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--judge-only: no cached run of this check" in err
    assert main([*common, "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--judge-only judges a cached check" in err
