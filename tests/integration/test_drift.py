"""The gate must fail what drifted, and only that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arches import BranchOnBrightness
from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, TESTS, save_state, seeded
from export_check.cli import main
from export_check.config import RunConfig
from export_check.run.pipeline import run_check

# tests/run_narrowed.py repeats this module under capped instruction sets (README, "What varies by CPU")
pytestmark = pytest.mark.cpu_sensitive

BRANCHY = f"{TESTS / 'arches.py'}:BranchOnBrightness"


def test_checkpoint_with_other_weights_fails_the_eager_row(tmp_path: Path, capsys) -> None:
    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    key = next(k for k, v in state.items() if v.dtype.is_floating_point and v.ndim == 4)
    state[key] = state[key] + 0.01 * torch.randn(state[key].shape, generator=torch.Generator().manual_seed(0))
    retrained = tmp_path / "retrained.pth"
    torch.save(state, retrained)

    code = main([str(retrained), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--out", str(tmp_path / "out"),
                 "--artifacts", "torchscript-trace", "-q"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL eager: MAE" in out
    assert "wrong or retrained weights" in out
    # the artifact still faithfully reproduces the (wrong) eager model: its own row passes
    report = run_check(RunConfig(checkpoint=retrained, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN, out_dir=tmp_path / "o2",
                                 kinds=("torchscript-trace",)))
    eager, trace = report.rows
    assert eager.status == "fail" and eager.metrics is not None and eager.metrics.mae > 1e-3
    assert trace.status == "pass" and trace.metrics is not None and trace.metrics.mae <= 1e-5


@pytest.fixture(scope="module")
def branchy_setup(tmp_path_factory: pytest.TempPathFactory, digit_images: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("branchy")
    checkpoint = save_state(seeded(BranchOnBrightness), root / "branchy.pth")
    code = main(["golden", "record", str(checkpoint), "--arch", BRANCHY, "--inputs", str(digit_images),
                 "--golden", str(root / "golden"), "--size", "32", "--batch-size", "8"])
    assert code == 0
    return checkpoint, root / "golden"


def test_trace_that_baked_a_branch_fails_its_row_while_script_passes(branchy_setup, tmp_path: Path) -> None:
    checkpoint, golden = branchy_setup
    # batch 8: the first batch (the trace example) holds dark digits, the other two light ones
    report = run_check(RunConfig(checkpoint=checkpoint, arch=BRANCHY, golden=golden, out_dir=tmp_path, batch_size=8))
    rows = {row.name: row for row in report.rows}
    assert rows["eager"].status == "pass"
    assert rows["torchscript-script"].status == "pass"
    assert rows["torchscript-script"].metrics.mae == 0.0
    trace = rows["torchscript-trace"]
    assert trace.status == "fail"
    assert trace.metrics.mae > 1e-3
    # exactly the 16 light images (batches 2 and 3) came out of the wrong head
    per_image = trace.metrics.per_image_mae
    assert all(v == 0.0 for v in per_image[:8]) and all(v > 1e-4 for v in per_image[8:])
    # ONNX is exported by tracing too, so it inherits the baked branch: the gate catches it as well
    assert rows["onnx"].status == "fail" and rows["onnx-simplified"].status == "fail"
    assert report.exit_code == 1


def test_cli_exit_code_for_a_baked_branch(branchy_setup, tmp_path: Path) -> None:
    checkpoint, golden = branchy_setup
    result = subprocess.run(
        [sys.executable, "-m", "export_check", str(checkpoint), "--arch", BRANCHY, "--golden", str(golden),
         "--out", str(tmp_path), "--batch-size", "8", "--artifacts", "torchscript-trace,torchscript-script", "-q"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    # the verdict is the table's first column (exporter/report/text.py)
    lines = {line.split()[1]: line for line in result.stdout.splitlines()
             if len(line.split()) > 1 and line.split()[0] in ("PASS", "FAIL", "ERROR", "N/A") and line.split()[1].startswith("torchscript")}
    assert lines["torchscript-trace"].startswith("FAIL ")
    assert lines["torchscript-script"].startswith("PASS ")
    assert "FAILED: 2 passed, 1 failed, 0 errors" in result.stdout
