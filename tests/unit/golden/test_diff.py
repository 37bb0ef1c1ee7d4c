"""golden/diff.py: what approving new weights would change, computed on the bundled golden set's real references."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import DEFAULT_GOLDEN
from export_check.golden.diff import diff_references
from export_check.golden.manifest import GoldenSet, load_golden
from export_check.signature import InputSpec, OutputSpec, Signature


@pytest.fixture(scope="module")
def golden() -> GoldenSet:
    return load_golden(DEFAULT_GOLDEN)


def test_the_same_logits_change_nothing(golden: GoldenSet) -> None:
    old = golden.reference()
    diff = diff_references(golden, old, old.copy(), "f" * 64)
    assert diff.unchanged and diff.changes == () and diff.mae == 0.0 and diff.inputs == len(golden) == 64
    assert diff.accuracy is not None and diff.accuracy[0] == diff.accuracy[1]
    assert diff.lines()[0] == f"checkpoint sha256 {golden.model['checkpoint_sha256'][:12]} -> ffffffffffff"


def test_a_moved_top1_is_named_with_its_label_and_the_accuracy(golden: GoldenSet) -> None:
    old = golden.reference().astype(np.float32)
    labels = golden.labels()
    new = old.copy()
    wrong = (labels[5] + 1) % 10
    new[5, wrong] = old[5].max() + 1.0  # sample 5 now predicts a wrong class
    diff = diff_references(golden, old, new, "a" * 64)
    expected_mae = float(np.abs(new.astype(np.float64) - old).mean())
    assert not diff.unchanged and diff.mae == pytest.approx(expected_mae) and diff.max_abs == pytest.approx(float(np.abs(new - old).max()))
    assert [(c.name, c.old, c.new, c.label) for c in diff.changes] == [(golden.inputs[5].name, int(old[5].argmax()), wrong, labels[5])]
    truth = np.asarray(labels)
    before = float(np.mean(old.argmax(1) == truth))
    assert diff.accuracy == pytest.approx((before, before - (1 / 64 if old[5].argmax() == labels[5] else 0)))
    text = diff.lines()
    assert "top-1 changes on 1 of 64 inputs" in text[1] and text[2].startswith(f"  {golden.inputs[5].name}: top-1 ")
    assert text[-1].startswith("accuracy on labels: ")


def test_another_shape_replaces_every_reference(golden: GoldenSet) -> None:
    old = golden.reference()
    diff = diff_references(golden, old, np.zeros((64, 12), np.float32), "b" * 64)
    assert diff.mae is None and not diff.unchanged
    assert diff.lines() == ["reference shape changes (64, 10) -> (64, 12); every input's logits are replaced"]


def format_2(golden: GoldenSet) -> GoldenSet:
    recorded = Signature((InputSpec("input"),), (OutputSpec("logits"), OutputSpec("boxes", kind="values"), OutputSpec("old")))
    return dataclasses.replace(golden, signature=recorded)


def test_format_2_outputs_are_diffed_one_by_one(golden: GoldenSet) -> None:
    two = format_2(golden)
    rng = np.random.default_rng(0)
    logits = [golden.reference()[i].astype(np.float32) for i in range(64)]
    boxes = [rng.random(4, dtype=np.float32) for _ in range(64)]
    old = {"logits": logits, "boxes": boxes, "old": [np.zeros(2, np.float32)] * 64}
    moved = [x.copy() for x in logits]
    moved[3][(int(logits[3].argmax()) + 1) % 10] += 100.0
    new_sig = Signature((InputSpec("input"),), (OutputSpec("logits"), OutputSpec("boxes", kind="values", compared=False),
                                                OutputSpec("scores", kind="values")))
    new = {"logits": moved, "boxes": [b[:2] for b in boxes], "scores": [np.ones(3, np.float64)] * 64}
    diff = diff_references(two, old, new, "c" * 64, new_sig)
    by_name = {o.name: o for o in diff.outputs}
    assert [(o.name, o.status) for o in diff.outputs] == [("logits", "compared"), ("boxes", "reshaped"), ("scores", "new"),
                                                         ("old", "removed")]
    logit_change = by_name["logits"]
    assert logit_change.max_abs == pytest.approx(100.0) and logit_change.mae == pytest.approx(100.0 / (64 * 10))
    assert logit_change.changes is not None and [c.name for c in logit_change.changes] == [golden.inputs[3].name]
    assert by_name["boxes"].old == "float32 (4,)" and by_name["boxes"].new == "float32 (2,)"
    assert diff.signature_changes == ("output boxes: compared True -> False",)
    assert not diff.unchanged and diff.accuracy is not None
    text = diff.lines()
    assert "output scores [values]: new (float64 (3,))" in text and "output old [logits]: removed (was float32 (2,))" in text
    assert any(line.startswith("output logits [logits]: MAE") and "top-1 changes on 1 of 64 inputs" in line for line in text)


def test_format_2_identical_outputs_are_unchanged(golden: GoldenSet) -> None:
    two = dataclasses.replace(golden, signature=Signature((InputSpec("input"),), (OutputSpec("seq", kind="sequence-logits"),)))
    values = [np.arange(12, dtype=np.float32).reshape(3, 4) * (i + 1) for i in range(64)]
    diff = diff_references(two, {"seq": values}, {"seq": [v.copy() for v in values]}, "d" * 64, two.signature)
    assert diff.unchanged and diff.outputs[0].changes == () and diff.accuracy is None
