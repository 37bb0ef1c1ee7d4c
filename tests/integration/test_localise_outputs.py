"""Localisation for every failing output (issue 44, item 2): a fault on a detector's *second* output is found by the
per-layer tables and reduced to a subgraph, as one on its first is; and on an fp16 file the reducer hands over a node
that computes, never a ``Constant`` alone. The truth is measured by hand: the traced file and eager run side by side, the
reduced subgraph run with onnxruntime on its saved inputs, the fp32 source file's values of the same tensors."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from conftest import TESTS, save_state, seeded
from export_check.cli import main
from export_check.golden.manifest import load_golden

ARCHES = TESTS / "data" / "diag_arches.py"
FLOAT_MAX_MAE = 1e-5


def _arches():
    spec = importlib.util.spec_from_file_location("diag_arches", ARCHES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _checked(root: Path, digit_images: Path, cls_name: str, artifacts: str, *gates: str) -> tuple[int, dict, str, torch.nn.Module]:
    model = seeded(getattr(_arches(), cls_name))
    checkpoint = save_state(model, root / "model.pth")
    arch = f"{ARCHES}:{cls_name}"
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(digit_images), "--golden", str(root / "golden"),
                 "--size", "16", "--batch-size", "8", "-q"]) == 0
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main(["check", str(checkpoint), "--arch", arch, "--golden", str(root / "golden"), "--out", str(root / "out"), "--no-cache",
                     "--batch-size", "8", "--artifacts", artifacts, "--json", str(root / "r.json"), *gates])
    return code, json.loads((root / "r.json").read_text()), printed.getvalue(), model


def _images(root: Path) -> np.ndarray:
    golden = load_golden(root / "golden")
    return next(batch for _, batch in golden.batches(len(golden)))


def _by_hand(reduced: dict) -> tuple[np.ndarray, np.ndarray]:
    data = dict(np.load(reduced["data"]))
    session = ort.InferenceSession(reduced["path"], providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: data[f"input_{k}"] for k, i in enumerate(session.get_inputs())})[0]
    return got.astype(np.float64), data["reference_0"].astype(np.float64)


@pytest.fixture(scope="module")
def second_output(tmp_path_factory, digit_images):
    root = tmp_path_factory.mktemp("second-output")
    return (root, *_checked(root, digit_images, "QuirkyDetectorForward", "torchscript-trace,onnx"))


def test_a_fault_on_the_second_output_fails_on_that_output_only(second_output) -> None:
    _, code, report, _, _ = second_output
    rows = {r["name"]: r for r in report["rows"]}
    assert code == 1 and rows["eager"]["status"] == "pass"
    for name in ("torchscript-trace", "onnx"):
        outputs = {o["name"]: o for o in rows[name]["outputs"]}
        assert rows[name]["status"] == "fail" and outputs["output_0"]["metrics"]["mae"] <= FLOAT_MAX_MAE
        assert outputs["output_1"]["metrics"]["mae"] > FLOAT_MAX_MAE


@pytest.mark.parametrize("name, scope", [("torchscript-trace", "local"), ("onnx", "cumulative")])
def test_the_second_outputs_fault_is_localised_in_the_forward_that_returns_it(second_output, name: str, scope: str) -> None:
    root, _, report, printed, model = second_output
    row = next(r for r in report["rows"] if r["name"] == name)
    layers = row["diagnostics"]["layers"]
    assert layers["error"] is None and layers["scope"] == scope
    # every module agrees (the trunk, both heads' Linear layers); the model's own forward departs on its output 1
    assert layers["first"] == "" and [d["module"] for d in layers["layers"] if d["departs"]] == [""], layers
    first = next(d for d in layers["layers"] if d["departs"])
    assert first["ops"].endswith("output 1")
    # by hand: the traced file beside eager on the table's batch; the table's MAE is output_1's, 1 % of the boxes
    start, size = layers["batch_start"], layers["batch_size"]
    batch = torch.from_numpy(_images(root)[start : start + size])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load's own deprecation
        traced = torch.jit.load(str(root / "out" / "torchscript-trace.pt"))
    with torch.inference_mode():
        (_, boxes), (_, eager_boxes) = traced(batch), model.eval()(batch)
    by_hand = float(np.abs(boxes.numpy().astype(np.float64) - eager_boxes.numpy()).mean())
    assert by_hand > FLOAT_MAX_MAE and first["mae"] == pytest.approx(by_hand, rel=1e-3)
    assert any(r.startswith("where: first departs") for r in row["reasons"]), row["reasons"]
    assert "no module departs" not in printed


def test_the_second_outputs_fault_is_reduced_to_a_failing_subgraph(second_output) -> None:
    root, _, report, printed, model = second_output
    row = next(r for r in report["rows"] if r["name"] == "onnx")
    reduced = row["diagnostics"]["reduced"]
    assert reduced["error"] is None and reduced["reference"] == "eager" and reduced["outputs"] == ["output_1"]
    assert "Mul" in reduced["ops"] and reduced["nodes"] < reduced["model_nodes"]
    got, reference = _by_hand(reduced)
    assert float(np.abs(got - reference).mean()) > FLOAT_MAX_MAE
    # its reference is eager's second output on that golden sample
    image = torch.from_numpy(_images(root)[reduced["sample"] : reduced["sample"] + 1])
    with torch.inference_mode():
        np.testing.assert_allclose(reference, model.eval()(image)[1].numpy(), rtol=0, atol=1e-6)
    assert "reduced: " in printed and "no failing subgraph written" not in printed


def test_an_fp16_reduction_holds_the_node_that_computes_not_the_constant_epsilon(tmp_path, digit_images) -> None:
    """``F.normalize``'s eps (1e-12) is a ``Constant`` the float16 converter clips to 5.96e-8: off by 5.96e4 times its size,
    it broke the relative gate first and was handed over alone. The subgraph now ends at a node that computes, and its
    reference is the fp32 source file's value of that tensor."""
    code, report, _, _ = _checked(tmp_path, digit_images, "NormalizedEmbedding", "onnx-fp16", "--fp16-max-relative-mae", "1e-4")
    row = next(r for r in report["rows"] if r["name"] == "onnx-fp16")
    assert code == 1 and row["status"] == "fail"
    reduced = row["diagnostics"]["reduced"]
    assert reduced["error"] is None and reduced["reference"] == "source"
    sub = onnx.load(reduced["path"])
    producer = next(n for n in sub.graph.node if reduced["outputs"][0] in n.output)
    assert producer.op_type != "Constant" and set(reduced["ops"]) - {"Constant", "Cast"}, reduced["ops"]
    assert not any(n.op_type == "Constant" for n in sub.graph.node if n.output[0] == reduced["outputs"][0])
    got, reference = _by_hand(reduced)
    relative = float(np.abs(got - reference).mean() / np.abs(reference).mean())
    assert 1e-4 < relative < 1e-1 and reduced["metrics"]["relative_mae"] == pytest.approx(relative, rel=1e-2)
    # the reference is the fp32 source's value of the same tensor, on the same golden sample
    source = onnx.load(str(Path(row["artifact"]["path"]).with_name("onnx.onnx")))
    source.graph.output.extend([onnx.ValueInfoProto(name=reduced["outputs"][0])])
    session = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    image = _images(tmp_path)[reduced["sample"] : reduced["sample"] + 1]
    fp32 = session.run([reduced["outputs"][0]], {session.get_inputs()[0].name: image})[0]
    np.testing.assert_allclose(reference, fp32, rtol=0, atol=1e-6)
