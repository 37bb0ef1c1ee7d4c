"""The executorch and executorch-int8 kinds (group edge) on the bundled ResNet: the rows pass, and their
MAE is the one each ``.pte`` gives when loaded and run by hand with the ExecuTorch runtime beside eager
(int8: on the samples outside the calibration split; its per-layer table under --diagnose is the two XNNPACK calls'
outputs, said so); the runner feeds
the dim order the program was exported with (a mismatch, forced through the module's test-only knob,
is a failing row: the runtime computes garbage without an error); a batch above the bound the file was
planned for is that batch size's error, in the runtime's words; without executorch the kind does not
apply and names the extra. Both files of the module run hold the runner contract (tests/runner_contract.py;
in place of TinyNet builds in tests/integration/test_artifact_contract.py)."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from arches import TinyNet
from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, seeded
from export_check.artifacts import KINDS_BY_NAME, BuildContext, executorch_pte
from export_check.artifacts._common import captured_warnings
from export_check.artifacts.base import INPUT, NotApplicable
from export_check.builder.protocol import ENV_SWITCH
from export_check.cache.secret import KEY_ENV
from export_check.config import RunConfig
from export_check.golden.manifest import load_golden
from export_check.model import load_model
from export_check.results import Row
from export_check.run import pipeline
from export_check.run.pipeline import run_check
from export_check.sentences import layers_summary
from runner_contract import eager_by_hand, holds_the_runner_contract

KIND, INT8 = "executorch", "executorch-int8"
BATCH = 16  # RunConfig's default batch size: the replay's, and the by-hand run's


def _rows(out: Path, kinds: tuple[str, ...], diagnose: bool = False, cache: Path | None = None) -> dict[str, Row]:
    report = run_check(RunConfig(checkpoint=DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN, out_dir=out, kinds=kinds,
                                 diagnose=diagnose, cache_dir=cache))
    rows = {row.name: row for row in report.rows}
    assert list(rows) == ["eager", *kinds]
    return rows


def _row(out: Path) -> Row:
    return _rows(out, (KIND,))[KIND]


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(artifact cache, its key file) of the module run: the layout test replays the run's own executorch.pte from it
    instead of building the same file again."""
    folder = tmp_path_factory.mktemp("executorch-cache")
    return folder / "cache", folder / "key" / "cache.key"


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, cached: tuple[Path, Path]) -> tuple[dict[str, Row], Path]:
    """One run of both kinds (the builds in the build server, as every run does them), with --diagnose: the passing int8
    row gets its per-layer table too (the float row is untouched by it), so one int8 build serves both tests. The run
    stores its files in a cache of the module's own (``cached``)."""
    out = tmp_path_factory.mktemp("executorch") / "out"
    cache, key = cached
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(key))
        rows = _rows(out, (KIND, INT8), diagnose=True, cache=cache)
    assert rows[KIND].cache == rows[INT8].cache == "miss", (rows[KIND].cache, rows[INT8].cache)
    return rows, out


@pytest.fixture(scope="module")
def bundled(both) -> tuple[Row, Path]:
    rows, out = both
    return rows[KIND], out


def _run_by_hand(pte: Path, x: np.ndarray) -> np.ndarray:
    """The .pte loaded by the ExecuTorch runtime, fed the inputs as they are (contiguous), batch by batch."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    return np.concatenate([method.execute([torch.from_numpy(x[i:i + BATCH].copy())])[0].numpy() for i in range(0, len(x), BATCH)])


@pytest.fixture(scope="module")
def eager() -> tuple[np.ndarray, np.ndarray]:
    """The 64 golden inputs and eager's logits for them, batch by batch as the tool replays them."""
    golden = load_golden(DEFAULT_GOLDEN)
    x = np.stack([golden.load_input(item) for item in golden.inputs]).astype(np.float32)
    model = load_model(DEFAULT_CHECKPOINT, DEFAULT_ARCH, {}, None)
    with torch.inference_mode():
        logits = np.concatenate([model(torch.from_numpy(x[i:i + BATCH])).numpy() for i in range(0, len(x), BATCH)])
    return x, logits


