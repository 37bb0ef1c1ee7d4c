"""The calibration split as the static int8 builders take it (batches of named inputs, checked non-empty),
and the PT2E steps the PT2E kinds share: capture, calibrate, convert."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import ArtifactError
from .base import BuildContext


def calibration_batches(ctx: BuildContext, what: str) -> tuple[dict[str, Any], ...]:
    """The golden set's calibration split, batch by batch; an ArtifactError when there is none (a
    statically quantized model calibrated on nothing has no activation ranges to ship)."""
    if not ctx.calibration:
        raise ArtifactError(f"{what} is calibrated on the golden set's calibration split, and this run has none: the golden set "
                            "needs at least 2 samples (one to calibrate on, one to judge); record more samples")
    return ctx.calibration


def calibration_count(batches: tuple[dict[str, Any], ...], ctx: BuildContext) -> int:
    spec = ctx.signature.inputs[0]
    return sum(int(b[spec.name].shape[spec.batch_axis]) for b in batches)


def torch_feeds(batches: tuple[dict[str, Any], ...]) -> Iterator[dict[str, Any]]:
    import numpy as np
    import torch

    for batch in batches:
        yield {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in batch.items()}


def pt2e_converted(ctx: BuildContext, batches: tuple[dict[str, Any], ...], quantizer: Any, prepare: Any, convert: Any,
                   model: Any = None) -> tuple[Any, int]:
    """The model captured by ``torch.export`` (batch and declared axes free, its guards checked), prepared
    with ``quantizer``, calibrated on ``batches`` and converted; with the number of quantize nodes it got
    (0: the quantizer found nothing to quantize). ``prepare``/``convert``: torchao's ``prepare_pt2e``/``convert_pt2e``;
    ``model``: the module to capture instead of ``ctx.model`` (a rewritten copy of it, same inputs)."""
    import copy

    import torch

    from ._program import dynamic_axes_of, export_inputs, require_guards_hold
    from .base import feeds_to_args

    model = copy.deepcopy(ctx.model if model is None else model).eval()
    args, kwargs, shapes = export_inputs(ctx, model)
    try:
        exported = torch.export.export(model, args, kwargs or None, dynamic_shapes=shapes, strict=False)
    except Exception as exc:
        raise ArtifactError(f"torch.export failed: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}") from None
    # calibration runs the captured graph on every size of the split: a pinned axis is the kind not applying, said as such
    require_guards_hold(exported, model, args, kwargs, dynamic_axes_of(ctx), [i.name for i in ctx.signature.inputs if not i.keyword])
    try:
        prepared = prepare(exported.module(), quantizer)
        with torch.no_grad():
            for feeds in torch_feeds(batches):
                call_args, call_kwargs = feeds_to_args(feeds, ctx.signature)
                prepared(*call_args, **call_kwargs)
        converted = convert(prepared)
    except Exception as exc:
        raise ArtifactError(f"PT2E quantization failed: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}") from None
    quantized = sum("quantize_per" in str(n.target) and "dequantize" not in str(n.target) for n in converted.graph.nodes)
    return converted, quantized
