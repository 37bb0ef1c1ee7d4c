"""The export-bug catalogue (issue 12): one small model per bug class users meet when they export,
plus clean controls, each checked with default options. Every row must get its verdict with the
cause named; the truth behind the key verdicts is measured here independently of the tool: the
artifact, loaded from its file with torch.jit.load or onnxruntime, against the eager model at the
same batch size, in numpy.

Models: tests/data/catalogue_arches.py. Golden sets: 44 real digit scans (a third inverted, so
batches differ in brightness; 44 so that the whole probe is a batch above 32 and the replay ends on
a short batch of 12), recorded by ``golden record``.
"""

from __future__ import annotations

import importlib.util
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TESTS, save_state, seeded
from export_check.cli import main
from export_check.config import RunConfig
from export_check.golden.manifest import load_golden
from export_check.run.pipeline import run_check
from export_check.sentences import layers_summary

# tests/run_narrowed.py repeats this module under capped instruction sets (README, "What varies by CPU")
pytestmark = pytest.mark.cpu_sensitive

ARCHES = TESTS / "data" / "catalogue_arches.py"
FLOAT = ("torchscript-trace", "torchscript-script", "onnx", "onnx-simplified")
INT8 = ("torch-int8-dynamic", "onnx-int8-dynamic")
FORWARD_CODE = "first departs in the forward code of <model forward> itself"
KEPT = "the export kept what its example batch computed"
SPECIALISED = "the export specialised the batch size"
RANDOM = "forward draws random numbers (dropout left on"
NOISY = "judged against a non-deterministic eager model"
NOT_JUDGED = "not judged: the eager model's outputs change from call to call"


def _module():
    spec = importlib.util.spec_from_file_location("catalogue_arches", ARCHES)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# case -> {row: (status, [texts its reasons, notes or concerns must hold])}; rows left out: see
