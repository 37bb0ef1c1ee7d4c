"""torchao-int8-dynamic: torchao's int8 dynamic activation, int8 weight quantization of nn.Linear (the
path PyTorch points to now that ``torch.ao.quantization`` is deprecated), exported with ``torch.export``
(batch and declared axes dynamic) and saved as a ``.pt2``; reloading it needs torchao installed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ..versions import BELOW_VNNI, cpu_flags, onednn_cap_below
from ._common import TorchModuleRunner, atomic_path, native_warnings
from ._coverage import recorded
from ._program import export_program
from .base import BuildContext, NotApplicable

ACCOUNTS = {"torchao-int8-dynamic": "torchao's `Int8DynamicActivationInt8WeightConfig` on every `nn.Linear`, exported with `torch.export` and "
                                    "saved as a `.pt2` (loading it needs torchao); **not applicable** to a model without `nn.Linear`; needs "
                                    "torchao (`[modern]`)"}

INSTALL = 'pip install "export-check[modern]" (or pip install torchao)'


def _torchao() -> Any:
    try:
        import torchao
    except ImportError:
        raise NotApplicable(f"not applicable: torchao is not installed: {INSTALL}") from None
    return torchao


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import torch
    from torch import nn

    torchao = _torchao()
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    linear = sum(isinstance(m, nn.Linear) for m in ctx.model.modules())
    if not linear:
        raise NotApplicable("not applicable: the model has no nn.Linear layer, the layers torchao's int8 dynamic quantization "
                            "converts, so it would change nothing")
    cap = onednn_cap_below(BELOW_VNNI)
    if cap and "avx512_vnni" in cpu_flags().split():
        raise NotApplicable(f"not applicable under {cap} on a CPU with avx512_vnni: torch picks its int8 matmul by the CPU's own "
                            "VNNI flag while oneDNN runs the capped code, which saturates on int8 activations, a mix no real CPU "
                            "runs; check it without the cap, or on a CPU of that kind")
    quantized = copy.deepcopy(ctx.model)
    quantize_(quantized, Int8DynamicActivationInt8WeightConfig())
    quantized.eval()
    program = export_program(ctx, quantized)
    with atomic_path(path) as tmp:
        torch.export.save(program, str(tmp))
    return {"quantized_linear_layers": str(linear), "config": "Int8DynamicActivationInt8WeightConfig",
            "torchao": str(getattr(torchao, "__version__", "?")), "saved_as": "torch.export (.pt2)", **recorded(path)}


class TorchaoProgramRunner(TorchModuleRunner):
    """The ``.pt2`` reloaded with ``torch.export.load``; torchao is imported first, its ops registered."""

    def load(self, path: Path) -> Any:
        import torch

        _torchao()
        with native_warnings():
            return torch.export.load(str(path)).module()


def open_runner(path: Path, ctx: BuildContext) -> TorchaoProgramRunner:
    return TorchaoProgramRunner(path, ctx.signature)
