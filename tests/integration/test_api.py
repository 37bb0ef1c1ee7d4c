"""The Python API on real runs (issue 16.4): ``export_check.check`` returns the Report the CLI views,
prints nothing, and its numbers are the ones an artifact run by hand gives; the golden operations;
real JSON reports (passing, failing, an error row) valid against the shipped schema."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import export_check
from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, NUDGE
from export_check.report import json_report

# tests/run_narrowed.py repeats this module under capped instruction sets (README, "What varies by CPU")
pytestmark = [pytest.mark.cpu_sensitive, pytest.mark.cheap]

SCHEMA = json_report.schema()


@contextlib.contextmanager
def captured_fds() -> Iterator[list[str]]:
    """What the process itself writes to fds 1 and 2 (a child's stray print included), as text."""
    out: list[str] = []
    with tempfile.TemporaryFile() as sink:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield out
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            out.append(sink.read().decode(errors="replace"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, nudged_checkpoint) -> dict[str, tuple[export_check.Report, str]]:
    """Three real runs of the bundled ResNet, its logits nudged by NUDGE (conftest), on the bundled 64
    digits, through the API: passing (onnx, cold, stored in a cache), failing (held to MAE 1e-9, its onnx
    file from that cache: thresholds are not in its key), and an error row (onnx's build killed by a
    10 ms --build-timeout). The nudge makes eager fail the tight gate on every CPU, where the bundled
    model itself reproduces its reference exactly on some."""
    base = tmp_path_factory.mktemp("api")
    cache, key = base / "cache", base / "key" / "cache.key"
    key.parent.mkdir(mode=0o700)
    common = dict(arch=DEFAULT_ARCH, golden=DEFAULT_GOLDEN, artifacts=["onnx"])
    found = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(key))
        for name, options in (("passing", dict(cache_dir=cache)), ("failing", dict(cache_dir=cache, max_mae=1e-9)),
                              ("error", dict(no_cache=True, build_timeout=0.01))):
            with captured_fds() as printed:
                report = export_check.check(nudged_checkpoint, out=base / name, **common, **options)
            found[name] = (report, printed[0])
    return found


def _hand_inputs() -> np.ndarray:
    """The golden inputs decoded by hand from the manifest's PNGs (32x32 RGB bilinear, (x/255 - 0.5) / 0.5)."""
    from PIL import Image

    manifest = json.loads((DEFAULT_GOLDEN / "manifest.json").read_text())
    assert manifest["preprocess"] == {"size": [32, 32], "mode": "RGB", "mean": [0.5] * 3, "std": [0.5] * 3, "resize": None,
                                      "interpolation": "bilinear"}
    arrays = []
    for item in manifest["inputs"]:
        with Image.open(DEFAULT_GOLDEN / item["file"]) as img:
            rgb = img.convert("RGB").resize((32, 32), Image.Resampling.BILINEAR)
        arrays.append(((np.asarray(rgb, np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1))
    return np.stack(arrays)


def test_check_returns_the_report_prints_nothing_and_its_numbers_are_the_artifacts(runs, nudged_checkpoint) -> None:
    import onnxruntime as ort
    import torch

    from models.resnet import ResNet

    report, printed = runs["passing"]
    assert printed == ""
    assert isinstance(report, export_check.Report) and report.passed and report.exit_code == 0
    assert [(r.name, r.status, r.cache) for r in report.rows] == [("eager", "pass", "miss"), ("onnx", "pass", "miss")]
    onnx = report.row("onnx")
    assert onnx.artifact is not None and Path(onnx.artifact.path).is_file()
    # truth from outside the tool: the shipped .onnx file run by hand beside eager, at the run's batch size
    inputs = _hand_inputs()
    model = ResNet()
    model.load_state_dict(torch.load(nudged_checkpoint, weights_only=True))
    model.eval()
    session = ort.InferenceSession(onnx.artifact.path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    eager, shipped = [], []
    with torch.inference_mode():
        for start in range(0, len(inputs), 16):
            batch = inputs[start:start + 16]
            eager.append(model(torch.from_numpy(batch)).numpy())
            shipped.append(session.run(None, {name: batch})[0])
    eager_all, shipped_all = np.concatenate(eager), np.concatenate(shipped)
    reference = np.load(next(DEFAULT_GOLDEN.glob("reference-*.npy")))
    hand_onnx_mae = float(np.abs(shipped_all - eager_all).mean())
    hand_eager_mae = float(np.abs(eager_all - reference).mean())
    assert onnx.metrics is not None and report.row("eager").metrics is not None
    assert 1e-8 < hand_onnx_mae < 1e-5 and onnx.metrics.mae == pytest.approx(hand_onnx_mae, rel=0.2)
    # the nudge, measured by hand: eager sits NUDGE from the reference (float32 rounding and CPU drift under 1e-6)
    assert abs(hand_eager_mae - NUDGE) < 1e-6 and report.row("eager").metrics.mae == pytest.approx(hand_eager_mae, rel=0.05)
    assert onnx.metrics.max_abs == pytest.approx(float(np.abs(shipped_all - eager_all).max()), rel=0.2)
    assert onnx.metrics.top1_agreement == 1.0 == float((shipped_all.argmax(1) == eager_all.argmax(1)).mean())


def test_failing_and_error_runs_are_rows_not_exceptions(runs) -> None:
    failing, printed = runs["failing"]
    assert printed == "" and not failing.passed and failing.exit_code == 1
    # max-mae gates eager against the golden set too; a failing row wants its per-layer table, so the
    # cached onnx file is reused and replayed afresh (cache "artifact"), giving the same numbers
    assert [(r.name, r.status) for r in failing.rows] == [("eager", "fail"), ("onnx", "fail")]
    assert failing.row("onnx").cache == "artifact"
    passed_mae = runs["passing"][0].row("onnx").metrics.mae  # type: ignore[union-attr]
    assert failing.row("onnx").metrics.mae == pytest.approx(passed_mae, rel=1e-6)  # type: ignore[union-attr]
    assert any("MAE" in reason and "1e-09" in reason for reason in failing.row("onnx").reasons), failing.row("onnx").reasons
    error, printed = runs["error"]
    assert printed == ""
    assert error.exit_code == 1 and error.row("onnx").status == "error" and error.row("onnx").metrics is None
    assert error.row("onnx").reasons[0].startswith("build timed out: still running after 0.01 s, its child process was killed")
    assert error.row("eager").status == "pass"  # the error is the onnx row's own


@pytest.mark.parametrize("name", ["passing", "failing", "error"])
def test_real_reports_are_valid_against_the_schema(runs, name) -> None:
    document = json.loads(json_report.render(runs[name][0]))
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert list(validator.iter_errors(document)) == []
    assert document["schema"] == "export-check-report" and document["schema_version"] == 1
    # and the schema has teeth: the same document with a wrong field is refused, naming it
    for path, value in ((("rows", 1, "status"), "passed"), (("schema_version",), 2), (("counts", "pass"), -1),
                        (("rows", 0, "metrics"), {"mae": 1.0}), (("checkpoint", "sha256"), "abc")):
        broken = json.loads(json.dumps(document))
        target = broken
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value
        errors = list(validator.iter_errors(broken))
        assert errors, path
    missing = {k: v for k, v in document.items() if k != "rows"}
    assert any("'rows' is a required property" in e.message for e in validator.iter_errors(missing))


def test_the_schema_has_the_error_form_of_a_run_stopped_with_exit_2() -> None:
    """On exit 2 every format is still written, carrying the error (issue 16.2, branch h-write16):
    the JSON is the schema's error form. This is that form as h-write16's report/failure.py writes it;
    once merged, its own render_json is validated too."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    stopped = {"schema": "export-check-report", "schema_version": 1, "tool_version": export_check.__version__,
               "created": "2026-12-01T00:00:00+00:00", "command": "check", "passed": False, "exit_code": 2,
               "error": {"type": "GoldenError", "message": "golden: golden set not found; record one"}, "checkpoints": ["model.pth"],
               "rows": []}
    assert list(validator.iter_errors(stopped)) == []
    try:
        from export_check.report import failure  # type: ignore[attr-defined]
    except ImportError:
        failure = None
    if failure is not None:
        real = json.loads(failure.render_json(failure.Stopped(command="check", message="golden: golden set not found", kind="GoldenError",
                                                              checkpoints=("model.pth",), created="2026-01-01T00:00:00+00:00")))
        assert list(validator.iter_errors(real)) == []
    for change in ({"rows": [{}]}, {"error": {"type": "GoldenError"}}, {"passed": True}, {"error": None}):
        assert list(validator.iter_errors({**stopped, **change})), change
    # a report that says exit 2 is held to the error form, not waved through as a report
    assert list(validator.iter_errors({**stopped, "error": {"type": "X", "message": ""}}))


def test_golden_operations_record_verify_approve(tmp_path: Path, digit_images: Path) -> None:
    import torch

    golden = tmp_path / "golden"
    with captured_fds() as printed:
        recorded = export_check.record(DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, inputs=digit_images, golden=golden, size=(32, 32),
                                       mean=(0.5, 0.5, 0.5))
    assert printed == [""]
    assert recorded.preprocess is not None and list(recorded.preprocess.size) == [32, 32]
    assert len(recorded) == 24 and (golden / "manifest.json").is_file()
    assert export_check.verify(golden).intact
    with pytest.raises(export_check.ExportCheckError, match="already holds a golden set"):
        export_check.record(DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, inputs=digit_images, golden=golden, size="32")
    same = export_check.approve(DEFAULT_CHECKPOINT, arch=DEFAULT_ARCH, golden=golden)
    assert not same.written and same.diff.unchanged
    # a changed checkpoint: the diff first (dry run writes nothing), then adopted
    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    last = [k for k in state if k.endswith(".bias")][-1]
    state[last] = state[last] + 0.5  # every logit moves by 0.5: argmax unchanged, MAE exactly 0.5
    moved = tmp_path / "moved.pth"
    torch.save(state, moved)
    manifest = (golden / "manifest.json").read_bytes()
    old_reference = np.load(next(golden.glob("reference-*.npy")))
    dry = export_check.approve(moved, arch=DEFAULT_ARCH, golden=golden, dry_run=True)
    assert not dry.written and not dry.diff.unchanged and (golden / "manifest.json").read_bytes() == manifest
    assert "MAE old->new reference: 5.000e-01 (max |diff| 5.000e-01); top-1 changes on 0 of 24 inputs" in dry.lines(), dry.lines()
    adopted = export_check.approve(moved, arch=DEFAULT_ARCH, golden=golden)
    assert adopted.written and export_check.verify(golden).intact
    new_reference = np.load(next(golden.glob("reference-*.npy")))
    assert np.abs(new_reference - old_reference).mean() == pytest.approx(0.5, abs=1e-5)
    # a tampered set: verify names the file
    victim = next((golden / "inputs").iterdir())
    victim.write_bytes(victim.read_bytes()[:-1] + b"\0")
    found = export_check.verify(golden)
    assert not found.intact and any(victim.name in line and "CHANGED" in line for line in found.lines), found.lines
