"""onnx-simplified: the ONNX file run through onnxsim. Its batch axis must stay dynamic.

The source is simplified from its path into a path (onnxsim's ``output_path``), whatever its size. Past
protobuf's 2 GiB (artifacts/_external.py) the weights are read from the source's ``.data`` file and never
serialized into one message, which ``onnxsim.simplify(model)`` would do and fail on (``EncodeError: Failed to
serialize proto``); within it, path to path writes the same bytes as loading the model, simplifying it and saving
the result, at about half the memory (the 92 M model of issue 43: 967 MB peak in one process against 1,685-2,008 MB;
BENCHMARKS.md "Big models"). The result is placed as every ONNX kind's is.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ArtifactError
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._external import external_above, node_count, place, scratch
from .base import BuildContext

ACCOUNTS = {"onnx-simplified": "the ONNX file through `onnxsim.simplify`; its batch axis must still be dynamic (checked)",
            "onnx-dynamo-simplified": "the `onnx-dynamo` file through onnxsim; needs onnxscript (`[modern]`)"}


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import onnxsim

    assert source is not None
    with scratch(path) as written, atomic_path(path) as tmp:
        nodes = node_count(source)
        simplified, ok = onnxsim.simplify(str(source), output_path=str(written), external_data_threshold=f"{external_above()}B")
        if not ok:
            raise ArtifactError("onnxsim could not validate the simplified model against the original")
        placed = place(written, tmp, path)
        require_dynamic_batch(tmp, "onnxsim", ctx.signature)
    return {"onnxsim": str(getattr(onnxsim, "__version__", "?")), "nodes": f"{nodes}->{len(simplified.graph.node)}", **placed}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
