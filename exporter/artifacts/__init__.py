"""The artifact kinds: one ordered table, each kind's code behind one small interface (``base``), and
the named groups ``--artifacts`` takes.

Adding a kind is one module (``build``, ``open_runner`` and ``ACCOUNTS``, its account, from which the docs' kind table
is generated), one row here (every fact about it: ``base.KIND_FACTS``) and its test (a new runtime: its row in
``runtimes.RUNTIMES``); the build order, the groups, the build server's preloads, the cache key's package versions and
the per-layer method are all read off the rows, and tests/unit/artifacts/test_kinds.py checks every row. Modules are named by string so that
importing this table costs nothing (``export-check --help`` stays instant).
"""

from __future__ import annotations

from .base import ArtifactKind, BuildContext, Runner

__all__ = ["ArtifactKind", "BuildContext", "Runner", "KINDS", "KIND_NAMES", "KINDS_BY_NAME", "BUILD_ORDER", "GROUPS", "GROUP_NAMES",
           "PRELOAD", "preload_of", "DEFAULT_KINDS", "resolve_kinds", "unknown_kinds_message"]

ONNX = ("torch", "onnx", "onnxscript", "onnx-ir", "onnxruntime")  # what builds and runs an ONNX file
OPSET, EXPORTER = ("opset",), ("opset", "onnx_exporter")  # the settings an ONNX export reads (dynamo: its own exporter)
# torch.export's first call in a process (3 s of imports and set-up): made once in the build server, for the kinds built on it.
EXPORT = ("export_check.artifacts._program:warm_export",)
# What an ExecuTorch build imports (5-7 s) and the XNNPACK pattern graphs its lowering builds on first use (4-6 s):
# once in the build server rather than in each build child.
EXECUTORCH = ("executorch.runtime", "executorch.exir", "executorch.backends.xnnpack.partition.xnnpack_partitioner", *EXPORT,
              "export_check.artifacts.executorch_pte:warm_patterns")