def test_the_bundled_model_passes_and_agrees_with_the_pte_run_by_hand(bundled, eager) -> None:
    row, out = bundled
    assert row.status == "pass" and row.family == "float", row.reasons
    details = dict(row.details)
    assert details["dim_order"] == "contiguous" and details["input_dim_orders"] == "0,1,2,3"
    assert details["batch_bound"] == "exported with Dim('batch', min=1, max=64); planned in the .pte for 64"
    assert details["delegates"].startswith("XnnpackBackend x")
    pte = out / "executorch.pte"
    assert row.artifact is not None and pte.is_file() and pte.stat().st_size == row.artifact.size_bytes
    # the truth, independently of the tool: the file loaded by the runtime, fed the golden inputs as they are (contiguous)
    x, logits = eager
    ran = _run_by_hand(pte, x)
    by_hand = float(np.abs(ran.astype(np.float64) - logits.astype(np.float64)).mean())
    assert by_hand < 1e-5
    assert row.metrics is not None and row.metrics.images == 64
    assert row.metrics.mae == pytest.approx(by_hand, rel=1e-6)
    # every batch size the diagnostics run (1, odd, main, whole probe) fits the bound of 64, and agrees with eager
    assert row.diagnostics is not None and row.diagnostics.shapes is not None
    runs = {run.size: run for run in row.diagnostics.shapes.runs}
    assert sorted(runs) == [1, 7, 16, 64] and all(r.error is None and r.mae is not None and r.mae < 1e-5 for r in runs.values()), runs
    # a failing row's per-layer table comes from ExecuTorch's developer tools (tests/integration/test_executorch_layers.py)
    assert KINDS_BY_NAME[KIND].layers == "executorch" and row.diagnostics.layers is None


def _judged_by_hand() -> list[int]:
    """The golden samples executorch-int8 is judged on, in order: outside the default calibration split, worked out from
    the manifest itself (the 32 inputs of smallest sha256: tests/integration/test_static_int8.py), not by the tool."""
    golden = load_golden(DEFAULT_GOLDEN)
    calibration = set(sorted(range(len(golden)), key=lambda i: golden.inputs[i].sha256)[:32])
    return [i for i in range(len(golden)) if i not in calibration]


def test_int8_passes_judged_only_on_the_samples_it_was_not_calibrated_on_and_agrees_with_the_pte_run_by_hand(both, eager) -> None:
    rows, out = both
    row = rows[INT8]
    assert row.status == "pass" and row.family == "int8", row.reasons
    details = dict(row.details)
    assert details["dim_order"] == "contiguous" and details["quantizer"].startswith("XNNPACKQuantizer")
    assert details["calibration_samples"] == "32" and details["judged_samples"] == "32"
    assert details["batch_bound"] == "exported with Dim('batch', min=1, max=64); planned in the .pte for 64"
    pte = out / "executorch-int8.pte"
    assert pte.stat().st_size < (out / "executorch.pte").stat().st_size / 2, "int8 weights: well under half the fp32 file"
    judged = _judged_by_hand()
    x, logits = eager
    ran = _run_by_hand(pte, x)
    by_hand = float(np.abs(ran[judged].astype(np.float64) - logits[judged].astype(np.float64)).mean())
    assert row.metrics is not None and row.metrics.images == 32
    assert row.metrics.mae == pytest.approx(by_hand, rel=1e-4)
    # really quantized (over 1% of the mean |logit|), within the int8 gate (5% of it), the same top-1 on every judged digit
    scale = row.metrics.reference_mean_abs
    assert 0.01 * scale < row.metrics.mae <= 0.05 * scale and row.metrics.top1_agreement == 1.0
    assert (ran[judged].argmax(1) == logits[judged].argmax(1)).all()


def test_both_pte_files_hold_the_runner_contract(both, eager) -> None:
    """The runner contract (tests/runner_contract.py) on the module run's two files, in place of a TinyNet build of each
    in tests/integration/test_artifact_contract.py: golden inputs at batch sizes within the bound the files are planned
    for (64), the int8 file fed only samples outside its calibration split; the ResNet's logits are not TinyNet-sized,
    so int8 is held to the int8 gate relative to eager's mean |logit| (float stays at 1e-5 absolute)."""
    _, out = both
    x, _ = eager
    judged = x[_judged_by_hand()]
    model = load_model(DEFAULT_CHECKPOINT, DEFAULT_ARCH, {}, None)
    ctx = BuildContext(model=None, example=None, opset=17, onnx_exporter="torchscript", threads=1)
    for name, samples in ((KIND, x), (INT8, judged)):
        kind, path = KINDS_BY_NAME[name], out / KINDS_BY_NAME[name].filename()
        holds_the_runner_contract(name, kind.open_runner(path, ctx), kind.family, eager_by_hand(model),
                                  lambda size, samples=samples: {INPUT: samples[:size].copy()}, path=path, suffix=kind.suffix, relative=True)


