"""The smallest subgraph of a failing ONNX row that still fails the row's gate on its own, to hand over.

For a row the judge failed whose file is an ONNX graph, the explain step (``explain.Explainer``) cuts
the file down to the fewest nodes whose output still breaks the row's gate when the tensors at the
cut are fed their *reference* values, and writes it beside the artifacts (``reduced/<kind>.onnx``) with
those inputs and the reference of its output (``reduced/<kind>.npz``), so that one ``python -c`` line
with onnxruntime and numpy (no torch, no export-check: ``messages.reproduce_command``) shows the error
to an exporter's maintainers.

How, on the golden sample that fails worst (Polygraphy's ``debug reduce``, its two passes, in process):

1. *The end.* One run of the row's graph with every value exposed. The reference values of the same
   tensors come from the file the row was converted from (``onnx`` for ``onnx-fp16``, the simplified
   and the int8 kinds: the converter keeps the tensor names), run the same way; or, for a file exported
   from the model (``onnx``, ``onnx-dynamo``), or when the source explains nothing and its own row failed too
   (the row inherits its source's error), from eager's module outputs (a source whose row passed is eager within its
   gate: it stands for eager), paired with graph values as the divergence table
   pairs them (``layers.onnx.eager_references``). The end is the first tensor with a reference, in
   topological order, whose value breaks the gate.
2. *The start.* Each node of the end's cone is a candidate first node: the subgraph from it to the end
   is fed, at its cut, the reference values (integer tensors, shapes and indices, carry no rounding
   error: they are fed what the whole graph computed; constants stay in the subgraph). A cut through
   a tensor without a reference is not a candidate. A bisection over the candidates, in topological
   order, finds the latest start whose subgraph still fails: each step is one
   ``onnx.utils.Extractor.extract_model`` and one onnxruntime session on one sample.

The gate is the row's (the judge's ``gate_reasons``, passed in as ``judge``), on the subgraph's output:
an intermediate tensor is compared as values (no argmax); a graph output as its signature declares.

Why not Polygraphy's reducer (``polygraphy debug reduce``): it is not a dependency here; it runs a
subprocess per step under a check command the user writes, and its reference is another run of the
same file, so it cannot compare a cut with eager or with the fp32 source; on the bundled ResNet's fp16
failure it took 67 s to go from 22 to 18 nodes (issue 30). The graph surgery here is onnx's own
extractor; what is ours is the search (about 100 lines), which on the same failure takes about a
second. Bounded: at most ``REDUCE_SECONDS`` of steps; when that stops the bisection the record says so
(``Reduced.cut``) and holds the smallest failing subgraph found by then.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts._external import PROTOBUF_LIMIT
from ..compare import Metrics
from ..nofollow import Refused, write_inside
from ..pinned import ORT_LOG_SEVERITY, quiet_onnxruntime
from ..records import Reduced

REDUCE_SECONDS = 60.0  # the search's budget per row
SAMPLES = 3  # the candidate samples tried, worst first, until one fails the gate on its own

# (tensor name, reference value, the candidate's value) -> the metrics when they break the row's gate, else None
Judge = Callable[[str, np.ndarray, np.ndarray], Metrics | None]


def _is_float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f"


def topological(graph: Any) -> list[Any]:
    """``graph``'s nodes in a topological order, the file's own order where it allows (a converter may
    append its casts at the end: onnxruntime's float16 converter does)."""
    produced = {out: i for i, node in enumerate(graph.node) for out in node.output if out}
    waiting = [{produced[t] for t in node.input if t in produced and produced[t] != i} for i, node in enumerate(graph.node)]
    users: dict[int, list[int]] = {}
    for i, needs in enumerate(waiting):
        for j in needs:
            users.setdefault(j, []).append(i)
    import heapq

    ready = [i for i, needs in enumerate(waiting) if not needs]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for k in users.get(i, ()):
            waiting[k].discard(i)
            if not waiting[k]:
                heapq.heappush(ready, k)
    if len(order) != len(graph.node):
        raise ValueError("the graph has a cycle")
    return [graph.node[i] for i in order]


def session(data: bytes, threads: int, level: str) -> Any:
    ort = quiet_onnxruntime()

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    options.log_severity_level = ORT_LOG_SEVERITY
    return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])


