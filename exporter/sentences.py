"""The sentences the tool says about measurements, in one place: the views, the judge's reasons and
the JSON report's summaries call these; the measurement records themselves hold numbers only."""

from __future__ import annotations

import json
import math
import shlex

from .artifacts.base import BEYOND_BOUND, beyond_bound  # noqa: F401  (the words a runner raises, read back here)
from .records import BatchSizeRun, Int8Coverage, LayerComparison, LayerDelta, Measured, Reduced

# How each per-layer method (``ArtifactKind.layers``, ``LayerComparison.method``) compares, in words.
LAYER_METHODS = {
    "torchscript": "each loaded TorchScript submodule run on the eager model's inputs to that module",
    "onnxruntime": "intermediate values of the ONNX graph (node scopes mapped to modules) against eager module outputs",
    "program": "intermediate values of the loaded torch.export program (nodes mapped to modules) against eager module outputs",
    "executorch": "intermediate values the .pte logged at run time (ETDump and its debug buffer, read by ExecuTorch's Inspector; ops "
                  "named by the ETRecord of a rebuild with the same execution plan) against eager module outputs",
    "executorch-portable": "intermediate values of the .pte's exported program lowered without a delegate, on ExecuTorch's portable "
                           "kernels (ETDump, Inspector), against eager module outputs: it localises export and lowering faults, "
                           "not the delegate's kernels",
}


def layer_method(layers: LayerComparison) -> str:
    """The per-layer table's method in words."""
    return LAYER_METHODS.get(layers.method, layers.method)


def measured_notes(measured: Measured) -> tuple[str, ...]:
    """What a row's diagnostics say about their own scope, then the warnings seen while measuring:
    what the diagnostics budget left out, what could not be measured."""
    notes = []
    if measured.cut:
        notes.append(f"diagnostics bounded to {measured.budget:g} of the replay's cost (--diagnostics-budget): " + "; ".join(measured.cut))
    if measured.unmeasured is not None:
        notes.append(f"determinism and latency not measured: {measured.unmeasured}")
    return (*notes, *measured.notes)


def recording_notes(details: dict[str, str]) -> tuple[str, ...]:
    """What the eager row says about how the golden set was recorded, when it differs from this check
    (its observation's details: ``recorded_batch_size``, ``checked_batch_size``, ``recorded_mode``)."""
    notes = []
    recorded, checked = details.get("recorded_batch_size"), details.get("checked_batch_size")
    if recorded is not None and checked is not None and recorded != checked:
        notes.append(f"the golden set was recorded at batch size {recorded}; this check runs at {checked}: a model whose "
                     "outputs depend on the batch differs from its reference for that reason alone")
    if details.get("recorded_mode") == "train":
        notes.append("the golden set was recorded with the model in training mode; the check runs it in eval mode")
    return tuple(notes)


def calibration_notes(details: dict[str, str]) -> tuple[str, ...]:
    """How many golden samples a calibrated kind's row was judged on (its observation's details:
    ``judged_samples``, ``calibration_samples_excluded``, ``calibration_split``); none for other rows."""
    if "judged_samples" not in details:
        return ()
    judged, excluded = int(details["judged_samples"]), int(details.get("calibration_samples_excluded", "0"))
    return (f"judged on {judged} of {judged + excluded} golden samples: {excluded} excluded as its calibration split "
            f"({details.get('calibration_split', '?')})",)


def percent(share: float) -> str:
    """A share as a percentage, rounded down (a share just under a floor never reads as the floor itself).

    >>> percent(0.2456), percent(0.4999), percent(0.0083), percent(1.0)
    ('24%', '49%', '0.8%', '100%')
    """
    digits = 0 if share >= 0.1 or share == 0 else 1
    return f"{math.floor(share * 100 * 10**digits + 1e-9) / 10**digits:.{digits}f}%"


SHORTFALL = "quantized only "  # how coverage_shortfall begins: report/next_steps.py tells a coverage reason from a drift


