"""Where an artifact departs from eager, named by the module's qualified name (``layers.2.conv1``).

Two methods, chosen by the artifact's file format:

* TorchScript (``.pt``): *local*. Forward pre/post hooks record every eager module's inputs and
  output; the loaded ScriptModule's submodule of the same qualified name is run on those same inputs.
  A module whose own computation changed departs; its parents depart only because it does, and it
  finishes first, so the first departing module in execution order is the culprit.
* ONNX (``.onnx``): *cumulative*. A copy of the graph exposes every node output as a graph output.
  The TorchScript-based exporter names nodes by module scope (``/layers/layers.2/conv1/Conv``), which
  maps back to ``layers.2.conv1``; a module's value is the last value produced inside its scope, and
  it is compared with the eager module's output. A module whose nodes were folded away (BatchNorm
  into the Conv before it) has no value of its own; the Conv's value then stands for the eager
  BatchNorm's output (it consumed the Conv's output directly), and the row lists it as ``merged``.

A module *departs* when the MAE of its output exceeds ``threshold * max(1, mean |eager output|)``:
absolute for small activations, relative for large ones, where float32 rounding alone grows.

* ExecuTorch (``.pte``): *cumulative*, from the runtime's own developer tools (ETRecord, ETDump and
  its Inspector): :mod:`.etdump` says how, and what a delegate hides.

Int8 artifacts get the same per-module comparison as an error table (SQNR in dB per layer).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import ArtifactKind, BuildContext
from ..artifacts._common import load_torchscript
from ..artifacts.pt2e_int8_static import SCOPES_FILE
from ..pinned import ORT_LOG_SEVERITY, quiet_onnxruntime
from ..records import LayerComparison, LayerDelta
from .outputs import graph_value, output_ops, pick, tensors

DIVERGENCE, INT8_LAYERS = "divergence", "int8-layers"


@dataclass
class Captured:
    """One eager module call: cloned inputs and output, and the identities of the original tensors."""

    name: str
    inputs: tuple[Any, ...] | None = None  # cloned tensors; None when not all positional args are tensors
    output: Any = None  # cloned tensor: the first the module returned; None when it returned none
    outputs: tuple[Any, ...] = ()  # every tensor it returned, cloned, flattened (``outputs.tensors``): output first
    input_ids: tuple[int, ...] = ()
    output_id: int | None = None
    calls: int = 0
    leaf: bool = False
    kind: str = ""


@dataclass
class EagerTrace:
    order: list[Captured] = field(default_factory=list)  # completion order, modules called once
    keep: list[Any] = field(default_factory=list)  # originals kept alive so their ids stay unique


def _first_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    return None


def capture_eager(model: Any, batch: np.ndarray) -> EagerTrace:
    """Run ``model`` once on ``batch`` with hooks on every module; record inputs and outputs."""
    import torch

    by_name: dict[str, Captured] = {}
    finished: list[Captured] = []
    trace = EagerTrace()
    handles = []

    def pre_hook(name: str):
        def hook(module: Any, args: tuple[Any, ...]) -> None:
            cap = by_name.setdefault(name, Captured(name, leaf=not any(True for _ in module.children()), kind=type(module).__name__))
            cap.calls += 1
            if cap.calls == 1 and args and all(isinstance(a, torch.Tensor) for a in args):
                cap.inputs = tuple(a.detach().clone() for a in args)
                cap.input_ids = tuple(id(a) for a in args)
                trace.keep.extend(args)

        return hook

    def post_hook(name: str):
        def hook(module: Any, args: tuple[Any, ...], output: Any) -> None:
            cap = by_name[name]
            found = tensors(output)
            if cap.calls == 1 and found:
                cap.outputs = tuple(t.detach().clone() for t in found)
                cap.output = cap.outputs[0]
                cap.output_id = id(found[0])
                trace.keep.extend(found)
                finished.append(cap)

        return hook

    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(pre_hook(name)))
            handles.append(module.register_forward_hook(post_hook(name)))
        with torch.inference_mode():
            model(torch.from_numpy(batch))
    finally:
        for handle in handles:
            handle.remove()
    # a module called more than once has no single output to compare: leave it out
    trace.order = [cap for cap in finished if cap.calls == 1]
    return trace


def layer_delta(
    module: str, ops: str, reference: np.ndarray, got: np.ndarray, threshold: float, merged: tuple[str, ...] = ()
) -> LayerDelta:
    """Compare one module's artifact output with its eager output."""
    ref = reference.astype(np.float64).ravel()
    cand = got.astype(np.float64).ravel()
    diff = np.where(np.isfinite(cand), np.abs(cand - ref), np.inf)
    mae = float(diff.mean()) if diff.size else 0.0
    max_abs = float(diff.max()) if diff.size else 0.0
    signal = float(np.sum(ref * ref))
    noise = float(np.sum(diff * diff))
    if noise == 0.0:
        sqnr = math.inf
    elif signal == 0.0 or not math.isfinite(noise):
        sqnr = -math.inf
    else:
        sqnr = 10.0 * math.log10(signal / noise)
    scale = max(1.0, float(np.mean(np.abs(ref)))) if ref.size else 1.0
    return LayerDelta(module=module, ops=ops, mae=mae, max_abs=max_abs, sqnr_db=sqnr,
                      departs=not mae <= threshold * scale, merged=merged)


