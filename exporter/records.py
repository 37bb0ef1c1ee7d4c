"""What a run observes about each row, before anything is judged: typed, frozen, no verdicts.

The pipeline (``observe``) fills one :class:`Observation` per row; ``judge`` turns observations and
gates into rows; the cache stores observations (never rows), so a cached run and a cold run are
judged by the same code. Nothing here imports numpy or torch.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from .compare import Metrics
from .files import FileInfo


@dataclass(frozen=True)
class BatchSizeRun:
    """The artifact run over the probe images at one batch size, compared per image with eager's
    output for the same images at the same batch size (``mae``, ``agreement``: judged under the
    row's gate), and with its own output at the main batch size (``moved``: how much it changes with
    the batch; ``eager_moved``: how much eager does), which says why a size fails."""

    size: int
    images: int  # how many of the probe images were run at this size
    mae: float | None = None  # against eager at the same batch size, over those images; None when it failed
    max_abs: float | None = None
    agreement: float | None = None  # top-1 (or per-position) agreement with eager at this size; None: values, not logits
    reference_mean_abs: float | None = None  # mean |eager output| at this size, for relative gates
    nonfinite: int = 0
    worst_image: int | None = None  # index (into the golden set) of the image furthest from eager at this size
    worst_image_mae: float | None = None
    moved: float | None = None  # worst per-image MAE of the artifact here against its own output at the main size
    eager_moved: float | None = None  # the same for the eager model
    error: str | None = None  # the run failed (exception, or wrong number of output rows)
    eager_error: str | None = None  # the eager model itself fails at this size
    seconds: float = 0.0  # wall time the artifact's runs at this size took here (0: reused from the replay)

    @property
    def max_image_mae(self) -> float | None:
        """The worst image's MAE against eager at this batch size."""
        return self.worst_image_mae

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "images": self.images,
            "mae": self.mae,
            "max_abs": self.max_abs,
            "agreement": self.agreement,
            "reference_mean_abs": self.reference_mean_abs,
            "nonfinite": self.nonfinite,
            "worst_image": self.worst_image,
            "worst_image_mae": self.worst_image_mae,
            "moved": self.moved,
            "eager_moved": self.eager_moved,
            "error": self.error,
            "eager_error": self.eager_error,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class Latency:
    """Median wall time per image of one batch, at the run's fixed thread count. Never gates."""

    ms_per_image: float
    batch: int
    repeats: int
    threads: int
    samples_ms: tuple[float, ...]  # per-image milliseconds of every timed repeat
    seconds: float = 0.0  # wall time of the runs made for this record and the determinism rerun (0: all from the replay)

    def to_json(self) -> dict[str, Any]:
        return {"ms_per_image": self.ms_per_image, "batch": self.batch, "repeats": self.repeats,
                "threads": self.threads, "samples_ms": list(self.samples_ms), "seconds": self.seconds}


@dataclass(frozen=True)
class LayerDelta:
    """One module's output in the artifact against the same module's output in eager."""

    module: str  # qualified module name, "" for the model's own forward
    ops: str  # what ran it in the artifact: ONNX op types, or the TorchScript module's class
    mae: float
    max_abs: float
    sqnr_db: float  # 10*log10(signal power / error power); inf when identical
    departs: bool  # beyond the comparison threshold
    merged: tuple[str, ...] = ()  # modules with no nodes of their own whose output this value also is
    # What departs: "module" (its own computation), "forward-code" (the code of its forward between
    # its children: .item(), numpy, arithmetic on their outputs), "dropped" (a module with no nodes in
    # the artifact's graph, whose effect the graph lost: an in-place op on a view, for one)
    where: str = "module"

    @property
    def label(self) -> str:
        return self.module or "<model forward>"

    def to_json(self) -> dict[str, Any]:
        return {"module": self.module, "ops": self.ops, "mae": self.mae, "max_abs": self.max_abs,
                "sqnr_db": None if not math.isfinite(self.sqnr_db) else self.sqnr_db,
                "departs": self.departs, "merged": list(self.merged), "where": self.where}


