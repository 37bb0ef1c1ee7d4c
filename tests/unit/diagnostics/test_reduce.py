"""The reducer's search on tiny hand-built ONNX graphs where the wrong node is known."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from export_check.compare import ErrorAccumulator
from export_check.diagnostics.reduce import Reducer, reduce_row, topological
from export_check.records import Reduced
from export_check.sentences import reproduce_command

BOUND = 1e-3
X = np.array([[-1.0, 0.5, 2.0, 3.0]], dtype=np.float32)


def judge(name: str, reference: np.ndarray, got: np.ndarray):
    """An MAE gate of BOUND, as the explain step builds one from the row's gate."""
    accumulator = ErrorAccumulator("values")
    accumulator.add(reference, got)
    metrics = accumulator.result()
    return metrics if metrics.mae > BOUND else None


def _graph(nodes, constants: dict[str, float], name: str = "g") -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(v, dtype=np.float32), k) for k, v in constants.items()]
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def skip_net(bias: float) -> onnx.ModelProto:
    """X -> A=Relu -> B=A*2 -> C=B+bias -> D=-C -> E=D+B (a skip) -> Y=|E|; the right bias is 0."""
    return _graph([
        helper.make_node("Relu", ["X"], ["A"], name="relu"),
        helper.make_node("Mul", ["A", "two"], ["B"], name="double"),
        helper.make_node("Add", ["B", "bias"], ["C"], name="add_bias"),
        helper.make_node("Neg", ["C"], ["D"], name="neg"),
        helper.make_node("Add", ["D", "B"], ["E"], name="skip"),
        helper.make_node("Abs", ["E"], ["Y"], name="abs"),
    ], {"two": 2.0, "bias": bias})


def skip_truth(x: np.ndarray) -> dict[str, np.ndarray]:
    a = np.maximum(x, 0)
    b = a * 2
    c = b
    d = -c
    e = d + b
    return {"X": x, "A": a, "B": b, "C": c, "D": d, "E": e, "Y": np.abs(e)}


def test_the_wrong_node_alone_is_the_smallest_failing_subgraph() -> None:
    reducer = Reducer(skip_net(0.5))
    values = reducer.values({"X": X})
    truth = skip_truth(X)
    end = reducer.end(values, truth, judge)
    assert end is not None and end[0] == "C"  # the first value off, in topological order
    cut = reducer.reduce("C", values, truth, judge)
    assert cut is not None and cut.cut is None
    assert cut.inputs == ("B",) and [n.name for n in cut.model.graph.node] == ["add_bias"]
    assert cut.metrics.mae == pytest.approx(0.5)


def test_a_cut_goes_only_through_tensors_with_a_reference() -> None:
    reducer = Reducer(skip_net(0.5))
    values = reducer.values({"X": X})
    truth = {k: v for k, v in skip_truth(X).items() if k != "B"}  # no reference for B: the cut moves up to A
    cut = reducer.reduce("C", values, truth, judge)
    assert cut is not None and cut.inputs == ("A",)
    assert [n.name for n in cut.model.graph.node] == ["double", "add_bias"]


def test_error_that_only_accumulates_keeps_the_nodes_it_needs() -> None:
    """Four Adds of 3e-4 each where none belongs: three stay within the gate, four break it."""
    step = 3e-4
    nodes = [helper.make_node("Add", ["X" if i == 0 else f"T{i}", "eps"], [f"T{i + 1}" if i < 3 else "Y"], name=f"add{i}")
             for i in range(4)]
    reducer = Reducer(_graph(nodes, {"eps": step}))
    values = reducer.values({"X": X})
    truth = {"X": X, **{f"T{i}": X for i in range(1, 4)}, "Y": X}
    end = reducer.end(values, truth, judge)
    assert end is not None and end[0] == "Y"
    cut = reducer.reduce("Y", values, truth, judge)
    assert cut is not None and cut.inputs == ("X",) and len(cut.model.graph.node) == 4
    assert cut.metrics.mae == pytest.approx(4 * step, rel=1e-3)


def test_nodes_out_of_order_are_sorted_and_the_search_is_bounded() -> None:
    proto = skip_net(0.5)
    nodes = list(proto.graph.node)
    del proto.graph.node[:]
    proto.graph.node.extend(reversed(nodes))  # as a converter that appends its casts leaves a graph
    assert [n.name for n in topological(proto.graph)] == ["relu", "double", "add_bias", "neg", "skip", "abs"]
    reducer = Reducer(proto)
    values = reducer.values({"X": X})
    truth = skip_truth(X)
    cut = reducer.reduce("C", values, truth, judge, seconds=0.0)
    # out of time at once: the first failing subgraph (the whole cone) is kept, and the record says it was cut
    assert cut is not None and cut.cut is not None and "budget" in cut.cut
    assert cut.inputs == ("X",) and len(cut.model.graph.node) == 3