def _numpy(value: Any) -> np.ndarray | None:
    tensor = _first_tensor(value)
    return None if tensor is None else _array(tensor)


def _array(tensor: Any) -> np.ndarray:
    if tensor.is_quantized:
        tensor = tensor.dequantize()
    return tensor.detach().cpu().numpy()


def _finish(purpose: str, method: str, scope: str, start: int, size: int, threshold: float, layers: list[LayerDelta]) -> LayerComparison:
    index = next((i for i, d in enumerate(layers) if d.departs), None)
    first = None if index is None else layers[index]
    suspects: tuple[str, ...] = ()
    if first is not None:
        suspects = (layers[index - 1].merged if index else ()) + first.merged
    return LayerComparison(purpose=purpose, method=method, scope=scope, batch_start=start, batch_size=size,
                           threshold=threshold, layers=tuple(layers), first=first, suspects=suspects)


def torchscript_layers(path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, start: int = 0) -> LayerComparison:
    """Local comparison: each loaded submodule on eager's own inputs to that module."""
    import torch

    loaded = load_torchscript(path)
    submodules = dict(loaded.named_modules())
    trace = capture_eager(model, batch)
    layers: list[LayerDelta] = []
    repro = None
    for cap in trace.order:
        if purpose == INT8_LAYERS and not cap.leaf:
            continue  # the int8 table is per layer; containers only repeat their children's error
        sub = submodules.get(cap.name)
        if sub is None or cap.inputs is None or cap.output is None:
            continue
        try:
            with torch.inference_mode():
                got = [_array(t) for t in tensors(sub(*(t.clone() for t in cap.inputs)))]
        except Exception:  # a submodule that cannot run alone (e.g. traced only inside its parent)
            continue
        ops = str(getattr(sub, "original_name", type(sub).__name__))
        # every output it returns, compared (a detector's boxes, an LSTM's state): the first that departs is its row
        deltas = [(k, layer_delta(cap.name, ops, ref.numpy(), value, threshold))
                  for k, (ref, value) in enumerate(zip(cap.outputs, got, strict=False)) if value.shape == tuple(ref.shape)]
        if not deltas:
            continue
        index, delta = pick(deltas)
        if delta.departs and not any(d.departs for d in layers):
            if not cap.leaf:  # its children ran first and agree: what departs is the code of its own forward
                delta = replace(delta, where="forward-code", ops=output_ops("forward", index))
            if purpose == DIVERGENCE:
                repro = _save_module_case(path, cap, cap.outputs[index].numpy(), index)
        layers.append(delta)
    method = "torchscript"  # messages.LAYER_METHODS words it
    return replace(_finish(purpose, method, "local", start, len(batch), threshold, layers), repro=repro)


def _save_module_case(path: Path, cap: Captured, reference: np.ndarray, index: int = 0) -> str | None:
    """The first departing module's eager inputs and output beside the TorchScript file: ``<file>.<module>.npz``; for
    a departing output other than its first, that output and its place (``output``: ``messages.module_command``)."""
    assert cap.inputs is not None
    target = path.with_name(f"{path.stem}.{cap.name or 'forward'}.npz")
    arrays = {f"input_{i}": t.detach().cpu().numpy() for i, t in enumerate(cap.inputs)}
    if index:
        arrays["output"] = np.array(index)
    try:
        with open(target, "wb") as handle:
            np.savez(handle, reference=reference, **arrays)
    except OSError:
        return None
    return str(target)


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


def _inside(scope: str, module: str) -> bool:
    return module == "" or scope == module or scope.startswith(module + ".")


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

    layers = _cumulative(values, results, model, batch, threshold, purpose, first_cause, forward, graph_outputs)
    return replace(_finish(purpose, method, "cumulative", start, len(batch), threshold, layers),
                   graph=proto.graph.name, nodes=owners(scopes, {d.module for d in layers}))