def coverage_summary(coverage: Int8Coverage) -> str:
    """An int8 row's coverage in one line: how many weight tensors, what share of the weight parameters."""
    if coverage.error is not None or coverage.share is None:
        return f"not measured: {coverage.error or 'the file holds no weight tensor'}"
    where = "in the file" if coverage.measured == "file" else f"in the {coverage.measured}"
    total = coverage.weight_params
    floats = "; ".join(f"{percent(params / total)} float in {op}" for op, params, _ in coverage.float_by_op())
    return (f"{coverage.quantized_tensors} of {coverage.weight_tensors} weight tensors in int8, {percent(coverage.share)} of the "
            f"{total:,} weight parameters{'; ' + floats if floats else ''} (counted {where}; biases and norms not counted)")


def coverage_shortfall(coverage: Int8Coverage, names: int = 4) -> str:
    """What an int8 row left float: the share quantized, and the float weights by the op that uses them.

    >>> c = Int8Coverage(4, 8, 14000, 57008, (("rnn.weight_ih_l0", "LSTM", 12288), ("rnn.weight_hh_l0", "LSTM", 9216)))
    >>> coverage_shortfall(c)
    'quantized only 24% of the weight parameters (4 of 8 weight tensors): 37% stay float in LSTM (rnn.weight_ih_l0, rnn.weight_hh_l0)'
    """
    total = coverage.weight_params or 1
    head = (f"{SHORTFALL}{percent(coverage.share or 0.0)} of the weight parameters ({coverage.quantized_tensors} of "
            f"{coverage.weight_tensors} weight tensors)")
    parts: list[str] = []
    for op, params, tensors in coverage.float_by_op():
        shown = ", ".join(tensors[:names]) + (f", +{len(tensors) - names} more" if len(tensors) > names else "")
        parts.append(f"{percent(params / total)} {'stay float ' if not parts else ''}in {op} ({shown})")
    return head + (": " + "; ".join(parts) if parts else "")


def layer_described(delta: LayerDelta) -> str:
    """Where a departing layer's difference comes from, in words."""
    if delta.where == "forward-code":
        return f"the forward code of {delta.label} itself ({delta.ops}, between its children, which agree)"
    if delta.where == "dropped":
        return f"{delta.label}, which has no nodes in this graph: the export lost what it does (an in-place op on a view?)"
    return delta.label


def delegate_summary(layers: LayerComparison) -> str:
    """What a delegate hid from the per-layer table, in words; "" when nothing was hidden."""
    if not layers.delegated_ops:
        return ""
    calls = f"{layers.delegate_calls} opaque call{'s' if layers.delegate_calls != 1 else ''}"
    text = (f"the {layers.delegate} delegate runs {layers.delegated_ops} of the {layers.graph_ops} ops of this .pte as {calls}, "
            "and its ETDump holds only each call's output")
    if layers.method != "executorch-portable":
        return text + ": the table has no values inside them"
    own = layers.artifact_first
    if own is None:
        where = "the .pte's own values agree with eager there" if layers.artifact_layers else "none of them matches an eager module"
    else:
        where = f"the .pte itself first departs at {own.label} (MAE {own.mae:.3g}, {own.ops})"
        if layers.first is None and layers.purpose == "divergence":
            where += ", while the same program without the delegate agrees: the difference is inside the delegate call"
    return f"{text} ({where}); the table is the same exported program without the delegate, on the portable kernels"


def layers_summary(layers: LayerComparison) -> str:
    """The per-layer table in one line: where a float artifact first departs, or int8's worst layers;
    what a delegate hid from it."""
    hidden = delegate_summary(layers)
    text = _layers_summary(layers)
    return f"{text}; {hidden}" if hidden and not layers.error else text


def _layers_summary(layers: LayerComparison) -> str:
    if layers.error:
        return f"diagnosis failed: {layers.error}"
    if layers.purpose == "int8-layers":
        worst = layers.worst()
        if not worst:
            return "no quantized layer changed its output"
        how = "lowest SQNR" if layers.scope == "local" else "largest added noise"
        return f"worst layers ({how}): " + ", ".join(f"{d.label} {d.sqnr_db:.1f} dB" for d in worst)
    if layers.first is None:
        return (f"no module departs from eager beyond {layers.threshold:g} at batch {layers.batch_start}.."
                f"{layers.batch_start + layers.batch_size - 1} ({len(layers.layers)} modules compared)")
    if layers.first.where != "module":
        return (f"first departs in {layer_described(layers.first)}: MAE {layers.first.mae:.3g}, "
                f"SQNR {layers.first.sqnr_db:.1f} dB ({layers.scope} comparison)")
    text = (f"first departs at {layers.first.label}: MAE {layers.first.mae:.3g}, "
            f"SQNR {layers.first.sqnr_db:.1f} dB ({layers.scope} comparison, {layers.first.ops})")
    if layers.suspects:
        text += (f"; also suspect, having no nodes of their own in this graph (folded into neighbours): "
                 f"{', '.join(layers.suspects)}")
    return text