# Build ranks: the pipeline builds (and, with --jobs 2, replays) the kinds in rank order; reports keep
# the table's order. onnx-simplified goes last: onnxsim is the slowest import (about 0.5 s), which the
# build server does while the other kinds build; and a cheap replay (it runs like onnx) is what is left
# after the last build. The slow opt-in kinds (dynamo, AOTInductor) come before it, so their replays
# overlap builds too. A derived kind comes after its source.
# Groups (README, "Artifact groups", says why each holds what): default is what a run checks when
# nothing is chosen, chosen by measurement against the cold-run target (the bundled default run
# <= 1.10x benchmarks/baseline.py doing the same kinds; benchmarks/groups.py): the six kinds at 0.92x;
# with onnx-fp16 1.40x, with torch-export too 1.07-1.13x and 2.6-5.6 s of export. So every new kind is
# opt-in: modern is what PyTorch recommends shipping today; all is every kind.
KINDS: tuple[ArtifactKind, ...] = (
    ArtifactKind(name="torchscript-trace", suffix=".pt", family="float", module="export_check.artifacts.torchscript_trace",
                 source=None, runtime="torch",
                 description="TorchScript from torch.jit.trace on a batch of golden inputs; loaded with torch.jit.load",
                 build_rank=10, groups=("default",), packages=("torch",), layers="torchscript", preload=("torch",), options=(),
                 activation_scales=None),
    ArtifactKind(name="torchscript-script", suffix=".pt", family="float", module="export_check.artifacts.torchscript_script",
                 source=None, runtime="torch",
                 description="TorchScript from torch.jit.script (keeps Python control flow); loaded with torch.jit.load",
                 build_rank=20, groups=("default",), packages=("torch",), layers="torchscript", preload=("torch",), options=(),
                 activation_scales=None),
    ArtifactKind(name="onnx", suffix=".onnx", family="float", module="export_check.artifacts.onnx_export",
                 source=None, runtime="onnxruntime",
                 description="ONNX with a dynamic batch axis, explicit opset and exporter; run in onnxruntime (CPU)",
                 build_rank=30, groups=("default",), packages=ONNX, layers="onnx",
                 preload=("torch.onnx", "onnx", "onnx.checker", "onnxruntime"), options=EXPORTER, activation_scales=None),
    ArtifactKind(name="onnx-simplified", suffix=".onnx", family="float", module="export_check.artifacts.onnx_simplified",
                 source="onnx", runtime="onnxruntime",
                 description="the ONNX file simplified by onnxsim; its batch axis must stay dynamic",
                 build_rank=180, groups=("default",), packages=(*ONNX, "onnxsim"), layers="onnx", preload=("onnxsim",), options=EXPORTER,
                 activation_scales=None),
    ArtifactKind(name="torch-int8-dynamic", suffix=".pt", family="int8", module="export_check.artifacts.torch_int8",
                 source=None, runtime="torch",
                 description="dynamic int8 quantization of nn.Linear (torch.ao), traced and saved as TorchScript",
                 build_rank=70, groups=("default",), packages=("torch",), layers="torchscript", preload=("torch.ao.quantization",), options=(),
                 activation_scales="dynamic"),
    ArtifactKind(name="onnx-int8-dynamic", suffix=".onnx", family="int8", module="export_check.artifacts.onnx_int8",
                 source="onnx", runtime="onnxruntime",
                 description="onnxruntime.quantization.quantize_dynamic of the ONNX file (int8 weights)",
                 build_rank=40, groups=("default",), packages=ONNX, layers="onnx", preload=("onnxruntime.quantization",), options=EXPORTER,
                 activation_scales="dynamic"),
    ArtifactKind(name="torch-export", suffix=".pt2", family="float", module="export_check.artifacts.torch_export",
                 source=None, runtime="torch.export",
                 description="torch.export (batch and declared axes dynamic) saved with torch.export.save; loaded with torch.export.load",
                 build_rank=80, groups=("modern",), packages=("torch",), layers="program", preload=EXPORT, options=(), activation_scales=None),
    ArtifactKind(name="onnx-dynamo", suffix=".onnx", family="float", module="export_check.artifacts.onnx_dynamo",
                 source=None, runtime="onnxruntime",
                 description="ONNX from the torch.export-based exporter (torch.onnx.export(dynamo=True), needs onnxscript); run in onnxruntime",
                 build_rank=110, groups=("modern",), packages=ONNX, layers="onnx", preload=("onnxscript", *EXPORT), options=OPSET,
                 activation_scales=None),
    ArtifactKind(name="onnx-fp16", suffix=".onnx", family="fp16", module="export_check.artifacts.onnx_fp16",
                 source="onnx", runtime="onnxruntime",
                 description="the ONNX file in float16 with float32 inputs and outputs kept; onnxruntime graph optimisation level pinned",
                 build_rank=50, groups=("modern",), packages=ONNX, layers="onnx", preload=(), options=(*EXPORTER, "fp16_optimization"),
                 activation_scales=None),
    ArtifactKind(name="torchao-int8-dynamic", suffix=".pt2", family="int8", module="export_check.artifacts.torchao_int8",
                 source=None, runtime="torch.export",
                 description="torchao int8 dynamic activation, int8 weight quantization of nn.Linear, saved with torch.export (needs torchao)",
                 build_rank=90, groups=("modern",), packages=("torch", "torchao"), layers="program",
                 preload=("torchao.quantization", *EXPORT), options=(), activation_scales="dynamic"),
    ArtifactKind(name="aoti", suffix=".pt2", family="float", module="export_check.artifacts.aoti",
                 source=None, runtime="aoti",
                 description="an AOTInductor package (aoti_compile_and_package; needs a C++ compiler); loaded with aoti_load_package",
                 build_rank=140, groups=(), packages=("torch",), layers=None, preload=EXPORT, options=(), activation_scales=None,
                 contract="test_modern_kinds.py"),
    ArtifactKind(name="openvino", suffix=".tar", family="fp16", module="export_check.artifacts.openvino_ir",
                 source=None, runtime="openvino",
                 description="OpenVINO IR as deployed: fp16-compressed weights, the CPU's default inference precision (needs openvino)",
                 build_rank=150, groups=(), packages=("torch", "openvino"), layers=None, preload=(), options=(), activation_scales=None),
    ArtifactKind(name="openvino-f32", suffix=".tar", family="float", module="export_check.artifacts.openvino_f32",
                 source=None, runtime="openvino",
                 description="the same OpenVINO IR with f32 weights and f32 inference precision pinned (needs openvino)",
                 build_rank=160, groups=(), packages=("torch", "openvino"), layers=None, preload=(), options=(), activation_scales=None),
    ArtifactKind(name="onnx-int8-static", suffix=".onnx", family="int8", module="export_check.artifacts.onnx_int8_static",
                 source="onnx", runtime="onnxruntime",
                 description="onnxruntime.quantization.quantize_static (QDQ, int8) of the ONNX file, calibrated on the golden set's "
                 "calibration split; judged on the other samples", calibrated=True,
                 build_rank=60, groups=("modern",), packages=ONNX, layers="onnx", preload=(), options=EXPORTER, activation_scales="static"),
    ArtifactKind(name="pt2e-int8-static", suffix=".pt2", family="int8", module="export_check.artifacts.pt2e_int8_static",
                 source=None, runtime="torch.export",
                 description="torchao PT2E static int8 (X86 Inductor quantizer), calibrated on the golden set's calibration split, saved "
                 "with torch.export (needs torchao); judged on the other samples", calibrated=True,
                 build_rank=100, groups=("modern",), packages=("torch", "torchao"), layers="program",
                 preload=("torchao.quantization.pt2e.quantize_pt2e", *EXPORT), options=(), activation_scales="static"),
    ArtifactKind(name="onnx-dynamo-simplified", suffix=".onnx", family="float", module="export_check.artifacts.onnx_simplified",
                 source="onnx-dynamo", runtime="onnxruntime",
                 description="the dynamo ONNX file simplified by onnxsim; its batch axis must stay dynamic",
                 build_rank=170, groups=("modern",), packages=(*ONNX, "onnxsim"), layers="onnx", preload=("onnxsim",), options=OPSET,
                 activation_scales=None),
    ArtifactKind(name="onnx-dynamo-int8-dynamic", suffix=".onnx", family="int8", module="export_check.artifacts.onnx_int8",
                 source="onnx-dynamo", runtime="onnxruntime",
                 description="onnxruntime.quantization.quantize_dynamic of the dynamo ONNX file (int8 weights)",
                 build_rank=120, groups=("modern",), packages=ONNX, layers="onnx", preload=("onnxruntime.quantization",), options=OPSET,
                 activation_scales="dynamic"),
    ArtifactKind(name="onnx-dynamo-int8-static", suffix=".onnx", family="int8", module="export_check.artifacts.onnx_int8_static",
                 source="onnx-dynamo", runtime="onnxruntime",
                 description="quantize_static (QDQ, int8) of the dynamo ONNX file, calibrated on the golden set's calibration split; "
                 "judged on the other samples", calibrated=True,
                 build_rank=130, groups=(), packages=ONNX, layers="onnx", preload=(), options=OPSET, activation_scales="static"),
    ArtifactKind(name="onnx-ort", suffix=".ort", family="float", module="export_check.artifacts.onnx_ort",
                 source="onnx", runtime="onnxruntime",
                 description="the ONNX file in ONNX Runtime's mobile/minimal-build .ort format (Fixed optimisation style); loaded from the .ort file",
                 build_rank=45, groups=("edge",), packages=ONNX, layers=None, preload=(), options=EXPORTER, activation_scales=None),
    ArtifactKind(name="executorch", suffix=".pte", family="float", module="export_check.artifacts.executorch_pte",
                 source=None, runtime="executorch",
                 description="an ExecuTorch program: torch.export with the batch bounded (max 64), lowered to XNNPACK (fp32) by "
                 "to_edge_transform_and_lower, fed in its exported dim order by the ExecuTorch Python runtime (needs executorch)",
                 build_rank=135, groups=("edge",), packages=("torch", "executorch"), layers="executorch", preload=EXECUTORCH, options=(),
                 activation_scales=None, contract="test_executorch.py"),
    ArtifactKind(name="executorch-int8", suffix=".pte", family="int8", module="export_check.artifacts.executorch_int8",
                 source=None, runtime="executorch",
                 description="PT2E static int8 with the XNNPACK quantizer (torchao prepare_pt2e/convert_pt2e), calibrated on the golden set's "
                 "calibration split, lowered to XNNPACK as executorch (needs executorch); judged on the other samples", calibrated=True,
                 build_rank=136, groups=("edge",), packages=("torch", "executorch", "torchao"), layers="executorch",
                 preload=(*EXECUTORCH, "executorch.backends.xnnpack.quantizer.xnnpack_quantizer", "torchao.quantization.pt2e.quantize_pt2e"),
                 options=(), activation_scales="static", contract="test_executorch.py"),
    ArtifactKind(name="coreml", suffix=".zip", family="float", module="export_check.artifacts.coreml",
                 source=None, runtime="coreml",
                 description="a Core ML ML Program (coremltools.convert of torch.export of one sample, FLOAT32 compute), the .mlpackage zipped, "
                 "fed sample by sample; predicted by Core ML on macOS only (elsewhere built, its spec checked, not applicable: "
                 "replay its bundle on a Mac)",
                 build_rank=137, groups=("edge",), packages=("torch", "coremltools"), layers=None, preload=("coremltools", *EXPORT), options=(),
                 activation_scales=None, contract="test_coreml.py"),
    ArtifactKind(name="litert", suffix=".tflite", family="float", module="export_check.artifacts.litert",
                 source=None, runtime="litert",
                 description="a LiteRT (TensorFlow Lite) flatbuffer converted by litert-torch (the example's batch, resized to each batch fed; "
                 "a declared dynamic axis the file keeps fixed gets one signature per golden size, at most 16), "
                 "run by the LiteRT interpreter through its signatures (needs litert-torch and ai-edge-litert: tox -e litert)",
                 build_rank=138, groups=("edge",), packages=("torch", "litert-torch", "ai-edge-litert"), layers=None,
                 preload=("litert_torch", *EXPORT), options=(), activation_scales=None, contract="test_litert.py"),
)
KIND_NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)
KINDS_BY_NAME: dict[str, ArtifactKind] = {k.name: k for k in KINDS}

# Everything below is read off the rows.
BUILD_ORDER: tuple[ArtifactKind, ...] = tuple(sorted(KINDS, key=lambda k: k.build_rank))
GROUP_NAMES = ("default", "modern", "edge", "all")  # edge: the on-device targets
GROUPS: dict[str, tuple[str, ...]] = {
    **{group: tuple(k.name for k in KINDS if group in k.groups) for group in GROUP_NAMES if group != "all"},
    "all": KIND_NAMES,
}


def preload_of(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """What the build server imports ahead while idle for a run of the kinds ``names``: torch, then their preloads in
    build order, each once (exporter/builder/server.py). A module no kind of the run needs is not imported (onnxsim:
    1.1 s of CPU, in every run that builds no simplified ONNX file, before); each kind's own are imported before its
    first child anyway (``BuildServer._import_for``)."""
    return tuple(dict.fromkeys(("torch", *(module for kind in BUILD_ORDER if kind.name in names for module in kind.preload))))


DEFAULT_KINDS: tuple[str, ...] = GROUPS["default"]
# The modules the build server imports ahead while idle until a run says its kinds: the default kinds'.
PRELOAD: tuple[str, ...] = preload_of(DEFAULT_KINDS)


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
