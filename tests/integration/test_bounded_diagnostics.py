"""Diagnostics under a budget (issue 15): the bounded plan still catches a baked batch size and a
nondeterministic artifact, says on every row what it left out, and ``--diagnostics-budget`` restores
issue 12's full plan. The small-model rule (at most 5,000,000 parameters: the full
plan) is switched off here so that the digit models are priced like a real-size one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from conftest import TESTS, save_state, seeded
from export_check.cli import main
from export_check.config import RunConfig
from export_check.diagnostics import shapes
from export_check.run.pipeline import run_check

ARCHES = TESTS / "data" / "diag_arches.py"
BOUNDED = "diagnostics bounded to"


def _record(tmp_path_factory, digit_images: Path, cls_name: str) -> tuple[Path, Path, str]:
    spec = importlib.util.spec_from_file_location("diag_arches", ARCHES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    arch = f"{ARCHES}:{cls_name}"
    root = tmp_path_factory.mktemp(cls_name)
    checkpoint = save_state(seeded(getattr(module, cls_name)), root / "model.pth")
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(digit_images),
                 "--golden", str(root / "golden"), "--size", "32", "--batch-size", "8", "-q"]) == 0
    return checkpoint, root / "golden", arch


@pytest.fixture()
def no_floor(monkeypatch):
    monkeypatch.setattr(shapes, "SMALL_MODEL_PARAMETERS", 0)


def test_the_minimum_plan_still_catches_a_baked_batch_size(tmp_path_factory, digit_images: Path, no_floor) -> None:
    checkpoint, golden, arch = _record(tmp_path_factory, digit_images, "BakedBatch")
    report = run_check(RunConfig(checkpoint=checkpoint, arch=arch, golden=golden, out_dir=tmp_path_factory.mktemp("out"),
                                 batch_size=8, kinds=("torchscript-trace", "torchscript-script", "onnx"), diagnostics_budget=0.0))
    rows = {row.name: row for row in report.rows}
    for name in ("torchscript-trace", "onnx"):
        row = rows[name]
        assert row.metrics.mae <= 1e-5 and row.status == "fail", name  # the replay alone would pass it
        check = row.diagnostics.shapes
        assert check.sizes == (1, 8) and [r.images for r in check.runs] == [0, 24]  # size 1 failed outright
        assert any("batch size 1 fails" in r and "specialised the batch size" in r for r in row.reasons), row.reasons
    script = rows["torchscript-script"]
    assert script.status == "pass"
    # one image at batch size 1, and that image again for determinism: nothing else beyond the replay
    assert [(r.size, r.images) for r in script.diagnostics.shapes.runs] == [(1, 1), (8, 24)]
    assert script.diagnostics.rerun.images == 1 and script.diagnostics.rerun.runs == 2 and script.diagnostics.rerun.max_abs == 0.0
    # latency from the replay's own full batches after the warm-up: 24 images at 8, so 2 of them
    assert script.diagnostics.latency.repeats == 2 and script.diagnostics.latency.batch == 8
    # every row says what the budget left out
    for row in report.rows:
        (note,) = [n for n in row.diagnostics.notes if n.startswith(BOUNDED)]
        assert "no odd batch size" in note and "no whole-probe batch of 24" in note and "determinism on one image" in note


def test_a_nondeterministic_artifact_still_fails_on_its_bounded_rerun(tmp_path_factory, digit_images: Path, no_floor) -> None:
    checkpoint, golden, arch = _record(tmp_path_factory, digit_images, "NoisyWhenScripted")
    report = run_check(RunConfig(checkpoint=checkpoint, arch=arch, golden=golden, out_dir=tmp_path_factory.mktemp("out"),
                                 batch_size=8, kinds=("torchscript-trace", "torchscript-script"), diagnostics_budget=0.0))
    noisy = report.row("torchscript-script")
    assert noisy.status == "fail" and noisy.metrics.mae <= 1e-5
    rerun = noisy.diagnostics.rerun
    assert rerun.images == 1 and rerun.runs == 2 and rerun.max_abs > 1e-6 and not rerun.passed
    assert report.row("torchscript-trace").status == "pass" and report.row("torchscript-trace").diagnostics.rerun.max_abs == 0.0


def test_a_large_budget_restores_the_full_plan(tmp_path_factory, digit_images: Path, no_floor) -> None:
    checkpoint, golden, arch = _record(tmp_path_factory, digit_images, "BakedBatch")
    assert main(["check", str(checkpoint), "--arch", arch, "--golden", str(golden), "--batch-size", "8", "--artifacts",
                 "torchscript-script", "--diagnostics-budget", "100", "--no-cache", "-q",
                 "--out", str(tmp_path_factory.mktemp("out")), "--json", str(golden.parent / "r.json")]) == 0
    import json

    row = next(r for r in json.loads((golden.parent / "r.json").read_text())["rows"] if r["name"] == "torchscript-script")
    runs = row["diagnostics"]["shapes"]["runs"]
    assert [(r["size"], r["images"]) for r in runs] == [(1, 24), (7, 21), (8, 24), (24, 24)]
    assert row["diagnostics"]["determinism"]["images"] == 8 and not any(n.startswith(BOUNDED) for n in row["diagnostics"]["notes"])


def test_plans_cost_what_they_say_and_shrink_in_order() -> None:
    full = shapes.bounded_plan(16, 64, 1e9, 4)
    assert full == shapes.full_plan(16, 64) and full.cost(4) == 64 + 63 + 64 + 4 * 16  # every size on the whole probe (issue 44)
    costs = [shapes.bounded_plan(16, 64, budget, 4).cost(4) for budget in range(0, 200)]
    assert costs == sorted(costs) and costs[0] == 2  # more budget never buys less; the minimum is two images
    assert all(shapes.bounded_plan(16, 64, b, 4).cost(4) <= max(b, 2) for b in range(200))
    kept = shapes.bounded_plan(16, 64, 45, 4)  # 0.176 x 256 images: the whole-probe batch above 32 fits
    assert 33 in kept.sizes and kept.images(33) == 33 and kept.rerun_images == 1


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_bad_budget_is_one_error_line(value: str, capsys) -> None:
    from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT

    assert main(["check", str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, f"--diagnostics-budget={value}", "--no-cache", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"export-check: error: diagnostics budget must be a finite number >= 0, got {float(value)}"]
