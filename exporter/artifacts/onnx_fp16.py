"""onnx-fp16: the ONNX file with its weights and arithmetic in float16, float32 inputs and outputs kept
(onnxruntime's own ``transformers.float16`` tool, so no new dependency), run in onnxruntime at a pinned
graph optimisation level.

The level is pinned per row and recorded in its details, because it changes what runs: an fp16
graph that loads at ``basic`` can crash onnxruntime at ``all`` (measured on the ViT). The build loads
the file at that level in a separate process first, so a native crash there is this row's error,
naming the level, and not the replay's.

Past protobuf's 2 GiB (the source's weights external, artifacts/_external.py) the converter is given the
source's path (it infers shapes from the file, as onnx's in-memory inference cannot past 2 GiB), converts
the weights in memory, and the result is saved with its weights in one ``onnx-fp16.onnx.data`` when the
float16 model is still over the limit.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from ..errors import ArtifactError
from ..pinned import ORT_LEVELS, ORT_LOG_SEVERITY
from ._common import OnnxRunner, atomic_path, require_dynamic_batch
from ._external import place, save, scratch
from .base import BuildContext
from .parts import companions

ACCOUNTS = {"onnx-fp16": "the `onnx` file in float16 (onnxruntime's `transformers.float16`), float32 inputs and outputs kept; run at a pinned "
                         "graph optimisation level (`ORT_ENABLE_ALL` unless `onnx-fp16-optimization` says otherwise, recorded in the row's "
                         "details and keyed on by the cache), first loaded at that level in a separate process so that an onnxruntime crash is "
                         "this row's error, naming the level and the setting (the bundled ViT crashes at `all` and passes at `basic`)"}

PROBE_TIMEOUT = 300.0

_PROBE = """
import sys, numpy as np, onnxruntime as ort
options = ort.SessionOptions()
options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, sys.argv[2])
options.intra_op_num_threads = 1
options.log_severity_level = int(sys.argv[3])  # pinned.ORT_LOG_SEVERITY: fatal only, no coloured log on stderr
ort.set_default_logger_severity(int(sys.argv[3]))
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
feeds = {}
for value in session.get_inputs():
    shape = [d if isinstance(d, int) and d > 0 else 2 for d in value.shape]
    dtype = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(bool)": np.bool_}.get(value.type, np.float32)
    feeds[value.name] = np.ones(shape, dtype)
try:
    session.run(None, feeds)
except Exception:
    pass  # a shape the model refuses is the replay's to judge; only a crash matters here
"""


def build(ctx: BuildContext, path: Path, source: Path | None) -> dict[str, str]:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    assert source is not None
    if companions(source):  # past 2 GiB: shape inference from the path (onnx's in-memory one serializes the model)
        converted = convert_float_to_float16(str(source), keep_io_types=True, disable_shape_infer=False)
    else:
        converted = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True, disable_shape_infer=False)
    level = ORT_LEVELS[ctx.fp16_optimization]  # "all" unless the settings say otherwise: pinned, recorded in details
    with scratch(path) as written, atomic_path(path) as tmp:
        save(converted, written)
        del converted
        placed = place(written, tmp, path)
        require_dynamic_batch(tmp, "fp16 conversion", ctx.signature)
        probe_load(tmp, level)
    return {"graph_optimization_level": level, "io_types": "float32 (kept)", "converter": "onnxruntime.transformers.float16", **placed}


def probe_load(path: Path, level: str) -> None:
    """Load and run ``path`` in onnxruntime at ``level`` in a child process; a crash there is an ArtifactError naming the level."""
    result = subprocess.run([sys.executable, "-c", _PROBE, str(path), level, str(ORT_LOG_SEVERITY)],
                            capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    if result.returncode < 0:
        name = signal.Signals(-result.returncode).name
        raise ArtifactError(f"onnxruntime crashed ({name}) loading and running the fp16 model at graph optimisation level {level}; "
                            "a lower level may load it: set onnx-fp16-optimization = \"basic\" in the settings (or pass "
                            "--onnx-fp16-optimization basic), and deploy the file at that level")
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1][:400]
        raise ArtifactError(f"onnxruntime could not load the fp16 model at graph optimisation level {level}: {last}")


def open_runner(path: Path, ctx: BuildContext) -> OnnxRunner:
    return OnnxRunner(path, ctx.threads, ctx.signature, graph_optimization=ctx.fp16_optimization)
