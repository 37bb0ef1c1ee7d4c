"""ONNX files read and placed without their weights (artifacts/_external.py ``graph_io``, ``node_count``, ``place``;
issue 43): after every ONNX build the file's graph inputs and outputs are read to check its batch axis, and the file is moved into
place. Neither parses the weights of an inline model any more (a 366 MB copy for the 92 M benchmark model): the
graph's inputs and outputs are found by walking the protobuf wire format, and a file alone in its scratch folder
within the limit is renamed. Each must give what ``onnx.load`` gives, or fall back to it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from export_check.artifacts import _external
from export_check.artifacts._common import onnx_batch_dims
from export_check.artifacts._external import graph_io, node_count, place
from export_check.signature import SINGLE

NAMES = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=12)
DIMS = st.lists(st.one_of(st.integers(0, 2**40), NAMES), min_size=0, max_size=4)


def _model(inputs: list[tuple[str, list]], outputs: list[tuple[str, list]], weights: int = 1000, doc: str = "") -> onnx.ModelProto:
    """A model with ``inputs`` and ``outputs`` (name, dims) around an Identity chain, an initializer of ``weights``
    floats (stepped over by the walk), a doc string and metadata (fields before and after the graph)."""
    values = [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims) for name, dims in inputs]
    results = [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims) for name, dims in outputs]
    nodes = [helper.make_node("Identity", [inputs[0][0]], [name]) for name, _ in outputs]
    weight = numpy_helper.from_array(np.arange(weights, dtype=np.float32), "w")
    graph = helper.make_graph(nodes, "g", values, results, initializer=[weight], doc_string=doc)
    model = helper.make_model(graph, producer_name="test", doc_string=doc)
    helper.set_model_props(model, {"k": "v" * 50})
    return model


def _by_onnx(path: Path) -> tuple[list, list]:
    model = onnx.load(str(path), load_external_data=False)
    return list(model.graph.input), list(model.graph.output)


@settings(max_examples=60, deadline=None)
@given(inputs=st.lists(st.tuples(NAMES, DIMS), min_size=1, max_size=3, unique_by=lambda v: v[0]),
       outputs=st.lists(st.tuples(NAMES, DIMS), min_size=1, max_size=3, unique_by=lambda v: v[0]),
       weights=st.integers(0, 5000), doc=st.text(max_size=300))
def test_the_graphs_inputs_and_outputs_are_what_onnx_load_reads(tmp_path_factory, inputs, outputs, weights, doc) -> None:
    path = tmp_path_factory.mktemp("io") / "m.onnx"
    path.write_bytes(_model(inputs, outputs, weights, doc).SerializeToString())
    found = graph_io(path)
    assert found == _by_onnx(path)
    assert [v.name for v in found[0]] == [name for name, _ in inputs]
    assert node_count(path) == len(outputs) == len(onnx.load(str(path)).graph.node)


def test_a_graph_given_twice_is_merged_as_protobuf_merges_it(tmp_path: Path) -> None:
    first = _model([("a", [1, "n"])], [("y", ["batch"])]).SerializeToString()
    second = onnx.ModelProto(graph=onnx.GraphProto(input=[helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])])).SerializeToString()
    path = tmp_path / "twice.onnx"
    path.write_bytes(first + second)  # one message: its graph field twice, whose repeated inputs concatenate
    inputs, outputs = graph_io(path)
    assert [v.name for v in inputs] == ["a", "b"] and [v.name for v in outputs] == ["y"] and node_count(path) == 1
    assert (inputs, outputs) == _by_onnx(path)


def test_the_weights_are_never_parsed(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "big.onnx"
    path.write_bytes(_model([("input", ["batch", 4])], [("logits", ["batch", 2])], weights=2_000_000).SerializeToString())
    monkeypatch.setattr(onnx, "load", lambda *a, **k: pytest.fail("parsed whole"))
    monkeypatch.setattr(onnx, "load_model", lambda *a, **k: pytest.fail("parsed whole"))
    assert onnx_batch_dims(path, SINGLE) == [("input", "input", 0, "batch"), ("output", "logits", 0, "batch")]


@pytest.mark.parametrize("cut", [1, 7, 100, -3])
def test_a_file_cut_short_or_not_protobuf_is_left_to_onnx_load_to_refuse(tmp_path: Path, cut: int) -> None:
    data = _model([("a", [1])], [("y", [1])], weights=10).SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:cut])
    try:
        expected = _by_onnx(path)
    except Exception as exc:  # onnx refuses it: graph_io raises what onnx.load raises
        with pytest.raises(type(exc)):
            graph_io(path)
    else:
        assert graph_io(path) == expected
    path.write_bytes(b"\x0f\xff\xff")  # wire type 7: not protobuf
    with pytest.raises(Exception):  # noqa: B017 (onnx's own DecodeError)
        graph_io(path)
    path.write_bytes(b"")
    assert graph_io(path) == ([], [])  # an empty message, as onnx.load reads it
    assert _by_onnx(path) == ([], [])


def test_a_file_alone_within_the_limit_is_renamed_unparsed(tmp_path: Path, monkeypatch) -> None:
    scratch, out = tmp_path / "scratch", tmp_path / "out"
    scratch.mkdir()
    out.mkdir()
    data = _model([("input", ["batch"])], [("logits", ["batch"])], weights=50_000).SerializeToString()
    (scratch / "onnx.onnx").write_bytes(data)
    monkeypatch.setattr(onnx, "load", lambda *a, **k: pytest.fail("parsed"))
    assert place(scratch / "onnx.onnx", out / "tmp.onnx", out / "onnx.onnx") == {}
    assert (out / "tmp.onnx").read_bytes() == data and not (scratch / "onnx.onnx").exists()


def test_a_file_with_company_or_over_the_limit_is_still_read(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    model = _model([("input", ["batch"])], [("logits", ["batch"])], weights=50_000)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    onnx.save(model, str(scratch / "onnx.onnx"), save_as_external_data=True, all_tensors_to_one_file=True, location="w.bin", size_threshold=0)
    assert place(scratch / "onnx.onnx", out / "tmp.onnx", out / "onnx.onnx") == {}  # external, total within: taken inline
    weight = numpy_helper.to_array(onnx.load(str(out / "tmp.onnx")).graph.initializer[0])
    assert np.array_equal(weight, np.arange(50_000, dtype=np.float32))
    model = _model([("input", ["batch"])], [("logits", ["batch"])], weights=50_000)  # onnx.save made the first external
    monkeypatch.setenv(_external.ENV, "1000")
    scratch2 = tmp_path / "scratch2"
    scratch2.mkdir()
    onnx.save(model, str(scratch2 / "onnx.onnx"))  # inline, alone, over the lowered limit: re-saved with its .data
    placed = place(scratch2 / "onnx.onnx", out / "tmp2.onnx", out / "onnx.onnx")
    assert "external_data" in placed and (out / "onnx.onnx.data").stat().st_size >= 200_000
