"""Int8 coverage: how many of an int8 artifact's weight tensors, and what share of its weight parameters,
the file stores in int8 (``measurements.Int8Coverage``), counted in the file as it ships, after it is written.

A weight tensor is a tensor of two or more dimensions that the graph multiplies with: a matrix, a
convolution kernel, an embedding table, a recurrent layer's input and hidden weights. Biases, normalisation
scales, quantization scales and zero points are not counted (one dimension; a recurrent layer's 2-D bias is
recognised by its slot), nor is a tensor the graph only adds or concatenates (a ViT's class token and position
embedding), which no int8 kind quantizes. A weight is int8 when it is stored as 8-bit (or 4-bit) integers, whatever op
dequantizes it, or when the graph quantizes it on the way in (``QuantizeLinear``, ``quantize_per_*``).

* ONNX: initializers and ``Constant`` tensors (subgraphs included), by the op slot that consumes them; the
  op named for a float weight is the first one past reshaping ops (``Slice``, ``Transpose``, ...).
* TorchScript (``.pt``, torch dynamic int8): the module's float parameters and the int8 weights packed in
  its quantized modules (``LinearPackedParamsBase``, the recurrent layers' ``CellParamsBase``).
* ``torch.export`` (``.pt2``): the lifted parameters, buffers and constants the graph uses (an unused
  placeholder, as PT2E leaves the float originals, is not counted); torchao's tensor subclasses by their
  inner tensors.
* ``.pte``: the XNNPACK delegate hides the weights, so executorch-int8 counts the exported program it lowers
  (``program``), recorded as measured "program before lowering".

Every build records it in its details (``recorded``); a file it cannot count records the error instead.
"""

from __future__ import annotations

import contextlib
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..records import Int8Coverage

# (name, op consuming it, parameter count, int8)
Weight = tuple[str, str, int, bool]

# ONNX
_QUANTIZING = {"QuantizeLinear", "DynamicQuantizeLinear"}  # a float weight consumed at slot 0 is quantized at run time
_PASS_THROUGH = {"Slice", "Transpose", "Reshape", "Concat", "Squeeze", "Unsqueeze", "Cast", "Identity", "Split", "Flatten",
                 "Expand", "DequantizeLinear"}
# what a tensor that is not multiplied with meets first: added, concatenated (ONNX, and torch ops by name)
_ADDITIVE = {"Add", "Sub", "Mul", "Div", "Where", "add", "add_", "sub", "mul", "div", "cat", "concat", "where"}
# slots that hold no weight: biases, scales, zero points (a recurrent layer's bias is 2-D)
_NOT_WEIGHT_SLOTS = {"LSTM": {3, 4, 5, 6, 7}, "GRU": {3, 4, 5}, "RNN": {3, 4, 5}, "DynamicQuantizeLSTM": {3, 4, 5, 6, 7, 8, 9, 10, 11},
                     "Gemm": {2}, "Conv": {2}, "ConvTranspose": {2}, "QuantizeLinear": {1, 2}, "DequantizeLinear": {1, 2},
                     "ConvInteger": {2, 3}, "MatMulInteger": {2, 3}, "QLinearConv": {1, 2, 4, 5, 6, 7, 8},
                     "QLinearMatMul": {1, 2, 4, 5, 6, 7}}


def coverage_of(weights: Iterable[Weight], measured: str = "file") -> Int8Coverage:
    """The counts over ``weights``; the float ones named, largest first."""
    found = list(weights)
    quantized = [w for w in found if w[3]]
    floats = sorted((w for w in found if not w[3]), key=lambda w: (-w[2], w[0]))
    return Int8Coverage(quantized_tensors=len(quantized), weight_tensors=len(found), quantized_params=sum(w[2] for w in quantized),
                        weight_params=sum(w[2] for w in found), float_tensors=tuple((n, op, c) for n, op, c, _ in floats),
                        measured=measured)


def recorded(path: Path) -> dict[str, str]:
    """The coverage of the built file at ``path`` as build details; the error instead when it cannot be counted."""
    counters: dict[str, Callable[[Path], Int8Coverage]] = {".onnx": onnx_file, ".pt": torchscript_file, ".pt2": program_file}
    counter = counters.get(path.suffix)
    if counter is None:
        return Int8Coverage(error=f"export-check cannot count the weights of a {path.suffix} file").to_details()
    try:
        with warnings.catch_warnings():  # the row's warnings are the build's and the reload's, not this count's
            warnings.simplefilter("ignore")
            return counter(path).to_details()
    except Exception as exc:  # a file the runtime loads but this count cannot read: said on the row, never a failed build
        text = " ".join(str(exc).split())[:300]
        return Int8Coverage(error=f"counting the weights of {path.name} failed: {type(exc).__name__}: {text}").to_details()