def owners(scopes: list[tuple[str, str]], table: set[str]) -> tuple[tuple[str, str], ...]:
    """Each node (name, module scope) with the innermost module of ``table`` that holds it; a node no module holds is left out.

    >>> owners([("/stem/stem.0/Conv", "stem.0"), ("/layers/layers.2/conv1/Conv", "layers.2.conv1"), ("/Flatten", "")],
    ...        {"stem.0", "layers.2"})
    (('/stem/stem.0/Conv', 'stem.0'), ('/layers/layers.2/conv1/Conv', 'layers.2'))
    """
    found = []
    for name, scope in scopes:
        holding = [m for m in table if _inside(scope, m)]
        if holding:
            found.append((name, max(holding, key=len)))
    return tuple(found)


def _cumulative(values: list[tuple[str, str, str]], results: dict[str, Any], model: Any, batch: np.ndarray, threshold: float,
                purpose: str, first_cause: Any = None, merge_forward: bool = True, graph_outputs: tuple[str, ...] | list[str] = ()
                ) -> list[LayerDelta]:
    """Each eager module's outputs against the last values produced inside its scope (``values``: value
    name, module scope, op, in graph order; ``results``: value name -> array); the model's own outputs against
    ``graph_outputs`` (the graph's, in order). ``first_cause`` looks closer at the first departing module (ONNX only)."""
    order, has_nodes = _modules_with_nodes(values, model, batch)
    layers: list[LayerDelta] = []
    for i, cap in enumerate(order):
        if cap.name not in has_nodes or cap.output is None:
            continue
        if purpose == INT8_LAYERS and not cap.leaf:
            continue
        ref, merged, chain = _merged_reference(order, i, has_nodes, merge_forward)
        found = _output_values(cap, values, results, graph_outputs, ref)
        if not found:
            continue
        ops = (",".join(dict.fromkeys(op for _, scope, op in values if scope == cap.name)) or found[0][2])[:60]
        index, delta = pick([(k, layer_delta(cap.name, ops, reference, value, threshold, tuple(merged) if k == 0 else ()))
                             for k, reference, _, value in found])
        if index == 0 and delta.departs and not any(d.departs for d in layers):
            chosen = next(value for k, _, _, value in found if k == 0)
            found_cause = first_cause(cap, chain, chosen, ops, threshold) if first_cause else []
            if found_cause:
                layers.extend(found_cause)
                continue
        layers.append(delta)
    return layers


def _output_values(cap: Captured, values: list[tuple[str, str, str]], results: dict[str, Any], graph_outputs: Any,
                   first: np.ndarray, dtypes: tuple[Any, ...] = (np.float32,), named: bool = False
                   ) -> list[tuple[int, np.ndarray, str, np.ndarray]]:
    """(index, eager's value, op, the graph's value) of each output of ``cap`` the graph holds: ``first`` (its first
    output, or the value it stands for) and every other tensor it returned. The model's own outputs are the graph's
    outputs, in order; a module's, the last values of their shapes inside its scope, each value taken once.
    ``named``: the graph value's name in place of the op."""
    refs = [first, *(t.numpy() for t in cap.outputs[1:])]
    found: list[tuple[int, np.ndarray, str, np.ndarray]] = []
    used: set[str] = set()
    for k, reference in enumerate(refs):
        own = graph_value(graph_outputs, results, k, reference.shape) if cap.name == "" and len(graph_outputs) == len(refs) else None
        if own is not None and own.dtype in dtypes:
            used.add(graph_outputs[k])
            found.append((k, reference, graph_outputs[k] if named else "output", own))
            continue
        chosen = _chosen_value(values, results, cap.name, reference.shape, dtypes, exclude=used)
        if chosen is not None:
            used.add(chosen[0])
            found.append((k, reference, chosen[0] if named else chosen[2], chosen[1]))
    return found


def _modules_with_nodes(values: list[tuple[str, str, str]], model: Any, batch: np.ndarray) -> tuple[list[Captured], set[str]]:
    """Eager's modules in completion order (run on ``batch``), and those with a value in the graph."""
    scoped = {scope for _, scope, _ in values}
    modules = {name for name, _ in model.named_modules()}
    return capture_eager(model, batch).order, {m for m in modules if any(_inside(s, m) for s in scoped)}


def _merged_reference(order: list[Captured], i: int, has_nodes: set[str], merge_forward: bool) -> tuple[np.ndarray, list[str], list[Captured]]:
    """Eager's value that the graph's value of module ``order[i]`` stands for: its output, or that of the
    modules without nodes that consumed it directly (a BatchNorm folded into its Conv, an Identity)."""
    cap = order[i]
    reference, current, merged, chain = cap.output, cap.output_id, [], []
    for nxt in order[i + 1 :] if merge_forward else ():
        if nxt.name in has_nodes or nxt.output is None or current not in nxt.input_ids:
            break
        reference, current = nxt.output, nxt.output_id
        merged.append(nxt.name)
        chain.append(nxt)
    return reference.numpy(), merged, chain