@dataclass(frozen=True)
class LayerComparison:
    """Per-module comparison with eager: where a float artifact diverges, or int8's per-layer error.

    ``scope`` is ``"local"`` when every module was fed eager's own inputs (TorchScript: the error is
    that module's alone), ``"cumulative"`` when the artifact ran end to end and its intermediate
    values were read out (ONNX: the error includes everything upstream).
    """

    purpose: str  # "divergence" (a failing float row) or "int8-layers"
    method: str
    scope: str  # "local" or "cumulative"
    batch_start: int  # golden index of the first image of the batch used
    batch_size: int
    threshold: float  # a module departs when MAE > threshold * max(1, mean |eager output|)
    layers: tuple[LayerDelta, ...]  # execution order (completion order of the modules)
    first: LayerDelta | None  # first module in execution order that departs
    error: str | None = None  # the diagnosis itself could not run
    # Modules with no nodes of their own in the artifact's graph that ran between the last agreeing
    # value and the first departing one: an optimizer may have folded a wrong operator into neighbours.
    suspects: tuple[str, ...] = ()
    seconds: float = 0.0  # wall time the comparison took
    # ONNX tables: the graph's name and every named node with the module of this table it belongs to (the
    # innermost one whose scope holds it), so the errors can colour the graph (report/node_data.py: Model Explorer)
    graph: str = ""
    nodes: tuple[tuple[str, str], ...] = ()
    # A TorchScript divergence: the first departing module's own inputs and eager output, saved (.npz: input_0..,
    # reference) beside the file, so that module alone reproduces it (messages.module_command)
    repro: str | None = None
    # What a delegate ran as opaque calls (ExecuTorch, diagnostics.etdump): only each call's output is
    # logged. Its backend(s), the graph's ops it ran, the graph's ops, the calls. "" / 0 without one.
    delegate: str = ""
    delegated_ops: int = 0
    graph_ops: int = 0
    delegate_calls: int = 0
    # The artifact's own values against eager, when ``layers`` come from a variant of it without the
    # delegate (method "executorch-portable"); () otherwise.
    artifact_layers: tuple[LayerDelta, ...] = ()

    @property
    def artifact_first(self) -> LayerDelta | None:
        """The first of the artifact's own values that departs, when the table is a variant's."""
        return next((d for d in self.artifact_layers if d.departs), None)

    def worst(self, count: int = 3) -> tuple[LayerDelta, ...]:
        """The layers that hurt most. Local tables: lowest SQNR. Cumulative tables: the largest
        increase of the noise-to-signal ratio over the previous module in execution order."""
        changed = [d for d in self.layers if d.mae > 0]
        if self.scope == "local":
            return tuple(sorted(changed, key=lambda d: d.sqnr_db)[:count])
        added = []
        previous = 0.0
        for d in self.layers:
            nsr = 10 ** (-d.sqnr_db / 10) if math.isfinite(d.sqnr_db) else 0.0
            if d.mae > 0:
                added.append((nsr - previous, d))
            previous = nsr
        return tuple(d for _, d in sorted(added, key=lambda t: -t[0])[:count])

    def to_json(self) -> dict[str, Any]:
        return {
            "purpose": self.purpose,
            "method": self.method,
            "scope": self.scope,
            "batch_start": self.batch_start,
            "batch_size": self.batch_size,
            "threshold": self.threshold,
            "first": None if self.first is None else self.first.module,
            "suspects": list(self.suspects),
            "worst": [d.module for d in self.worst()] if self.purpose == "int8-layers" else [],
            "layers": [d.to_json() for d in self.layers],
            "error": self.error,
            "seconds": self.seconds,
            "delegate": self.delegate,
            "delegated_ops": self.delegated_ops,
            "graph_ops": self.graph_ops,
            "delegate_calls": self.delegate_calls,
            "artifact_layers": [d.to_json() for d in self.artifact_layers],
        }


