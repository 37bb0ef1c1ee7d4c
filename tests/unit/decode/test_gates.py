"""The judge of a language model's rows (export_check.decode.rows.judge, on the gates of export_check.decode.gates), on
verdicts made by hand: every bound it misses, the first divergent prompt and step, and the cause it names (the decode
path, the cache's length)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from export_check.decode.gates import GATES
from export_check.decode.rows import DecodePath, judge
from export_check.decode.verdicts import PromptVerdict, TokenVerdict, token_verdict


def verdict(prompts: tuple[PromptVerdict, ...], mae: float = 0.0, kl: float = 0.0, top1: float = 1.0) -> TokenVerdict:
    return TokenVerdict(positions=40, mae=mae, max_abs=mae, kl_mean=kl, kl_worst=kl, top1_agreement=top1, perplexity=5.0,
                        reference_perplexity=5.0, prompts=prompts, per_prompt_mae=tuple(mae for _ in prompts))


SAME = PromptVerdict("p0", 6, True)


def diverged(name: str, prompt_tokens: int, step: int) -> PromptVerdict:
    return PromptVerdict(name, prompt_tokens, False, step, 11, 12, " a", " b")


def test_a_float_row_whose_generations_all_match_passes() -> None:
    judged = judge("decode-onnx", verdict((SAME, SAME), mae=5e-7), GATES["float"], DecodePath(True, 18, True, 18))
    assert (judged.passed, judged.reasons, judged.gate.describe(), judged.against) == (True, (), "generations identical & MAE<=1e-05", "eager")


def test_a_divergence_names_the_prompt_the_step_both_tokens_the_row_and_the_decode_path() -> None:
    judged = judge("decode-onnx", verdict((SAME, diverged("p1", 7, 3), diverged("p2", 6, 0))), GATES["float"], DecodePath(True, 18, True, 18))
    passed, reasons = judged.passed, judged.reasons
    assert not passed
    assert reasons[0] == ("generation differs on 2 of 3 prompts; first: prompt p1 at step 3 (position 10): eager ' a' (token 11), "
                          "decode-onnx ' b' (token 12) (and 1 more: p2)")
    assert reasons[1].startswith("cause: the single forward (full-forward) passes, so the decode path is the suspect")
    assert "step 3 of prompt p1" in reasons[1]


@given(length=st.integers(min_value=4, max_value=60), past=st.integers(min_value=1, max_value=8), prompt=st.integers(min_value=1, max_value=4))
def test_a_divergence_only_past_the_cache_names_its_length(length: int, past: int, prompt: int) -> None:
    # the token at step s is generated from position prompt + s - 1: past the cache when that is >= length
    step = length - prompt + past
    reasons = judge("decode-onnx", verdict((diverged("p0", prompt, step),)), GATES["float"], DecodePath(True, length, True, length + 9)).reasons
    assert reasons[-1] == (f"cause: the generation stops matching only past the static cache's {length} positions "
                           f"(prompt + continuation need up to {length + 9}): the cache is too short")
    within = verdict((diverged("p0", prompt, length - prompt),))
    inside = judge("decode-onnx", within, GATES["float"], DecodePath(True, length, True, length + 9)).reasons
    assert "too short" not in inside[-1] and "decode path is the suspect" in inside[-1]


def test_no_cause_is_named_for_the_full_forward_or_when_the_single_forward_fails_too() -> None:
    bad = verdict((diverged("p0", 5, 2),), mae=0.3)
    assert not any(r.startswith("cause:") for r in judge("full-forward", bad, GATES["float"], DecodePath(False, None, None)).reasons)
    assert not any(r.startswith("cause:") for r in judge("decode-onnx", bad, GATES["float"], DecodePath(True, 40, False, 20)).reasons)


@pytest.mark.parametrize(("kl", "top1", "missed"), [(5e-5, 0.99, ()), (2e-3, 0.99, ("KL",)), (5e-5, 0.9, ("top-1",)), (2e-3, 0.9, ("KL", "top-1"))])
def test_the_int8_gate_bounds_kl_and_agreement_and_lets_generations_differ(kl: float, top1: float, missed: tuple[str, ...]) -> None:
    judged = judge("decode-torchao-int8", verdict((diverged("p0", 5, 2),), mae=6e-3, kl=kl, top1=top1), GATES["int8-weight"],
                   DecodePath(True, 40, True, 40))
    assert judged.passed == (not missed) and [r.split(" ")[0] for r in judged.reasons] == list(missed)


def test_token_verdict_counts_by_hand() -> None:
    ref = [np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]], np.float32))]
    cand = (ref[0][[0, 0, 2]],)  # position 1 argmax moves from 1 to 0
    out = token_verdict(["p"], [np.array([4, 5])], [np.array([1])], ref, [np.array([1])], cand, (np.array([0]),), lambda ids: f"<{ids[0]}>")
    assert out.top1_agreement == pytest.approx(2 / 3) and out.kl_worst == pytest.approx(0.1 * np.log(0.1 / 0.7) + 0.8 * np.log(0.8 / 0.2))
    assert out.perplexity == pytest.approx(1 / 0.2) and out.reference_perplexity == pytest.approx(1 / 0.8)
    assert out.prompts[0].first_step == 0 and (out.prompts[0].expected_text, out.prompts[0].got_text) == ("<1>", "<0>")


def test_a_standing_reason_fails_a_row_that_meets_every_bound() -> None:
    judged = judge("decode-executorch-runner", verdict((SAME,), mae=5e-7), GATES["float"], DecodePath(True, 18, True, 18), "eager",
                   ("the runner disagrees",))
    assert (judged.passed, judged.reasons, judged.standing) == (False, ("the runner disagrees",), ("the runner disagrees",))


def test_the_runner_is_compared_with_the_stepped_tokens_up_to_eos_and_not_where_it_raised() -> None:
    from export_check.decode.verdicts import runner_disagreement

    decode = lambda ids: "".join(chr(96 + i) for i in ids)  # noqa: E731  1 -> "a", 2 -> "b"
    generated = (np.array([1, 2, 9, 3]), np.array([2, 2]), np.array([3]))  # 9: EOS, what follows it is not text
    assert runner_disagreement(["p0", "p1", "p2"], None, generated, decode, 9) == ()
    assert runner_disagreement(["p0", "p1", "p2"], ("ab", "bb", "\0it raised"), generated, decode, 9) == ()
    assert runner_disagreement(["p0", "p1", "p2"], ("ab", "ba", "x"), generated, decode, 9) == (
        "ExecuTorch's runner (TextLLMRunner) and the stepped loop disagree on 2 of 3 prompts; first: prompt p1: runner 'ba', stepped 'bb'",)
    assert runner_disagreement(["p0"], ("abic",), generated[:1], decode, None) == ()  # no EOS: every token is text


def test_the_options_lay_new_bounds_over_a_family_and_refuse_one_out_of_range() -> None:
    from export_check.decode.gates import gates_for, overlaid
    from export_check.errors import UsageError

    gates = gates_for({"max-mae": 1e-4, "int4-weight-min-top1": 0.9, "int8-weight-max-kl": None})
    assert (gates["float"].max_mae, gates["eager"].max_mae, gates["int4-weight"].min_top1) == (1e-4, 1e-4, 0.9)
    assert gates["int8-weight"] == GATES["int8-weight"] and gates["int4-weight"].max_kl_mean == GATES["int4-weight"].max_kl_mean
    for name, bad in (("int8-weight-min-top1", 1.5), ("int4-weight-max-kl", -1.0), ("int8-weight-max-kl", float("nan"))):
        with pytest.raises(UsageError, match=f"^--{name} must be "):
            overlaid(GATES["int8-weight"], "int8-weight" if name.startswith("int8") else "int4-weight", {name: bad})


def test_a_stored_row_judged_again_is_the_same_judge_with_the_new_bounds() -> None:
    """rows.judged_again reads back what judged_row stored (as the JSON report holds it) and judges it again."""
    import json

    from export_check.decode.rows import judged_again, judged_row

    int8 = verdict((SAME, diverged("p1", 5, 2)), mae=6e-3, kl=4e-5, top1=0.99)
    def row(name: str, family: str, v: TokenVerdict, path: DecodePath, standing: tuple[str, ...] = ()):
        return judged_row(name, family, v, judge(name, v, GATES[family], path, "eager", standing))

    float_row = row("full-forward", "float", verdict((SAME, SAME), mae=5e-7), DecodePath(False, None, None))
    onnx = row("decode-onnx", "float", verdict((SAME, diverged("p1", 5, 2)), mae=2e-6), DecodePath(True, 40, True, 40))
    quant = row("decode-torchao-int8", "int8-weight", int8, DecodePath(True, 40, True, 40), standing=("ExecuTorch's runner ... disagree",))
    rows = [float_row, onnx, quant]
    data = {"rows": [r.to_json(1e-5) for r in rows]}
    assert json.loads(json.dumps(data)) == data
    same, notes = judged_again(data, "r.json", {})
    assert [(r.name, r.status, r.reasons, r.details) for r in same] == [(r.name, r.status, r.reasons, r.details) for r in rows]
    assert notes == ("decode gates: as the report's",)
    # a tighter float MAE fails the full forward: the decode row's cause no longer blames the decode path
    tight, notes = judged_again(data, "r.json", {"max-mae": 1e-9, "int8-weight-max-kl": 1e-5})
    assert [r.status for r in tight] == ["fail", "fail", "fail"] and [r.status for r in rows] == ["pass", "fail", "fail"]
    assert not any(r.startswith("cause:") for r in tight[1].reasons) and any(r.startswith("cause:") for r in onnx.reasons)
    assert tight[2].reasons == ("KL to eager 4e-05 nats (mean; worst 4e-05) > 1e-05", "ExecuTorch's runner ... disagree")
    assert notes[0].startswith("decode gates changed: float generations identical & MAE<=1e-05 -> generations identical & MAE<=1e-09; ")