def _chosen_value(values: list[tuple[str, str, str]], results: dict[str, Any], module: str, shape: tuple[int, ...],
                  dtypes: tuple[Any, ...] = (np.float32,), exclude: set[str] | frozenset[str] = frozenset()
                  ) -> tuple[str, np.ndarray, str] | None:
    """The last value produced inside ``module``'s scope with eager's shape, not in ``exclude``: (name, value, op)."""
    for name, scope, op in reversed(values):
        if not _inside(scope, module) or name in exclude:
            continue
        value = results.get(name)
        if isinstance(value, np.ndarray) and value.dtype in dtypes and value.shape == shape:
            return name, value, op
    return None


def eager_references(proto: Any, model: Any, batch: np.ndarray, results: dict[str, Any],
                     dtypes: tuple[Any, ...] = (np.float32, np.float16)) -> dict[str, np.ndarray]:
    """Eager's module outputs on ``batch`` by the name of the graph value that stands for each, paired as
    the divergence table pairs them (``results``: the graph's values on the same batch); the first
    module to claim a value keeps it (the innermost: modules complete inside out)."""
    modules = {name for name, _ in model.named_modules()}
    values, _ = scoped_values(proto, modules)
    order, has_nodes = _modules_with_nodes(values, model, batch)
    forward = merges_forward(proto, modules)
    graph_outputs = [o.name for o in proto.graph.output]
    out: dict[str, np.ndarray] = {}
    for i, cap in enumerate(order):
        if cap.name not in has_nodes or cap.output is None:
            continue
        ref, _, _ = _merged_reference(order, i, has_nodes, forward)
        # every output it returns (a detector's second head, an LSTM's state): the model's own are the graph's outputs
        for _, reference, name, _ in _output_values(cap, values, results, graph_outputs, ref, dtypes, named=True):
            out.setdefault(name, reference)
    return out


def program_layers(path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, start: int = 0) -> LayerComparison:
    """Cumulative comparison for a ``.pt2`` (torch.export) file: every node's value in one run of the
    loaded program's graph, nodes mapped to modules by their ``nn_module_stack`` (or, for a file whose
    graph lost it, the node -> module map it carries: pt2e-int8-static)."""
    import json

    import torch

    with contextlib.suppress(ImportError):
        import torchao  # noqa: F401  (a quantized program's ops are registered by torchao)
    extra = {SCOPES_FILE: ""}
    loaded = torch.export.load(str(path), extra_files=extra)
    carried: dict[str, str] = json.loads(extra[SCOPES_FILE]) if extra[SCOPES_FILE] else {}
    module = loaded.module()
    values: list[tuple[str, str, str]] = []
    for node in module.graph.nodes:
        if node.op != "call_function":
            continue
        stack = node.meta.get("nn_module_stack") or {}
        scope = carried.get(node.name, str(list(stack.values())[-1][0]) if stack else None)
        if scope is not None:
            values.append((node.name, scope, getattr(node.target, "__name__", str(node.target)).split(".")[0]))
    # the model's own outputs, in order (the output node's arguments), each compared with eager's (a second head too)
    leaves = torch.utils._pytree.tree_leaves(next(n for n in module.graph.nodes if n.op == "output").args[0])
    graph_outputs = [n.name for n in leaves] if all(isinstance(n, torch.fx.Node) for n in leaves) else []
    wanted = {name for name, _, _ in values} | set(graph_outputs)
    results: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            if n.name in wanted and isinstance(out, torch.Tensor) and out.dtype == torch.float32:
                results[n.name] = out.detach().numpy().copy()
            return out

    with torch.inference_mode():
        Recorder(module).run(torch.from_numpy(batch))
    layers = _cumulative(values, results, model, batch, threshold, purpose, graph_outputs=graph_outputs)
    method = "program"  # messages.LAYER_METHODS words it
    found = _finish(purpose, method, "cumulative", start, len(batch), threshold, layers)
    if purpose == DIVERGENCE and found.first is not None and found.first.module:
        found = replace(found, repro=_program_module_case(path, loaded, model, batch, found.first.module))
    return found


