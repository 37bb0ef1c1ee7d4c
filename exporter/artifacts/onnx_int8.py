"""onnx-int8-dynamic: onnxruntime's ``quantize_dynamic`` (int8 weights) of the ONNX file."""

from __future__ import annotations

from pathlib import Path

from ..pinned import quiet_onnxruntime
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._coverage import recorded
from .base import BuildContext


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    quiet_onnxruntime()  # the sessions the quantizer opens log at fatal only
    from onnxruntime.quantization import QuantType, quantize_dynamic

    assert source is not None
    with atomic_path(path) as tmp:
        quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8)
        require_dynamic_batch(tmp, "onnx int8 quantization", ctx.signature)
    return {"weight_type": "QInt8", **recorded(path)}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
