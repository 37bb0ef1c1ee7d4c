"""The per-layer method of ONNX files (``.onnx``): *cumulative*. A copy of the graph exposes every node
output as a graph output. The TorchScript-based exporter names nodes by module scope
(``/layers/layers.2/conv1/Conv``), which maps back to ``layers.2.conv1``; the dynamo exporter records the
scopes in each node's metadata. A module's value is the last value produced inside its scope, and it is
compared with the eager module's output. A module whose nodes were folded away (BatchNorm into the Conv
before it) has no value of its own; the Conv's value then stands for the eager BatchNorm's output (it
consumed the Conv's output directly), and the row lists it as ``merged``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts import ArtifactKind, BuildContext
from ...pinned import ORT_LOG_SEVERITY, quiet_onnxruntime
from ...records import LayerComparison, LayerDelta
from ._common import Captured, cumulative, finish, inside, layer_delta, merged_reference, modules_with_nodes, output_values


def compare(kind: ArtifactKind, path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, threads: int,
            start: int, ctx: BuildContext | None = None) -> LayerComparison:
    """The method's entry (``layers.compare_layers``): one onnxruntime session on ``threads`` threads."""
    return onnx_layers(path, model, batch, threshold, purpose, threads=threads, start=start)


def module_of(scoped_name: str, modules: set[str]) -> str | None:
    """Map a TorchScript-exporter ONNX name to a module's qualified name.

    >>> module_of("/layers/layers.2/conv1/Conv", {"layers", "layers.2", "layers.2.conv1"})
    'layers.2.conv1'
    >>> module_of("/Flatten", {"fc"})
    ''
    >>> module_of("input_QuantizeLinear", {"fc"}) is None
    True
    """
    if not scoped_name.startswith("/"):
        return None
    qualified, local = "", ""
    for segment in scoped_name.split("/")[1:-1]:
        # A container's child is scoped as "<container's own name>.<index>" ("layers/layers.2",
        # "downsample/downsample.0"); any other submodule by its attribute name ("conv1").
        if local and segment.startswith(local + "."):
            candidate = f"{qualified}{segment[len(local):]}"
        else:
            candidate = f"{qualified}.{segment}" if qualified else segment
        if candidate not in modules:
            break  # e.g. "relu_1", a second call of a module: the node belongs to the enclosing module
        qualified, local = candidate, segment
    return qualified


def dynamo_scope(node: Any, modules: set[str]) -> str | None:
    """The module a dynamo-exported ONNX node came from: the innermost module of its recorded
    ``pkg.torch.onnx.name_scopes`` (``['', 'layers', 'layers.0', 'layers.0.bn1', 'batch_norm']``);
    None for a node without it (a Q/DQ node a quantizer added)."""
    import ast

    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return None
            inside = [str(s) for s in scopes if str(s) in modules]
            return inside[-1] if inside else None
    return None