class Exposed:
    """Every array value of a graph on given feeds: the graph with each node output made a graph output, in one
    session made once (the search runs it on up to ``SAMPLES`` samples, against each reference)."""

    def __init__(self, proto: Any, threads: int, level: str) -> None:
        import onnx

        exposed = onnx.ModelProto()
        exposed.CopyFrom(proto)
        existing = {o.name for o in exposed.graph.output}
        for node in exposed.graph.node:
            for out in node.output:
                if out and out not in existing:
                    exposed.graph.output.append(onnx.ValueInfoProto(name=out))
                    existing.add(out)
        self.session = session(exposed.SerializeToString(), threads, level)
        self.names = [o.name for o in self.session.get_outputs()]
        self.wanted = {i.name for i in self.session.get_inputs()}

    def __call__(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        got = self.session.run(None, {k: v for k, v in feeds.items() if k in self.wanted})
        return {name: value for name, value in zip(self.names, got, strict=True) if isinstance(value, np.ndarray)}


@dataclass(frozen=True)
class Cut:
    """A failing subgraph: fed ``inputs`` (reference values), its output ``output`` breaks the gate."""

    inputs: tuple[str, ...]
    output: str
    model: Any  # the extracted onnx.ModelProto
    metrics: Metrics
    steps: int
    cut: str | None = None


class Reducer:
    """One ONNX graph, sorted, with what the search needs: who produces each tensor, which are constant."""

    def __init__(self, proto: Any, threads: int = 1, level: str = "ORT_ENABLE_ALL") -> None:
        import onnx

        self.proto, self.threads, self.level = proto, threads, level
        self._exposed: Exposed | None = None  # made at the first ``values``
        self.order = topological(proto.graph)
        self.sorted = onnx.ModelProto()
        self.sorted.CopyFrom(proto)
        del self.sorted.graph.node[:]
        self.sorted.graph.node.extend(self.order)
        self.producer = {out: i for i, node in enumerate(self.order) for out in node.output if out}
        self.initializers = {t.name for t in proto.graph.initializer} | {t.name for t in proto.graph.sparse_initializer}
        self.inputs = [i.name for i in proto.graph.input if i.name not in self.initializers]
        self.outputs = [o.name for o in proto.graph.output]
        self.constants = set(self.initializers)
        for node in self.order:  # a node fed by constants only (Constant, a shape computed from a weight) is one
            subgraph = any(a.HasField("g") or len(a.graphs) for a in node.attribute)
            if not subgraph and all(not t or t in self.constants for t in node.input):
                self.constants.update(o for o in node.output if o)

    def values(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every value of the graph on ``feeds`` (not kept: a sample's values at 14 M parameters are ~100 MB)."""
        if self._exposed is None:
            self._exposed = Exposed(self.proto, self.threads, self.level)
        return {**{k: v for k, v in feeds.items() if k in self.inputs}, **self._exposed(feeds)}

    def end(self, values: dict[str, np.ndarray], references: dict[str, np.ndarray], judge: Judge) -> tuple[str, Metrics] | None:
        """The first computed tensor, in topological order, whose value breaks the gate against its reference. A constant
        (a ``Constant`` node, a value folded from weights only) is never the end: what fails is the first node that computes
        with it (issue 44: an fp16 file's clamp epsilon, 1e-12 flushed to 0, was handed over alone, "relative MAE 5.96e+04")."""
        for node in self.order:
            for name in node.output:
                if name in self.constants:
                    continue
                ref, got = references.get(name), values.get(name)
                if ref is None or got is None or not _is_float(ref) or not _is_float(got) or ref.shape != got.shape:
                    continue
                failed = judge(name, ref, got)
                if failed is not None:
                    return name, failed
        return None

    def _cone(self, end: str, start: int) -> tuple[frozenset[int], tuple[str, ...]]:
        """The nodes from ``start`` on (topological index) that ``end`` needs, and the tensors at the cut."""
        nodes: set[int] = set()
        boundary: dict[str, None] = {}
        stack, seen = [end], set()
        while stack:
            tensor = stack.pop()
            if not tensor or tensor in seen:
                continue
            seen.add(tensor)
            i = self.producer.get(tensor)
            if i is None:
                if tensor not in self.initializers:
                    boundary[tensor] = None  # a graph input (or a value from outside: not fed, the run says so)
                continue
            if i < start and tensor not in self.constants:
                boundary[tensor] = None
                continue
            nodes.add(i)
            stack.extend(self.order[i].input)
        return frozenset(nodes), tuple(sorted(boundary, key=lambda t: self.producer.get(t, -1)))

    def extract(self, inputs: tuple[str, ...], output: str, values: dict[str, np.ndarray]) -> Any:
        """The subgraph from ``inputs`` to ``output`` (onnx's extractor), typed from this sample's values."""
        import onnx
        from onnx import helper
        from onnx.utils import Extractor

        model = onnx.ModelProto()
        model.CopyFrom(self.sorted)
        known = {v.name for v in (*model.graph.input, *model.graph.output)}
        del model.graph.value_info[:]
        model.graph.value_info.extend(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
                                      for name, value in values.items() if name not in known)
        return Extractor(model).extract_model(list(inputs), [output])

    def run_cut(self, model: Any, inputs: tuple[str, ...], fed: dict[str, np.ndarray]) -> np.ndarray:
        run = session(model.SerializeToString(), self.threads, self.level)
        return run.run(None, {name: fed[name] for name in inputs})[0]

    @staticmethod
    def fed(values: dict[str, np.ndarray], references: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What a cut may be fed: a float tensor's reference, in the dtype the graph holds it; any other
        tensor (shapes, indices) as the whole graph computed it."""
        return {name: (references[name].astype(value.dtype) if name in references and _is_float(value) else value)
                for name, value in values.items() if name in references or not _is_float(value)}

    def reduce(self, end: str, values: dict[str, np.ndarray], references: dict[str, np.ndarray], judge: Judge,
               seconds: float = REDUCE_SECONDS) -> Cut | None:
        """The latest start whose subgraph to ``end`` still fails, fed reference values at its cut (None:
        not even the whole cone fails on its own)."""
        deadline = time.perf_counter() + seconds
        fed = self.fed(values, references)
        full, _ = self._cone(end, 0)
        candidates: list[tuple[str, ...]] = []
        seen: set[tuple[str, ...]] = set()
        listed = True  # every start was looked at (else the budget stopped the listing)
        for start in sorted(full):
            if time.perf_counter() > deadline and candidates:
                listed = False
                break
            _, boundary = self._cone(end, start)
            if boundary in seen or not all(t in fed and fed[t].shape == values[t].shape for t in boundary):
                continue
            seen.add(boundary)
            candidates.append(boundary)
        reference = references[end]
        steps = 0

        def attempt(index: int) -> tuple[Any, Metrics] | None:
            nonlocal steps
            steps += 1
            inputs = candidates[index]
            try:
                model = self.extract(inputs, end, values)
                got = self.run_cut(model, inputs, fed)
            except Exception:  # a cut the extractor or the runtime refuses is not one that fails
                return None
            failed = judge(end, reference, got) if got.shape == reference.shape else None
            return None if failed is None else (model, failed)

        if not candidates:
            return None
        best, lo = attempt(0), 0
        if best is None:
            return None
        hi = len(candidates)
        while hi - lo > 1 and time.perf_counter() <= deadline:
            mid = (lo + hi) // 2
            found = attempt(mid)
            if found is not None:
                best, lo = found, mid
            else:
                hi = mid
        cut = None if hi - lo <= 1 and listed else f"the search stopped at its budget of {seconds:g} s after {steps} subgraphs"
        return Cut(inputs=candidates[lo], output=end, model=best[0], metrics=best[1], steps=steps, cut=cut)


def _save(cut: Cut, fed: Mapping[str, np.ndarray], reference: np.ndarray, folder: Path, name: str) -> tuple[Path, Path]:
    """The subgraph and its data (``input_<i>`` in the subgraph's input order, ``reference_0``, and
    their tensor names) written atomically as ``folder/<name>.onnx`` and ``.npz``, following no link below
    ``folder``'s parent (``--out``: ``nofollow.write_inside``; a planted one is ``Refused``)."""
    graph_path, data_path = folder / f"{name}.onnx", folder / f"{name}.npz"
    order = [i.name for i in cut.model.graph.input]
    arrays = {f"input_{k}": np.ascontiguousarray(fed[t]) for k, t in enumerate(order)}
    arrays["reference_0"] = np.ascontiguousarray(reference)
    arrays["input_names"] = np.array(order, dtype=str)
    arrays["output_names"] = np.array([cut.output], dtype=str)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # type: ignore[arg-type]
    write_inside(folder.parent, f"{folder.name}/{graph_path.name}", cut.model.SerializeToString())
    write_inside(folder.parent, f"{folder.name}/{data_path.name}", buffer.getvalue())
    return graph_path, data_path


def reduce_row(name: str, path: Path, source: Path | None, model: Any, samples: list[tuple[int, dict[str, np.ndarray]]],
               judge: Judge, gate: str, folder: Path, threads: int = 1, level: str = "ORT_ENABLE_ALL",
               seconds: float = REDUCE_SECONDS, source_passed: bool = False) -> Reduced:
    """The row's smallest failing subgraph written to ``folder`` (see the module's docstring), or why not.
    ``samples``: (golden index, feeds) worst first; ``source``: the file the row was converted from;
    ``model``: the eager model (None: no eager references); ``source_passed``: the source's own row passed its gate, so
    its values stand for eager's (within that gate) and, when they explain nothing, eager's are not searched again."""
    import onnx

    began = time.perf_counter()
    proto = onnx.load(str(path))
    if (size := proto.ByteSize()) > PROTOBUF_LIMIT:  # the search runs its subgraphs in sessions made from bytes in memory
        return Reduced(gate=gate, model_nodes=len(proto.graph.node), optimization=level, seconds=time.perf_counter() - began,
                       error=f"{path.name} holds {size:,} bytes with its weights, past ONNX's 2 GiB limit for the in-memory "
                             "sessions the search runs")
    reducer = Reducer(proto, threads, level)
    tried: list[str] = []
    source_searched = False  # the source's values were the references, and explained nothing
    modes = ([("source", source)] if source is not None else []) + [("eager", None)]
    for mode, source_path in modes:
        if mode == "eager" and model is None:
            continue
        if mode == "eager" and source_passed and source_searched and source is not None:
            tried.append(f"eager's module outputs not searched: {source.name} passed its own gate, so its values are eager's "
                         "within that gate")
            continue
        if mode == "eager" and len(reducer.inputs) != 1:
            tried.append(f"eager's module outputs pair with graph values for a model with one input; this one has {len(reducer.inputs)}")
            continue
        source_proto = onnx.load(str(source_path)) if source_path is not None else None
        if source_proto is not None and (size := source_proto.ByteSize()) > PROTOBUF_LIMIT:
            tried.append(f"against {_words(mode, source_path)}: it holds {size:,} bytes with its weights, past ONNX's 2 GiB limit "
                         "for the in-memory session that computes its values")
            continue
        theirs_of = None if source_proto is None else Exposed(source_proto, threads, "ORT_ENABLE_ALL")
        del source_proto  # its session holds what it needs
        source_searched = theirs_of is not None
        for index, given in samples[:SAMPLES]:
            # the one golden input is fed to the graph's one input whatever its name, as the row's runner feeds it
            feeds = {reducer.inputs[0]: next(iter(given.values()))} if len(given) == 1 == len(reducer.inputs) else dict(given)
            values = reducer.values(feeds)
            references = {k: v for k, v in feeds.items() if k in reducer.inputs}
            if theirs_of is not None:
                theirs = theirs_of(feeds)
                references |= {k: v for k, v in theirs.items() if k in values and v.shape == values[k].shape and _is_float(v)}
            else:
                from .layers.onnx import eager_references

                references |= eager_references(proto, model, next(iter(feeds.values())), values)
            end = reducer.end(values, references, judge)
            if end is None:
                tried.append(f"against {_words(mode, source_path)}, no value of sample {index} breaks the gate")
                continue
            spent = time.perf_counter() - began
            cut = reducer.reduce(end[0], values, references, judge, max(seconds - spent, 0.0))
            if cut is None:
                tried.append(f"against {_words(mode, source_path)}, {end[0]} of sample {index} breaks the gate only inside the whole graph")
                continue
            try:
                graph_path, data_path = _save(cut, reducer.fed(values, references), references[cut.output], folder, name)
            except Refused as exc:  # a link planted in --out: the row keeps its verdict, its reduction says why it is not there
                return Reduced(gate=gate, model_nodes=len(proto.graph.node), optimization=level, error=str(exc),
                               seconds=time.perf_counter() - began)
            return Reduced(gate=gate, reference=mode, source=source_path.name if source_path is not None else "", sample=index,
                           path=str(graph_path), data=str(data_path), nodes=len(cut.model.graph.node), model_nodes=len(proto.graph.node),
                           inputs=cut.inputs, outputs=(cut.output,), ops=tuple(n.op_type for n in cut.model.graph.node),
                           metrics=cut.metrics, optimization=level, steps=cut.steps, cut=cut.cut,
                           seconds=time.perf_counter() - began)
    if not tried:
        tried.append("no reference for its values: it has no source file and no eager model")
    return Reduced(gate=gate, model_nodes=len(proto.graph.node), optimization=level, error="; ".join(tried),
                   seconds=time.perf_counter() - began)


def _words(mode: str, source: Path | None) -> str:
    return f"{source.name} (its source)" if mode == "source" and source is not None else "eager's module outputs"
