"""The per-value gates beside MAE: atol/rtol (numpy.allclose on every value) and max-abs.

The truth is numpy's own: ``np.isclose(candidate, reference, rtol, atol)`` on the same whole arrays,
against the tool's streamed count (batch by batch, no arrays kept)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.cli import main
from export_check.compare import ErrorAccumulator, compare
from export_check.errors import UsageError
from export_check.gates import FAMILIES, GATE_FAMILIES, Gate, Thresholds, gate_reasons, metric_missing
from export_check.options import SETTINGS
from export_check.records import Observation
from export_check.run.judge import judge_row, layers_missing


def _truth(reference: np.ndarray, candidate: np.ndarray, atol: float, rtol: float) -> tuple[int, int]:
    """numpy's count of values outside the tolerance, and the flat index of the worst (largest excess)."""
    ref, cand = reference.astype(np.float64), candidate.astype(np.float64)
    outside = ~np.isclose(cand, ref, rtol=rtol, atol=atol)
    excess = np.abs(cand - ref) - (atol + rtol * np.abs(ref))
    return int(outside.sum()), int(np.argmax(np.where(outside, excess, -np.inf)))


def _streamed(reference: np.ndarray, candidate: np.ndarray, pairs: tuple[tuple[float, float], ...], batch: int):
    acc = ErrorAccumulator("logits", tolerances=pairs)
    for start in range(0, len(reference), batch):
        acc.add(reference[start:start + batch], candidate[start:start + batch])
    return acc.result()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), samples=st.integers(1, 40), width=st.integers(1, 12), batch=st.integers(1, 16),
       atol=st.sampled_from([0.0, 1e-6, 1e-3, 0.05]), rtol=st.sampled_from([0.0, 1e-5, 1e-2, 0.1]))
def test_streamed_count_and_worst_are_numpys_on_the_whole_arrays(seed, samples, width, batch, atol, rtol) -> None:
    rng = np.random.default_rng(seed)
    reference = rng.normal(0, 3, (samples, width)).astype(np.float32)
    candidate = (reference + rng.normal(0, 0.02, reference.shape) * (rng.random(reference.shape) < 0.5)).astype(np.float32)
    metrics = _streamed(reference, candidate, ((atol, rtol), (0.0, 0.0)), batch)
    for pair in ((atol, rtol), (0.0, 0.0)):
        count = metrics.tolerance(*pair)
        assert count is not None and count.values == reference.size
        expected, worst = _truth(reference, candidate, *pair)
        assert count.violations == expected
        assert (count.violations == 0) == bool(np.allclose(candidate.astype(np.float64), reference.astype(np.float64),
                                                           rtol=pair[1], atol=pair[0]))
        if expected:
            assert count.worst is not None and divmod(worst, width) == (count.worst.sample, count.worst.index)
            assert count.worst.candidate == float(candidate.flat[worst]) and count.worst.reference == float(reference.flat[worst])
        else:
            assert count.worst is None
    # max-abs: the largest absolute error, and where it is
    diff = np.abs(candidate.astype(np.float64) - reference.astype(np.float64))
    assert metrics.max_abs == float(diff.max())
    if diff.max() > 0:
        assert metrics.max_abs_at is not None and divmod(int(np.argmax(diff)), width) == (metrics.max_abs_at.sample, metrics.max_abs_at.index)


def test_a_non_finite_candidate_value_is_always_outside() -> None:
    reference = np.array([[1.0, 2.0, 3.0]], np.float32)
    candidate = np.array([[1.0, np.nan, np.inf]], np.float32)
    count = compare(reference, candidate, tolerances=((1e9, 1.0),)).tolerance(1e9, 1.0)
    assert count is not None and count.violations == 2 and count.worst is not None and count.worst.index in (1, 2)


def test_the_judge_gates_on_allclose_with_the_count_and_the_worst_value() -> None:
    reference = np.array([[1.0, 10.0, 100.0], [0.5, -4.0, 2.0]])
    candidate = reference + np.array([[1e-4, 2e-3, 0.5], [0.0, 0.0, -1e-3]])
    gate = Gate(max_mae=1.0, atol=1e-3, rtol=1e-3)
    metrics = compare(reference, candidate, tolerances=(gate.tolerance,))  # type: ignore[arg-type]
    assert not np.allclose(candidate, reference, atol=1e-3, rtol=1e-3)
    # numpy: |err| <= 1e-3 + 1e-3*|ref|: 10 + 2e-3 > 1e-3 + 1e-2? no (2e-3 <= 0.011); 100 + 0.5 > 0.101: yes; 2 - 1e-3 <= 0.003: ok
    reasons = gate_reasons(metrics, gate)
    assert reasons == ("allclose(atol=0.001, rtol=0.001): 1 of 6 values outside atol + rtol*|reference|; worst sample 0, element 2: "
                       "100.5 vs reference 100 (|err| 0.5 > 0.101)",)
    # 0.5 <= 0.5 + 0.1: inside, as numpy says (a pair is judged only by its own count)
    assert np.allclose(candidate, reference, atol=0.5, rtol=1e-3)
    assert gate_reasons(compare(reference, candidate, tolerances=((0.5, 1e-3),)), gate.replace(atol=0.5)) == ()


