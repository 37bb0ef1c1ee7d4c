"""The artifact kinds: one ordered table, each kind's code behind one small interface (``base``), and
the named groups ``--artifacts`` takes.

Adding a kind is one module (``build`` and ``open_runner``) and one row here, plus its place in
``BUILD_ORDER`` and in ``GROUPS``. A row's ``packages`` are the distributions that build, load or run
its artifact (a derived kind's include its source's): the cache keys each entry on their versions, and
the report records them (``exporter/versions.py``). Modules are named by string so that importing this table costs
nothing (``export-check --help`` stays instant).
"""

from __future__ import annotations

from .base import ArtifactKind, BuildContext, Runner

__all__ = ["ArtifactKind", "BuildContext", "Runner", "KINDS", "KIND_NAMES", "KINDS_BY_NAME", "BUILD_ORDER", "GROUPS", "DEFAULT_KINDS",
           "resolve_kinds", "unknown_kinds_message"]

KINDS: tuple[ArtifactKind, ...] = (
    ArtifactKind("torchscript-trace", ".pt", "float", "export_check.artifacts.torchscript_trace", None, "torch",
                 "TorchScript from torch.jit.trace on a batch of golden inputs; loaded with torch.jit.load",
                 packages=("torch",)),
    ArtifactKind("torchscript-script", ".pt", "float", "export_check.artifacts.torchscript_script", None, "torch",
                 "TorchScript from torch.jit.script (keeps Python control flow); loaded with torch.jit.load",
                 packages=("torch",)),
    ArtifactKind("onnx", ".onnx", "float", "export_check.artifacts.onnx_export", None, "onnxruntime",
                 "ONNX with a dynamic batch axis, explicit opset and exporter; run in onnxruntime (CPU)",
                 packages=("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime")),
    ArtifactKind("onnx-simplified", ".onnx", "float", "export_check.artifacts.onnx_simplified", "onnx", "onnxruntime",
                 "the ONNX file simplified by onnxsim; its batch axis must stay dynamic",
                 packages=("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime", "onnxsim")),
    ArtifactKind("torch-int8-dynamic", ".pt", "int8", "export_check.artifacts.torch_int8", None, "torch",
                 "dynamic int8 quantization of nn.Linear (torch.ao), traced and saved as TorchScript",
                 packages=("torch",)),
    ArtifactKind("onnx-int8-dynamic", ".onnx", "int8", "export_check.artifacts.onnx_int8", "onnx", "onnxruntime",
                 "onnxruntime.quantization.quantize_dynamic of the ONNX file (int8 weights)",
                 packages=("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime")),
    ArtifactKind("torch-export", ".pt2", "float", "export_check.artifacts.torch_export", None, "torch.export",
                 "torch.export (batch and declared axes dynamic) saved with torch.export.save; loaded with torch.export.load",
                 packages=("torch",)),
    ArtifactKind("onnx-dynamo", ".onnx", "float", "export_check.artifacts.onnx_dynamo", None, "onnxruntime",
                 "ONNX from the torch.export-based exporter (torch.onnx.export(dynamo=True), needs onnxscript); run in onnxruntime",
                 packages=("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime")),
    ArtifactKind("onnx-fp16", ".onnx", "fp16", "export_check.artifacts.onnx_fp16", "onnx", "onnxruntime",
                 "the ONNX file in float16 with float32 inputs and outputs kept; onnxruntime graph optimisation level pinned",
                 packages=("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime")),
    ArtifactKind("torchao-int8-dynamic", ".pt2", "int8", "export_check.artifacts.torchao_int8", None, "torch.export",
                 "torchao int8 dynamic activation, int8 weight quantization of nn.Linear, saved with torch.export (needs torchao)",
                 packages=("torch", "torchao")),
    ArtifactKind("aoti", ".pt2", "float", "export_check.artifacts.aoti", None, "aoti",
                 "an AOTInductor package (aoti_compile_and_package; needs a C++ compiler); loaded with aoti_load_package",
                 packages=("torch",)),
    ArtifactKind("openvino", ".tar", "fp16", "export_check.artifacts.openvino_ir", None, "openvino",
                 "OpenVINO IR as deployed: fp16-compressed weights, the CPU's default inference precision (needs openvino)",
                 packages=("torch", "openvino")),
    ArtifactKind("openvino-f32", ".tar", "float", "export_check.artifacts.openvino_f32", None, "openvino",
                 "the same OpenVINO IR with f32 weights and f32 inference precision pinned (needs openvino)",
                 packages=("torch", "openvino")),
    ArtifactKind("onnx-int8-static", ".onnx", "int8", "export_check.artifacts.onnx_int8_static", "onnx", "onnxruntime",
                 "onnxruntime.quantization.quantize_static (QDQ, int8) of the ONNX file, calibrated on the golden set's "
                 "calibration split; judged on the other samples", calibrated=True,
                 packages=("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime")),
    ArtifactKind("pt2e-int8-static", ".pt2", "int8", "export_check.artifacts.pt2e_int8_static", None, "torch.export",
                 "torchao PT2E static int8 (X86 Inductor quantizer), calibrated on the golden set's calibration split, saved "
                 "with torch.export (needs torchao); judged on the other samples", calibrated=True,
                 packages=("torch", "torchao")),
    ArtifactKind("onnx-dynamo-simplified", ".onnx", "float", "export_check.artifacts.onnx_simplified", "onnx-dynamo", "onnxruntime",
                 "the dynamo ONNX file simplified by onnxsim; its batch axis must stay dynamic",
                 packages=("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime", "onnxsim")),
    ArtifactKind("onnx-dynamo-int8-dynamic", ".onnx", "int8", "export_check.artifacts.onnx_int8", "onnx-dynamo", "onnxruntime",
                 "onnxruntime.quantization.quantize_dynamic of the dynamo ONNX file (int8 weights)",
                 packages=("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime")),
    ArtifactKind("onnx-dynamo-int8-static", ".onnx", "int8", "export_check.artifacts.onnx_int8_static", "onnx-dynamo", "onnxruntime",
                 "quantize_static (QDQ, int8) of the dynamo ONNX file, calibrated on the golden set's calibration split; "
                 "judged on the other samples", calibrated=True,
                 packages=("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime")),
)
KIND_NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)
KINDS_BY_NAME: dict[str, ArtifactKind] = {k.name: k for k in KINDS}

