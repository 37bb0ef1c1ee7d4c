"""onnx-simplified: the ONNX file run through onnxsim. Its batch axis must stay dynamic."""

from __future__ import annotations

from pathlib import Path

from ..errors import ArtifactError
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from .base import BuildContext


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import onnx
    import onnxsim

    assert source is not None
    model = onnx.load(str(source))
    simplified, ok = onnxsim.simplify(model)
    if not ok:
        raise ArtifactError("onnxsim could not validate the simplified model against the original")
    with atomic_path(path) as tmp:
        onnx.save(simplified, str(tmp))
        require_dynamic_batch(tmp, "onnxsim", ctx.signature)
    return {"onnxsim": str(getattr(onnxsim, "__version__", "?")), "nodes": f"{len(model.graph.node)}->{len(simplified.graph.node)}"}


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature)