@dataclass(frozen=True)
class Reduced:
    """The smallest subgraph of a failing ONNX row that still fails the row's gate on its own
    (``diagnostics.reduce``), written to hand over: ``path`` (the ``.onnx``) and ``data`` (the ``.npz``:
    ``input_0``.. fed to it, ``reference_0``.. its outputs should be). Its cut inputs hold the
    *reference* values of those tensors (``reference``: where they come from), so its error is its own.
    ``error``: no reduction was written, and why."""

    gate: str  # the gate it was reduced under (Gate.describe()): a changed gate reduces again
    reference: str = ""  # "source" (the file the row was converted from, run with every value exposed) or "eager" (module outputs)
    source: str = ""  # the source file's name, for reference "source"
    sample: int | None = None  # golden index of the sample its inputs are taken from
    path: str | None = None
    data: str | None = None
    nodes: int = 0  # in the subgraph
    model_nodes: int = 0  # in the row's whole graph
    inputs: tuple[str, ...] = ()  # the cut tensors fed from the reference
    outputs: tuple[str, ...] = ()  # the tensor(s) compared with their reference
    ops: tuple[str, ...] = ()  # the subgraph's node op types, in order
    metrics: Metrics | None = None  # the subgraph's output against its reference (the judge words the gate's reasons)
    optimization: str = "ORT_ENABLE_ALL"  # the onnxruntime graph optimisation level it was run at (the row's)
    steps: int = 0  # subgraphs extracted and run
    cut: str | None = None  # the budget stopped the search: the subgraph is a failing one, not the smallest
    error: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"gate": self.gate, "reference": self.reference, "source": self.source, "sample": self.sample, "path": self.path,
                "data": self.data, "nodes": self.nodes, "model_nodes": self.model_nodes, "inputs": list(self.inputs),
                "outputs": list(self.outputs), "ops": list(self.ops),
                "metrics": None if self.metrics is None else self.metrics.to_json(), "optimization": self.optimization,
                "steps": self.steps, "cut": self.cut, "error": self.error, "seconds": self.seconds}


@dataclass(frozen=True)
class EagerSelfCheck:
    """The eager model run on the same batch twice before anything is built: does it reproduce
    itself, and if not, why (``random``: forward draws from torch's random number generator, e.g.
    dropout left on or ``randn_like``; ``state_changes``: attributes or buffers forward changed)."""

    runs: int
    images: int
    max_abs: float  # largest difference between two calls on the same batch
    mae: float  # their mean absolute difference: the eager model's own noise floor
    agreement: float | None  # top-1 agreement between the two calls (logits), None otherwise
    random: bool  # forward consumed torch's random number generator
    state_changes: tuple[str, ...] = ()  # "calls: 1 -> 2", "running_mean changed", ...
    reproduces_under_seed: bool | None = None  # the same seed before each call gives the same output
    reference_mean_abs: float = 0.0  # mean |output| of the first call: the scale of the noise
    nonfinite_weights: tuple[str, ...] = ()  # "fc.weight: 1 of 320": the model's tensors holding NaN/Inf (issue 44)

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "images": self.images, "max_abs": self.max_abs, "mae": self.mae, "agreement": self.agreement,
                "reference_mean_abs": self.reference_mean_abs, "nonfinite_weights": list(self.nonfinite_weights),
                "random": self.random, "state_changes": list(self.state_changes), "reproduces_under_seed": self.reproduces_under_seed}


@dataclass(frozen=True)
class SizeRuns:
    """The batch-size runs over the probe images, each compared per image with the main size."""

    main_size: int
    runs: tuple[BatchSizeRun, ...]  # the first compared output's
    outputs: tuple[tuple[str, tuple[BatchSizeRun, ...]], ...] = ()  # every other compared output's, by name


@dataclass(frozen=True)
class RerunMeasure:
    """The first batch run ``runs`` times: the largest difference of a later run from the first."""

    runs: int
    images: int
    max_abs: float


@dataclass(frozen=True)
class Measured:
    """A row's diagnostics as measured: batch sizes, reruns, cost and, when the judge asked for
    one, the per-layer table (``layers``, measured against ``layers.threshold``)."""

    sizes: SizeRuns | None = None
    rerun: RerunMeasure | None = None
    latency: Latency | None = None
    layers: LayerComparison | None = None
    notes: tuple[str, ...] = ()  # warnings the runtime emitted while measuring (its own words)
    seconds: float = 0.0
    error: str | None = None  # the artifact could not be reopened for its diagnostics
    eager_check: EagerSelfCheck | None = None  # the eager row's: two calls on the first batch before any build
    unmeasured: str | None = None  # determinism and latency were not measured: the error that stopped them
    budget: float | None = None  # --diagnostics-budget, when it cut the plan (``cut``: what it left out)
    cut: tuple[str, ...] = ()
    reduced: Reduced | None = None  # a failing ONNX row's smallest failing subgraph (explain.Explainer)


# The build details key an int8 kind records its coverage under (``Int8Coverage.to_details``): details are what
# travels from the build process through the cache and bundles to the judge.
COVERAGE_KEY = "int8_coverage"


