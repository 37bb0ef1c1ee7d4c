"""The gate-metric table (exporter/gates/metrics.py): every bound is an option of every family that offers it,
a gate is frozen and compared by its bounds, and the two streamed metrics (least cosine similarity,
SNR in dB) are numpy's own on the whole arrays, however the set is cut into batches."""

from __future__ import annotations

import math
import pickle
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.compare import ErrorAccumulator, compare
from export_check.errors import UsageError
from export_check.gates import BOUNDS, GATE_FAMILIES, GATE_METRICS, STREAMS, Gate, Thresholds, gate_reasons, metric_missing
from export_check.options import SETTINGS
from export_check.records import Observation
from export_check.run.judge import judge_row, layers_missing


def test_every_bound_of_the_table_is_an_option_of_every_family_that_offers_it() -> None:
    for family in GATE_FAMILIES:
        if family.follows:  # eager vs golden takes the float family's options
            assert not family.options
            continue
        relative = family.name != "float"
        prefix = "" if family.name == "float" else f"{family.name}-"
        offered = {(b.field, f"{prefix}{b.option}") for m in GATE_METRICS if relative or m.families == "all" for b in m.bounds}
        assert {(o.field, o.name) for o in family.options} == offered
        assert {name for _, name in offered} <= set(SETTINGS)
    assert {"min-cosine", "min-snr", "int8-min-cosine", "fp16-min-snr", "bf16-min-cosine"} <= set(SETTINGS)
    assert set(Thresholds().to_json()["float"]) == set(BOUNDS)


def test_a_gate_is_frozen_compared_by_its_bounds_and_pickles() -> None:
    gate = Gate(max_mae=1e-5, min_cosine=0.99)
    assert gate == Gate(min_cosine=0.99, max_mae=1e-5) and hash(gate) == hash(Gate(min_cosine=0.99, max_mae=1e-5))
    assert gate == Gate(max_mae=1e-5, min_cosine=0.99, min_top1=0.0)  # min_top1 0 is no bound
    assert gate != Gate(max_mae=1e-5) and pickle.loads(pickle.dumps(gate)) == gate
    assert gate.min_cosine == 0.99 and gate.min_snr_db is None and gate.min_top1 == 0.0
    assert gate.replace(min_cosine=None) == Gate(max_mae=1e-5)
    with pytest.raises(AttributeError, match="frozen"):
        gate.max_mae = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError, match="unknown bounds max_maee"):
        Gate(max_maee=1.0)
    with pytest.raises(UsageError, match="min cosine similarity is a fraction in"):
        Gate(max_mae=1.0, min_cosine=1.5)
    with pytest.raises(UsageError, match="min SNR must be a finite number >= 0, got nan"):
        Gate(max_mae=1.0, min_snr_db=float("nan"))
    assert Gate(max_mae=1e-5, min_cosine=0.999, min_snr_db=40).describe() == "MAE<=1e-05 & cos>=0.999 & SNR>=40dB"


def _least_cosine(reference: np.ndarray, candidate: np.ndarray) -> float:
    """By hand: each sample flattened, cos = a.b / (|a| |b|), the least over the samples."""
    a = reference.reshape(len(reference), -1).astype(np.float64)
    b = candidate.reshape(len(candidate), -1).astype(np.float64)
    return float(min(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)) for x, y in zip(a, b, strict=True)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), samples=st.integers(1, 30), width=st.integers(1, 10), batch=st.integers(1, 12),
       noise=st.sampled_from([1e-6, 1e-3, 0.3, 3.0]))