def test_max_abs_gate_names_where_the_largest_error_is() -> None:
    reference = np.zeros((3, 4))
    candidate = reference.copy()
    candidate[2, 1] = -0.25
    reasons = gate_reasons(compare(reference, candidate), Gate(max_mae=1.0, max_abs=0.1))
    assert reasons == ("max abs error 0.25 > 0.1 (at sample 2, element 1: -0.25 vs reference 0)",)
    assert gate_reasons(compare(reference, candidate), Gate(max_mae=1.0, max_abs=0.25)) == ()


def test_a_gate_whose_pair_was_not_measured_fails_visibly_and_a_cached_observation_is_observed_again() -> None:
    reference, candidate = np.zeros((2, 3)), np.full((2, 3), 1e-4)
    metrics = compare(reference, candidate)  # no pairs counted
    thresholds = Thresholds.from_options({"atol": 1e-5, "max-mae": 1.0})
    gate = thresholds.gate_for("float")
    assert gate_reasons(metrics, gate) == ("allclose(atol=1e-05, rtol=0) was not measured for this output",)
    obs = Observation(name="onnx", family="float", compared_with="eager", metrics=metrics)
    assert metric_missing(obs, thresholds) and layers_missing(obs, thresholds, diagnose=False)  # the cache re-observes it
    measured = replace(obs, metrics=compare(reference, candidate, tolerances=thresholds.tolerances()))
    assert not metric_missing(measured, thresholds)  # (it fails, so the cache also wants its per-layer table)
    row = judge_row(measured, thresholds)
    assert row.status == "fail" and row.reasons[0].startswith("allclose(atol=1e-05, rtol=0): 6 of 6 values outside")


def test_each_output_of_a_row_is_judged_by_its_own_count() -> None:
    pair = (1e-3, 0.0)
    close = compare(np.zeros((4, 2)), np.full((4, 2), 1e-4), "values", tolerances=(pair,))
    far = compare(np.zeros((4, 3)), np.full((4, 3), 1e-2), "values", tolerances=(pair,))
    obs = Observation(name="onnx", family="float", compared_with="eager", metrics=close, outputs=(("boxes", close), ("scores", far)))
    row = judge_row(obs, Thresholds.from_options({"atol": 1e-3, "max-mae": 1.0}))
    assert [(o.name, o.status) for o in row.outputs] == [("boxes", "pass"), ("scores", "fail")]
    assert row.status == "fail" and row.reasons == ("scores: allclose(atol=0.001, rtol=0): 12 of 12 values outside atol + "
                                                    "rtol*|reference|; worst sample 0, element 0: 0.01 vs reference 0 (|err| 0.01 > 0.001)",)


def test_defaults_are_unchanged_and_every_family_has_the_three_options() -> None:
    defaults = Thresholds()
    assert defaults.tolerances() == ()
    assert all(gate.max_abs is None and gate.atol is None and gate.rtol is None for _, gate in defaults.gates)
    assert defaults == Thresholds.from_options({})
    for family in GATE_FAMILIES:
        if family.follows:
            continue
        prefix = "" if family.name == "float" else f"{family.name}-"
        names = {o.name: o.field for o in family.options}
        assert {names[f"{prefix}max-abs"], names[f"{prefix}atol"], names[f"{prefix}rtol"]} == {"max_abs", "atol", "rtol"}
        assert {f"{prefix}max-abs", f"{prefix}atol", f"{prefix}rtol"} <= set(SETTINGS)
    t = Thresholds.from_options({"rtol": 1e-3, "int8-atol": 0.1, "fp16-max-abs": 0.5})
    assert t.gate_for("float").tolerance == (0.0, 1e-3) and t.gate_for(FAMILIES["eager"].name).tolerance == (0.0, 1e-3)
    assert t.gate_for("int8").tolerance == (0.1, 0.0) and t.gate_for("fp16").max_abs == 0.5 and t.gate_for("fp16").tolerance is None
    assert t.tolerances() == ((0.0, 1e-3), (0.1, 0.0))
    assert t.to_json()["int8"]["atol"] == 0.1 and t.to_json()["float"]["rtol"] == 1e-3


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_a_bad_tolerance_is_refused(value: float) -> None:
    with pytest.raises(UsageError, match="atol must be a finite number >= 0"):
        Gate(max_mae=1e-5, atol=value)


@pytest.mark.parametrize("flag, text, message", [("--atol", "-1", "atol must be a finite number >= 0, got -1.0"),
                                                 ("--int8-rtol", "nan", "rtol must be a finite number >= 0, got nan"),
                                                 ("--max-abs", "big", "argument --max-abs: invalid float value: 'big'")])
def test_bad_tolerance_flags_are_one_line_and_exit_2(tmp_path: Path, monkeypatch, capsys, flag: str, text: str, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "CKPT").write_bytes(b"not read before the arguments")
    assert main(["CKPT", "--arch", "m:F", flag, text]) == 2
    err = capsys.readouterr().err
    assert err.startswith("export-check: error: ") and err.count("\n") == 1 and message in err, err


def test_a_bad_tolerance_in_the_settings_file_names_the_file(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "CKPT").write_bytes(b"not read before the settings")
    (tmp_path / "pyproject.toml").write_text('[tool.export-check]\narch = "m:F"\natol = "tight"\n')
    assert main(["CKPT"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pyproject.toml" in err and "atol" in err and "Traceback" not in err, err
