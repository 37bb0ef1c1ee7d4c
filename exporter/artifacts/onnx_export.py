"""onnx: ``torch.onnx.export`` with a dynamic batch axis, explicit opset and exporter."""

from __future__ import annotations

from pathlib import Path

from ..errors import ArtifactError
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._native import stdout_into_notes
from .base import BuildContext


def _legacy_export(ctx: BuildContext, args: tuple, kwargs: dict, tmp: Path, input_names: list[str], output_names: list[str]) -> None:
    import torch

    torch.onnx.export(
        ctx.model,
        args,
        str(tmp),
        kwargs=kwargs or None,
        dynamo=False,
        opset_version=ctx.opset,
        input_names=input_names,
        output_names=output_names,
        dynamic_axes=ctx.dynamic_axes(),
        do_constant_folding=True,
    )


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import onnx
    import torch

    args, kwargs = ctx.example_args()
    # The graph's inputs and outputs carry the signature's names (``input`` and ``logits`` for a
    # format-1 golden set), with each one's batch axis and declared axes dynamic.
    input_names = [i.name for i in ctx.signature.inputs if not i.keyword] + [i.name for i in ctx.signature.inputs if i.keyword]
    output_names = list(ctx.signature.output_names)
    with atomic_path(path) as tmp:
        if ctx.onnx_exporter == "torchscript":
            with stdout_into_notes("the ONNX exporter"):
                _legacy_export(ctx, args, kwargs, tmp, input_names, output_names)
        else:
            try:
                import onnxscript  # noqa: F401  (the dynamo exporter needs it)
            except ImportError:
                raise ArtifactError("the dynamo ONNX exporter needs onnxscript: pip install onnxscript") from None
            batch = torch.export.Dim("batch", min=1)
            program = torch.onnx.export(
                ctx.model,
                args,
                kwargs=kwargs or None,
                dynamo=True,
                opset_version=ctx.opset,
                input_names=input_names,
                output_names=output_names,
                dynamic_shapes=tuple({i.batch_axis: batch} for i in ctx.signature.inputs if not i.keyword),
                external_data=False,
            )
            if program is None:  # torch returns the program when no file is given
                raise ArtifactError("the dynamo ONNX exporter returned no program")
            program.save(str(tmp), external_data=False)
        onnx.checker.check_model(str(tmp), full_check=True)
        require_dynamic_batch(tmp, "onnx export", ctx.signature)
    return {"exporter": ctx.onnx_exporter, "opset": str(ctx.opset)}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