# -- ONNX ------------------------------------------------------------------------------------------------


def _graphs(graph: Any) -> Iterator[Any]:
    import onnx

    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub)


def onnx_weights(model: Any) -> list[Weight]:
    """The weight tensors of an ONNX model (``onnx.ModelProto``), each with its consuming op and whether it is int8."""
    import onnx

    quantized_types = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT4, onnx.TensorProto.UINT4}
    float_types = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
    graphs = list(_graphs(model.graph))
    tensors: dict[str, Any] = {}
    consumers: dict[str, list[tuple[Any, int]]] = {}
    for graph in graphs:
        tensors.update({t.name: t for t in graph.initializer})
        for node in graph.node:
            if node.op_type == "Constant":
                value = next((a.t for a in node.attribute if a.name == "value"), None)
                if value is not None and node.output:
                    tensors[node.output[0]] = value
            for slot, name in enumerate(node.input):
                consumers.setdefault(name, []).append((node, slot))

    def compute_op(name: str) -> str:
        queue, seen = deque([name]), {name}
        while queue:
            for node, _ in consumers.get(queue.popleft(), ()):
                if node.op_type not in _PASS_THROUGH:
                    return str(node.op_type)
                for out in node.output:
                    if out not in seen:
                        seen.add(out)
                        queue.append(out)
        return consumers[name][0][0].op_type

    weights: list[Weight] = []
    for name, tensor in tensors.items():
        uses = consumers.get(name, [])
        if len(tensor.dims) < 2 or tensor.data_type not in quantized_types | float_types or not uses:
            continue
        if all(slot in _NOT_WEIGHT_SLOTS.get(node.op_type, ()) for node, slot in uses):
            continue
        params = 1
        for dim in tensor.dims:
            params *= int(dim)
        int8 = tensor.data_type in quantized_types or any(node.op_type in _QUANTIZING and slot == 0 for node, slot in uses)
        op = compute_op(name)
        if op not in _ADDITIVE:
            weights.append((name, op, params, int8))
    return weights


def onnx_file(path: Path) -> Int8Coverage:
    import onnx

    return coverage_of(onnx_weights(onnx.load(str(path), load_external_data=False)))


# -- TorchScript -----------------------------------------------------------------------------------------

_CONTAINERS = {"ModuleList", "Sequential", "ModuleDict", "PackedParameter", "LinearPackedParams"}