def _program_module_case(path: Path, program: Any, model: Any, batch: np.ndarray, module: str) -> str | None:
    """The first departing module of a ``.pt2``, alone: eager's inputs to it and its output saved beside the file, when
    ``torch.export.unflatten`` gives that module as one callable that runs on them (else None: the where: line stands)."""
    import torch

    cap = next((c for c in capture_eager(model, batch).order if c.name == module), None)
    if cap is None or cap.inputs is None or cap.output is None:
        return None
    try:
        with warnings.catch_warnings():  # torch's own deprecations inside unflatten (LeafSpec), not the user's export
            warnings.simplefilter("ignore")
            alone = dict(torch.export.unflatten(program).named_modules())[module]
        with torch.inference_mode():
            got = _numpy(alone(*(t.clone() for t in cap.inputs)))
    except Exception:  # a module the program inlined or split: no callable of its own
        return None
    if got is None or got.shape != tuple(cap.output.shape):
        return None
    return _save_module_case(path, cap, cap.output.numpy())


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


def executorch_layers(kind: ArtifactKind, path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, threads: int,
                      start: int = 0, ctx: BuildContext | None = None) -> LayerComparison:
    """Cumulative comparison for a ``.pte``: the values the file logged with ETDump, named by the ETRecord of
    a verified rebuild (:mod:`.etdump`). Where a delegate ran ops as opaque calls, the table is the same
    exported program's on the portable kernels (method ``executorch-portable``), and the file's own
    values are kept beside it (``artifact_layers``)."""
    import warnings

    import torch

    from . import etdump

    if ctx is None:  # called without the run's context (one input, the batch as the export example)
        ctx = BuildContext(model=model, example=torch.from_numpy(np.ascontiguousarray(batch)), opset=17,
                           onnx_exporter="torchscript", threads=threads)
    batch = etdump.fitting(path, batch, ctx.signature.inputs[0].batch_axis)
    found = etdump.explain_pte(kind, path, batch, ctx, threads)
    own = found.own
    if not found.same_bytes:
        warnings.warn(f"per-layer table: {path.name} has the execution plan of a rebuild of the same model but other constant data "
                      "(weights): changed after its build, or built by another version; its own values are its own, while a table "
                      "without the delegate is the rebuild's", stacklevel=2)
    own_layers = _cumulative(own.values, own.results, model, batch, threshold, purpose)
    def counted(table: LayerComparison, artifact_layers: tuple[LayerDelta, ...] = ()) -> LayerComparison:
        return replace(table, delegate=own.delegate, delegated_ops=own.delegated_ops, graph_ops=own.graph_ops,
                       delegate_calls=own.delegate_calls, artifact_layers=artifact_layers)

    if found.portable is None:
        if found.portable_error:
            warnings.warn(f"per-layer table: the {own.delegate} delegate hides {own.delegated_ops} of {own.graph_ops} ops, and the same "
                          f"program could not run without it on the portable kernels: {found.portable_error}", stacklevel=2)
        return counted(_finish(purpose, etdump.METHOD, "cumulative", start, len(batch), threshold, own_layers))
    layers = _cumulative(found.portable.values, found.portable.results, model, batch, threshold, purpose)
    return counted(_finish(purpose, etdump.PORTABLE, "cumulative", start, len(batch), threshold, layers), tuple(own_layers))


# The per-layer methods a kind's row names (``ArtifactKind.layers``).
METHODS = {"onnxruntime": onnx_layers, "torchscript": torchscript_layers, "program": program_layers, "executorch": executorch_layers}


def compare_layers(kind: ArtifactKind, path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, threads: int,
                   start: int, ctx: BuildContext | None = None) -> LayerComparison:
    """Dispatch on the per-layer method the kind's row names (``ArtifactKind.layers``); a diagnosis that
    cannot run says why instead of raising. ``ctx``: the run's build context (the ExecuTorch method
    rebuilds the program from it)."""
    method = METHODS.get(kind.layers) if kind.layers else None
    try:
        if method is None:
            raise ValueError(f"no per-layer method for {kind.runtime} artifacts")
        if method is onnx_layers:
            return onnx_layers(path, model, batch, threshold, purpose, threads=threads, start=start)
        if method is program_layers:
            return program_layers(path, model, batch, threshold, purpose, start=start)
        if method is executorch_layers:
            return executorch_layers(kind, path, model, batch, threshold, purpose, threads, start=start, ctx=ctx)
        return torchscript_layers(path, model, batch, threshold, purpose, start=start)
    except Exception as exc:  # the diagnosis is advice; it must never take the report down
        text = " ".join(str(exc).split())[:300]
        return LayerComparison(purpose=purpose, method="", scope="", batch_start=start, batch_size=len(batch),
                               threshold=threshold, layers=(), first=None, error=f"{type(exc).__name__}: {text}")
