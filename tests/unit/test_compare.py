from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from export_check.compare import ErrorAccumulator, ShapeMismatch, compare
from export_check.gates import Gate, gate_reasons

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), rows=st.integers(1, 40), cols=st.integers(1, 12))
def test_streaming_in_any_batches_equals_one_shot(data, rows: int, cols: int) -> None:
    ref = data.draw(arrays(np.float32, (rows, cols), elements=finite))
    cand = data.draw(arrays(np.float32, (rows, cols), elements=finite))
    cuts = sorted(data.draw(st.lists(st.integers(1, rows - 1), max_size=5, unique=True))) if rows > 1 else []
    acc = ErrorAccumulator()
    for lo, hi in zip([0, *cuts], [*cuts, rows], strict=True):
        acc.add(ref[lo:hi], cand[lo:hi])
    streamed, whole = acc.result(), compare(ref, cand)
    diff = np.abs(cand.astype(np.float64) - ref)
    assert streamed.images == whole.images == rows
    assert streamed.mae == pytest.approx(float(diff.mean()), rel=1e-9, abs=1e-12)
    assert streamed.max_abs == whole.max_abs == pytest.approx(float(diff.max()))
    assert streamed.top1_changed == whole.top1_changed
    assert streamed.per_image_mae == pytest.approx(whole.per_image_mae)


def test_known_numbers() -> None:
    ref = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]], np.float32)
    cand = np.array([[1.0, 2.5, 3.0], [0.0, 2.0, 1.0]], np.float32)
    m = compare(ref, cand)
    assert m.mae == pytest.approx(2.5 / 6)
    assert m.max_abs == 2.0
    assert m.top1_changed == (1,)
    assert m.top1_agreement == 0.5
    assert m.per_image_mae == pytest.approx((0.5 / 3, 2.0 / 3))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_output_fails_whatever_the_gate(bad: float) -> None:
    ref = np.zeros((4, 3), np.float32)
    cand = ref.copy()
    cand[2, 1] = bad
    m = compare(ref, cand)
    assert m.nonfinite == 1 and m.mae == float("inf")
    assert "1 non-finite (NaN/Inf) output values" in gate_reasons(m, Gate(max_mae=1e9))


def test_judge_lists_every_violation() -> None:
    ref = np.eye(4, dtype=np.float32)
    cand = np.flip(ref, axis=1).copy()
    assert len(gate_reasons(compare(ref, cand), Gate(max_mae=0.1, min_top1=0.9, max_abs=0.5))) == 3
    assert gate_reasons(compare(ref, ref), Gate(max_mae=0.0, min_top1=1.0, max_abs=0.0)) == ()


def test_shape_mismatch_is_reported() -> None:
    with pytest.raises(ShapeMismatch, match=r"\(2, 3\) != reference \(2, 4\)"):
        compare(np.zeros((2, 4)), np.zeros((2, 3)))


def test_an_accumulator_measures_the_streams_it_is_given_and_its_own_where_they_apply() -> None:
    """compare knows no gate metric's stream: given none (the diagnostics', ``compare()``), it measures only its own (a CTC
    output's decoded agreement); given the gates' (a replay), every one that applies, in the JSON's order."""
    from export_check.compare import Layout
    from export_check.gates import STREAMS
    from export_check.gates.streams import LeastCosine

    ref, cand = np.eye(3), np.eye(3) + 0.5
    assert compare(ref, cand).streamed == ()
    assert [key for key, _ in compare(ref, cand, streams=STREAMS).streamed] == ["cosine", "snr_db"]  # no CER: no blank
    other = {"least": lambda layout: LeastCosine(), "never": lambda layout: None}  # None: it does not apply to the layout
    assert compare(ref, cand, streams=other).streamed == (("least", compare(ref, cand, streams=STREAMS).stat("cosine")),)
    assert set(STREAMS) == {"cosine", "snr_db", "cer"} and STREAMS["cer"](Layout("logits")) is None
