"""What the four per-layer methods share: eager's module calls captured by hooks, one module's artifact
output against its eager output (``layer_delta``), the table's record (``finish``), and the cumulative walk
(``cumulative``) that pairs each eager module with the last value the artifact produced inside its scope.

A module *departs* when the MAE of its output exceeds ``threshold * max(1, mean |eager output|)``:
absolute for small activations, relative for large ones, where float32 rounding alone grows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...records import LayerComparison, LayerDelta
from ..outputs import graph_value, pick, tensors

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


def numpy_of(value: Any) -> np.ndarray | None:
    """The first tensor of a module's output as an array (dequantized), or None when it returned none."""
    tensor = _first_tensor(value)
    return None if tensor is None else array_of(tensor)


def array_of(tensor: Any) -> np.ndarray:
    """A tensor as an array on the CPU, dequantized."""
    if tensor.is_quantized:
        tensor = tensor.dequantize()
    return tensor.detach().cpu().numpy()


def finish(purpose: str, method: str, scope: str, start: int, size: int, threshold: float, layers: list[LayerDelta]) -> LayerComparison:
    """The table's record: its rows, the first that departs, and the modules merged into it or its predecessor."""
    index = next((i for i, d in enumerate(layers) if d.departs), None)
    first = None if index is None else layers[index]
    suspects: tuple[str, ...] = ()
    if first is not None:
        suspects = (layers[index - 1].merged if index else ()) + first.merged
    return LayerComparison(purpose=purpose, method=method, scope=scope, batch_start=start, batch_size=size,
                           threshold=threshold, layers=tuple(layers), first=first, suspects=suspects)


def save_module_case(path: Path, cap: Captured, reference: np.ndarray, index: int = 0) -> str | None:
    """The first departing module's eager inputs and output beside the file (``.pt``, ``.pt2``): ``<file>.<module>.npz``; for
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


def inside(scope: str, module: str) -> bool:
    return module == "" or scope == module or scope.startswith(module + ".")


def cumulative(values: list[tuple[str, str, str]], results: dict[str, Any], model: Any, batch: np.ndarray, threshold: float,
                purpose: str, first_cause: Any = None, merge_forward: bool = True, graph_outputs: tuple[str, ...] | list[str] = ()
                ) -> list[LayerDelta]:
    """Each eager module's outputs against the last values produced inside its scope (``values``: value
    name, module scope, op, in graph order; ``results``: value name -> array); the model's own outputs against
    ``graph_outputs`` (the graph's, in order). ``first_cause`` looks closer at the first departing module (ONNX only)."""
    order, has_nodes = modules_with_nodes(values, model, batch)
    layers: list[LayerDelta] = []
    for i, cap in enumerate(order):
        if cap.name not in has_nodes or cap.output is None:
            continue
        if purpose == INT8_LAYERS and not cap.leaf:
            continue
        ref, merged, chain = merged_reference(order, i, has_nodes, merge_forward)
        found = output_values(cap, values, results, graph_outputs, ref)
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


def output_values(cap: Captured, values: list[tuple[str, str, str]], results: dict[str, Any], graph_outputs: Any,
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


def modules_with_nodes(values: list[tuple[str, str, str]], model: Any, batch: np.ndarray) -> tuple[list[Captured], set[str]]:
    """Eager's modules in completion order (run on ``batch``), and those with a value in the graph."""
    scoped = {scope for _, scope, _ in values}
    modules = {name for name, _ in model.named_modules()}
    return capture_eager(model, batch).order, {m for m in modules if any(inside(s, m) for s in scoped)}


def merged_reference(order: list[Captured], i: int, has_nodes: set[str], merge_forward: bool) -> tuple[np.ndarray, list[str], list[Captured]]:
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
        if not inside(scope, module) or name in exclude:
            continue
        value = results.get(name)
        if isinstance(value, np.ndarray) and value.dtype in dtypes and value.shape == shape:
            return name, value, op
    return None
