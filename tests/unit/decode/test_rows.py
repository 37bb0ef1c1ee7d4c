"""A language model's kind that does not apply (decode/rows.py): not applicable, or under --strict a failure, in the check
and when judge reads the stored row again."""

from __future__ import annotations

import json

from export_check.decode.rows import judged_again, not_applicable_row


def test_a_kind_that_does_not_apply_fails_only_under_strict() -> None:
    lenient, strict = (not_applicable_row("decode-onnx", "float", "needs onnxruntime, not installed", s) for s in (False, True))
    assert (lenient.status, lenient.passed, lenient.reasons) == ("not-applicable", True, ("needs onnxruntime, not installed",))
    assert (strict.status, strict.passed, strict.reasons) == ("fail", False,
                                                               ("needs onnxruntime, not installed (--strict: a kind that does not apply fails)",))
    assert not_applicable_row("decode-torchao-int4", "int4-weight", "needs torchao, not installed", False).family == "int8"


def test_judge_reads_the_stored_row_under_strict_or_not() -> None:
    for first in (False, True):
        row = not_applicable_row("decode-torchao-int8", "int8-weight", "needs torchao, not installed", first)
        stored = json.loads(json.dumps(row.to_json(1e-5)))
        for again in (False, True):
            (judged,), _ = judged_again({"rows": [stored]}, "r.json", {}, again)
            assert (judged.status, judged.family, judged.reasons[0].endswith("fails)")) == (
                ("fail", "int8", True) if again else ("not-applicable", "int8", False))