# The order the pipeline builds (and, with --jobs 2, replays) them in; reports keep the table's order.
# onnx-simplified goes last: onnxsim is the slowest import (about 0.5 s), which the build server does
# while the other kinds build; and a cheap replay (it runs like onnx) is what is left after the last
# build. The slow opt-in kinds (dynamo, AOTInductor) come before it, so their replays overlap builds
# too. A derived kind comes after its source.
BUILD_ORDER: tuple[ArtifactKind, ...] = tuple(
    KINDS_BY_NAME[name]
    for name in ("torchscript-trace", "torchscript-script", "onnx", "onnx-int8-dynamic", "onnx-fp16", "onnx-int8-static", "torch-int8-dynamic",
                 "torch-export", "torchao-int8-dynamic", "pt2e-int8-static", "onnx-dynamo", "onnx-dynamo-int8-dynamic", "onnx-dynamo-int8-static",
                 "aoti", "openvino", "openvino-f32", "onnx-dynamo-simplified", "onnx-simplified")
)
assert sorted(k.name for k in BUILD_ORDER) == sorted(KIND_NAMES), "every kind needs its place in BUILD_ORDER"
assert all(set(KINDS_BY_NAME[k.source].packages) <= set(k.packages) for k in KINDS if k.source), "a derived kind runs its source's packages too"
assert all(BUILD_ORDER.index(KINDS_BY_NAME[k.source]) < BUILD_ORDER.index(k) for k in KINDS if k.source)

# The groups --artifacts takes besides kind names (README, "Artifact groups", says why each holds what).
# default: what a run checks when nothing is chosen, chosen by measurement against the cold-run target
# (the bundled default run <= 1.10x benchmarks/baseline.py doing the same kinds; benchmarks/groups.py):
# the six kinds at 0.92x; with onnx-fp16 1.40x (its load probe in a second process, its replay and
# diagnostics cost more than its 0.3 s conversion), with torch-export too 1.07-1.13x and 2.6-5.6 s of
# export. So every new kind is opt-in: modern is what PyTorch recommends shipping today.
# all: every kind, the opt-in AOTInductor (a C++ compile per run) and OpenVINO (an optional extra) included.
GROUPS: dict[str, tuple[str, ...]] = {
    "default": ("torchscript-trace", "torchscript-script", "onnx", "onnx-simplified", "torch-int8-dynamic", "onnx-int8-dynamic"),
    "modern": ("torch-export", "onnx-dynamo", "onnx-fp16", "torchao-int8-dynamic", "onnx-int8-static", "pt2e-int8-static",
               "onnx-dynamo-simplified", "onnx-dynamo-int8-dynamic"),
    "all": KIND_NAMES,
}
assert not set(GROUPS) & set(KIND_NAMES) and all(set(g) <= set(KIND_NAMES) for g in GROUPS.values())
DEFAULT_KINDS: tuple[str, ...] = GROUPS["default"]


def unknown_kinds_message(unknown: list[str]) -> str:
    """The one line that refuses ``unknown`` names, with the choices (a settings file's key and RunConfig)."""
    return f"unknown artifact kind(s) {', '.join(unknown)}; choose from the groups {', '.join(GROUPS)} or the kinds {', '.join(KIND_NAMES)}"


def resolve_kinds(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Kind and group names as the kinds they stand for, in the order given (a group in its own
    order), each once; reports keep the table's order whatever this order is.

    >>> resolve_kinds(["onnx-fp16", "aoti", "modern"])[:4]
    ('onnx-fp16', 'aoti', 'torch-export', 'onnx-dynamo')

    An unknown name is kept, for RunConfig to refuse naming the choices.
    """
    chosen: list[str] = []
    for name in names:
        chosen.extend(GROUPS.get(name, (name,)))
    return tuple(dict.fromkeys(chosen))
