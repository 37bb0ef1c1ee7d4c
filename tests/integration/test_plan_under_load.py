"""Issue 44: which checks run never depends on the load. The same check with every clock reading made 1000x slow (a
machine under a CPU hog, taken to the extreme: the bundled ResNet read 10.2 ms per image there) plans the same batch
sizes on the same images and reaches the same verdicts and reasons as at rest."""

from __future__ import annotations

import time
from pathlib import Path

from conftest import TESTS, save_state, seeded
from export_check.cli import main
from export_check.config import RunConfig
from export_check.run.pipeline import run_check

ARCH = f"{TESTS / 'arches.py'}:AllConv"


def _plan_and_verdicts(report) -> list[tuple]:
    return [(row.name, row.status, row.reasons, tuple((r.size, r.images) for r in row.diagnostics.shapes.runs),
             row.diagnostics.rerun.images if row.diagnostics.rerun else None) for row in report.rows]


def test_the_same_check_under_a_slow_clock_plans_and_judges_the_same(tmp_path: Path, digit_images: Path, monkeypatch) -> None:
    from arches import AllConv

    checkpoint = save_state(seeded(AllConv), tmp_path / "m.pth")
    assert main(["golden", "record", str(checkpoint), "--arch", ARCH, "--inputs", str(digit_images), "--golden", str(tmp_path / "golden"),
                 "--size", "32", "--batch-size", "8", "-q"]) == 0

    def check(out: str):
        return run_check(RunConfig(checkpoint=checkpoint, arch=ARCH, golden=tmp_path / "golden", out_dir=tmp_path / out, batch_size=8,
                                   kinds=("torchscript-trace",), cache_dir=None))

    at_rest = check("rest")
    real = time.perf_counter
    began = real()
    monkeypatch.setattr(time, "perf_counter", lambda: began + (real() - began) * 1000.0)  # every interval read 1000x longer
    loaded = check("loaded")
    monkeypatch.undo()
    assert loaded.row("eager").diagnostics.latency.ms_per_image > 100 * at_rest.row("eager").diagnostics.latency.ms_per_image
    assert _plan_and_verdicts(loaded) == _plan_and_verdicts(at_rest)
    assert at_rest.plan_cut() == loaded.plan_cut() == ()
    # the full plan on the whole probe of 24 images, at sizes 1, 7, 8 and 24
    assert [(r.size, r.images) for r in at_rest.row("torchscript-trace").diagnostics.shapes.runs] == [(1, 24), (7, 21), (8, 24), (24, 24)]
    # a plan the budget had to cut (the small-model rule off, no budget) says so in the run's headline, not only in notes
    from export_check.diagnostics import shapes as diagnostics_shapes
    from export_check.report.text import render

    monkeypatch.setattr(diagnostics_shapes, "SMALL_MODEL_PARAMETERS", 0)
    cut = run_check(RunConfig(checkpoint=checkpoint, arch=ARCH, golden=tmp_path / "golden", out_dir=tmp_path / "cut", batch_size=8,
                              kinds=("torchscript-trace",), cache_dir=None, diagnostics_budget=0.0))
    (headline,) = [line for line in render(cut).splitlines() if line.startswith(("PASSED", "FAILED"))]
    assert cut.plan_cut() and "checks cut by --diagnostics-budget (latency from the replay only" in headline, headline
    assert "checks cut" not in render(at_rest)
