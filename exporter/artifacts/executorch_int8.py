"""executorch-int8: PT2E static int8 with ExecuTorch's XNNPACK quantizer (``XNNPACKQuantizer``,
``get_symmetric_quantization_config(is_per_channel=True)``: int8 activations, per-channel int8 weights),
``prepare_pt2e`` / ``convert_pt2e`` from torchao, calibrated on the golden set's calibration split, then
exported again with the batch bounded and lowered to XNNPACK as :mod:`.executorch_pte` does; the same
runner (the dim order read from the file, the bound recorded). Judged only on the samples it was not
calibrated on (``observe``). Needs executorch (which requires torchao): ``pip install "export-check[executorch]"``.
"""

from __future__ import annotations

import copy
from pathlib import Path

from ..errors import ArtifactError
from ._calibration import calibration_batches, calibration_count, torch_feeds
from ._common import native_warnings
from ._program import dynamic_axes_of, export_inputs, require_guards_hold
from .base import BuildContext, NotApplicable, feeds_to_args
from .executorch_pte import PteRunner, export_bounded, lower_and_save, require_executorch

QUANTIZER = "XNNPACKQuantizer (get_symmetric_quantization_config(is_per_channel=True): static, per-channel weights)"


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch

    require_executorch()
    batches = calibration_batches(ctx, "executorch-int8")
    try:
        with native_warnings():
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    except ImportError as exc:
        raise NotApplicable(f"not applicable: this executorch or torchao has no PT2E XNNPACK quantization ({exc}); "
                            'pip install "export-check[executorch]" installs the tested pair') from None
    model = copy.deepcopy(ctx.model).eval()
    # the first capture, for calibration, keeps the batch free: the split's batches may be of any size
    args, kwargs, shapes = export_inputs(ctx, model)
    try:
        exported = torch.export.export(model, args, kwargs or None, dynamic_shapes=shapes, strict=False)
    except Exception as exc:
        raise ArtifactError(f"torch.export failed: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}") from None
    require_guards_hold(exported, model, args, kwargs, dynamic_axes_of(ctx), [i.name for i in ctx.signature.inputs if not i.keyword])
    try:
        quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
        prepared = prepare_pt2e(exported.module(), quantizer)
        with torch.no_grad():
            for feeds in torch_feeds(batches):
                call_args, call_kwargs = feeds_to_args(feeds, ctx.signature)
                prepared(*call_args, **call_kwargs)
        converted = convert_pt2e(prepared)
    except Exception as exc:
        raise ArtifactError(f"PT2E quantization failed: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}") from None
    quantized = sum("quantize_per" in str(n.target) and "dequantize" not in str(n.target) for n in converted.graph.nodes)
    if not quantized:
        raise NotApplicable("not applicable: the XNNPACK quantizer found no layer to quantize in the model (it quantizes "
                            "convolutions, linear layers and their neighbours), so it would change nothing")
    program, bound = export_bounded(ctx, converted)  # the converted GraphModule's forward keeps the model's parameter names
    return lower_and_save(program, path, bound, {"partitioner": "XnnpackPartitioner (int8 QDQ)", "quantizer": QUANTIZER,
                                                 "quantize_nodes": str(quantized), "calibration_samples": str(calibration_count(batches, ctx))})


def open_runner(path: Path, ctx: BuildContext) -> PteRunner:
    return PteRunner(path, ctx)