def test_the_int8_table_has_the_delegate_calls_outputs_and_says_why_there_is_no_portable_one(both) -> None:
    """XNNPACK runs the whole quantized program in two calls; the Python runtime has no portable
    quantize/dequantize kernels, so the table is the file's own two values, and the row says both."""
    rows, out = both
    row = rows[INT8]
    assert row.status == "pass", row.reasons
    layers = row.diagnostics.layers
    assert layers is not None and layers.error is None and layers.purpose == "int8-layers" and layers.method == "executorch"
    # the head kept float (executorch_int8.RECIPE): 21 of the 22 ops of the ETRecord's graph carry a delegated debug handle
    # (22 of 22 when fc was int8); the .pte is the same two delegate calls with one view between them either way
    assert layers.delegate == "XnnpackBackend" and layers.delegate_calls == 2 and layers.graph_ops - 1 <= layers.delegated_ops
    assert layers.graph_ops >= 20
    by_module = {d.module: d for d in layers.layers}
    assert list(by_module) == ["pool", "fc"] and all(d.ops.startswith("delegate call (") for d in layers.layers)
    hidden = f"per-layer table: the XnnpackBackend delegate hides {layers.delegated_ops} of {layers.graph_ops} ops"
    assert any(hidden in n and "no portable kernels for quantized_decomposed::" in n for n in row.diagnostics.notes), row.diagnostics.notes
    assert layers_summary(layers).endswith("its ETDump holds only each call's output: the table has no values inside them")
    # fc's value is the file's logits: the same numbers as the file run by hand, against eager's
    golden = load_golden(DEFAULT_GOLDEN)
    items = golden.inputs[layers.batch_start : layers.batch_start + layers.batch_size]
    batch = np.stack([golden.load_input(item) for item in items]).astype(np.float32)
    with torch.inference_mode():
        logits = load_model(DEFAULT_CHECKPOINT, DEFAULT_ARCH, {}, None)(torch.from_numpy(batch)).numpy()
    from executorch.runtime import Runtime

    ran = Runtime.get().load_program(out / "executorch-int8.pte").load_method("forward").execute([torch.from_numpy(batch)])[0].numpy()
    diff = ran.astype(np.float64) - logits.astype(np.float64)
    sqnr = 10 * math.log10(np.sum(logits.astype(np.float64) ** 2) / np.sum(diff**2))
    assert by_module["fc"].sqnr_db == pytest.approx(sqnr, abs=0.01) and 15 < sqnr < 60  # really quantized, still the model
    assert by_module["fc"].mae == pytest.approx(np.abs(diff).mean(), rel=1e-4)


def test_the_layout_fed_is_the_one_exported_and_a_mismatch_is_a_failing_row(bundled, cached, eager, tmp_path: Path, monkeypatch) -> None:
    """The same file fed channels-last tensors (the runner's test-only knob): no error anywhere, numbers
    off by the whole signal, and the row fails on them instead of passing. The row's file is the module
    run's executorch.pte, restored from that run's cache (a copy of it) and replayed with the knob set:
    the observation cached beside it (a pass, fed the right layout) is not used, as when a verdict wants
    a per-layer table an entry lacks; the file is not built again."""
    _, out = bundled
    x, logits = eager
    monkeypatch.setattr(executorch_pte, "_FEED_DIM_ORDER", (0, 2, 3, 1))
    ctx = BuildContext(model=None, example=None, opset=17, onnx_exporter="torchscript", threads=1)
    with captured_warnings([]), executorch_pte.open_runner(out / "executorch.pte", ctx) as runner:
        wrong = runner.infer({"input": x[:BATCH]})["logits"]
    assert float(np.abs(wrong - logits[:BATCH]).mean()) > 0.1
    monkeypatch.setenv(ENV_SWITCH, "0")  # built and replayed in this process, where the knob is set (no replay child)
    cache, key = cached
    shutil.copytree(cache, tmp_path / "cache")  # the module's cache stays as its run left it
    monkeypatch.setenv(KEY_ENV, str(key))
    monkeypatch.setattr(pipeline, "_cache_hit", lambda *args: None)  # every row observed afresh; the files still restored
    row = _rows(tmp_path / "out", (KIND,), cache=tmp_path / "cache")[KIND]
    assert row.cache == "artifact", row.cache  # the module run's file, replayed afresh
    assert row.artifact is not None and row.artifact.sha256 == bundled[0].artifact.sha256
    assert row.status == "fail" and row.metrics is not None and row.metrics.mae > 0.1, (row.status, row.metrics, row.reasons)
    assert any(reason.startswith("MAE ") for reason in row.reasons), row.reasons
    # the per-layer table (ETDump, diagnostics.etdump) runs what the row ran: the wrong layout departs at the first convolution
    assert any(reason.startswith("where: first departs at stem.0: ") for reason in row.reasons), row.reasons
    assert dict(row.details)["dim_order"] == "contiguous"  # what the file holds; the knob fed the other


