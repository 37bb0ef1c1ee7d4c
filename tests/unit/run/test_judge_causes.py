"""Issue 44: a cause is stated only with its evidence. Float noise is eager's own variation, never the artifact's own
error; a checkpoint cause comes only from the eager row's measured numbers; the diagnostics plan reads no clock."""

from __future__ import annotations

import numpy as np

from export_check.compare import compare
from export_check.diagnostics.shapes import plan_for
from export_check.gates import Gate, Thresholds
from export_check.records import Measured, Observation, SizeRuns
from export_check.run.judge import WRONG_WEIGHTS, judge_row

from .test_judge import agreeing, obs

TIGHT = Thresholds.from_options({"max-mae": 5e-7})
NOISE_WORDS = ("float noise", "loosen")


def _sizes(artifact_error: float, eager_moved: float = 6e-7) -> Measured:
    """Eager moves by ``eager_moved`` between sizes 1 and 16; the artifact differs from eager by ``artifact_error`` at
    every size alike (a wrong export: nothing moves with the batch)."""
    runs = (agreeing(1, 64, mae=artifact_error, worst_image=3, worst_image_mae=artifact_error, eager_moved=eager_moved,
                     reference_mean_abs=1.7),
            agreeing(16, 64, mae=artifact_error, worst_image_mae=artifact_error, reference_mean_abs=1.7))
    return Measured(sizes=SizeRuns(main_size=16, runs=runs))


def test_a_wrong_export_is_never_told_its_error_is_float_noise() -> None:
    """The issue's SiLU symbolic (x * sigmoid(1.1 x)) and ExecuTorch fed the wrong layout: the artifact's error at the
    main size was counted as the model's noise, so every batch size 'within' it was told to loosen the gate."""
    for error in (1e-5, 0.0102, 1.93):  # 17x, 17,000x, 3 million x eager's own 6e-7
        row = judge_row(obs(mae=error, diagnostics=_sizes(error)), TIGHT)
        assert row.status == "fail" and row.reasons[0].startswith("MAE ")
        assert not any(word in r for r in row.reasons + row.diagnostics.notes for word in NOISE_WORDS), (error, row.reasons)
    # within 10x eager's own variation: the noise sentence, with both numbers
    row = judge_row(obs(mae=4e-7, diagnostics=_sizes(1.3e-6)), TIGHT)
    assert any("within this model's float noise measured in this run" in r and "loosen" in r for r in row.reasons), row.reasons


def _eager(reference: np.ndarray, outputs: np.ndarray, top_ks: tuple[int, ...] = ()) -> Observation:
    return Observation(name="eager", family="eager", compared_with="golden", metrics=compare(outputs, reference, top_ks=top_ks))


def test_a_top_k_never_measured_is_no_evidence_against_the_checkpoint() -> None:
    """`export-check judge` with a top-k gate the report never measured: the eager row of the bundled ResNet (error 0.0)
    fails for the missing value and says so, and names no checkpoint cause; eager really off names it."""
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(32, 10)).astype(np.float32)
    with_topk = Thresholds().with_gates(eager=Gate(max_mae=1e-5, min_topk=0.99))
    row = judge_row(_eager(reference, reference.copy()), with_topk)
    assert row.status == "fail" and row.metrics.mae == 0.0
    assert row.reasons == ("top-5 agreement was not measured for this output",), row.reasons
    assert WRONG_WEIGHTS not in row.reasons
    off = judge_row(_eager(reference, reference + 0.5), with_topk)
    assert off.status == "fail" and off.reasons[0].startswith("MAE 0.5 > 1e-05") and off.reasons[-1] == WRONG_WEIGHTS


def test_the_plan_reads_the_model_and_the_set_never_a_clock() -> None:
    """The same model and set give the same plan; only the parameter count, the set's size, the batch size and the budget
    move it (a 78,714-parameter ResNet: the full plan; ResNet-50's 25.6 million: the budget's share of 64 images)."""
    assert plan_for(78_714, 64, 16, 64, 0.15) == plan_for(78_714, 64, 16, 64, 0.15) and plan_for(78_714, 64, 16, 64, 0.15).cut == ()
    big = plan_for(25_600_000, 64, 16, 64, 0.15)
    assert big.sizes == (1, 3, 16) and "no whole-probe batch of 33 (sizes above 32 untested)" in big.cut  # 9.6 images of budget
    assert plan_for(25_600_000, 64, 16, 64, 100.0).cut == ()
    assert dict(plan_for(78_714, 50, 16, 50, 0.15).counts) == {1: 50, 7: 49, 16: 48, 50: 50}  # every size on the whole probe, in whole batches
