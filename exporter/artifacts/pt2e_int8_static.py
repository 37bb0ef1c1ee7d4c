"""pt2e-int8-static: torchao's PT2E static int8 (``prepare_pt2e`` / ``convert_pt2e`` with the X86 Inductor
quantizer: int8 activations and per-channel int8 weights), calibrated on the golden set's calibration
split, exported again with ``torch.export`` (batch and declared axes dynamic) and saved as a ``.pt2``;
reloading it needs torchao installed. Judged only on the samples it was not calibrated on (``observe``).

(XNNPACK's quantizer lives in executorch, not in torchao 0.18; the X86 Inductor one is torchao's own.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ._calibration import calibration_batches, calibration_count, pt2e_converted
from ._common import atomic_path, native_warnings
from ._coverage import recorded
from ._program import export_program
from .base import BuildContext, NotApplicable
from .torchao_int8 import TorchaoProgramRunner, _torchao

ACCOUNTS = {"pt2e-int8-static": "torchao's PT2E (`prepare_pt2e`, calibration on the split, `convert_pt2e`; X86 Inductor quantizer), exported "
                                "with `torch.export`, `torch.export.save`/`load`; judged only on the uncalibrated samples; needs torchao "
                                "(`[modern]`)"}

# Exporting the converted GraphModule again loses each node's module (``nn_module_stack``); the file
# carries it instead, node name -> module qualified name, for the per-layer error table (diagnostics.layers.program).
SCOPES_FILE = "export_check_scopes.json"
QUANTIZER = "X86InductorQuantizer (get_default_x86_inductor_quantization_config: static, per-channel weights)"


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch

    torchao = _torchao()
    batches = calibration_batches(ctx, "pt2e-int8-static")
    with native_warnings():
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
        from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
            X86InductorQuantizer,
            get_default_x86_inductor_quantization_config,
        )

    quantizer = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
    converted, quantized = pt2e_converted(ctx, batches, quantizer, prepare_pt2e, convert_pt2e)
    if not quantized:
        raise NotApplicable("not applicable: the X86 Inductor quantizer found no layer to quantize in the model (it quantizes "
                            "convolutions, linear layers, matmuls and their neighbours), so it would change nothing")
    # the converted GraphModule's forward keeps the model's parameter names, which export_program maps to axes
    program = export_program(ctx, converted)
    with atomic_path(path) as tmp:
        torch.export.save(program, str(tmp), extra_files={SCOPES_FILE: json.dumps(_scopes(converted, program))})
    return {"quantizer": QUANTIZER, "torchao": str(getattr(torchao, "__version__", "?")), "saved_as": "torch.export (.pt2)",
            "quantize_nodes": str(quantized), "calibration_samples": str(calibration_count(batches, ctx)), **recorded(path)}


def _scopes(converted: Any, program: Any) -> dict[str, str]:
    """The re-exported program's node names mapped to the module each came from in the first export."""
    scope = {}
    for node in converted.graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        if stack:
            scope[node.name] = str(list(stack.values())[-1][0])
    return {n.name: scope[n.name] for n in program.graph.nodes if n.name in scope}


def open_runner(path: Path, ctx: BuildContext) -> TorchaoProgramRunner:
    return TorchaoProgramRunner(path, ctx.signature)