def test_streamed_cosine_and_snr_are_numpys_on_the_whole_arrays(seed, samples, width, batch, noise) -> None:
    rng = np.random.default_rng(seed)
    reference = rng.normal(0, 3, (samples, 2, width)).astype(np.float32)
    candidate = (reference + rng.normal(0, noise, reference.shape)).astype(np.float32)
    acc = ErrorAccumulator("values", streams=STREAMS)
    for start in range(0, samples, batch):
        acc.add(reference[start:start + batch], candidate[start:start + batch])
    metrics = acc.result()
    ref, cand = reference.astype(np.float64), candidate.astype(np.float64)
    snr = 10 * math.log10(float(np.sum(ref**2)) / float(np.sum((cand - ref) ** 2)))
    assert metrics.stat("snr_db") == pytest.approx(snr, rel=1e-9)
    assert metrics.stat("cosine") == pytest.approx(_least_cosine(reference, candidate), rel=1e-9, abs=1e-12)
    assert metrics.to_json()["snr_db"] == metrics.stat("snr_db") and metrics.to_json()["cosine"] == metrics.stat("cosine")


def test_edge_values_of_the_streams() -> None:
    same = compare(np.ones((2, 3)), np.ones((2, 3)), streams=STREAMS)
    assert same.stat("snr_db") == math.inf and same.stat("cosine") == 1.0
    zeros = compare(np.zeros((2, 3)), np.zeros((2, 3)), streams=STREAMS)
    assert zeros.stat("cosine") == 1.0 and zeros.stat("snr_db") == math.inf
    flipped = compare(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.0, 2.0], [-3.0, -4.0]]), streams=STREAMS)
    assert flipped.stat("cosine") == pytest.approx(-1.0)  # the second sample points the other way
    nan = compare(np.ones((2, 3)), np.array([[1.0, 1.0, 1.0], [1.0, np.nan, 1.0]]), streams=STREAMS)
    assert nan.stat("cosine") == -1.0 and nan.stat("snr_db") == -math.inf


def test_one_sample_pointing_elsewhere_fails_the_cosine_gate_where_mae_passes() -> None:
    """An embedding row: 100 samples agree, one points the other way at the same size. Its MAE over the
    set is small; the least cosine names it."""
    rng = np.random.default_rng(0)
    reference = rng.normal(0, 0.01, (100, 64))
    candidate = reference.copy()
    candidate[37] = -candidate[37]
    gate = Gate(max_mae=1e-3, min_cosine=0.99)
    metrics = compare(reference, candidate, kind="values", streams=STREAMS)
    assert metrics.mae < 1e-3
    assert gate_reasons(metrics, gate) == (f"cosine similarity {metrics.stat('cosine'):.6g} < 0.99 (the least of any sample)",)
    assert metrics.stat("cosine") == pytest.approx(-1.0)
    assert gate_reasons(compare(reference, reference * 1.001, kind="values", streams=STREAMS), gate) == ()


def test_snr_gate_fails_below_its_decibels() -> None:
    reference = np.full((4, 10), 10.0)
    candidate = reference + 0.1  # SNR = 10 log10(100 / 0.01) = 40 dB
    metrics = compare(reference, candidate, streams=STREAMS)
    assert metrics.stat("snr_db") == pytest.approx(40.0)
    assert gate_reasons(metrics, Gate(max_mae=1.0, min_snr_db=45)) == ("SNR 40 dB < 45 dB",)
    assert gate_reasons(metrics, Gate(max_mae=1.0, min_snr_db=39)) == ()


def test_an_observation_measured_before_a_metric_existed_is_measured_again_never_passed() -> None:
    reference, candidate = np.zeros((2, 3)), np.zeros((2, 3))
    old = replace(compare(reference, candidate, streams=STREAMS), streamed=())  # what a cache entry of an earlier version holds
    thresholds = Thresholds.from_options({"min-cosine": 0.9})
    assert gate_reasons(old, thresholds.gate_for("float")) == ("cosine similarity was not measured for this output",)
    obs = Observation(name="onnx", family="float", compared_with="eager", metrics=old)
    assert metric_missing(obs, thresholds) and layers_missing(obs, thresholds, diagnose=False)
    fresh = replace(obs, metrics=compare(reference, candidate, streams=STREAMS))
    assert not metric_missing(fresh, thresholds) and judge_row(fresh, thresholds).status == "pass"
    assert not metric_missing(obs, Thresholds())  # no gate asks for it: the old observation serves