# test_every_row_is_accounted_for (int8 rows of models whose bug is not about int8 follow their gate).
CASES: dict[str, dict[str, tuple[str, list[str]]]] = {
    "Clean": {"eager": ("pass", []), **{k: ("pass", []) for k in FLOAT}},
    "CleanLarge": {"eager": ("pass", []), **{k: ("pass", []) for k in FLOAT}},
    "ValueBranch": {
        "eager": ("pass", ["the model itself depends on the batch"]),
        "torchscript-trace": ("fail", ["batch size 1: against eager at the same batch size", KEPT, FORWARD_CODE,
                                       "TracerWarning: Converting a tensor to a Python boolean"]),
        "torchscript-script": ("pass", []),
        "onnx": ("fail", ["batch size 1: against eager at the same batch size", KEPT, FORWARD_CODE, "TracerWarning"]),
        "onnx-simplified": ("fail", ["batch size 1: against eager at the same batch size", KEPT]),
        "torch-int8-dynamic": ("fail", ["batch size 1: against eager at the same batch size", KEPT]),
        "onnx-int8-dynamic": ("fail", ["batch size 1: against eager at the same batch size", KEPT]),
    },
    "BatchBranch": {
        "eager": ("pass", ["the model itself depends on the batch: its outputs at batch size 44"]),
        "torchscript-trace": ("fail", ["batch size 44: against eager at the same batch size", KEPT, FORWARD_CODE]),
        "torchscript-script": ("pass", []),
        "onnx": ("fail", ["batch size 44: against eager at the same batch size", KEPT]),
        "onnx-simplified": ("fail", ["batch size 44: against eager at the same batch size", KEPT]),
        "torch-int8-dynamic": ("fail", ["batch size 44: against eager at the same batch size", KEPT]),
        "onnx-int8-dynamic": ("fail", ["batch size 44: against eager at the same batch size", KEPT]),
    },
    "BakedShape": {
        "eager": ("pass", []),
        "torchscript-trace": ("fail", ["running failed at inputs 32..43: RuntimeError: shape '[16, 64]' is invalid for input of size 768",
                                       "batch size 1 fails", SPECIALISED, "TracerWarning: Converting a tensor to a Python integer"]),
        "torchscript-script": ("pass", []),
        "onnx": ("fail", ["running failed at inputs 32..43: onnxruntime: Reshape node", "batch size 7 fails", SPECIALISED]),
        "onnx-simplified": ("error", ["batch axis is fixed to 16, not dynamic"]),
        "torch-int8-dynamic": ("fail", ["running failed at inputs 32..43", SPECIALISED]),
        "onnx-int8-dynamic": ("error", ["batch axis is fixed to 16, not dynamic"]),
    },
    "ItemInForward": {
        "eager": ("pass", []),
        "torchscript-trace": ("fail", ["MAE ", FORWARD_CODE, "TracerWarning: Converting a tensor to a Python number"]),
        "torchscript-script": ("pass", []),
        "onnx": ("fail", ["MAE ", FORWARD_CODE + " (Div"]),
        "onnx-simplified": ("fail", ["MAE ", FORWARD_CODE]),
        "torch-int8-dynamic": ("fail", ["batch size 1: against eager at the same batch size", KEPT]),
        "onnx-int8-dynamic": ("fail", ["batch size 1: against eager at the same batch size", KEPT]),
    },
    "TolistInForward": {
        "eager": ("pass", []),
        "torchscript-trace": ("fail", ["running failed at inputs 32..43", "batch size 7 fails", SPECIALISED]),
        "torchscript-script": ("error", ["Expected type hint for result of tolist()"]),
        "onnx": ("fail", ["running failed at inputs 32..43: onnxruntime: Sub node", SPECIALISED]),
        "onnx-simplified": ("error", ["batch axis is fixed to 16, not dynamic"]),
        "torch-int8-dynamic": ("fail", ["running failed at inputs 32..43", SPECIALISED]),
        "onnx-int8-dynamic": ("error", ["batch axis is fixed to 16, not dynamic"]),
    },
    "NumpyInForward": {
        "eager": ("pass", []),
        "torchscript-trace": ("fail", ["batch size 1: against eager at the same batch size", KEPT,
                                       "TracerWarning: Converting a tensor to a NumPy array"]),
        "torchscript-script": ("error", ["build failed"]),
        "onnx": ("fail", ["batch size 1: against eager at the same batch size", KEPT]),
        "onnx-simplified": ("fail", [KEPT]),
    },
    "Counter": {
        "eager": ("fail", ["stateful forward: two calls on the same batch of 16 differ", "calls: "]),
        **{k: ("error", [NOT_JUDGED]) for k in FLOAT + INT8},
    },
    "Unscriptable": {
        "eager": ("pass", []),
        "torchscript-trace": ("pass", []),
        "torchscript-script": ("error", ["failed to compile it to a TorchScript function"]),
        "onnx": ("pass", []),
        "onnx-simplified": ("pass", []),
    },
    "AntialiasedResize": {
        "eager": ("pass", []),
        "torchscript-trace": ("pass", []),
        "torchscript-script": ("pass", []),
        "onnx": ("error", ["'aten::_upsample_bilinear2d_aa' to ONNX opset version 17 is not supported"]),
        "onnx-simplified": ("error", ["it is derived from onnx, which failed"]),
        "onnx-int8-dynamic": ("error", ["it is derived from onnx, which failed"]),
    },
    "Int8Collapse": {
        "eager": ("pass", []),
        **{k: ("pass", []) for k in FLOAT},
        "torch-int8-dynamic": ("fail", ["relative MAE", "worst layers (lowest SQNR): fc2"]),
        "onnx-int8-dynamic": ("fail", ["relative MAE", "worst layers (largest added noise): fc2"]),
    },
    "InplaceOnView": {
        "eager": ("pass", []),
        "torchscript-trace": ("pass", []),
        "torchscript-script": ("pass", []),
        "onnx": ("fail", ["MAE ", "first departs in clamp, which has no nodes in this graph: the export lost what it does"]),
        "onnx-simplified": ("fail", ["MAE ", "first departs in clamp, which has no nodes in this graph"]),
    },
    "DropoutLeftOn": {
        "eager": ("fail", ["not deterministic: two calls on the same batch of 16 differ", RANDOM]),
        **{k: ("pass", [NOISY]) for k in FLOAT + INT8},
    },
    "RandomOps": {
        "eager": ("fail", ["not deterministic: two calls on the same batch of 16 differ", RANDOM]),
        **{k: ("pass", [NOISY]) for k in FLOAT + INT8},
    },
    "BatchCentred": {
        "eager": ("pass", ["the model itself depends on the batch: its outputs at batch size"]),
        **{k: ("pass", []) for k in FLOAT},
        "torch-int8-dynamic": ("pass", []),
    },
    # a custom ONNX symbolic with a wrong formula (issue 44): wrong at every batch size alike, never called float noise
    "WrongSymbolic": {
        "eager": ("pass", []), "torchscript-trace": ("pass", []), "torchscript-script": ("pass", []),
        "onnx": ("fail", ["MAE ", FORWARD_CODE]), "onnx-simplified": ("fail", ["MAE "]),
    },
    "NoInputs": {
        "eager": ("pass", ["the eager model itself fails at batch size 1"]),
        "torchscript-trace": ("pass", []),
        "torchscript-script": ("pass", []),
        "onnx": ("error", ["the ONNX graph has no inputs: the export turned the model's input into a constant"]),
        "onnx-simplified": ("error", ["it is derived from onnx, which failed"]),
        "onnx-int8-dynamic": ("error", ["it is derived from onnx, which failed"]),
    },
}