# What a replay child's end says (builder/clean.py, ReplayProcessDied): the runtime crashed on the call, in its own process.
RUNTIME_CRASHED = "its replay process ended while"


def size_refused_cause(error: str) -> str:
    """Why the artifact raised at a batch size where eager runs: its runtime crashed at that size (its replay process
    ended), past a bound planned in its file (the runner said which), else a batch size the export specialised."""
    if RUNTIME_CRASHED in error:
        return ("its runtime crashed at this batch size (a native fault in the runtime or the file at this shape; the other sizes "
                "ran in a new replay process): reproduce it by running the file at this batch size alone")
    if f" {BEYOND_BOUND} " in error:
        return ("the file was planned for batches up to the bound named above, and its runtime refuses larger ones: deploy it "
                "only within that bound, or export it with a larger one")
    return "the export specialised the batch size (a shape baked in by tracing, or a graph whose batch axis was fixed)"


def batch_size_cause(run: BatchSizeRun, artifact: bool, eager: bool, scales: str | None) -> str:
    """Why the artifact disagrees with eager at this batch size, from whether each of them moved (the
    judge decides that, against the row's bound) from its own output at the main size. ``scales``: the kind's
    row's ``activation_scales`` (only "dynamic" moves with the batch by design)."""
    if eager and not artifact:
        return (f"the model's own output changes with the batch size (eager moves by MAE {run.eager_moved:.3g}) and the "
                "artifact's does not follow: the export kept what its example batch computed (a branch on the batch's "
                "size or values, a Python number taken from a tensor, or a shape that tracing recorded as a constant)")
    if artifact and not eager:
        if scales == "dynamic":
            return (f"its output moves with the batch by design (dynamic int8 computes activation scales per batch; "
                    f"by MAE {run.moved:.3g} here), but beyond the row's gate")
        if scales == "static":
            return (f"only the artifact's output changes with the batch size (by MAE {run.moved:.3g}), which its static int8 activation "
                    "scales (fixed at calibration) do not explain: a kernel or a graph that depends on the batch size")
        return (f"only the artifact's output changes with the batch size (by MAE {run.moved:.3g}): the export specialised "
                "the batch size (a shape baked in by tracing, or a graph whose batch axis was fixed)")
    if artifact and eager:
        return (f"the model itself depends on the batch (eager moves by MAE {run.eager_moved:.3g}) and the artifact moves "
                f"differently (by MAE {run.moved:.3g})")
    return "the artifact differs from eager at this batch size only"


def within_float_noise(bound: float, eager: float, artifact: float | None, main: int, factor: float | None) -> str:
    """Why no batch-size cause is named: the gate's MAE bound is within the model's float noise measured in this
    run (``causes.FloatNoise``: eager against itself across batch sizes, the artifact against eager at the main size).
    ``factor``: how far beyond eager's variation a cause is named (None: the eager row, which names none); the judge says
    this only when the artifact's own difference is within ``factor`` times eager's too (``causes.FloatNoise.hides``).

    >>> within_float_noise(5e-7, 6.1e-7, None, 16, None).split(": ")[0]
    "gate MAE<=5e-07 is within this model's float noise"
    """
    measured = f"eager against itself across batch sizes differs by up to {eager:.3g}"
    if artifact is not None:
        measured += f", and the artifact from eager at batch size {main} (the replay's, where the batch size plays no part) by up to {artifact:.3g}"
    if factor is None:
        return (f"gate MAE<={bound:.3g} is within this model's float noise: {measured} (float rounding: kernels chosen per batch "
                "size), not a dependence on the batch")
    return (f"gate MAE<={bound:.3g} is within this model's float noise measured in this run: {measured}; no batch-size cause "
            f"stands out from it (each is within {factor:g}x eager's own variation; a cause is named beyond that): loosen the gate above the "
            "noise, or accept it")