@dataclass(frozen=True)
class Int8Coverage:
    """How much of an int8 artifact's weights are int8, counted in its file (``measured`` "file") or, for a
    ``.pte`` whose delegate hides its weights, in the program before lowering (``artifacts._coverage``).

    A weight tensor is a tensor of two or more dimensions the graph multiplies with: a matrix, a convolution
    kernel, an embedding table, a recurrent layer's input and hidden weights. Biases, normalisation scales,
    quantization scales and zero points are not counted, nor is a tensor the graph only adds or concatenates.
    ``float_tensors``: each weight left float, as (name, the op that consumes it, its parameter count), largest
    first. ``error``: it could not be counted, and why."""

    quantized_tensors: int = 0
    weight_tensors: int = 0
    quantized_params: int = 0
    weight_params: int = 0
    float_tensors: tuple[tuple[str, str, int], ...] = ()
    measured: str = "file"
    error: str | None = None

    @property
    def share(self) -> float | None:
        """The share of the weight parameters (by count) that are int8; None when there is no weight to count."""
        if self.error is not None or not self.weight_params:
            return None
        return self.quantized_params / self.weight_params

    def float_by_op(self) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
        """The float weights grouped by the op consuming them: (op, parameters, tensor names), most parameters first."""
        groups: dict[str, tuple[int, tuple[str, ...]]] = {}
        for name, op, params in self.float_tensors:
            count, names = groups.get(op, (0, ()))
            groups[op] = (count + params, (*names, name))
        return tuple(sorted(((op, n, names) for op, (n, names) in groups.items()), key=lambda g: -g[1]))

    def to_details(self) -> dict[str, str]:
        return {COVERAGE_KEY: json.dumps({"tensors": [self.quantized_tensors, self.weight_tensors],
                                          "parameters": [self.quantized_params, self.weight_params],
                                          "float": [list(t) for t in self.float_tensors], "measured": self.measured,
                                          "error": self.error}, separators=(",", ":"))}

    @classmethod
    def from_details(cls, details: dict[str, str]) -> Int8Coverage | None:
        """The coverage a build recorded in its details; None when it recorded none (a kind that is not int8)."""
        text = details.get(COVERAGE_KEY)
        if text is None:
            return None
        try:
            data = json.loads(text)
            (qt, wt), (qp, wp) = data["tensors"], data["parameters"]
            floats = tuple((str(n), str(op), int(c)) for n, op, c in data.get("float") or ())
            return cls(int(qt), int(wt), int(qp), int(wp), floats, str(data.get("measured") or "file"),
                       None if data.get("error") is None else str(data["error"]))
        except (ValueError, TypeError, KeyError) as exc:
            return cls(error=f"the recorded {COVERAGE_KEY} detail is unreadable ({type(exc).__name__}: {exc})")

    def to_json(self) -> dict[str, Any]:
        return {"tensors": [self.quantized_tensors, self.weight_tensors], "parameters": [self.quantized_params, self.weight_params],
                "share": self.share, "float_tensors": [{"name": n, "op": op, "parameters": c} for n, op, c in self.float_tensors],
                "measured": self.measured, "error": self.error}


@dataclass(frozen=True)
class Observation:
    """Everything observed about one row: the eager model against the golden reference, or one
    artifact, reloaded from its file, against eager. ``error`` is a build, reload or replay failure
    (for eager: its output does not fit the reference)."""

    name: str
    family: str  # the gate family (gates.GATE_FAMILIES)
    compared_with: str  # "golden" or "eager"
    metrics: Metrics | None
    error: str | None = None
    artifact: FileInfo | None = None
    build_seconds: float | None = None
    replay_seconds: float | None = None
    details: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()  # warnings the exporters and runtimes emitted
    diagnostics: Measured | None = None
    # With several compared outputs: each one's metrics, the first one's also in ``metrics`` (which
    # the diagnostics are about); empty for a single output. And the outputs a setting excluded.
    outputs: tuple[tuple[str, Metrics], ...] = ()
    not_compared: tuple[str, ...] = ()
    not_applicable: bool = False  # the kind does not apply to this model; ``error`` says why
    # Where it came from in the artifact cache: "hit" (nothing built or replayed), "artifact" (file
    # reused, replayed afresh), "miss", "rebuilt" (damaged entry); None: no cache.
    cache: str | None = None