@pytest.fixture(scope="module")
def catalogue_images(tmp_path_factory) -> dict[int, Path]:
    """44 digit scans, every third inverted; and the first 32 (NoInputs returns 16 rows per call)."""
    from PIL import ImageOps

    from models.digits import digit_to_image, digits_split, load_digits_arrays

    images, labels = load_digits_arrays()
    _, test_idx = digits_split(labels)
    folders = {}
    for count in (44, 32):
        folder = tmp_path_factory.mktemp(f"catalogue-{count}")
        names = {}
        for n, index in enumerate(test_idx[200 : 200 + count]):
            img = digit_to_image(images[index])
            if n % 3 == 2:
                img = ImageOps.invert(img)
            img.save(folder / f"{n:04d}.png")
            names[f"{n:04d}.png"] = int(labels[index])
        (folder / "labels.json").write_text(json.dumps(names))
        folders[count] = folder
    return folders


_REPORTS: dict[str, tuple] = {}


@pytest.fixture()
def checked(request, tmp_path_factory, catalogue_images, capfd):
    """The case's model recorded and checked once per session, with default options, and what it printed."""
    case = request.param
    if case not in _REPORTS:
        root = tmp_path_factory.mktemp(case)
        checkpoint = save_state(seeded(getattr(_module(), case)), root / "model.pth")
        arch = f"{ARCHES}:{case}"
        inputs = catalogue_images[32 if case == "NoInputs" else 44]
        assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(inputs), "--golden", str(root / "golden"),
                     "--size", "32", "-q"]) == 0
        capfd.readouterr()
        report = run_check(RunConfig(checkpoint=checkpoint, arch=arch, golden=root / "golden", out_dir=root / "out"))
        _REPORTS[case] = (report, root, capfd.readouterr())
    return _REPORTS[case]


def _texts(row) -> str:
    d = row.diagnostics
    parts = [*row.reasons, *row.notes, *row.concerns]
    if d is not None:
        parts += list(d.notes)
        if d.layers is not None:
            parts.append(layers_summary(d.layers))
    return "\n".join(parts)


@pytest.mark.parametrize("checked", list(CASES), indirect=True)
def test_catalogue_case_gets_its_verdict_and_cause_on_every_row(checked) -> None:
    report, _, printed = checked
    case = Path(report.golden.path).parent.name.rstrip("0123456789")
    rows = {row.name: row for row in report.rows}
    for name, (status, texts) in CASES[case].items():
        row = rows[name]
        assert row.status == status, (case, name, row.status, row.reasons)
        text = _texts(row)
        for expected in texts:
            assert expected in text, (case, name, expected, text)
    # exporter dumps and tracer warnings never reach the terminal ahead of the report
    assert "Torch IR graph" not in printed.out and "TracerWarning" not in printed.err


@pytest.mark.parametrize("checked", list(CASES), indirect=True)
def test_every_row_is_accounted_for(checked) -> None:
    """Rows the table leaves out are int8 rows of a model whose bug is not about int8 (a clean
    control, a float-only bug): judged by their gate on the replay alone (this machine's int8 drift,
    see BENCHMARKS.md). A batch-size finding on one is this CPU's int8 drift too (a top-1 flip at one
    size, on every probe image since issue 44): it must then be true, recomputed here by hand."""
    report, root, _ = checked
    case = Path(report.golden.path).parent.name.rstrip("0123456789")
    for row in report.rows:
        if row.name in CASES[case]:
            continue
        assert row.name in INT8, (case, row.name)
        assert row.status in ("pass", "fail") and row.metrics is not None
        if row.status == "fail":
            assert row.reasons, row
            for reason in (r for r in row.reasons if r.startswith("batch size")):
                _a_batch_size_finding_is_true(report, root, case, row.name, reason)


