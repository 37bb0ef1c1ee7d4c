"""The per-layer method of ExecuTorch programs (``.pte``): *cumulative*, from the runtime's own developer
tools (ETRecord, ETDump and its Inspector): :mod:`..etdump` says how, and what a delegate hides.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ...artifacts import ArtifactKind, BuildContext
from ...records import LayerComparison, LayerDelta
from ._common import cumulative, finish


def compare(kind: ArtifactKind, path: Path, model: Any, batch: np.ndarray, threshold: float, purpose: str, threads: int,
            start: int = 0, ctx: BuildContext | None = None) -> LayerComparison:
    """The method's entry (``layers.compare_layers``): the values the file logged with ETDump, named by the ETRecord
    of a rebuild from ``ctx`` (the run's build context), verified against the file. Where a delegate ran ops as opaque
    calls, the table is the same exported program's on the portable kernels (method ``executorch-portable``), and
    the file's own values are kept beside it (``artifact_layers``)."""
    import warnings

    import torch

    from .. import etdump

    if ctx is None:  # called without the run's context (one input, the batch as the export example)
        ctx = BuildContext(model=model, example=torch.from_numpy(np.ascontiguousarray(batch)), opset=17,
                           onnx_exporter="torchscript", threads=threads)
    batch = etdump.fitting(path, batch, ctx.signature.inputs[0].batch_axis)
    found = etdump.explain_pte(kind, path, batch, ctx, threads)
    own = found.own
    if not found.same_bytes:
        warnings.warn(f"per-layer table: {path.name} has the execution plan of a rebuild of the same model but other constant data "
                      "(weights): changed after its build, or built by another version; its own values are its own, while a table "
                      "without the delegate is the rebuild's", stacklevel=2)
    own_layers = cumulative(own.values, own.results, model, batch, threshold, purpose)
    def counted(table: LayerComparison, artifact_layers: tuple[LayerDelta, ...] = ()) -> LayerComparison:
        return replace(table, delegate=own.delegate, delegated_ops=own.delegated_ops, graph_ops=own.graph_ops,
                       delegate_calls=own.delegate_calls, artifact_layers=artifact_layers)

    if found.portable is None:
        if found.portable_error:
            warnings.warn(f"per-layer table: the {own.delegate} delegate hides {own.delegated_ops} of {own.graph_ops} ops, and the same "
                          f"program could not run without it on the portable kernels: {found.portable_error}", stacklevel=2)
        return counted(finish(purpose, etdump.METHOD, "cumulative", start, len(batch), threshold, own_layers))
    layers = cumulative(found.portable.values, found.portable.results, model, batch, threshold, purpose)
    return counted(finish(purpose, etdump.PORTABLE, "cumulative", start, len(batch), threshold, layers), tuple(own_layers))