def test_batch_size_runs_are_judged_by_the_bounds_measured_there_only() -> None:
    from export_check.gates import at_batch_sizes

    gate = Gate(max_mae=1e-5, max_abs=1e-4, atol=1e-3, min_cosine=0.9, min_snr_db=20, min_top1=0.5)
    assert at_batch_sizes(gate) == Gate(max_mae=1e-5, max_abs=1e-4, min_top1=0.5)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), samples=st.integers(1, 40), classes=st.integers(2, 6), batch=st.integers(1, 12))
def test_label_accuracy_is_counted_as_numpy_counts_it_however_the_set_is_batched(seed, samples, classes, batch) -> None:
    rng = np.random.default_rng(seed)
    reference = rng.normal(0, 1, (samples, classes))
    candidate = reference + rng.normal(0, 0.7, reference.shape)
    labels = rng.integers(0, classes, samples)
    acc = ErrorAccumulator("logits")
    for start in range(0, samples, batch):
        acc.add(reference[start:start + batch], candidate[start:start + batch], labels[start:start + batch])
    m = acc.result()
    mine, theirs = float((candidate.argmax(1) == labels).mean()), float((reference.argmax(1) == labels).mean())
    assert m.labelled == samples and m.label_accuracy == pytest.approx(mine) and m.reference_label_accuracy == pytest.approx(theirs)
    assert m.accuracy_drop == pytest.approx(100 * (theirs - mine))
    assert m.to_json()["accuracy_drop"] == m.accuracy_drop


def test_the_accuracy_drop_gate_fails_past_its_points_and_never_gates_a_set_without_labels() -> None:
    reference = np.eye(4)[[0, 1, 2, 3, 0, 1, 2, 3]] * 5.0
    candidate = reference.copy()
    candidate[[1, 2], :] = np.eye(4)[[3, 3]] * 5.0  # two of eight predictions moved off their (right) label
    labels = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    acc = ErrorAccumulator("logits")
    acc.add(reference, candidate, labels)
    m = acc.result()
    assert (m.label_accuracy, m.reference_label_accuracy, m.accuracy_drop) == (0.75, 1.0, 25.0)
    gate = Gate(max_mae=10.0, max_accuracy_drop=10)
    assert gate_reasons(m, gate) == ("label accuracy 75.0% against the reference's 100.0%: a drop of 25.00 points > 10",)
    assert gate_reasons(m, gate.replace(max_accuracy_drop=25)) == ()
    unlabelled = compare(reference, candidate)  # no labels: measured, none to count
    assert unlabelled.labelled == 0 and gate_reasons(unlabelled, gate) == ()
    old = replace(unlabelled, labelled=None)  # a cache entry from before labels were counted: measured again, never passed
    assert gate_reasons(old, gate) == ("accuracy drop was not measured for this output",)
    assert Gate(max_mae=1e-5, max_accuracy_drop=0.5).describe() == "MAE<=1e-05 & accdrop<=0.5pt"


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), samples=st.integers(1, 30), classes=st.integers(2, 9), batch=st.integers(1, 12),
       k=st.integers(1, 6))
def test_top_k_agreement_is_numpys_set_comparison_however_the_set_is_batched(seed, samples, classes, batch, k) -> None:
    rng = np.random.default_rng(seed)
    reference = rng.normal(0, 1, (samples, classes))
    candidate = reference + rng.normal(0, 0.3, reference.shape)
    acc = ErrorAccumulator("logits", top_ks=(k,))
    for start in range(0, samples, batch):
        acc.add(reference[start:start + batch], candidate[start:start + batch])
    width = min(k, classes)
    truth = np.mean([set(np.argsort(-c)[:width]) == set(np.argsort(-r)[:width]) for r, c in zip(reference, candidate, strict=True)])
    assert acc.result().topk_agreement(k) == pytest.approx(float(truth))
    assert acc.result().to_json()["topk_agreement"] == {str(k): pytest.approx(float(truth))}


