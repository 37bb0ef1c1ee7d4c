"""executorch-int8: PT2E static int8 with ExecuTorch's XNNPACK quantizer (``XNNPACKQuantizer``,
``get_symmetric_quantization_config(is_per_channel=True)``: int8 activations, per-channel int8 weights),
``prepare_pt2e`` / ``convert_pt2e`` from torchao, calibrated on the golden set's calibration split, then
exported again with the batch bounded and lowered to XNNPACK as :mod:`.executorch_pte` does; the same
runner (the dim order read from the file, the bound recorded). Judged only on the samples it was not
calibrated on (``observe``). Needs executorch (which requires torchao): ``pip install "export-check[executorch]"``.

The recipe (:func:`quantizer`), one for every model: the convolutions and linear layers are int8 (weights,
and the activations in and out), everything else stays float (elementwise arithmetic, softmax, norms,
embeddings, pooling), and so do the layers whose result reaches a model output through no other such
layer (the heads). The quantizer's global setting also quantizes every ``add``/``mul``/``cat``: on the
bundled token classifier that puts the attention-mask add (``scores + mask * -1e9``) on one int8 scale of
~1e9 / 127, every real score rounds to 0 and the model answers one class (relative MAE 1.29, top-1 0 %);
the other adds cost accuracy for no size (measured in issue 27: relative MAE 4.8 % with every conv/linear
int8, 3.5 % with the head float; the ResNet 2.4 % either way, 99 KB).

A model with an ``nn.LSTM`` and a declared dynamic axis is captured with each LSTM as the ``torch.scan`` loop the
executorch kind exports (:mod:`._recurrent`): the convolutions around it are int8, the loop (its step's matrix
product, gates and state) and its input projections (their bias is the sum of the LSTM's two, computed) stay float,
the batch static at one sample; the row's details say which layers are int8 and why the others are not (its int8 coverage, what share of the weight
parameters).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._calibration import calibration_batches, calibration_count, pt2e_converted
from ._common import native_warnings
from ._coverage import program as program_coverage
from ._recurrent import RECURRENCE, recurrent_types, with_scan_lstm
from .base import BuildContext, NotApplicable
from .executorch_pte import Bounds, PteRunner, export_bounded, lower_and_save, require_executorch

ACCOUNTS = {"executorch-int8": "PT2E static int8 with ExecuTorch's XNNPACK quantizer (`XNNPACKQuantizer`, "
                               "`get_symmetric_quantization_config(is_per_channel=True)` on the convolutions and linear layers only: the heads, "
                               "elementwise arithmetic such as attention masks, softmax, norms and an LSTM's `scan` loop stay float; torchao's "
                               "`prepare_pt2e`, calibration on the golden set's **calibration split**, `convert_pt2e`), exported again with the "
                               "same bounded batch and lowered to XNNPACK as `executorch`, run by the same runner (dim order from the file, "
                               "bound recorded); judged **only on the other samples**"}

QUANTIZER = "XNNPACKQuantizer (get_symmetric_quantization_config(is_per_channel=True): static, per-channel weights)"
RECIPE = ("convolutions and linear layers int8 (weights, activations in and out), except the heads (the layers whose result "
          "reaches an output through no other such layer) and layers whose weight or bias is computed; elementwise "
          "arithmetic (attention masks, residual adds), softmax, norms, embeddings and pooling float")
LAYER_OPS = ("conv1d", "conv2d", "conv3d", "linear")  # aten ops (.default) the recipe quantizes


def _layer_targets() -> set[Any]:
    import torch

    return {getattr(torch.ops.aten, name).default for name in LAYER_OPS}


def is_head(node: Any, layers: set[Any]) -> bool:
    """Whether a convolution/linear node's result reaches the graph's output through no other convolution/linear."""
    seen, todo = set(), list(node.users)
    while todo:
        user = todo.pop()
        if user.op == "output":
            return True
        if user in seen or user.target in layers:
            continue
        seen.add(user)
        todo.extend(user.users)
    return False


def quantizer(XNNPACKQuantizer: Any, get_symmetric_quantization_config: Any) -> Any:
    """The recipe (:data:`RECIPE`): the quantizer annotates the layer ops only, and no head."""
    config = get_symmetric_quantization_config(is_per_channel=True)
    layers = _layer_targets()
    found = XNNPACKQuantizer()
    for target in layers:
        found.set_operator_type(target, config)
    return found.set_filter_function(lambda node: node.target not in layers or (not is_head(node, layers) and _constant_operands(node)))


def _constant_operands(node: Any) -> bool:
    """Whether a layer's weight and bias are the model's own tensors, not computed in the graph: XNNPACK delegates a
    quantized layer only then (the LSTM loop's input projection sums its two biases), and a quantized weight left
    outside the delegate has no kernel in the runtime."""
    return all(getattr(arg, "op", "get_attr") in ("get_attr", "placeholder") for arg in node.args[1:3])


def layer_precision(converted: Any) -> tuple[list[str], list[str]]:
    """(int8 layers, float layers with why) of a converted graph's convolutions and linear layers, by module (or node)
    name: int8 when its weight arrives through a dequantize node."""
    layers = _layer_targets()
    int8: list[str] = []
    fp32: list[str] = []
    for node in converted.graph.nodes:
        if node.target not in layers:
            continue
        stack = node.meta.get("nn_module_stack") or {}
        name = str(list(stack.values())[-1][0]) if stack else ""
        name = name if name and name not in (*int8, *(f.split(" (")[0] for f in fp32)) else node.name
        weight: Any = node.args[1] if len(node.args) > 1 else None
        if getattr(weight, "op", "") == "call_function" and "dequantize" in str(weight.target):
            int8.append(name)
        else:
            fp32.append(f"{name} ({'head' if is_head(node, layers) else 'computed weight or bias'})")
    return int8, fp32


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    program, bounds, details = exported_program_with_details(ctx)
    return lower_and_save(program, path, bounds, {**details, **program_coverage(program).to_details()})  # XNNPACK hides the weights


def exported_program(ctx: BuildContext) -> tuple[Any, Bounds]:
    """The quantized program ``build`` lowers, with its bounds: what ``diagnostics.etdump`` rebuilds
    (with an ETRecord) to explain a ``.pte`` of this kind."""
    program, bounds, _ = exported_program_with_details(ctx)
    return program, bounds


def exported_program_with_details(ctx: BuildContext) -> tuple[Any, Bounds, dict[str, str]]:
    """Calibrated, converted and exported again with its axes bounded: (program, bounds, the row's details)."""
    require_executorch()
    declared = [a for i in ctx.signature.inputs for a, _ in i.dynamic_axes if a != i.batch_axis]
    model, recurrence = ctx.model, ""
    if declared and recurrent_types(ctx.model):  # PT2E's capture would unroll the LSTM over the example's steps (#115092)
        model, count = with_scan_lstm(ctx.model)  # NotApplicable for a GRU/RNN or a projected LSTM
        recurrence = (f"{RECURRENCE}; {count} layer{'s' if count > 1 else ''}, its loop float (the step's matrix product, "
                      "gates and state), run by the portable kernels, batch static at 1")
    batches = calibration_batches(ctx, "executorch-int8")
    try:
        with native_warnings():
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError as exc:
        raise NotApplicable(f"not applicable: this executorch or torchao has no PT2E XNNPACK quantization ({exc}); "
                            'pip install "export-check[executorch]" installs the tested pair') from None
    # the first capture, for calibration, keeps the batch free: the split's batches may be of any size
    converted, quantized = pt2e_converted(ctx, batches, quantizer(XNNPACKQuantizer, get_symmetric_quantization_config),
                                          prepare_pt2e, convert_pt2e, model)
    int8, fp32 = layer_precision(converted)
    if not quantized or not int8:
        raise NotApplicable("not applicable: the model has no convolution or linear layer besides its heads, the only layers "
                            f"this kind quantizes ({RECIPE}), so it would change nothing")
    program, bounds = export_bounded(ctx, converted, recurrence)  # the converted GraphModule's forward keeps the model's parameter names
    _restore_scopes(converted, program)
    total = len(int8) + len(fp32)
    return program, bounds, {"partitioner": "XnnpackPartitioner (int8 QDQ)", "quantizer": QUANTIZER, "recipe": RECIPE,
                             "int8_layers": f"{len(int8)} of {total} convolution/linear layers",
                             "float_layers": ", ".join(fp32) or "none",
                             "quantize_nodes": str(quantized), "calibration_samples": str(calibration_count(batches, ctx))}


def _restore_scopes(converted: Any, program: Any) -> None:
    """Exporting the converted GraphModule again loses each node's module (``nn_module_stack``): put back
    the first capture's, by node name (as pt2e-int8-static's file carries them), so that the lowered
    program's ETRecord names modules (diagnostics.etdump). Metadata only: the program computes the same."""
    stacks = {n.name: n.meta["nn_module_stack"] for n in converted.graph.nodes if n.meta.get("nn_module_stack")}
    for node in program.graph.nodes:
        if node.name in stacks and not node.meta.get("nn_module_stack"):
            node.meta["nn_module_stack"] = stacks[node.name]


def open_runner(path: Path, ctx: BuildContext) -> PteRunner:
    return PteRunner(path, ctx)
