"""onnx: ``torch.onnx.export`` with a dynamic batch axis, explicit opset and exporter. Past protobuf's 2 GiB
the weights go to one ``onnx.onnx.data`` beside the graph (artifacts/_external.py): the export writes into a
scratch folder (the legacy exporter's one file per tensor, too), ``place`` makes it the artifact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ArtifactError
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._external import place, scratch
from ._native import stdout_into_notes
from .base import BuildContext

ACCOUNTS = {"onnx": "`torch.onnx.export`, TorchScript-based exporter (`dynamo=False`), opset 17, dynamic batch axis (checked), `onnx.checker` "
                    "full check; run in onnxruntime CPU"}


def _legacy_export(ctx: BuildContext, args: tuple, kwargs: dict, tmp: Path, input_names: list[str], output_names: list[str]) -> None:
    import torch

    # The exporter traces the model with autograd on (as a user's call does: under no_grad, torch's own
    # TransformerEncoderLayer takes a native fast path that has no ONNX form), so autograd kept every activation of
    # the example batch for a backward that never comes, until the export returned: 9/10 of the export's peak
    # above the model (TokenTransformer 92 M, batch 16: about 1.5 GB). Saved tensors are dropped instead: the same
    # graph is recorded (the file is byte-identical), nothing is kept for backward (BENCHMARKS.md, "Big models").
    with torch.autograd.graph.saved_tensors_hooks(_drop_saved, _never_unpacked):
        _export(ctx, args, kwargs, tmp, input_names, output_names)


def _drop_saved(tensor: Any) -> None:
    return None


def _never_unpacked(packed: Any) -> Any:
    raise ArtifactError("internal: a backward pass ran during the ONNX export")


def _export(ctx: BuildContext, args: tuple, kwargs: dict, tmp: Path, input_names: list[str], output_names: list[str]) -> None:
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
    with scratch(path) as written, atomic_path(path) as tmp:
        if ctx.onnx_exporter == "torchscript":
            with stdout_into_notes("the ONNX exporter"):
                _legacy_export(ctx, args, kwargs, written, input_names, output_names)
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
            program.save(str(written), external_data=None)  # None: external past 2 GB, in one <name>.data
        placed = place(written, tmp, path)
        onnx.checker.check_model(str(tmp), full_check=True)
        require_dynamic_batch(tmp, "onnx export", ctx.signature)
    return {"exporter": ctx.onnx_exporter, "opset": str(ctx.opset), **placed}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
