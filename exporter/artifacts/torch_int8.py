"""torch-int8-dynamic: ``torch.ao.quantization.quantize_dynamic`` of the layers it converts, traced and saved.

Dynamic quantization stores int8 weights and quantizes activations per batch at run time; it covers
Linear and recurrent layers and cells (convolutions stay float). Which layer types it converts is read
from torch's own table (``get_default_dynamic_quant_module_mappings``, ``dynamic_layer_types``), never
kept by hand here; a model with none of them gets a ``not applicable`` row naming the types looked for.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ._common import TorchScriptRunner, atomic_path
from ._coverage import recorded
from .base import BuildContext, NotApplicable

ACCOUNTS = {"torch-int8-dynamic": "`torch.ao.quantization.quantize_dynamic` to int8 of every layer torch's default dynamic mapping converts "
                                  "(`nn.Linear`, `nn.LSTM`, `nn.GRU`, `nn.LSTMCell`, `nn.GRUCell`, `nn.RNNCell`, read from "
                                  "`get_default_dynamic_quant_module_mappings`), traced and saved as TorchScript; **not applicable** to a model "
                                  "with none of them (the reason names the types looked for), or with a torch that no longer has "
                                  "`torch.ao.quantization`"}


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


def dynamic_layer_types() -> tuple[type, ...]:
    """The layer types ``quantize_dynamic`` converts to int8, from torch's default dynamic mapping: those it maps to a
    dynamically quantized module (``torch.ao.nn.quantized.dynamic``, ``...intrinsic.quantized.dynamic``: Linear, LSTM,
    GRU, LSTMCell, GRUCell, RNNCell, ...). Embedding's counterpart is weight-only (quint8, another recipe), and the
    Linear subclass MultiheadAttention keeps float on purpose (``NonDynamicallyQuantizableLinear``: its forward reads
    ``.weight``) are left out, as quantize_dynamic's own int8 default leaves them."""
    try:
        from torch.ao.quantization.quantization_mappings import get_default_dynamic_quant_module_mappings
        from torch.nn.modules.linear import NonDynamicallyQuantizableLinear
    except ImportError:
        import torch

        raise NotApplicable(f"not applicable: torch {torch.__version__} has no default dynamic quantization mapping "
                            "(torch.ao.quantization.quantization_mappings); check torchao-int8-dynamic instead") from None
    mapping = get_default_dynamic_quant_module_mappings()
    return tuple(cls for cls, quantized in mapping.items()
                 if isinstance(cls, type) and ".dynamic" in quantized.__module__ and cls is not NonDynamicallyQuantizableLinear)


def type_name(cls: type) -> str:
    """``nn.LSTMCell`` for torch.nn's own layers, the qualified name for any other (``torch.ao.nn.qat...Linear``)."""
    return f"nn.{cls.__name__}" if cls.__module__.startswith("torch.nn.") else f"{cls.__module__}.{cls.__name__}"


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch

    quantize_dynamic = torch_ao_quantize_dynamic()
    quantized_types = dynamic_layer_types()
    # by exact type, as quantize_dynamic swaps them: MultiheadAttention's out_proj (a Linear subclass) stays float
    counts: dict[str, int] = {}  # by class name: torch.nn's Linear and the QAT one are both "Linear" layers here
    for cls in quantized_types:
        counts[cls.__name__] = counts.get(cls.__name__, 0) + sum(type(m) is cls for m in ctx.model.modules())
    if not any(counts.values()):
        looked = ", ".join(type_name(cls) for cls in quantized_types)
        raise NotApplicable(f"not applicable: the model has none of the layers dynamic int8 quantization converts (torch's "
                            f"default dynamic mapping: {looked}), so it would change nothing")
    quantized = quantize_dynamic(copy.deepcopy(ctx.model), set(quantized_types), dtype=torch.qint8)
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
    details = {"quantized_linear_layers": str(counts.get("Linear", 0)), "saved_as": "torchscript (trace)"}
    details.update({f"quantized_{name.lower()}_layers": str(n) for name, n in counts.items() if name != "Linear" and n})
    return {**details, **recorded(path)}


def open_runner(path: Path, ctx: BuildContext) -> TorchScriptRunner:
    return TorchScriptRunner(path, ctx.signature)
