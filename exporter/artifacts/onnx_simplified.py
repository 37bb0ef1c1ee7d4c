"""onnx-simplified: the ONNX file run through onnxsim. Its batch axis must stay dynamic.

A source whose weights are external (past protobuf's 2 GiB, artifacts/_external.py) is simplified from
its path into a path (onnxsim's ``output_path``): the weights are read from the source's ``.data`` file
and never serialized into one message, which ``onnxsim.simplify(model)`` would do and fail on
(``EncodeError: Failed to serialize proto``). Either way the result is placed as every ONNX kind's is.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ArtifactError
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._external import external_above, place, save, scratch
from .base import BuildContext
from .parts import companions


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import onnx
    import onnxsim

    assert source is not None
    with scratch(path) as written, atomic_path(path) as tmp:
        if companions(source):  # external weights: path in, path out, never one message
            nodes = len(onnx.load(str(source), load_external_data=False).graph.node)
            simplified, ok = onnxsim.simplify(str(source), output_path=str(written), external_data_threshold=f"{external_above()}B")
        else:
            model = onnx.load(str(source))
            nodes = len(model.graph.node)
            simplified, ok = onnxsim.simplify(model)
            if ok:
                save(simplified, written)
        if not ok:
            raise ArtifactError("onnxsim could not validate the simplified model against the original")
        placed = place(written, tmp, path)
        require_dynamic_batch(tmp, "onnxsim", ctx.signature)
    return {"onnxsim": str(getattr(onnxsim, "__version__", "?")), "nodes": f"{nodes}->{len(simplified.graph.node)}", **placed}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
