"""The product: the bundled trained model, the bundled real golden images, every artifact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO
from export_check.artifacts import DEFAULT_KINDS
from export_check.config import RunConfig
from export_check.run.pipeline import run_check
from export_check.versions import cpu_flags

# tests/run_narrowed.py repeats this module under capped instruction sets (README, "What varies by CPU")
pytestmark = [pytest.mark.cpu_sensitive, pytest.mark.cheap]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("default-run")
    report_path = out / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "export_check", str(DEFAULT_CHECKPOINT), "--out", str(out / "artifacts"), "--json", str(report_path), "-q"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return result, json.loads(report_path.read_text()), out / "artifacts"


def test_default_run_passes_every_row(default_run) -> None:
    result, report, _ = default_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert report["passed"] is True
    names = [row["name"] for row in report["rows"]]
    assert names == ["eager", *DEFAULT_KINDS]
    assert all(row["status"] == "pass" for row in report["rows"])
    assert f"PASSED: {1 + len(DEFAULT_KINDS)} passed, 0 failed, 0 errors" in result.stdout


def test_default_run_stderr_is_clean_and_native_warnings_are_row_notes(default_run) -> None:
    """torch.jit.load of the int8 module prints a C++ deprecation warning past Python's warnings:
    it is in that row's notes, not on the terminal (the run is -q: nothing else may print)."""
    result, report, _ = default_run
    assert result.stderr == "", result.stderr
    notes = {row["name"]: row["notes"] for row in report["rows"]}
    assert any(n.startswith("NativeWarning: torch.quantize_per_tensor") and "deprecated" in n for n in notes["torch-int8-dynamic"])


def test_default_run_float_rows_within_1e5_and_int8_really_quantized(default_run) -> None:
    _, report, _ = default_run
    rows = {row["name"]: row for row in report["rows"]}
    assert report["golden"]["inputs"] >= 32
    for name in ("eager", "torchscript-trace", "torchscript-script", "onnx", "onnx-simplified"):
        metrics = rows[name]["metrics"]
        assert metrics["images"] == report["golden"]["inputs"]
        assert metrics["mae"] <= 1e-5, (name, metrics["mae"])
        assert metrics["top1_agreement"] == 1.0
        assert rows[name]["within_reference_mae"] is True
    for name in ("torch-int8-dynamic", "onnx-int8-dynamic"):
        metrics = rows[name]["metrics"]
        # int8 really changed the numbers (so the gate is doing work), within its own gate.
        assert metrics["mae"] > 1e-5 and metrics["relative_mae"] <= rows[name]["gate"]["max_relative_mae"], (name, metrics)
        # the relative MAE is the MAE over the mean |eager logit|, computed here from the report's own numbers
        assert metrics["relative_mae"] == metrics["mae"] / metrics["reference_mean_abs"]
        assert metrics["top1_agreement"] >= 0.98
        assert rows[name]["within_reference_mae"] is False
        # an int8 verdict may move with the CPU (VNNI or not): the row names the CPU flags and the caps that decided it,
        # read here from /proc/cpuinfo and the environment
        details = rows[name]["details"]
        assert details["cpu_flags"] == (cpu_flags() or "unknown")
        for variable in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
            assert details.get(variable) == (os.environ.get(variable) or None), variable
    for name in ("eager", "torchscript-trace", "onnx"):  # a float verdict does not depend on the CPU: no flags
        assert "cpu_flags" not in rows[name].get("details", {}), name
    # the bundled model is a real classifier of the golden digits
    assert report["golden"]["eager_label_accuracy"] >= 0.95


def test_default_run_reports_files_hashes_and_versions(default_run) -> None:
    _, report, artifacts = default_run
    for row in report["rows"][1:]:
        path = Path(row["artifact"]["path"])
        assert path.parent == artifacts and path.is_file()
        assert path.stat().st_size == row["artifact"]["size_bytes"] > 0
        assert len(row["artifact"]["sha256"]) == 64
    assert report["checkpoint"]["sha256"] == report["golden"]["recorded_checkpoint_sha256"]
    assert report["settings"]["opset"] == 17 and report["settings"]["onnx_exporter"] == "torchscript"
    for lib in ("torch", "onnx", "onnxruntime", "onnxsim", "numpy"):
        assert report["versions"][lib] != "not installed"
    assert report["thresholds"]["float"]["max_mae"] == 1e-5
    # no partial files left behind
    assert not [p for p in artifacts.iterdir() if ".partial" in p.name]


def test_check_outside_the_repo_reads_its_settings_only_when_named(tmp_path: Path) -> None:
    """Issue 24: standing outside the repository, the pyproject.toml above the checkpoint is not read
    (one line says where settings come from); named with --config, it is, relative to that file."""
    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "export_check", str(DEFAULT_CHECKPOINT), "--artifacts", "torchscript-script",
                               "--out", str(tmp_path / "out"), "-q", *extra], cwd=tmp_path, capture_output=True, text=True, timeout=300)

    outside = run()
    assert outside.returncode == 2 and outside.stdout == ""
    assert outside.stderr.startswith("export-check: error: no architecture given and no settings file read") and outside.stderr.count("\n") == 1
    named = run("--config", str(REPO / "pyproject.toml"))
    assert named.returncode == 0, named.stdout + named.stderr
    assert f"settings: {REPO / 'pyproject.toml'}" in named.stdout and "PASSED: 2 passed" in named.stdout


def test_run_check_api_matches_cli_defaults(tmp_path: Path) -> None:
    report = run_check(
        RunConfig(checkpoint=DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN, out_dir=tmp_path, kinds=("onnx",))
    )
    assert [row.name for row in report.rows] == ["eager", "onnx"]
    assert report.passed and report.exit_code == 0
    assert report.row("onnx").metrics is not None and report.row("onnx").metrics.mae < 1e-5
