"""onnx-ort: the ONNX file converted to ONNX Runtime's ``.ort`` format (a flatbuffer, file identifier
``ORTM``), the format of onnxruntime's mobile and minimal builds; reloaded from the ``.ort`` file by an
ordinary ``onnxruntime.InferenceSession``.

The conversion is what ``python -m onnxruntime.tools.convert_onnx_models_to_ort`` does for one file,
with its defaults (no ``--target_platform``): a CPU session at optimisation level ``all`` with the
NCHWc layout transformer left out (it makes an x86-only graph) and ``session.qdqisint8allowed=0``,
saving its optimised graph with ``session.save_model_format=ORT``. The level is pinned here, not read
from the tool's environment variable, so that the cache key covers what the file holds.

Optimisation style **Fixed**, deliberately: the optimisations are applied at conversion and baked into
the file, so the graph this row measures is the graph a device runs. The other style, Runtime, saves
only basic optimisations plus records to replay at load, and only when the loading session sets
``session.enable_saved_runtime_optimizations`` (a minimal build with a compiling EP, NNAPI or CoreML,
which is what onnxruntime recommends it for); for the CPU execution provider, the one this tool runs,
onnxruntime's guidance is Fixed, and a Runtime file loaded without the replay runs the unoptimised graph
(measured on the bundled ResNet: 22 nodes, against 12 fused ones with Fixed).

The runner loads the file with graph optimisations disabled: a minimal build has no optimisers (Fixed
saves no runtime records), so what runs is the graph as saved, as on the device. The batch axis must
stay dynamic: the build loads the written file and refuses it if an input's or output's batch axis has
become a fixed size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ArtifactError
from ..pinned import ORT_LOG_SEVERITY, quiet_onnxruntime
from ..signature import SINGLE, Signature
from ._common import OnnxRunner, atomic_path
from .base import BuildContext

ACCOUNTS = {"onnx-ort": "the `onnx` file converted to ONNX Runtime's mobile/minimal-build ORT format (a flatbuffer, as "
                        "`onnxruntime.tools.convert_onnx_models_to_ort` does it: optimisation style **Fixed**, level `all` baked into the file, "
                        "NCHWc left out), reloaded from the `.ort` file by `onnxruntime.InferenceSession` with graph optimisations off (the "
                        "saved graph runs as a minimal build runs it); its batch axis must stay dynamic (checked on the loaded file); the style, "
                        "ORT format version and node counts are in the row's details"}

OPTIMIZATION_STYLE = "Fixed"
OPTIMIZATION_LEVEL = "all"  # onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL, the converter's default
DISABLED_OPTIMIZERS = ("NchwcTransformer",)  # what the converter leaves out unless --target_platform amd64
LOAD_OPTIMIZATION = "disabled"  # the runner's level (pinned.ORT_LEVELS key): the saved graph runs as saved
ORT_FILE_IDENTIFIER = b"ORTM"  # the flatbuffer file identifier of onnxruntime's ort.fbs, at offset 4


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    ort = quiet_onnxruntime()

    assert source is not None
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = ctx.threads
    options.log_severity_level = ORT_LOG_SEVERITY
    options.add_session_config_entry("session.save_model_format", "ORT")
    options.add_session_config_entry("session.qdqisint8allowed", "0")
    with atomic_path(path) as tmp:
        options.optimized_model_filepath = str(tmp)
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(DISABLED_OPTIMIZERS))
        data = tmp.read_bytes() if tmp.is_file() else b""
        if data[4:8] != ORT_FILE_IDENTIFIER:
            raise ArtifactError(f"onnxruntime's ORT conversion wrote no ORT format file (file identifier {data[4:8]!r}, not {ORT_FILE_IDENTIFIER!r})")
        require_dynamic_batch_ort(tmp, "ORT format conversion", ctx.signature)
        format_version, nodes = _ort_file_facts(data)
    return {"optimization_style": OPTIMIZATION_STYLE, "optimization_level": OPTIMIZATION_LEVEL,
            "disabled_optimizers": ",".join(DISABLED_OPTIMIZERS), "load_graph_optimization": LOAD_OPTIMIZATION,
            "onnxruntime": ort.__version__, "ort_format_version": format_version, "nodes": f"{_onnx_nodes(source)}->{nodes}"}


def require_dynamic_batch_ort(path: Path, what: str, signature: Signature = SINGLE) -> None:
    """Raise when the ``.ort`` file, loaded in onnxruntime, has no input or an input or output whose
    batch axis is not symbolic (``_common.require_dynamic_batch`` reads an ONNX protobuf, which this is not)."""
    ort = quiet_onnxruntime()

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    options.log_severity_level = ORT_LOG_SEVERITY
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    inputs, outputs = session.get_inputs(), session.get_outputs()
    if not inputs:
        raise ArtifactError(f"{what}: the ORT graph has no inputs: the export turned the model's input into a constant")
    axes = {i.name: i.batch_axis for i in signature.inputs} | {o.name: o.batch_axis for o in signature.outputs}
    for side, values in (("input", inputs), ("output", outputs)):
        for value in values:
            axis = axes.get(value.name, 0)
            shape = list(value.shape or [])
            size: Any = shape[axis] if axis < len(shape) else None
            if not isinstance(size, str) or not size:
                where = side if signature is SINGLE else f"{side} {value.name!r} (axis {axis})"
                raise ArtifactError(f"{what}: the {where} batch axis is fixed to {size!r}, not dynamic; the file only accepts that batch size")


def _ort_file_facts(data: bytes) -> tuple[str, str]:
    """The ORT format version the file records and its main graph's node count, read with the flatbuffer
    bindings onnxruntime ships (``onnxruntime.tools.ort_format_model``); ``?`` where they cannot say."""
    try:
        import onnxruntime.tools.ort_format_model  # noqa: F401  (puts its ort_flatbuffers_py on sys.path)
        from ort_flatbuffers_py.fbs.InferenceSession import InferenceSession  # type: ignore[import-not-found]

        session = InferenceSession.GetRootAsInferenceSession(bytearray(data), 0)
        version = (session.OrtVersion() or b"?").decode()
        model = session.Model()
        graph = model.Graph() if model is not None else None
        return version, str(graph.NodesLength()) if graph is not None else "?"
    except Exception:  # the facts are details only; the file loaded, which is what the row needs
        return "?", "?"


def _onnx_nodes(source: Path) -> str:
    import onnx

    return str(len(onnx.load(str(source), load_external_data=False).graph.node))


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature, graph_optimization=LOAD_OPTIMIZATION)