def test_reduce_row_writes_a_subgraph_that_fails_by_hand(tmp_path) -> None:
    candidate, source = tmp_path / "candidate.onnx", tmp_path / "source.onnx"
    onnx.save(skip_net(0.5), candidate)
    onnx.save(skip_net(0.0), source)  # what the candidate was converted from: right
    reduced = reduce_row("k", candidate, source, None, [(7, {"input": X})], judge, "MAE<=0.001", tmp_path / "reduced")
    assert reduced.error is None and reduced.reference == "source" and reduced.sample == 7
    assert (reduced.nodes, reduced.model_nodes, reduced.inputs, reduced.outputs) == (1, 6, ("B",), ("C",))
    data = np.load(reduced.data)
    np.testing.assert_array_equal(data["input_0"], skip_truth(X)["B"])
    np.testing.assert_array_equal(data["reference_0"], skip_truth(X)["C"])
    command = reproduce_command(reduced)
    assert command is not None
    printed = subprocess.run(f"{sys.executable} {command.removeprefix('python ')}", shell=True, check=True, capture_output=True,
                             text=True).stdout
    assert printed.startswith("C MAE 0.5 max 0.5")


def test_a_model_past_the_protobuf_limit_is_not_searched_and_says_why(tmp_path, monkeypatch) -> None:
    """The search runs subgraphs in onnxruntime sessions made from bytes in memory, which protobuf cannot hold past 2 GiB:
    the 700 M benchmark model's int8 row said "EncodeError: Failed to serialize proto" (its source, the 2.7 GB onnx).
    A source past the limit gives no references, said, and eager's module outputs are the next; a row's own file past it
    is not searched at all (the limit lowered here)."""
    from export_check.diagnostics import reduce as reduce_module

    candidate, big = tmp_path / "candidate.onnx", tmp_path / "big.onnx"
    onnx.save(skip_net(0.5), candidate)
    net = skip_net(0.0)
    net.graph.initializer.append(numpy_helper.from_array(np.zeros(64, np.float32), "padding"))
    onnx.save(net, big)
    monkeypatch.setattr(reduce_module, "PROTOBUF_LIMIT", onnx.load(str(candidate)).ByteSize())  # the candidate fits, big does not
    reduced = reduce_row("k", candidate, big, None, [(7, {"input": X})], judge, "MAE<=0.001", tmp_path / "reduced")
    assert reduced.path is None and reduced.error is not None and reduced.error.startswith("against big.onnx (its source): it holds ")
    assert reduced.error.endswith(" bytes with its weights, past ONNX's 2 GiB limit for the in-memory session that computes its values")
    reduced = reduce_row("k", big, candidate, None, [(7, {"input": X})], judge, "MAE<=0.001", tmp_path / "reduced")
    size = onnx.load(str(big)).ByteSize()
    assert reduced.error == f"big.onnx holds {size:,} bytes with its weights, past ONNX's 2 GiB limit for the in-memory sessions the search runs"
    assert not (tmp_path / "reduced").exists()


def test_no_reduction_says_why(tmp_path) -> None:
    path = tmp_path / "right.onnx"
    onnx.save(skip_net(0.0), path)
    reduced = reduce_row("k", path, path, None, [(0, {"X": X})], judge, "MAE<=0.001", tmp_path / "reduced")
    assert reduced.path is None and reduced.error == "against right.onnx (its source), no value of sample 0 breaks the gate"
    reduced = reduce_row("k", path, None, None, [(0, {"X": X})], judge, "MAE<=0.001", tmp_path / "reduced")
    assert reduced.error == "no reference for its values: it has no source file and no eager model"
    assert reproduce_command(reduced) is None and not (tmp_path / "reduced").exists()
    assert isinstance(reduced, Reduced)