FOUND = re.compile(r"batch size (\d+): against eager at the same batch size, top-1 agreement ([\d.]+)% < ([\d.]+)% .*\((\d+) images;")


def _a_batch_size_finding_is_true(report, root: Path, case: str, kind: str, reason: str) -> None:
    """The top-1 agreement the reason states, at its batch size over its images, equals the file against eager run by hand."""
    found = FOUND.match(reason)
    assert found, reason  # an int8 row of a float-only bug fails a batch size only by its top-1 agreement
    size, stated, bound, images = int(found[1]), float(found[2]), float(found[3]), int(found[4])
    probe = _probe(root, images)
    path = Path(report.row(kind).artifact.path)
    got = np.concatenate([_run_artifact(path, probe[i : i + size]) for i in range(0, images, size)])
    want = np.concatenate([_eager(root, case, probe[i : i + size]) for i in range(0, images, size)])
    by_hand = 100.0 * float(np.mean(got.argmax(1) == want.argmax(1)))
    assert abs(by_hand - stated) < 0.06 and by_hand < bound, (reason, by_hand)


# ---- the truth, measured without the tool ------------------------------------------------------


def _probe(root: Path, count: int) -> np.ndarray:
    golden = load_golden(root / "golden")
    return next(batch for _, batch in golden.batches(count))


def _run_artifact(path: Path, batch: np.ndarray) -> np.ndarray:
    if path.suffix == ".onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {session.get_inputs()[0].name: batch})[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load's own deprecation
        module = torch.jit.load(str(path), map_location="cpu").eval()
    with torch.inference_mode():
        return module(torch.from_numpy(batch)).numpy()


def _eager(root: Path, case: str, batch: np.ndarray) -> np.ndarray:
    model = getattr(_module(), case)()
    model.load_state_dict(torch.load(root / "model.pth", weights_only=True))
    with torch.inference_mode():
        return model.eval()(torch.from_numpy(batch)).numpy()


def _mae_at(report, root: Path, case: str, kind: str, size: int, images: int) -> float:
    """The artifact against eager, both at batch size ``size``, over the first ``images`` images."""
    probe = _probe(root, images)
    path = Path(report.row(kind).artifact.path)
    got = np.concatenate([_run_artifact(path, probe[i : i + size]) for i in range(0, images, size)])
    want = np.concatenate([_eager(root, case, probe[i : i + size]) for i in range(0, images, size)])
    return float(np.abs(got.astype(np.float64) - want).mean())


@pytest.mark.parametrize("checked, size, images, failing", [
    ("BatchBranch", 44, 44, ("torchscript-trace", "onnx")),  # one batch above 32: eager takes the other path
    ("ValueBranch", 1, 44, ("torchscript-trace", "onnx")),  # one image at a time: the brightness branch differs
    ("NumpyInForward", 1, 44, ("torchscript-trace", "onnx")),  # every size on the whole probe (issue 44)
], indirect=["checked"])
def test_batch_size_bugs_are_real_artifact_vs_eager_at_the_same_size(checked, size: int, images: int, failing) -> None:
    report, root, _ = checked
    case = Path(report.golden.path).parent.name.rstrip("0123456789")
    for kind in failing:
        truth = _mae_at(report, root, case, kind, size, images)
        assert truth > 1e-5, kind  # beyond the float gate: a real failure
        # and the tool measured exactly that (the same images at the same batch size)
        run = next(r for r in report.row(kind).diagnostics.shapes.runs if r.size == size)
        assert run.images == images and run.mae == pytest.approx(truth, rel=1e-4), kind
        # and at the replay's batch size the same artifact agrees: only the batch-size check catches it
        if case == "BatchBranch":
            assert _mae_at(report, root, case, kind, 16, 32) <= 1e-6
    # scripting keeps the control flow: exact at that size too (it cannot compile numpy at all)
    if case != "NumpyInForward":
        assert _mae_at(report, root, case, "torchscript-script", size, images) <= 1e-6


NOISE_WORDS = ("float noise", "loosen the gate")


