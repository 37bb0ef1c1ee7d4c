"""onnx-dynamo: ``torch.onnx.export(dynamo=True)``, the torch.export-based exporter PyTorch makes the
default since 2.9 (it needs ``onnxscript``); an ONNX kind of its own beside the TorchScript-based ``onnx``,
since users ship both. Batch and declared axes dynamic; run in onnxruntime (CPU). Past protobuf's 2 GiB the
weights are in one ``onnx-dynamo.onnx.data`` beside the graph (artifacts/_external.py)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ArtifactError
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._external import place, scratch
from ._program import export_inputs
from .base import BuildContext, NotApplicable

ACCOUNTS = {"onnx-dynamo": "`torch.onnx.export(dynamo=True)`, the torch.export-based exporter (the default since torch 2.9), opset ≥ 18 (the "
                           "opset written is recorded), batch and declared axes dynamic; run in onnxruntime CPU; needs onnxscript (`[modern]`)"}

DYNAMO_MIN_OPSET = 18


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import onnx
    import torch

    try:
        import onnxscript
    except ImportError:
        raise NotApplicable('not applicable: the dynamo ONNX exporter needs onnxscript: pip install "export-check[modern]" '
                            "(or pip install onnxscript)") from None
    args, kwargs, shapes = export_inputs(ctx)
    # The dynamo exporter implements opset 18 and up; below that it converts afterwards, which fails
    # on most models and keeps 18 anyway: ask for what it will write, and record it.
    opset = max(ctx.opset, DYNAMO_MIN_OPSET)
    input_names = [i.name for i in ctx.signature.inputs if not i.keyword] + [i.name for i in ctx.signature.inputs if i.keyword]
    try:
        program = torch.onnx.export(ctx.model, args, kwargs=kwargs or None, dynamo=True, opset_version=opset,
                                    input_names=input_names, output_names=list(ctx.signature.output_names),
                                    dynamic_shapes=shapes, external_data=False, optimize=True, verbose=False)
    except Exception as exc:
        text = " ".join(str(exc).split())[:600]
        raise ArtifactError(f"torch.onnx.export(dynamo=True) failed: {type(exc).__name__}: {text}") from None
    if program is None:
        raise ArtifactError("the dynamo ONNX exporter returned no program")
    with scratch(path) as saved, atomic_path(path) as tmp:
        program.save(str(saved), external_data=None)  # None: external past 2 GB, in one <name>.data (what place keeps)
        placed = place(saved, tmp, path)
        onnx.checker.check_model(str(tmp), full_check=True)
        require_dynamic_batch(tmp, "dynamo onnx export", ctx.signature)
    written = next((o.version for o in onnx.load(str(path), load_external_data=False).opset_import if o.domain in ("", "ai.onnx")), opset)
    asked = f" (asked {ctx.opset}; the dynamo exporter writes >= {DYNAMO_MIN_OPSET})" if ctx.opset < DYNAMO_MIN_OPSET else ""
    return {"exporter": "dynamo", "opset": f"{written}{asked}", "onnxscript": str(getattr(onnxscript, "__version__", "?")),
            **placed}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