def test_a_batch_above_the_planned_bound_is_that_batch_sizes_error_in_the_runtimes_words(tmp_path: Path, monkeypatch) -> None:
    """Exported with a bound of 32 (the test-only knob, built in this process): batch sizes 1, 7 and 16
    run and agree, the whole probe of 64 is refused by the runtime, and that is the batch size's error
    and the row's failure, not a crash of the run. (A bound equal to the example batch, 16, measured
    worse: XNNPACK planned an intermediate static at 16, and batch sizes 1 and 7 were refused; the
    default bound, 64, is above the example.)"""
    monkeypatch.setenv(ENV_SWITCH, "0")
    monkeypatch.setattr(executorch_pte, "_BATCH_MAX", 32)
    row = _row(tmp_path / "out")
    assert dict(row.details)["batch_bound"] == "exported with Dim('batch', min=1, max=32); planned in the .pte for 32"
    assert row.metrics is not None and row.metrics.mae < 1e-5  # the replay, at batch 16, is within the bound
    assert row.diagnostics is not None and row.diagnostics.shapes is not None
    runs = {run.size: run for run in row.diagnostics.shapes.runs}
    assert all(runs[size].error is None for size in (1, 7, 16)), runs
    refused = runs[64].error or ""
    assert refused.startswith("ArtifactError: executorch: Attempted to resize a bounded tensor with a maximum capacity of 98304 "
                              "elements to 196608 elements; Error resizing tensor at input 0 (method->set_inputs() "), refused
    assert row.status == "fail" and any("batch size 64 fails" in reason for reason in row.reasons), row.reasons
    # the cause is the bound planned in the file, not a specialised export; a refused size has no values to compare
    # layer by layer and the replay's size agrees, so no per-layer table is made (nor a "where:")
    assert refused.endswith("; batch 64 above the bound of 32 planned in the .pte"), refused
    assert [reason.split(": the ")[-1] for reason in row.reasons] == [
        "file was planned for batches up to the bound named above, and its runtime refuses larger ones: deploy it only within "
        "that bound, or export it with a larger one"], row.reasons
    assert row.diagnostics.layers is None


def test_without_executorch_the_kind_is_not_applicable_and_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "executorch", None)  # import raises ImportError, as when it is not installed
    ctx = BuildContext(model=seeded(TinyNet), example=torch.zeros(2, 3, 16, 16), opset=17, onnx_exporter="torchscript", threads=1)
    for kind in (KIND, INT8):
        with pytest.raises(NotApplicable, match=r'^not applicable: executorch is not installed: pip install "export-check\[executorch\]"'):
            KINDS_BY_NAME[kind].build(ctx, tmp_path / KINDS_BY_NAME[kind].filename(), None)
    with pytest.raises(NotApplicable, match="executorch is not installed"):
        KINDS_BY_NAME[KIND].open_runner(tmp_path / "executorch.pte", ctx).__enter__()
    assert not list(tmp_path.iterdir())


def test_the_servers_warm_up_builds_xnnpacks_pattern_graphs_and_leaves_it_single_threaded() -> None:
    """The build server runs ``warm_patterns`` (the kind's preload) before forking the kind's first build child: the
    graphs are then built once per server, and the server must stay safe to fork (no Python thread left behind)."""
    import threading

    from export_check.builder import ahead

    warm = "export_check.artifacts.executorch_pte:warm_patterns"
    assert warm in KINDS_BY_NAME[KIND].preload
    ahead.end_helper_threads()  # a monitor an earlier test started would hide one the warm-up leaves
    before = set(threading.enumerate())
    ahead.WARMED.discard(warm)
    ahead.import_ahead(warm)  # as the server runs it: tqdm's monitor thread, which XNNPACK's passes start, ended
    from executorch.backends.xnnpack.partition.graphs import bilinear_2d, sdpa

    assert set(threading.enumerate()) <= before, [t.name for t in threading.enumerate()]  # no thread left behind
    assert bilinear_2d._get_bilinear_2d_graphs.cache_info().currsize == 1 and sdpa.get_graphs.cache_info().currsize == 1
    assert len(bilinear_2d.get_graphs_dict()) == 4  # both align_corners, with and without dim order