@pytest.mark.parametrize("checked", list(CASES), indirect=True)
def test_a_cause_is_said_only_with_its_evidence(checked) -> None:
    """Issue 44: a row is told its gate is within float noise (and to loosen it) only when its error against eager is within
    10x eager's own variation (its movement across batch sizes, two calls on one batch), measured in the same run; "by
    design" only on a row whose kind's row says its int8 activation scales are dynamic."""
    from export_check.artifacts import KINDS_BY_NAME

    report, _, _ = checked
    eager = report.row("eager").diagnostics
    variation = max([r.eager_moved or 0.0 for r in eager.shapes.runs] + [eager.eager_check.mae])
    for row in report.rows:
        text = _texts(row)
        if row.name != "eager" and row.metrics is not None and row.metrics.mae > 10 * variation:
            assert not any(word in text for word in NOISE_WORDS), (row.name, row.metrics.mae, variation, text)
        if "by design" in text:
            assert KINDS_BY_NAME[row.name].activation_scales == "dynamic", (row.name, text)


@pytest.mark.parametrize("checked", ["WrongSymbolic"], indirect=True)
def test_a_wrong_symbolic_is_far_beyond_eagers_own_variation(checked) -> None:
    """The truth by hand: the .onnx at batch size 16 against eager is over 10x eager's own movement between batch sizes
    1 and 16, and the file really computes x * sigmoid(1.1 x) (a Sigmoid fed by a Mul)."""
    import onnx

    report, root, _ = checked
    probe = _probe(root, 16)
    at_16 = _eager(root, "WrongSymbolic", probe)
    eager_moved = float(np.abs(np.concatenate([_eager(root, "WrongSymbolic", probe[i : i + 1]) for i in range(16)]) - at_16).max())
    error = _mae_at(report, root, "WrongSymbolic", "onnx", 16, 16)
    assert error > 1e-5 and error > 10 * eager_moved, (error, eager_moved)
    graph = onnx.load(report.row("onnx").artifact.path).graph
    assert any(n.op_type == "Sigmoid" and any(p.op_type == "Mul" and p.output[0] in n.input for p in graph.node) for n in graph.node)
    # the subgraph handed over computes: it is never a constant alone (issue 44, item 2)
    reduced = report.row("onnx").diagnostics.reduced
    assert reduced is not None and reduced.error is None, reduced
    assert set(reduced.ops) - {"Constant"}, reduced.ops


@pytest.mark.parametrize("checked", ["ItemInForward", "InplaceOnView"], indirect=True)
def test_drift_figures_match_an_independent_computation(checked) -> None:
    report, root, _ = checked
    case = Path(report.golden.path).parent.name.rstrip("0123456789")
    for kind in ("onnx",) + (("torchscript-trace",) if case == "ItemInForward" else ()):
        row = report.row(kind)
        independent = _mae_at(report, root, case, kind, 16, 32) * 32 / 44 + _mae_at_tail(report, root, case, kind) * 12 / 44
        assert row.metrics.mae == pytest.approx(independent, rel=1e-4), kind


def _mae_at_tail(report, root: Path, case: str, kind: str) -> float:
    """The replay's last, short batch (images 32..43) as the replay runs it."""
    probe = _probe(root, 44)[32:44]
    got = _run_artifact(Path(report.row(kind).artifact.path), probe)
    return float(np.abs(got.astype(np.float64) - _eager(root, case, probe)).mean())


@pytest.mark.parametrize("checked", ["BakedShape"], indirect=True)
def test_baked_shape_really_fails_at_other_batch_sizes(checked) -> None:
    report, root, _ = checked
    probe = _probe(root, 44)
    path = Path(report.row("torchscript-trace").artifact.path)
    assert _run_artifact(path, probe[:16]).shape == (16, 10)
    with pytest.raises(RuntimeError, match=r"shape '\[16, 64\]' is invalid"):
        _run_artifact(path, probe[:7])


@pytest.mark.parametrize("checked", ["DropoutLeftOn", "Counter"], indirect=True)
def test_an_eager_model_that_does_not_reproduce_itself_really_does_not(checked) -> None:
    report, root, _ = checked
    case = Path(report.golden.path).parent.name.rstrip("0123456789")
    probe = _probe(root, 16)
    model = getattr(_module(), case)()
    model.load_state_dict(torch.load(root / "model.pth", weights_only=True))
    model.eval()
    with torch.inference_mode():
        a, b = model(torch.from_numpy(probe)).numpy(), model(torch.from_numpy(probe)).numpy()
    assert np.abs(a - b).max() > 1e-4
    check = report.row("eager").diagnostics.eager_check
    assert check.random is (case == "DropoutLeftOn") and bool(check.state_changes) is (case == "Counter")


