"""torch-int8-dynamic: ``torch.ao.quantization.quantize_dynamic`` of nn.Linear, nn.LSTM and nn.GRU, traced and saved.

Dynamic quantization stores int8 weights and quantizes activations per batch at run time; it covers
Linear and recurrent layers (convolutions stay float), which is what PyTorch's dynamic mode supports; a
model with none of them gets a ``not applicable`` row.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ._common import TorchScriptRunner, atomic_path
from ._coverage import recorded
from .base import BuildContext, NotApplicable


def torch_ao_quantize_dynamic() -> Any:
    """``torch.ao.quantization.quantize_dynamic``, or ``not applicable`` when this torch no longer has it
    (PyTorch marks ``torch.ao.quantization`` for removal; torchao-int8-dynamic is the path that stays)."""
    import torch

    try:
        from torch.ao.quantization import quantize_dynamic
    except ImportError:
        raise NotApplicable(f"not applicable: torch {torch.__version__} has no torch.ao.quantization.quantize_dynamic (PyTorch "
                            "removed it); check torchao-int8-dynamic instead (pip install \"export-check[modern]\")") from None
    return quantize_dynamic


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch
    from torch import nn

    quantize_dynamic = torch_ao_quantize_dynamic()

    QUANTIZED = (nn.Linear, nn.LSTM, nn.GRU)  # what torch's dynamic quantization converts
    # by exact type, as quantize_dynamic swaps them: MultiheadAttention's out_proj (a Linear subclass) stays float
    counts = {cls.__name__: sum(type(m) is cls for m in ctx.model.modules()) for cls in QUANTIZED}
    if not any(counts.values()):
        raise NotApplicable("not applicable: the model has no nn.Linear, nn.LSTM or nn.GRU layer, the layers dynamic int8 "
                            "quantization converts, so it would change nothing")
    quantized = quantize_dynamic(copy.deepcopy(ctx.model), set(QUANTIZED), dtype=torch.qint8)
    quantized.eval()
    args, kwargs = ctx.example_args()
    if kwargs:
        raise NotApplicable("not applicable: the traced int8 model takes positional inputs only, and this model takes keywords")
    # nn.TransformerEncoder(Layer) and nn.MultiheadAttention check for their fused fast path by reading
    # ``.weight.device`` of each linear; a dynamically quantized Linear's ``weight`` is a method, so that check
    # raised AttributeError: 'function' object has no attribute 'device' (issue 25). The fused kernel takes
    # float weights only: trace the layer-by-layer path, which runs the quantized linears.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad():
            traced = torch.jit.trace(quantized, args[0] if len(args) == 1 else args, check_trace=False, strict=False)
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    with atomic_path(path) as tmp:
        torch.jit.save(traced, str(tmp))
    details = {"quantized_linear_layers": str(counts["Linear"]), "saved_as": "torchscript (trace)"}
    details.update({f"quantized_{name.lower()}_layers": str(n) for name, n in counts.items() if name != "Linear" and n})
    return {**details, **recorded(path)}


def open_runner(path: Path, ctx: BuildContext) -> TorchScriptRunner:
    return TorchScriptRunner(path, ctx.signature)
