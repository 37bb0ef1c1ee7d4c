"""onnx: ``torch.onnx.export`` with a dynamic batch axis, explicit opset and exporter."""

from __future__ import annotations

from pathlib import Path

from ..errors import ArtifactError
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from .base import BuildContext

INPUT_NAME = "input"
OUTPUT_NAME = "logits"


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import onnx
    import torch

    with atomic_path(path) as tmp:
        if ctx.onnx_exporter == "torchscript":
            torch.onnx.export(
                ctx.model,
                (ctx.example,),
                str(tmp),
                dynamo=False,
                opset_version=ctx.opset,
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
                do_constant_folding=True,
            )
        else:
            try:
                import onnxscript  # noqa: F401  (the dynamo exporter needs it)
            except ImportError:
                raise ArtifactError("the dynamo ONNX exporter needs onnxscript: pip install onnxscript") from None
            batch = torch.export.Dim("batch", min=1)
            program = torch.onnx.export(
                ctx.model,
                (ctx.example,),
                dynamo=True,
                opset_version=ctx.opset,
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                dynamic_shapes=({0: batch},),
                external_data=False,
            )
            if program is None:  # torch returns the program when no file is given
                raise ArtifactError("the dynamo ONNX exporter returned no program")
            program.save(str(tmp), external_data=False)
        onnx.checker.check_model(str(tmp), full_check=True)
        require_dynamic_batch(tmp, "onnx export")
    return {"exporter": ctx.onnx_exporter, "opset": str(ctx.opset)}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads)
