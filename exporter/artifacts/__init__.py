"""The artifact kinds: one ordered table, each kind's code behind one small interface (``base``).

Adding a kind is one module (``build`` and ``open_runner``) and one row here, plus its place in
``BUILD_ORDER``. Modules are named by string so that importing this table costs nothing
(``export-check --help`` stays instant).
"""

from __future__ import annotations

from .base import ArtifactKind, BuildContext, Runner

__all__ = ["ArtifactKind", "BuildContext", "Runner", "KINDS", "KIND_NAMES", "KINDS_BY_NAME", "BUILD_ORDER"]

KINDS: tuple[ArtifactKind, ...] = (
    ArtifactKind("torchscript-trace", ".pt", "float", "exporter.artifacts.torchscript_trace", None, "torch",
                 "TorchScript from torch.jit.trace on a batch of golden inputs; loaded with torch.jit.load"),
    ArtifactKind("torchscript-script", ".pt", "float", "exporter.artifacts.torchscript_script", None, "torch",
                 "TorchScript from torch.jit.script (keeps Python control flow); loaded with torch.jit.load"),
    ArtifactKind("onnx", ".onnx", "float", "exporter.artifacts.onnx_export", None, "onnxruntime",
                 "ONNX with a dynamic batch axis, explicit opset and exporter; run in onnxruntime (CPU)"),
    ArtifactKind("onnx-simplified", ".onnx", "float", "exporter.artifacts.onnx_simplified", "onnx", "onnxruntime",
                 "the ONNX file simplified by onnxsim; its batch axis must stay dynamic"),
    ArtifactKind("torch-int8-dynamic", ".pt", "int8", "exporter.artifacts.torch_int8", None, "torch",
                 "dynamic int8 quantization of nn.Linear (torch.ao), traced and saved as TorchScript"),
    ArtifactKind("onnx-int8-dynamic", ".onnx", "int8", "exporter.artifacts.onnx_int8", "onnx", "onnxruntime",
                 "onnxruntime.quantization.quantize_dynamic of the ONNX file (int8 weights)"),
)
KIND_NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)
KINDS_BY_NAME: dict[str, ArtifactKind] = {k.name: k for k in KINDS}

# The order the pipeline builds (and, with --jobs 2, replays) them in; reports keep the table's order.
# onnx-simplified goes last: onnxsim is the slowest import (about 0.5 s), which the build server does
# while the other kinds build; and a cheap replay (it runs like onnx) is what is left after the last
# build. A derived kind comes after its source.
BUILD_ORDER: tuple[ArtifactKind, ...] = tuple(
    KINDS_BY_NAME[name]
    for name in ("torchscript-trace", "torchscript-script", "onnx", "onnx-int8-dynamic", "torch-int8-dynamic", "onnx-simplified")
)
assert sorted(k.name for k in BUILD_ORDER) == sorted(KIND_NAMES), "every kind needs its place in BUILD_ORDER"
assert all(BUILD_ORDER.index(KINDS_BY_NAME[k.source]) < BUILD_ORDER.index(k) for k in KINDS if k.source)
