"""onnx-dynamo: ``torch.onnx.export(dynamo=True)``, the torch.export-based exporter PyTorch makes the
default since 2.9 (it needs ``onnxscript``); an ONNX kind of its own beside the TorchScript-based ``onnx``,
since users ship both. Batch and declared axes dynamic; run in onnxruntime (CPU)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ArtifactError
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._program import export_inputs
from .base import BuildContext, NotApplicable


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import onnx
    import torch

    try:
        import onnxscript
    except ImportError:
        raise NotApplicable('not applicable: the dynamo ONNX exporter needs onnxscript: pip install "export-check[modern]" '
                            "(or pip install onnxscript)") from None
    args, kwargs, shapes = export_inputs(ctx)
    input_names = [i.name for i in ctx.signature.inputs if not i.keyword] + [i.name for i in ctx.signature.inputs if i.keyword]
    try:
        program = torch.onnx.export(ctx.model, args, kwargs=kwargs or None, dynamo=True, opset_version=ctx.opset,
                                    input_names=input_names, output_names=list(ctx.signature.output_names),
                                    dynamic_shapes=shapes, external_data=False, optimize=True, verbose=False)
    except Exception as exc:
        text = " ".join(str(exc).split())[:600]
        raise ArtifactError(f"torch.onnx.export(dynamo=True) failed: {type(exc).__name__}: {text}") from None
    if program is None:
        raise ArtifactError("the dynamo ONNX exporter returned no program")
    with atomic_path(path) as tmp:
        program.save(str(tmp), external_data=False)
        onnx.checker.check_model(str(tmp), full_check=True)
        require_dynamic_batch(tmp, "dynamo onnx export", ctx.signature)
    return {"exporter": "dynamo", "opset": str(ctx.opset), "onnxscript": str(getattr(onnxscript, "__version__", "?"))}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
