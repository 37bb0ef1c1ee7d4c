"""torch-int8-dynamic: ``torch.ao.quantization.quantize_dynamic`` of nn.Linear, traced and saved.

Dynamic quantization stores int8 weights and quantizes activations per batch at run time; it covers
Linear layers (convolutions stay float), which is what PyTorch's dynamic mode supports.
"""

from __future__ import annotations

import copy
from pathlib import Path

from ..errors import ArtifactError
from ._common import TorchScriptRunner, atomic_path
from .base import BuildContext


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch
    from torch import nn
    from torch.ao.quantization import quantize_dynamic

    linears = sum(isinstance(m, nn.Linear) for m in ctx.model.modules())
    if linears == 0:
        raise ArtifactError("the model has no nn.Linear layer, so dynamic int8 quantization changes nothing")
    quantized = quantize_dynamic(copy.deepcopy(ctx.model), {nn.Linear}, dtype=torch.qint8)
    quantized.eval()
    with torch.no_grad():
        traced = torch.jit.trace(quantized, ctx.example, check_trace=False)
    with atomic_path(path) as tmp:
        torch.jit.save(traced, str(tmp))
    return {"quantized_linear_layers": str(linears), "saved_as": "torchscript (trace)"}


def open_runner(path: Path, ctx: BuildContext) -> TorchScriptRunner:
    return TorchScriptRunner(path)
