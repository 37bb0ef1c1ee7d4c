"""onnx-ort on the bundled ResNet: the row passes, its file is an ORT format flatbuffer (not an ONNX
protobuf), and its MAE is the one the .ort file gives when run by hand beside eager; the edge group
selects it, building onnx as its source without reporting it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import export_check
from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN
from export_check.artifacts import GROUPS, KINDS_BY_NAME, BuildContext, resolve_kinds
from export_check.golden.manifest import load_golden
from export_check.model import load_model

# tests/run_narrowed.py repeats this module under capped instruction sets (README, "What varies by CPU")
pytestmark = pytest.mark.cpu_sensitive

# onnxruntime/core/flatbuffers/schema/ort.fbs: ``file_identifier "ORTM";``, which flatbuffers writes at
# bytes 4..8, after the root table's offset
ORT_IDENTIFIER = b"ORTM"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, export_check.Report]:
    """Two cold runs through the API: onnx and onnx-ort chosen by name, and onnx-ort alone (the edge group's
    ExecuTorch kinds cost a minute to build: tests/integration/test_executorch.py runs them)."""
    base = tmp_path_factory.mktemp("onnx-ort")
    common = dict(arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN, no_cache=True)
    return {"named": export_check.check(DEFAULT_CHECKPOINT, out=base / "named", artifacts=["onnx", "onnx-ort"], **common),
            "alone": export_check.check(DEFAULT_CHECKPOINT, out=base / "alone", artifacts=["onnx-ort"], **common)}


def test_the_ort_row_passes_and_its_mae_is_the_ort_files_run_by_hand(runs) -> None:
    import onnxruntime as ort
    import torch

    report = runs["named"]
    assert [(r.name, r.status) for r in report.rows] == [("eager", "pass"), ("onnx", "pass"), ("onnx-ort", "pass")], \
        {r.name: r.reasons for r in report.rows}
    row = report.row("onnx-ort")
    assert row.family == "float" and row.metrics is not None and row.metrics.images == 64
    assert row.artifact is not None
    path = Path(row.artifact.path)
    assert path.suffix == ".ort" and path.is_file() and path.stat().st_size == row.artifact.size_bytes
    data = path.read_bytes()
    assert data[4:8] == ORT_IDENTIFIER, data[:8]
    onnx_path = Path(report.row("onnx").artifact.path)  # type: ignore[union-attr]
    assert onnx_path.read_bytes()[4:8] != ORT_IDENTIFIER, "the onnx row's file is a protobuf, not a flatbuffer"
    details = dict(row.details)
    assert details["optimization_style"] == "Fixed" and details["onnxruntime"] == ort.__version__
    assert details["ort_format_version"].isdigit(), details
    before, after = (int(n) for n in details["nodes"].split("->"))
    assert 0 < after < before, "Fixed style bakes the fusions into the file"

    # truth from outside the tool: the .ort file loaded by hand, fed the golden inputs at the run's batch
    # size (16) on one thread, beside eager torch on the same batches
    golden = load_golden(DEFAULT_GOLDEN)
    x = np.stack([golden.load_input(item) for item in golden.inputs]).astype(np.float32)
    model = load_model(DEFAULT_CHECKPOINT, DEFAULT_ARCH, {}, None)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    assert [i.shape[0] for i in session.get_inputs()] == ["batch"], "the batch axis stays dynamic"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        eager, shipped = [], []
        with torch.inference_mode():
            for start in range(0, len(x), 16):
                batch = x[start:start + 16]
                eager.append(model(torch.from_numpy(batch)).numpy())
                shipped.append(session.run(None, {session.get_inputs()[0].name: batch})[0])
    finally:
        torch.set_num_threads(threads)
    eager_all, shipped_all = np.concatenate(eager), np.concatenate(shipped)
    by_hand = float(np.abs(shipped_all.astype(np.float64) - eager_all.astype(np.float64)).mean())
    assert 0 < by_hand < 1e-5
    assert row.metrics.mae == pytest.approx(by_hand, rel=1e-9, abs=0), (row.metrics.mae, by_hand)
    assert row.metrics.top1_agreement == 1.0 == float((shipped_all.argmax(1) == eager_all.argmax(1)).mean())


def test_the_edge_group_holds_onnx_ort_which_builds_its_source_without_reporting_it(runs) -> None:
    assert "onnx-ort" in GROUPS["edge"] and "onnx-ort" in resolve_kinds(("edge",))
    assert "onnx-ort" not in GROUPS["default"] and KINDS_BY_NAME["onnx-ort"].source == "onnx"
    report = runs["alone"]
    assert [(r.name, r.status) for r in report.rows] == [("eager", "pass"), ("onnx-ort", "pass")], {r.name: r.reasons for r in report.rows}
    assert dict(report.settings)["kinds"] == ["onnx-ort"]
    assert (Path(report.out_dir) / "onnx.onnx").is_file(), "its source was built, into the run's folder"
    ort_row = report.row("onnx-ort")
    assert ort_row.artifact is not None and Path(ort_row.artifact.path).read_bytes()[4:8] == ORT_IDENTIFIER
    assert ort_row.metrics is not None
    assert ort_row.metrics.mae == pytest.approx(runs["named"].row("onnx-ort").metrics.mae, rel=1e-9)  # type: ignore[union-attr]


def test_an_ort_file_with_a_fixed_batch_axis_is_refused_and_not_written(runs, tmp_path: Path) -> None:
    """An ONNX source whose batch axis is pinned to 4 converts to an .ort file that only takes 4: the
    build refuses it, naming the axis, and leaves no file (atomic_path)."""
    import onnx

    from export_check.artifacts.onnx_ort import require_dynamic_batch_ort
    from export_check.builder.builds import build_artifact
    from export_check.errors import ArtifactError

    source = onnx.load(str(runs["named"].row("onnx").artifact.path))  # type: ignore[union-attr]
    for value in (source.graph.input[0], source.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_value = 4
    fixed = tmp_path / "fixed.onnx"
    onnx.save(source, str(fixed))
    kind = KINDS_BY_NAME["onnx-ort"]
    ctx = BuildContext(model=None, example=None, opset=17, onnx_exporter="torchscript", threads=1)
    target = tmp_path / kind.filename()
    outcome = build_artifact(kind, ctx, target, fixed)
    assert outcome.error is not None and "batch axis is fixed to 4" in outcome.error, outcome.error
    assert not target.exists() and not list(tmp_path.glob("*.ort"))
    with pytest.raises(ArtifactError, match="batch axis is fixed to 4"):
        require_dynamic_batch_ort(fixed, "ORT format conversion")  # an ONNX file loads too: the same check
    require_dynamic_batch_ort(Path(runs["named"].row("onnx-ort").artifact.path), "ORT format conversion")  # type: ignore[union-attr]
