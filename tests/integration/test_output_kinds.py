"""Output kinds by evidence, not by shape alone (issue 44, item 4), on kit-like models recorded as a user records them:
a face detector's box and landmark heads beside its class probabilities, and a voice-activity LSTM that returns its
carried state. Box offsets, landmarks and ``h``/``c`` are ``values`` (judged by their error, no top-1 gate); the
classifier head stays ``logits``; ``golden record`` says the evidence, and the manifest keeps it."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TESTS, save_state, seeded
from export_check.cli import main

ARCHES = TESTS / "data" / "diag_arches.py"


def _samples(folder: Path, shape: tuple[int, ...], count: int = 12) -> Path:
    rng = np.random.default_rng(3)
    folder.mkdir(parents=True)
    for i in range(count):
        np.savez(folder / f"s{i:03d}.npz", x=rng.standard_normal(shape).astype(np.float32))
    return folder


def _record(tmp_path: Path, cls_name: str, shape: tuple[int, ...]) -> tuple[dict[str, str], str, dict]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("diag_arches", ARCHES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    checkpoint = save_state(seeded(getattr(module, cls_name)), tmp_path / "model.pth")
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["golden", "record", str(checkpoint), "--arch", f"{ARCHES}:{cls_name}", "--inputs",
                     str(_samples(tmp_path / "samples", shape)), "--golden", str(tmp_path / "golden")]) == 0
    manifest = json.loads((tmp_path / "golden" / "manifest.json").read_text())
    kinds = {o["name"]: o["kind"] for o in manifest["signature"]["outputs"]}
    return kinds, printed.getvalue(), manifest


def test_a_detectors_box_and_landmark_heads_are_values_its_class_head_logits(tmp_path: Path) -> None:
    kinds, printed, manifest = _record(tmp_path, "KitDetector", (12,))
    assert kinds == {"output_0": "logits", "output_1": "values", "output_2": "values"}
    line = next(x for x in printed.splitlines() if x.startswith("output kinds: "))
    assert "output_0 logits (evidence: returned by nn.Softmax scores.1, class probabilities: top-1 per sample is gated)" in line
    assert "output_1 values (evidence: another output, output_0, holds the classes" in line and "output_2 values (evidence" in line
    assert manifest["recording"]["kinds"]["output_1"].startswith("evidence: another output, output_0")


def test_an_lstms_carried_state_is_values_and_its_classifier_logits(tmp_path: Path) -> None:
    kinds, printed, _ = _record(tmp_path, "KitVoiceActivity", (5, 6))
    state = [name for name in kinds if name != "output_0"]
    assert kinds["output_0"] == "logits" and len(state) == 2 and all(kinds[n] == "values" for n in state), kinds
    line = next(x for x in printed.splitlines() if x.startswith("output kinds: "))
    assert line.count("evidence: the carried state (h/c) of nn.LSTM rnn") == 2
    assert "output_0 logits (default for a 2-D float output: top-1 per sample is gated)" in line


def test_a_shape_alone_still_makes_a_single_unnamed_matrix_logits(tmp_path: Path) -> None:
    """One unnamed (batch, 4) output from a Linear, no labels, no other output: no evidence, the shape's default stays."""
    kinds, printed, manifest = _record(tmp_path, "KitDetectorBoxesOnly", (12,))
    assert kinds == {"output": "logits"} and "kinds" not in manifest["recording"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_named_as_the_cause_not_nondeterminism(tmp_path: Path, bad: float) -> None:
    """A checkpoint with one NaN (or Inf) weight: the eager row names the tensor, every artifact row is not judged,
    and no sentence blames nondeterminism (NaN != NaN made two identical calls look different)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("diag_arches", ARCHES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = seeded(module.KitDetectorBoxesOnly)
    checkpoint = save_state(model, tmp_path / "model.pth")
    arch = f"{ARCHES}:KitDetectorBoxesOnly"
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(_samples(tmp_path / "samples", (12,))),
                 "--golden", str(tmp_path / "golden"), "-q"]) == 0
    state = torch.load(checkpoint, weights_only=True)
    state["boxes.weight"][1, 2] = bad
    torch.save(state, tmp_path / "broken.pth")
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["check", str(tmp_path / "broken.pth"), "--arch", arch, "--golden", str(tmp_path / "golden"), "--out",
                     str(tmp_path / "out"), "--no-cache", "-q", "--artifacts", "torchscript-trace", "--json", str(tmp_path / "r.json")])
    rows = {r["name"]: r for r in json.loads((tmp_path / "r.json").read_text())["rows"]}
    assert code == 1 and rows["eager"]["status"] == "fail" and rows["torchscript-trace"]["status"] == "error"
    assert rows["eager"]["reasons"][0].startswith("the checkpoint's weights hold NaN/Inf (boxes.weight: 1 of 64)")
    assert rows["torchscript-trace"]["reasons"][0].startswith("not judged: the checkpoint's weights hold NaN/Inf")
    assert not any("deterministic" in r for row in rows.values() for r in row["reasons"])
