"""The litert kind (issue 27): the bundled ResNet converted by litert-torch to one .tflite, reloaded by the
LiteRT interpreter, replayed over the golden set and compared, by hand, with the interpreter driven
outside the tool; the runner contract (any batch size, float32, the same output twice); the two-output
detector fed sample by sample; the sequence models (the token classifier, the LSTM recogniser), whose files
keep their length at the example's, converted with one signature per golden size. Its stack cannot
share the main test environment (xdsl pins typing-extensions below 4.13, coremltools needs 4.14+): these
tests run in `tox -e litert`, which `./dev test` runs; in the main environment they are skipped for that
reason, and the kind's rows say it is not applicable there."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO, read_report
from export_check.cli import main
from litert_runs import by_hand, eager_model, multi_io_run
from runner_contract import eager_by_hand, holds_the_runner_contract

pytest.importorskip("ai_edge_litert", reason="the litert kind runs in its own environment: tox -e litert (README, \"Artifact groups\")")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("litert_torch", reason="the litert kind runs in its own environment: tox -e litert")


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("litert")
    code = main(["check", str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "litert,onnx", "-q", "--no-cache",
                 "--out", str(folder / "out"), "--json", str(folder / "r.json")])
    return code, read_report(folder / "r.json")


def test_the_tflite_file_matches_eager_on_the_golden_set_as_the_interpreter_run_by_hand_says(checked) -> None:
    from ai_edge_litert.interpreter import Interpreter

    from export_check.golden.manifest import load_golden
    from models.resnet import ResNet

    code, report = checked
    rows = {r["name"]: r for r in report["rows"]}
    row = rows["litert"]
    assert code == 0 and row["status"] == "pass", row["reasons"]
    assert row["details"]["litert_inputs"] == "args_0" and row["details"]["batch_in_file"].startswith("16 ")
    # by hand: the file, the interpreter, the golden set, eager
    model = ResNet()
    model.load_state_dict(torch.load(DEFAULT_CHECKPOINT, weights_only=True))
    model.eval()
    runner = Interpreter(model_path=row["artifact"]["path"], num_threads=1).get_signature_runner("serving_default")
    errors, flips, count = [], 0, 0
    for _, batch in load_golden(DEFAULT_GOLDEN).batches(16):
        with torch.inference_mode():
            eager = model(torch.from_numpy(batch)).numpy()
        out = runner(args_0=batch)["output_0"]
        errors.append(np.abs(out.astype(np.float64) - eager).ravel())
        flips += int((out.argmax(1) != eager.argmax(1)).sum())
        count += len(batch)
    mae = float(np.concatenate(errors).mean())
    assert count == 64 and flips == 0 and mae < 1e-5
    assert row["metrics"]["mae"] == pytest.approx(mae, rel=1e-6, abs=1e-12)
    assert row["metrics"]["top1_agreement"] == 1.0


def test_the_runner_contract_at_any_batch_size(checked) -> None:
    """The contract every kind is held to (tests/runner_contract.py): the ResNet's file, reloaded by the kind's runner, at
    batch sizes 1, 3, 16 and 33 of random inputs (the file's signature is at 16: the runner resizes it), against eager by
    hand; an input it does not take is refused; used after its with-block it raises."""
    from export_check.artifacts import KINDS_BY_NAME, BuildContext
    from export_check.artifacts.base import INPUT
    from export_check.model import load_model

    _, report = checked
    row = next(r for r in report["rows"] if r["name"] == "litert")
    kind = KINDS_BY_NAME["litert"]
    ctx = BuildContext(model=None, example=None, opset=17, onnx_exporter="torchscript", threads=1)
    rng = np.random.default_rng(0)
    path, resnet = Path(row["artifact"]["path"]), load_model(DEFAULT_CHECKPOINT, DEFAULT_ARCH, {}, None)
    holds_the_runner_contract("litert", kind.open_runner(path, ctx), kind.family, eager_by_hand(resnet),
                              lambda size: {INPUT: rng.standard_normal((size, 3, 32, 32), dtype=np.float32)},
                              path=path, suffix=kind.suffix, sizes=(1, 3, 16, 33))


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory):
    """The bundled two-output digit detector ``(boxes, scores)`` on 24 held-out samples."""
    return multi_io_run(tmp_path_factory, "digit_detector", "DigitDetector", 24)


def test_the_two_output_detector_passes_and_each_outputs_mae_is_the_interpreters_run_by_hand(detector) -> None:
    """litert-torch 0.10 cannot lower the detector's flatten over a symbolic batch, and the batch-16 file refuses to resize:
    the file is converted from one sample and fed sample by sample, which the row says; each output's MAE is the
    interpreter's, driven by hand one sample at a time, against eager on the golden batches."""
    from ai_edge_litert.interpreter import Interpreter

    from export_check.golden.manifest import load_golden
    from models.multi_io import DigitDetector

    code, report, golden_dir, weights = detector
    row = next(r for r in report["rows"] if r["name"] == "litert")
    assert code == 0 and row["status"] == "pass", row["reasons"]
    assert row["details"]["batch_in_file"].startswith("1 (fed sample by sample: the batch-16 file refused to resize to one sample: ")
    model = DigitDetector()
    model.load_state_dict(torch.load(weights, weights_only=True))
    model.eval()
    runner = Interpreter(model_path=row["artifact"]["path"], num_threads=1).get_signature_runner("serving_default")
    errors: dict[str, list[np.ndarray]] = {"output_0": [], "output_1": []}
    count = 0
    for _, feeds in load_golden(golden_dir).feed_batches(16):
        x = feeds["x"]
        with torch.inference_mode():
            eager = [t.numpy() for t in model(torch.from_numpy(x))]
        outs = [runner(args_0=x[i:i + 1]) for i in range(len(x))]
        for k, name in enumerate(errors):
            got = np.concatenate([o[name] for o in outs])
            errors[name].append(np.abs(got.astype(np.float64) - eager[k].astype(np.float64)).ravel())
        count += len(x)
    assert count == 24
    measured = {o["name"]: o["metrics"]["mae"] for o in row["outputs"]}
    assert list(measured) == ["output_0", "output_1"]
    for name, parts in errors.items():
        mae = float(np.concatenate(parts).mean())
        assert mae < 1e-5
        assert measured[name] == pytest.approx(mae, rel=1e-6, abs=1e-12), name


# The sequence recogniser (issue 27, "dynamic shapes as the device sees them"): torch.export unrolls its LSTM over the
# example's width, so its file gets one signature per width in the golden set, and the runner picks the one each batch
# matches. (In this file, not beside the token classifier: the two files take about as long, one per worker.)

@pytest.fixture(scope="module")
def recogniser(tmp_path_factory: pytest.TempPathFactory):
    """The bundled sequence recogniser (image (N, 1, 16, W), W = 48, 64, 80; a BiLSTM; time-major output) on its bundled golden set."""
    folder = tmp_path_factory.mktemp("litert-recogniser")
    weights = REPO / "models" / "checkpoints" / "sequence_recognizer.pth"
    code = main(["check", str(weights), "--config", str(REPO / "models" / "examples" / "sequence_recognizer.toml"), "--artifacts",
                 "litert", "-q", "--no-cache", "--out", str(folder / "out"), "--json", str(folder / "r.json")])
    return code, read_report(folder / "r.json"), REPO / "models" / "examples" / "sequence_recognizer_golden", weights


def test_the_lstm_recogniser_is_unrolled_once_per_golden_width_and_matches_the_interpreter_by_hand(recogniser) -> None:
    from ai_edge_litert.interpreter import Interpreter

    code, report, golden_dir, weights = recogniser
    row = next(r for r in report["rows"] if r["name"] == "litert")
    assert code == 0 and row["status"] == "pass", row["reasons"]
    details = row["details"]
    assert details["signatures"] == "image axis 3 at 48, 64, 80: one signature each (len_48, len_64, len_80)"
    assert "unrolls the LSTM over the example's time steps (pytorch/pytorch#115092)" in details["signatures_why"]
    assert details["batch_in_file"].startswith("1 (fed sample by sample: ")
    listed = Interpreter(model_path=row["artifact"]["path"]).get_signature_list()
    assert sorted(listed) == ["len_48", "len_64", "len_80"]
    # time-major output (T, N, 11): the samples are joined on axis 1
    mae, used, count = by_hand(row["artifact"]["path"], golden_dir, eager_model("SequenceRecognizer", weights), ["image"], 1)
    assert count == 24 and used == set(listed) and mae < 1e-5
    assert row["metrics"]["mae"] == pytest.approx(mae, rel=1e-9)


def test_more_golden_sizes_than_the_signature_cap_is_not_applicable_naming_the_setting(tmp_path: Path) -> None:
    """17 distinct widths of the recogniser (its LSTM goes straight to buckets): refused before anything is converted."""
    from export_check.artifacts import BuildContext, litert
    from export_check.artifacts.base import NotApplicable
    from export_check.golden.manifest import load_golden

    signature = load_golden(REPO / "models" / "examples" / "sequence_recognizer_golden").signature
    ctx = BuildContext(model=eager_model("SequenceRecognizer", REPO / "models" / "checkpoints" / "sequence_recognizer.pth"),
                       example={"image": torch.zeros(2, 1, 16, 48)}, opset=17, onnx_exporter="torchscript", threads=1,
                       signature=signature, axis_sizes=tuple((("image", 3, 48 + 4 * k),) for k in range(litert.MAX_SIGNATURES + 1)))
    with pytest.raises(NotApplicable) as refused:
        litert.build(ctx, tmp_path / "litert.tflite", None)
    message = str(refused.value)
    assert message.startswith("not applicable: a .tflite converted from the example would keep its image axis 3 at 48: "), message
    assert message.endswith("; one signature per size would take 17 (the golden set's distinct sizes of image axis 3), above the 16 a "
                            "file is given (litert.MAX_SIGNATURES): record the golden set with fewer lengths, or pad its samples to "
                            "a few bucket lengths"), message
    assert not (tmp_path / "litert.tflite").exists()