def test_recording_a_model_that_ignores_the_batch_size_is_one_line(tmp_path: Path, catalogue_images, capsys) -> None:
    # NoInputs always returns 16 rows: on 44 inputs the short last batch cannot be recorded
    checkpoint = save_state(seeded(_module().NoInputs), tmp_path / "model.pth")
    code = main(["golden", "record", str(checkpoint), "--arch", f"{ARCHES}:NoInputs", "--inputs", str(catalogue_images[44]),
                 "--golden", str(tmp_path / "golden"), "--size", "32", "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "the model returned 16 output rows for a batch of 12 inputs" in err[0]
    assert not (tmp_path / "golden" / "manifest.json").exists()


# --- the modern kinds over the catalogue (issue 13): torch.export-based exports meet the same bugs -----
MODERN = ("torch-export", "onnx-dynamo", "onnx-int8-static", "pt2e-int8-static")
DATA_DEPENDENT = "Could not guard on data-dependent expression"
MODERN_CASES: dict[str, dict[str, tuple[str, list[str]]]] = {
    "Clean": {k: ("pass", []) for k in MODERN},
    # a branch on the batch's values: torch.export refuses it (the legacy exporters kept one path)
    "ValueBranch": {
        "torch-export": ("error", [DATA_DEPENDENT]),
        "onnx-dynamo": ("error", ["Failed to export the model with torch.export"]),
        "onnx-int8-static": ("fail", ["batch size 1: against eager at the same batch size", KEPT]),
        "pt2e-int8-static": ("error", [DATA_DEPENDENT]),
    },
    # a batch size baked in by int(x.shape[0]): torch.export says so; the dynamo ONNX keeps it symbolic
    "BakedShape": {
        "torch-export": ("error", ["specialized it to be a constant (16)"]),
        "onnx-dynamo": ("pass", []),
        "onnx-int8-static": ("error", ["fails on the calibration batches", "Reshape"]),
        "pt2e-int8-static": ("error", ["specialized it to be a constant (16)"]),
    },
}
_MODERN_REPORTS: dict[str, tuple] = {}


@pytest.fixture()
def checked_modern(request, tmp_path_factory, catalogue_images, capfd):
    case = request.param
    if case not in _MODERN_REPORTS:
        root = tmp_path_factory.mktemp(f"modern-{case}")
        checkpoint = save_state(seeded(getattr(_module(), case)), root / "model.pth")
        arch = f"{ARCHES}:{case}"
        assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(catalogue_images[44]), "--golden",
                     str(root / "golden"), "--size", "32", "-q"]) == 0
        capfd.readouterr()
        report = run_check(RunConfig(checkpoint=checkpoint, arch=arch, golden=root / "golden", out_dir=root / "out", kinds=MODERN))
        _MODERN_REPORTS[case] = (report, root, capfd.readouterr())
    return _MODERN_REPORTS[case]


@pytest.mark.parametrize("checked_modern", list(MODERN_CASES), indirect=True)
def test_modern_kinds_over_the_catalogue(checked_modern) -> None:
    report, root, printed = checked_modern
    case = Path(report.golden.path).parent.name.removeprefix("modern-").rstrip("0123456789")
    assert sorted(row.name for row in report.rows) == sorted(("eager", *MODERN))
    for name, (status, texts) in MODERN_CASES[case].items():
        row = report.row(name)
        assert row.status == status, (case, name, row.status, row.reasons)
        for expected in texts:
            assert expected in _texts(row), (case, name, expected)
    # calibrated kinds are judged on the half of the 44 inputs they were not calibrated on
    for name in ("onnx-int8-static", "pt2e-int8-static"):
        row = report.row(name)
        if row.metrics is not None:
            assert row.metrics.images == 22, (case, name, row.metrics.images)
    # nothing a build printed (onnxruntime's error log, torch.onnx's log lines) reaches the terminal
    assert "onnxruntime" not in printed.err and "torchvision" not in printed.err and "Torch IR graph" not in printed.out
    if case == "BakedShape":  # the dynamo ONNX file really runs at every batch size, exactly
        path = Path(report.row("onnx-dynamo").artifact.path)
        probe = _probe(root, 44)
        for size in (1, 7, 44):
            got = _run_artifact(path, probe[:size])
            assert float(np.abs(got - _eager(root, case, probe[:size])).max()) < 1e-5, size