def test_the_top_k_gate_names_k_and_is_measured_again_when_a_cached_entry_lacks_its_k() -> None:
    reference = np.array([[5.0, 4.0, 3.0, 2.0, 1.0], [5.0, 4.0, 3.0, 2.0, 1.0]])
    candidate = np.array([[5.0, 4.0, 3.0, 2.0, 1.0], [5.0, 4.0, 1.0, 2.0, 3.0]])  # sample 1: its 3rd class swapped with the 5th
    thresholds = Thresholds.from_options({"min-topk": 1.0, "top-k": 3})
    gate = thresholds.gate_for("float")
    assert thresholds.top_ks() == (3,) and gate.describe() == "MAE<=1e-05 & top3>=100%"
    metrics = compare(reference, candidate, tolerances=(), top_ks=(3,))
    assert gate_reasons(metrics, gate.replace(max_mae=10.0)) == (
        "top-3 agreement 50.0% < 100.0% (samples whose 3 highest classes are the reference's)",)
    assert gate_reasons(compare(reference, candidate, top_ks=(2,)), gate.replace(max_mae=10.0)) == (
        "top-3 agreement was not measured for this output",)
    obs = Observation(name="onnx", family="float", compared_with="eager", metrics=compare(reference, candidate))
    assert metric_missing(obs, thresholds)
    assert Thresholds.from_options({"min-topk": 0.9}).top_ks() == (5,)  # k defaults to 5
    with pytest.raises(UsageError, match="top-k is a whole number >= 1, got 2.5"):
        Gate(max_mae=1.0, top_k=2.5)


@given(st.integers(min_value=1, max_value=5000), st.sampled_from([0.9, 0.95, 0.98, 0.99, 0.995, 0.999]), st.data())
def test_a_top1_failure_says_how_many_changed_and_how_many_the_set_size_tolerates(samples: int, bound: float, data) -> None:
    from export_check.gates import samples_for_one_flip, small_set_notes, tolerated_flips

    tolerated = tolerated_flips(bound, samples)
    assert (samples - tolerated) / samples >= bound - 1e-12 and (tolerated + 1 > samples or (samples - tolerated - 1) / samples < bound)
    need = samples_for_one_flip(bound)
    assert tolerated_flips(bound, need) == 1 and tolerated_flips(bound, need - 1) == 0
    changed = data.draw(st.integers(min_value=tolerated + 1, max_value=samples)) if tolerated < samples else samples
    m = compare(np.eye(samples, 3, dtype=np.float32), np.eye(samples, 3, dtype=np.float32))
    m = replace(m, images=samples, top1_agreement=1 - changed / samples, top1_changed=tuple(range(changed)))
    (reason,) = gate_reasons(m, Gate(max_relative_mae=1.0, min_top1=bound))
    assert f"{changed} of {samples} samples changed; at {samples} samples the gate tolerates " in reason
    assert (f"({need} would let one pass)" in reason) == (tolerated == 0)
    notes = small_set_notes(Thresholds().with_gates(int8=Gate(max_relative_mae=0.05, min_top1=bound)), samples)
    assert any(n.startswith("int8 gate top-1") for n in notes) == (tolerated == 0)
    assert small_set_notes(Thresholds().with_gates(int8=Gate(max_relative_mae=0.05, min_top1=bound)), samples, per_sample=False) == []


def test_only_outputs_judged_per_sample_make_the_small_set_notes_apply() -> None:
    from export_check.gates import per_sample_agreement
    from export_check.signature import InputSpec, OutputSpec, Signature

    def signature(*outputs: OutputSpec) -> Signature:
        return Signature(inputs=(InputSpec(name="x"),), outputs=outputs)

    assert per_sample_agreement(signature(OutputSpec("logits")))
    assert per_sample_agreement(signature(OutputSpec("text", kind="sequence-logits", ctc_blank=0)))  # decoded texts, per sample
    assert not per_sample_agreement(signature(OutputSpec("energy", kind="values"), OutputSpec("frames", kind="sequence-logits")))
    assert not per_sample_agreement(signature(OutputSpec("values", kind="values"), OutputSpec("logits", compared=False)))
