"""onnx-int8-dynamic: onnxruntime's ``quantize_dynamic`` (int8 weights) of the ONNX file. A source with external
weights (past 2 GiB, artifacts/_external.py) is quantized with ``use_external_data_format``: the quantizer writes
the weights in one ``<name>.data``, which ``place`` keeps (or takes back inline when the int8 file fits)."""

from __future__ import annotations

from pathlib import Path

from ..pinned import quiet_onnxruntime
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._coverage import recorded
from ._external import place, scratch
from .base import BuildContext
from .parts import companions

ACCOUNTS = {"onnx-int8-dynamic": "`onnxruntime.quantization.quantize_dynamic` (QInt8 weights, convolutions included)",
            "onnx-dynamo-int8-dynamic": "`quantize_dynamic` of the `onnx-dynamo` file; needs onnxscript (`[modern]`)"}


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    quiet_onnxruntime()  # the sessions the quantizer opens log at fatal only
    from onnxruntime.quantization import QuantType, quantize_dynamic

    assert source is not None
    with scratch(path) as written, atomic_path(path) as tmp:
        quantize_dynamic(str(source), str(written), weight_type=QuantType.QInt8, use_external_data_format=bool(companions(source)))
        placed = place(written, tmp, path)
        require_dynamic_batch(tmp, "onnx int8 quantization", ctx.signature)
    return {"weight_type": "QInt8", **recorded(path), **placed}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