def test_a_source_that_passed_its_gate_stands_for_eager(tmp_path) -> None:
    """Eager's module outputs are the references for a row without a source, or whose source explains nothing because it
    is wrong too (it passes on its error). A source that passed its own gate is eager within that gate: when it explains
    nothing, eager is not searched again (at 14 M parameters that second search was 0.6 s of a futile 1.3 s)."""
    import torch

    path = tmp_path / "right.onnx"
    onnx.save(skip_net(0.0), path)
    eager = torch.nn.ReLU()
    searched = reduce_row("k", path, path, eager, [(0, {"X": X})], judge, "MAE<=0.001", tmp_path / "reduced")
    assert searched.error is not None and "; against eager's module outputs" in searched.error  # both were searched
    trusted = reduce_row("k", path, path, eager, [(0, {"X": X})], judge, "MAE<=0.001", tmp_path / "reduced", source_passed=True)
    assert trusted.error == ("against right.onnx (its source), no value of sample 0 breaks the gate; eager's module outputs not "
                             "searched: right.onnx passed its own gate, so its values are eager's within that gate")
    assert not (tmp_path / "reduced").exists()


def test_a_passing_source_too_big_to_search_leaves_eager_the_reference(tmp_path, monkeypatch) -> None:
    """The source stands for eager only where its values were searched: one past the in-memory limit gave none, so eager's
    module outputs are searched though its row passed."""
    import torch

    from export_check.diagnostics import reduce as reduce_module

    candidate, big = tmp_path / "candidate.onnx", tmp_path / "big.onnx"
    onnx.save(skip_net(0.0), candidate)
    net = skip_net(0.0)
    net.graph.initializer.append(numpy_helper.from_array(np.zeros(64, np.float32), "padding"))
    onnx.save(net, big)
    monkeypatch.setattr(reduce_module, "PROTOBUF_LIMIT", onnx.load(str(candidate)).ByteSize())
    reduced = reduce_row("k", candidate, big, torch.nn.ReLU(), [(0, {"X": X})], judge, "MAE<=0.001", tmp_path / "reduced",
                         source_passed=True)
    assert reduced.error is not None and reduced.error.startswith("against big.onnx (its source): it holds ")
    assert "; against eager's module outputs" in reduced.error and "not searched" not in reduced.error


def test_the_readme_shows_the_command_the_report_prints() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    command = reproduce_command(Reduced(gate="", path="build/export-check/reduced/onnx-fp16.onnx", data="build/export-check/reduced/onnx-fp16.npz"))
    page = (Path(__file__).resolve().parents[3] / "docs" / "explanation" / "groups-and-checks.md").read_text()
    assert command is not None and f"\n$ {command}\n" in readme
    assert f"\n$ {command}\n" in page  # where tests/integration/test_docs.py runs it, on the bundled model


def test_a_constant_is_never_the_end_the_node_computing_with_it_is() -> None:
    """Issue 44: an fp16 file's clamp epsilon (1e-12 in the source, clipped to float16's 5.96e-8 by the converter) broke a
    relative gate first, in topological order, and the reducer handed over the one ``Constant`` node. The end is the first
    *computing* node whose value breaks the gate: here the Max that uses the epsilon, fed X at its cut."""
    nodes = [helper.make_node("Constant", [], ["eps"], name="eps", value=numpy_helper.from_array(np.array(5.96e-8, np.float32))),
             helper.make_node("Relu", ["X"], ["A"], name="relu"),
             helper.make_node("Max", ["A", "eps"], ["M"], name="clamp"),
             helper.make_node("Mul", ["M", "two"], ["Y"], name="double")]
    reducer = Reducer(_graph(nodes, {"two": 2.0}))
    values = reducer.values({"X": X})
    a = np.maximum(X, 0)
    truth = {"X": X, "eps": np.array(1e-12, np.float32), "A": a, "M": np.maximum(a, 0.5), "Y": 2 * np.maximum(a, 0.5)}
    relative = 1e-3  # a relative gate, as the fp16 family's: the epsilon alone is off by 5.96e4 times its size

    def judge_relative(name: str, reference: np.ndarray, got: np.ndarray):
        accumulator = ErrorAccumulator("values")
        accumulator.add(reference.reshape(1, -1), got.reshape(1, -1))
        metrics = accumulator.result()
        return metrics if metrics.mae > relative * max(float(np.abs(reference).mean()), 1e-30) else None

    assert judge_relative("eps", truth["eps"], values["eps"]) is not None  # the constant alone breaks the gate: it is skipped
    end = reducer.end(values, truth, judge_relative)
    assert end is not None and end[0] == "M"
    cut = reducer.reduce("M", values, truth, judge_relative)
    assert cut is not None and [n.op_type for n in cut.model.graph.node] == ["Constant", "Max"] and cut.inputs == ("A",)