@contextlib.contextmanager
def _session(proto: Any, threads: int) -> Iterator[Any]:
    ort = quiet_onnxruntime()

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = ORT_LOG_SEVERITY
    yield ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def scoped_values(proto: Any, modules: set[str]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """(value name, module scope, op type) of every node output that maps to a module, in graph order;
    and (node name, module scope) of every named node that does."""
    values: list[tuple[str, str, str]] = []
    scopes: list[tuple[str, str]] = []
    for node in proto.graph.node:
        for out in node.output:
            scope = module_of(node.name, modules) if node.name else None
            if scope is None and out:
                scope = module_of(out, modules)
            if scope is None:
                scope = dynamo_scope(node, modules)
            if out and scope is not None:
                values.append((out, scope, node.op_type))
            if node.name and scope is not None and (not scopes or scopes[-1][0] != node.name):
                scopes.append((node.name, scope))
    return values, scopes


def merges_forward(proto: Any, modules: set[str]) -> bool:
    """Whether a module without nodes takes its value from the node before it (the TorchScript-based
    exporter). The dynamo exporter fuses the other way round: a BatchNorm's node holds the Conv before
    it, so no later node-less module stands in for a value there (the Conv's own output is simply not kept)."""
    return not any(dynamo_scope(n, modules) is not None for n in proto.graph.node)


def onnx_layers(
    path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, threads: int = 1, start: int = 0
) -> LayerComparison:
    """Cumulative comparison: every module's value read out of one run of the whole graph."""
    import onnx

    proto = onnx.load(str(path))
    modules = {name for name, _ in model.named_modules()}
    values, scopes = scoped_values(proto, modules)
    graph_outputs = [o.name for o in proto.graph.output]  # the model's outputs, in its flattened order
    existing = set(graph_outputs)
    for name, _, _ in values:
        if name not in existing:
            proto.graph.output.append(onnx.ValueInfoProto(name=name))
    with _session(proto, threads) as session:
        names = [o.name for o in session.get_outputs()]
        results = dict(zip(names, session.run(None, {session.get_inputs()[0].name: batch}), strict=True))  # one value per output
    method = "onnxruntime"  # messages.LAYER_METHODS words it
    forward = merges_forward(proto, modules)
    def first_cause(cap: Captured, chain: list[Captured], value: np.ndarray, ops: str, limit: float) -> list[LayerDelta]:
        return _first_cause(cap, chain, value, ops, limit, proto, results, modules)

    layers = cumulative(values, results, model, batch, threshold, purpose, first_cause, forward, graph_outputs)
    return replace(finish(purpose, method, "cumulative", start, len(batch), threshold, layers),
                   graph=proto.graph.name, nodes=owners(scopes, {d.module for d in layers}))


def owners(scopes: list[tuple[str, str]], table: set[str]) -> tuple[tuple[str, str], ...]:
    """Each node (name, module scope) with the innermost module of ``table`` that holds it; a node no module holds is left out.

    >>> owners([("/stem/stem.0/Conv", "stem.0"), ("/layers/layers.2/conv1/Conv", "layers.2.conv1"), ("/Flatten", "")],
    ...        {"stem.0", "layers.2"})
    (('/stem/stem.0/Conv', 'stem.0'), ('/layers/layers.2/conv1/Conv', 'layers.2'))
    """
    found = []
    for name, scope in scopes:
        holding = [m for m in table if inside(scope, m)]
        if holding:
            found.append((name, max(holding, key=len)))
    return tuple(found)


def _first_cause(cap: Captured, chain: list[Captured], value: np.ndarray, ops: str, threshold: float, proto: Any,
                 results: dict[str, Any], modules: set[str]) -> list[LayerDelta]:
    """The first departing ONNX value, looked at more closely: did the module's own output agree,
    and a module without nodes after it lost its effect (``dropped``)? Or was the module's input
    already off, so that what departs is the forward code that produced it (``forward-code``)?
    Empty when neither: the module itself departs."""
    own = cap.output.numpy()
    if chain and own.shape == value.shape and not layer_delta(cap.name, ops, own, value, threshold).departs:
        out = [layer_delta(cap.name, ops, own, value, threshold)]
        for nxt in chain:
            ref = nxt.output.numpy()
            if ref.shape == value.shape:
                delta = layer_delta(nxt.name, "no nodes", ref, value, threshold)
                if delta.departs:
                    return [*out, replace(delta, where="dropped")]
        return []
    if cap.inputs is None or not cap.inputs:
        return []
    eager_in = cap.inputs[0].numpy()
    def scope_of(n: Any) -> str | None:
        return module_of(n.name, modules) if n.name else None

    # the module's first node in graph order, and the value it reads first
    node = next((n for n in proto.graph.node if cap.name and (scope_of(n) or "").split(".")[: cap.name.count(".") + 1] == cap.name.split(".")), None)
    if node is None or not node.input:
        return []
    got = results.get(node.input[0])
    if not isinstance(got, np.ndarray) or got.shape != eager_in.shape:
        return []
    delta_in = layer_delta(cap.name, "", eager_in, got, threshold)
    if not delta_in.departs:
        return []
    # The code between the module that produced the value and this one belongs to the forward of
    # their closest common ancestor (for two children of the model: the model's own forward).
    producer = next((n for n in proto.graph.node if node.input[0] in n.output), None)
    produced_in = (scope_of(producer) if producer is not None else None) or ""
    parent = cap.name.rpartition(".")[0]
    common = [a for a, b in zip(produced_in.split("."), parent.split("."), strict=False) if a == b] if produced_in and parent else []
    scope = ".".join(common)
    what = producer.op_type if producer is not None and produced_in == scope else "code the graph does not hold"
    return [replace(delta_in, module=scope, ops=what, where="forward-code")]


def eager_references(proto: Any, model: Any, batch: np.ndarray, results: dict[str, Any],
                     dtypes: tuple[Any, ...] = (np.float32, np.float16)) -> dict[str, np.ndarray]:
    """Eager's module outputs on ``batch`` by the name of the graph value that stands for each, paired as
    the divergence table pairs them (``results``: the graph's values on the same batch); the first
    module to claim a value keeps it (the innermost: modules complete inside out)."""
    modules = {name for name, _ in model.named_modules()}
    values, _ = scoped_values(proto, modules)
    order, has_nodes = modules_with_nodes(values, model, batch)
    forward = merges_forward(proto, modules)
    graph_outputs = [o.name for o in proto.graph.output]
    out: dict[str, np.ndarray] = {}
    for i, cap in enumerate(order):
        if cap.name not in has_nodes or cap.output is None:
            continue
        ref, _, _ = merged_reference(order, i, has_nodes, forward)
        # every output it returns (a detector's second head, an LSTM's state): the model's own are the graph's outputs
        for _, reference, name, _ in output_values(cap, values, results, graph_outputs, ref, dtypes, named=True):
            out.setdefault(name, reference)
    return out
