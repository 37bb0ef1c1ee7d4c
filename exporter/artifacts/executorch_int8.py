"""executorch-int8: PT2E static int8 with ExecuTorch's XNNPACK quantizer (``XNNPACKQuantizer``,
``get_symmetric_quantization_config(is_per_channel=True)``: int8 activations, per-channel int8 weights),
``prepare_pt2e`` / ``convert_pt2e`` from torchao, calibrated on the golden set's calibration split, then
exported again with the batch bounded and lowered to XNNPACK as :mod:`.executorch_pte` does; the same
runner (the dim order read from the file, the bound recorded). Judged only on the samples it was not
calibrated on (``observe``). Needs executorch (which requires torchao): ``pip install "export-check[executorch]"``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._calibration import calibration_batches, calibration_count, pt2e_converted
from ._common import native_warnings
from ._coverage import program as program_coverage
from ._recurrent import recurrent_types
from .base import BuildContext, NotApplicable
from .executorch_pte import Bounds, PteRunner, export_bounded, lower_and_save, require_executorch

QUANTIZER = "XNNPACKQuantizer (get_symmetric_quantization_config(is_per_channel=True): static, per-channel weights)"


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
    recurrent = recurrent_types(ctx.model) if declared else set()
    if recurrent:  # measured on the bundled recogniser: the capture held 12 steps, and the .pte answered 12 for a width of 64
        raise NotApplicable(f"not applicable: the PT2E capture unrolls the {'/'.join(sorted(recurrent))} over the example's time "
                            "steps (pytorch/pytorch#115092), so the quantized program would keep one length; the executorch kind "
                            "exports it as a scan loop, which this kind does not quantize yet")
    batches = calibration_batches(ctx, "executorch-int8")
    try:
        with native_warnings():
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError as exc:
        raise NotApplicable(f"not applicable: this executorch or torchao has no PT2E XNNPACK quantization ({exc}); "
                            'pip install "export-check[executorch]" installs the tested pair') from None
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    # the first capture, for calibration, keeps the batch free: the split's batches may be of any size
    converted, quantized = pt2e_converted(ctx, batches, quantizer, prepare_pt2e, convert_pt2e)
    if not quantized:
        raise NotApplicable("not applicable: the XNNPACK quantizer found no layer to quantize in the model (it quantizes "
                            "convolutions, linear layers and their neighbours), so it would change nothing")
    program, bounds = export_bounded(ctx, converted)  # the converted GraphModule's forward keeps the model's parameter names
    _restore_scopes(converted, program)
    return program, bounds, {"partitioner": "XnnpackPartitioner (int8 QDQ)", "quantizer": QUANTIZER, "quantize_nodes": str(quantized),
                            "calibration_samples": str(calibration_count(batches, ctx))}


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
