"""Greedy CTC decoding, the edit distance and the decoded streams against straightforward reference implementations
(hypothesis); the ctc-blank setting's parser, its JSON round-trip and the judge's reasons on a CTC output."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from export_check.compare import ErrorAccumulator
from export_check.ctc import collapse, decode_batch, edit_distance
from export_check.errors import UsageError
from export_check.gates import Gate, Thresholds, gate_reasons
from export_check.signature import InputSpec, OutputSpec, Signature, ctc_problem, parse_signature_settings, signature_from_json

labels = st.lists(st.integers(0, 4), max_size=12).map(tuple)


def _levenshtein(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """The textbook recursion, memoised."""

    @functools.cache
    def d(i: int, j: int) -> int:
        if not i or not j:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))

    return d(len(a), len(b))


def _collapse(path: tuple[int, ...], blank: int) -> tuple[int, ...]:
    return tuple(k for k, _ in itertools.groupby(path) if k != blank)


@given(labels, labels)
def test_edit_distance_is_the_textbook_levenshtein(a, b) -> None:
    assert edit_distance(a, b) == _levenshtein(a, b) == edit_distance(b, a)


@given(labels, st.integers(0, 4))
def test_collapse_merges_repeats_then_drops_blanks(path, blank) -> None:
    assert collapse(path, blank) == _collapse(path, blank)


@given(st.integers(1, 4), st.integers(1, 9), st.integers(2, 5), st.integers(0, 2**32 - 1), st.booleans())
@settings(max_examples=50, deadline=None)
def test_decode_batch_is_argmax_per_frame_then_collapse(samples, frames, classes, seed, classes_first) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.integers(-3, 3, size=(samples, frames, classes)).astype(np.float64) + rng.random((samples, frames, classes)) / 10
    expected = [_collapse(tuple(int(np.argmax(frame)) for frame in sample), 0) for sample in scores]
    assert decode_batch(scores, blank=0, class_axis=-1) == expected
    if classes_first:  # (samples, classes, frames): the class axis given as 1
        assert decode_batch(np.swapaxes(scores, 1, 2), blank=0, class_axis=1) == expected


@given(st.integers(2, 6), st.integers(1, 8), st.integers(0, 2**32 - 1), st.floats(0.0, 2.0))
@settings(max_examples=40, deadline=None)
def test_the_streams_in_batches_equal_a_by_hand_decoding_of_the_whole_set(samples, frames, seed, noise) -> None:
    rng = np.random.default_rng(seed)
    reference = rng.normal(size=(samples, frames, 4))
    candidate = reference + rng.normal(scale=noise, size=reference.shape)
    acc = Thresholds().accumulator("sequence-logits", -1, ctc_blank=0)  # what a replay measures
    for start in range(0, samples, 2):  # batches of 2: indices and sums carried across them
        acc.add(reference[start:start + 2], candidate[start:start + 2])
    m = acc.result()
    texts = [(_collapse(tuple(r.argmax(-1)), 0), _collapse(tuple(c.argmax(-1)), 0)) for r, c in zip(reference, candidate, strict=True)]
    changed = tuple(i for i, (r, c) in enumerate(texts) if r != c)
    edits, length = sum(_levenshtein(r, c) for r, c in texts), sum(len(r) for r, _ in texts)
    assert m.agreement == "decoded" and m.top1_changed == changed and m.top1_agreement == 1 - len(changed) / samples
    assert m.stat("decoded_exact_match") == m.top1_agreement
    assert [key for key, _ in m.streamed] == ["cosine", "snr_db", "decoded_exact_match", "cer"]  # the JSON's order, as before
    assert m.stat("cer") == (0.0 if not edits else edits / length if length else float("inf"))
    assert m.position_agreement == pytest.approx(float((reference.argmax(-1) == candidate.argmax(-1)).mean()))


def test_without_a_blank_a_sequence_output_keeps_its_per_position_agreement_and_no_decoded_streams() -> None:
    reference = np.zeros((1, 3, 2))
    acc = Thresholds().accumulator("sequence-logits", -1)
    acc.add(reference, reference)
    m = acc.result()
    assert m.agreement == "per-position" and m.stat("cer") is None and m.stat("decoded_exact_match") is None
    assert "cer" not in m.to_json() and m.to_json()["position_agreement"] == 1.0


def test_the_judge_gates_a_ctc_output_on_its_texts_where_per_frame_agreement_passes() -> None:
    """40 frames a sample, one frame moved in each of 2 of 10 samples: 99.5 % per position, 80 % of the texts kept."""
    reference = np.zeros((10, 40, 3))
    reference[:, ::4, 1] = 1.0  # text: ten 1s, blanks between
    candidate = reference.copy()
    candidate[[3, 7], 4, 1] = 0.0  # a character frame read as blank: one deletion each
    acc = Thresholds().accumulator("sequence-logits", -1, ctc_blank=0)
    acc.add(reference, candidate)
    m = acc.result()
    assert m.position_agreement == pytest.approx(1 - 2 / 400) and m.top1_agreement == pytest.approx(0.8)
    assert m.stat("cer") == pytest.approx(2 / 100) and m.top1_changed == (3, 7)
    reasons = gate_reasons(m, Gate(max_relative_mae=1.0, min_top1=0.98, max_cer=0.01))
    assert reasons == (
        "decoded exact-match rate 80.0% < 98.0% (2 of 10 samples changed; at 10 samples the gate tolerates no changed sample "
        "(50 would let one pass); per-position agreement 99.5%)",
        "character error rate 2.00% > 1.00% (greedy CTC decoding; 2 of 10 samples' decoded text changed)",
    )
    assert gate_reasons(m, Gate(max_relative_mae=1.0, min_top1=0.8, max_cer=0.02)) == ()
    own = ErrorAccumulator("sequence-logits", -1, ctc_blank=0)  # given no stream (the diagnostics'): the agreement is compare's own
    own.add(reference, candidate)
    assert own.result().streamed == (("decoded_exact_match", pytest.approx(0.8)),) and own.result().top1_changed == (3, 7)


def test_a_cer_gate_does_not_gate_an_output_without_a_blank() -> None:
    acc = Thresholds().accumulator("logits")
    acc.add(np.eye(3), np.eye(3))
    assert gate_reasons(acc.result(), Gate(max_mae=1.0, max_cer=0.0)) == ()


@given(st.integers(0, 50))
def test_a_blank_round_trips_through_the_settings_and_the_manifest_json(blank) -> None:
    parsed = parse_signature_settings(None, {"output": {"kind": "sequence-logits", "ctc-blank": blank}}, "s.toml")
    spec = parsed.apply_output(OutputSpec("output", batch_axis=1))
    assert spec.ctc_blank == blank
    signature = Signature(inputs=(InputSpec("image"),), outputs=(spec,))
    assert signature_from_json(signature.to_json(), "m.json") == signature
    assert ctc_problem(spec, (12, blank + 1)) is None and "is not one of its classes" in (ctc_problem(spec, (12, blank)) or "")


def test_an_output_without_a_blank_writes_no_blank_key() -> None:
    assert "ctc_blank" not in OutputSpec("output").to_json()


@given(st.one_of(st.integers(max_value=-1), st.booleans(), st.floats(allow_nan=True), st.text(max_size=4), st.none(),
                 st.lists(st.integers(), max_size=2)))
def test_a_bad_blank_value_is_one_line_naming_the_key(value) -> None:
    with pytest.raises(UsageError) as caught:
        parse_signature_settings(None, {"output": {"ctc-blank": value}}, "s.toml")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("s.toml: outputs.output.ctc-blank must be the class index of the CTC blank")


@pytest.mark.parametrize("kind", ["logits", "values"])
def test_a_blank_on_another_kind_is_refused_by_the_settings_and_the_manifest(kind) -> None:
    with pytest.raises(UsageError, match=f"ctc-blank is for a sequence-logits output .*kind is '{kind}'"):
        parse_signature_settings(None, {"output": {"kind": kind, "ctc-blank": 0}}, "s.toml")
    data = Signature(inputs=(InputSpec("x"),), outputs=(OutputSpec("output", kind=kind),)).to_json()
    data["outputs"][0]["ctc_blank"] = 0
    with pytest.raises(ValueError, match="ctc_blank of output must be a class index >= 0 of a sequence-logits output"):
        signature_from_json(data, "m.json")
    assert "sequence-logits output" in (ctc_problem(OutputSpec("output", kind=kind, ctc_blank=0), (5,)) or "")