def reduced_summary(reduced: Reduced, reasons: tuple[str, ...], stale: bool = False) -> str:
    """A row's reduced subgraph in one line: how small, fed what, failing how (``reasons``: the gate's words
    on its output), and where it is. ``stale``: it was reduced under another gate than the row's now
    (``export-check judge`` with other gates)."""
    again = f" (reduced under {reduced.gate}: a check with these gates reduces it again)" if stale else ""
    if reduced.error is not None:
        return f"no failing subgraph written: {reduced.error}{again}"
    fed = "eager's module outputs" if reduced.reference == "eager" else f"{reduced.source}'s values"
    ops = ", ".join(dict.fromkeys(reduced.ops))
    cut = f" ({reduced.cut}: a failing subgraph, maybe not the smallest)" if reduced.cut else ""
    inputs = ", ".join(reduced.inputs)
    return (f"{reduced.nodes} of {reduced.model_nodes} nodes ({ops[:80]}) fail the gate on their own, fed at {inputs[:160]} "
            f"(golden sample {reduced.sample}; a value inside the graph: {fed}): {', '.join(reduced.outputs)}: "
            f"{'; '.join(reasons) or 'within this gate'}{cut}; written to {reduced.path}{again}")


def module_command(artifact: str, module: str, data: str) -> str:
    """One shell line that runs the departing module of a TorchScript (``.pt``) or torch.export (``.pt2``) file alone on
    eager's saved inputs to it, and prints its error against eager's saved output (torch and numpy only)."""
    loaded = (f"t.export.unflatten(t.export.load({json.dumps(artifact)}))" if artifact.endswith(".pt2")
              else f"t.jit.load({json.dumps(artifact)})")
    code = (f"import numpy as n,torch as t;d=n.load({json.dumps(data)});"
            + (f"m=dict({loaded}.named_modules())[{json.dumps(module)}];" if module else f"m={loaded};")  # no get_submodule there
            # its saved inputs (input_0..), the output compared (``output``: its place among the tensors it returns, else the first)
            + "y=m(*[t.from_numpy(d[f\"input_{k}\"]) for k in range(sum(f.startswith(\"input_\") for f in d.files))]);"
            "y=t.utils._pytree.tree_leaves(y)[int(d[\"output\"]) if \"output\" in d.files else 0].detach().numpy().astype(\"f8\");"
            "f=d[\"reference\"].astype(\"f8\");e=abs(y-f);print(\"MAE %.4g max %.4g\"%(e.mean(),e.max()))")
    return f"python -c {shlex.quote(code)}"


def reproduce_command(reduced: Reduced) -> str | None:
    """One shell line that runs the reduced subgraph with onnxruntime on its saved inputs and prints its
    error against the saved reference (numpy and onnxruntime only: something to hand to a maintainer)."""
    if reduced.path is None or reduced.data is None:
        return None
    options = ""
    if reduced.optimization != "ORT_ENABLE_ALL":
        options = f"o=r.SessionOptions();o.graph_optimization_level=r.GraphOptimizationLevel.{reduced.optimization};"
    code = (f"import numpy as n,onnxruntime as r;d=n.load({json.dumps(reduced.data)});{options}"
            f"s=r.InferenceSession({json.dumps(reduced.path)},{'o,' if options else ''}providers=[\"CPUExecutionProvider\"]);"
            "y=s.run(None,{i.name:d[f\"input_{k}\"] for k,i in enumerate(s.get_inputs())});"
            "[print(o.name,\"MAE %.4g max %.4g relMAE %.4g\"%(e.mean(),e.max(),e.mean()/abs(f).mean())) "
            "for k,(o,v) in enumerate(zip(s.get_outputs(),y)) for f in [d[f\"reference_{k}\"].astype(\"f8\")] "
            "for e in [abs(v.astype(\"f8\")-f)]]")
    return f"python -c {shlex.quote(code)}"