def _script_tensors(value: Any) -> Iterator[Any]:
    """The tensors held by a TorchScript custom class (packed quantized weights), through its ``__getstate__``."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _script_tensors(item)
    elif isinstance(value, torch.ScriptObject):
        try:
            state = value.__getstate__()
        except Exception:  # a scripted module holding the packed object, not the object itself: walked as a module
            return
        yield from _script_tensors(state)


def torchscript_weights(module: Any) -> list[Weight]:
    """The weight tensors of a loaded TorchScript module: float parameters and the int8 weights its quantized modules pack."""
    import torch

    kinds = {name: m.original_name for name, m in module.named_modules()}

    def layer(name: str) -> str:  # the nearest module that is a layer, not a container
        parts = name.split(".")
        while parts and kinds.get(".".join(parts), "") in _CONTAINERS | {""}:
            parts.pop()
        return kinds.get(".".join(parts), "") or "module"

    added = _additive_attributes(module)
    weights: list[Weight] = []
    for name, tensor in module.state_dict().items():
        if name in added:
            continue
        if isinstance(tensor, torch.Tensor) and tensor.dim() >= 2 and (tensor.is_floating_point() or tensor.is_quantized):
            weights.append((name, layer(name.rpartition(".")[0]), tensor.numel(), tensor.is_quantized or tensor.dtype in (torch.int8, torch.uint8)))
    for name, sub in module.named_modules():
        for attr in ("_packed_params", "param"):
            value = sub._c.getattr(attr) if sub._c.hasattr(attr) else None
            if not isinstance(value, torch.ScriptObject):  # a plain tensor of that name is in the state_dict already
                continue
            packed = [t for t in _script_tensors(value) if t.dim() >= 2]
            for i, tensor in enumerate(packed):
                where = f"{name}.{attr}" + (f"[{i}]" if len(packed) > 1 else "")
                weights.append((where, layer(name), tensor.numel(), tensor.is_quantized or tensor.dtype in (torch.int8, torch.uint8)))
    return weights


_SCRIPT_PASS = {"aten::t", "aten::to", "aten::contiguous", "aten::view", "aten::reshape", "aten::transpose", "aten::permute",
                "aten::slice", "aten::select", "aten::chunk", "aten::unbind", "aten::expand", "aten::unsqueeze", "aten::squeeze",
                "aten::detach", "prim::ListConstruct", "prim::TupleConstruct", "prim::ListUnpack"}


def _additive_attributes(module: Any) -> set[str]:
    """The attributes (by state_dict name) the module's forward graph only adds or concatenates (``_ADDITIVE``); none
    when the graph cannot be read (every tensor is then counted)."""
    try:
        graph = module.inlined_graph
    except Exception:
        return set()
    paths: dict[int, str] = {next(iter(graph.inputs())).unique(): ""}
    found: dict[str, Any] = {}
    for node in graph.nodes():
        if node.kind() == "prim::GetAttr" and node.input().unique() in paths:
            base = paths[node.input().unique()]
            path = f"{base}.{node.s('name')}" if base else node.s("name")
            paths[node.output().unique()] = path
            found[path] = node.output()
    added = set()
    for path, value in found.items():
        queue, seen, first = deque([value]), {value.unique()}, None
        while queue and first is None:
            for use in queue.popleft().uses():
                kind = use.user.kind()
                if kind not in _SCRIPT_PASS:
                    first = kind
                    break
                for out in use.user.outputs():
                    if out.unique() not in seen:
                        seen.add(out.unique())
                        queue.append(out)
        if first is not None and first.split("::")[-1] in _ADDITIVE:
            added.add(path)
    return added


def torchscript_file(path: Path) -> Int8Coverage:
    import torch

    return coverage_of(torchscript_weights(torch.jit.load(str(path), map_location="cpu")))


# -- torch.export ----------------------------------------------------------------------------------------

_LIFTED = ("PARAMETER", "BUFFER", "CONSTANT_TENSOR")
# ops a weight passes through on its way to the op that computes with it (by name, overload dropped)
_PROGRAM_PASS = {"dequantize_per_channel", "dequantize_per_tensor", "dequantize_affine", "access_subclass_inner_tensor", "getitem",
                 "view", "reshape", "permute", "transpose", "t", "to", "_to_copy", "clone", "contiguous", "expand", "slice", "split",
                 "split_with_sizes", "unbind", "select", "unsqueeze", "squeeze", "_assert_tensor_metadata", "detach", "alias"}


def _op_name(target: Any) -> str:
    """``aten.conv2d.default`` -> ``conv2d``; ``operator.getitem`` -> ``getitem``."""
    return str(getattr(target, "__name__", target)).split(".")[0]


def _is_int8(tensor: Any) -> bool:
    import torch
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if tensor.dtype in (torch.int8, torch.uint8) or tensor.is_quantized:
        return True
    if is_traceable_wrapper_subclass(tensor):  # torchao's Int8Tensor reports float32: its data (its largest inner tensor) is int8
        names, _ = tensor.__tensor_flatten__()
        inner = [getattr(tensor, n) for n in names]
        return bool(inner) and _is_int8(max(inner, key=lambda t: t.numel()))
    return False


def program_weights(program: Any) -> list[Weight]:
    """The weight tensors an ``ExportedProgram``'s graph uses: its lifted parameters, buffers and constants."""
    import torch

    specs = {s.arg.name: s.target for s in program.graph_signature.input_specs
             if s.kind.name in _LIFTED and s.target is not None}
    tensors = {**program.state_dict, **program.constants}

    def compute_op(node: Any) -> str:
        queue, seen = deque([node]), {node}
        while queue:
            for user in queue.popleft().users:
                if user.op == "call_function" and _op_name(user.target) not in _PROGRAM_PASS:
                    return _op_name(user.target)
                if user not in seen:
                    seen.add(user)
                    queue.append(user)
        return "?"

    weights: list[Weight] = []
    for node in program.graph.nodes:
        target = specs.get(node.name) if node.op == "placeholder" else None
        tensor = tensors.get(target) if target is not None else None
        if not isinstance(tensor, torch.Tensor) or tensor.dim() < 2 or not node.users:
            continue
        if not (tensor.is_floating_point() or _is_int8(tensor)):
            continue
        int8 = _is_int8(tensor) or any(_op_name(u.target).startswith(("quantize_per", "quantize_affine")) for u in node.users)
        op = compute_op(node)
        if op not in _ADDITIVE:
            weights.append((str(target), op, tensor.numel(), int8))
    return weights


def program(exported: Any, measured: str = "program before lowering") -> Int8Coverage:
    """The coverage of an ``ExportedProgram`` in memory (executorch-int8: what it lowers to XNNPACK)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return coverage_of(program_weights(exported), measured)
    except Exception as exc:
        return Int8Coverage(measured=measured, error=f"counting the program's weights failed: {type(exc).__name__}: {exc}")


def program_file(path: Path) -> Int8Coverage:
    import torch

    with contextlib.suppress(ImportError):  # torchao's tensor subclasses and ops must be registered before its files load
        import torchao  # noqa: F401
    return coverage_of(program_weights(torch.export.load(str(path))))
