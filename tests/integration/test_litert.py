"""The litert kind (issue 27): the bundled ResNet converted by litert-torch to one .tflite, reloaded by the
LiteRT interpreter, replayed over the golden set and compared, by hand, with the interpreter driven
outside the tool; the runner contract (any batch size, float32, the same output twice); the two-output
detector fed sample by sample; the sequence models (the token classifier, the LSTM recogniser), whose files
keep their length at the example's, converted with one signature per golden size. Its stack cannot
share the main test environment (xdsl pins typing-extensions below 4.13, coremltools needs 4.14+): these
tests run in `tox -e litert`, which `./dev test` runs; in the main environment they are skipped for that
reason, and the kind's rows say it is not applicable there."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO
from export_check.cli import main

pytest.importorskip("ai_edge_litert", reason="the litert kind runs in its own environment: tox -e litert (README, \"Artifact groups\")")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("litert_torch", reason="the litert kind runs in its own environment: tox -e litert")


def _report(path: Path) -> dict:
    text = path.read_text()
    return json.loads("{" + text[text.index('"schema"'):])


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("litert")
    code = main(["check", str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "litert,onnx", "-q", "--no-cache",
                 "--out", str(folder / "out"), "--json", str(folder / "r.json")])
    return code, _report(folder / "r.json")


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
    from export_check.artifacts import KINDS_BY_NAME, BuildContext
    from export_check.artifacts.base import INPUT, OUTPUT

    _, report = checked
    row = next(r for r in report["rows"] if r["name"] == "litert")
    kind = KINDS_BY_NAME["litert"]
    ctx = BuildContext(model=None, example=None, opset=17, onnx_exporter="torchscript", threads=1)
    rng = np.random.default_rng(0)
    with kind.open_runner(Path(row["artifact"]["path"]), ctx) as runner:
        for size in (1, 3, 16, 33):
            batch = rng.standard_normal((size, 3, 32, 32), dtype=np.float32)
            out = runner.infer({INPUT: batch})[OUTPUT]
            assert out.shape == (size, 10) and out.dtype == np.float32
            assert np.array_equal(out, runner.infer({INPUT: batch})[OUTPUT])


def _multi_io(tmp_path_factory: pytest.TempPathFactory, model: str, cls: str, count: int):
    """A bundled models/multi_io.py model recorded on ``count`` held-out samples (models.make_multi_io_samples) and checked
    on the litert row: (exit code, report, golden folder, checkpoint)."""
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp(f"litert-{model}")
    subprocess.run([sys.executable, "-m", "models.make_multi_io_samples", str(folder / "samples"), "--model", model,
                    "--count", str(count)], check=True, cwd=REPO, capture_output=True)
    weights, arch = REPO / "models" / "checkpoints" / f"{model}.pth", f"{REPO / 'models' / 'multi_io.py'}:{cls}"
    assert main(["golden", "record", str(weights), "--arch", arch, "--golden", str(folder / "golden"), "--inputs",
                 str(folder / "samples"), "-q"]) == 0
    code = main(["check", str(weights), "--arch", arch, "--golden", str(folder / "golden"), "--artifacts", "litert", "-q", "--no-cache",
                 "--out", str(folder / "out"), "--json", str(folder / "r.json")])
    return code, _report(folder / "r.json"), folder / "golden", weights


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory):
    """The bundled two-output digit detector ``(boxes, scores)`` on 24 held-out samples."""
    return _multi_io(tmp_path_factory, "digit_detector", "DigitDetector", 24)


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


# The sequence models (issue 27, "dynamic shapes as the device sees them"): a file that keeps a declared dynamic axis at
# the example's size gets one signature per size of that axis in the golden set, and the runner picks the one each batch
# matches. The token classifier's file keeps its length (a reshape baked into the graph: the probe says so); the
# recogniser's LSTM is unrolled over the example's width by torch.export.

def _eager(arch: str, checkpoint: Path) -> torch.nn.Module:
    from models import multi_io

    model = getattr(multi_io, arch)()
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    return model.eval()


def _by_hand(path: str, golden_dir: Path, model: torch.nn.Module, names: list[str], batch_axis: int) -> tuple[float, set[str], int]:
    """(MAE, signatures used, samples): the .tflite in the LiteRT interpreter, each golden batch through the signature of its
    size, one sample at a time (the file holds one), int64 fed as the int32 the file declares; eager on the same golden batch."""
    from ai_edge_litert.interpreter import Interpreter

    from export_check.golden.manifest import load_golden

    interpreter = Interpreter(model_path=path, num_threads=1)
    errors, used, count = [], set(), 0
    for _, feeds in load_golden(golden_dir).feed_batches(16):  # consecutive samples of one size, as the tool compares them
        arrays = [feeds[name] for name in names]
        size = arrays[0].shape[-1]
        runner = interpreter.get_signature_runner(f"len_{size}")
        used.add(f"len_{size}")
        with torch.inference_mode():
            eager = model(*(torch.from_numpy(a) for a in arrays)).numpy()
        parts = [runner(**{f"args_{k}": (a[i:i + 1].astype(np.int32) if a.dtype == np.int64 else a[i:i + 1])
                          for k, a in enumerate(arrays)})["output_0"] for i in range(len(arrays[0]))]
        got = np.concatenate(parts, axis=batch_axis)
        assert got.shape == eager.shape
        errors.append(np.abs(got.astype(np.float64) - eager.astype(np.float64)).ravel())
        count += len(arrays[0])
    return float(np.concatenate(errors).mean()), used, count


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory):
    """The bundled token classifier (input_ids, attention_mask; length 64, 48, 56, 40 every 4 samples) on 16 held-out samples."""
    return _multi_io(tmp_path_factory, "token_classifier", "TokenClassifier", 16)


@pytest.fixture(scope="module")
def recogniser(tmp_path_factory: pytest.TempPathFactory):
    """The bundled sequence recogniser (image (N, 1, 16, W), W = 48, 64, 80; a BiLSTM; time-major output) on its bundled golden set."""
    folder = tmp_path_factory.mktemp("litert-recogniser")
    weights = REPO / "models" / "checkpoints" / "sequence_recognizer.pth"
    code = main(["check", str(weights), "--config", str(REPO / "models" / "examples" / "sequence_recognizer.toml"), "--artifacts",
                 "litert", "-q", "--no-cache", "--out", str(folder / "out"), "--json", str(folder / "r.json")])
    return code, _report(folder / "r.json"), REPO / "models" / "examples" / "sequence_recognizer_golden", weights


def test_the_token_classifier_gets_one_signature_per_golden_length_and_matches_the_interpreter_by_hand(tokens) -> None:
    from ai_edge_litert.interpreter import Interpreter

    code, report, golden_dir, weights = tokens
    row = next(r for r in report["rows"] if r["name"] == "litert")
    assert code == 0 and row["status"] == "pass", row["reasons"]
    details = row["details"]
    assert details["signatures"] == ("input_ids axis 1 and attention_mask axis 1 at 40, 48, 56, 64: one signature each "
                                     "(len_40, len_48, len_56, len_64)")
    assert details["signatures_why"].startswith("the .tflite keeps the example's input_ids axis 1 at 64, attention_mask axis 1 at 64, "
                                                "and the interpreter refuses 128, 128: ")
    assert details["batch_in_file"].startswith("1,1 (fed sample by sample: the batch-4 file refused to resize to one sample: ")
    listed = Interpreter(model_path=row["artifact"]["path"]).get_signature_list()
    assert sorted(listed) == ["len_40", "len_48", "len_56", "len_64"]
    mae, used, count = _by_hand(row["artifact"]["path"], golden_dir, _eager("TokenClassifier", weights), ["input_ids", "attention_mask"], 0)
    assert count == 16 and used == set(listed) and mae < 1e-5
    assert row["metrics"]["mae"] == pytest.approx(mae, rel=1e-9)
    assert row["metrics"]["top1_agreement"] == 1.0


def test_a_length_the_file_has_no_signature_for_is_an_error_naming_the_lengths_it_takes(tokens) -> None:
    """The runner on the row's file: a batch of 3 at length 48 (a signature's) agrees with eager; length 50 (none) is refused."""
    from export_check.artifacts import KINDS_BY_NAME, BuildContext
    from export_check.errors import ArtifactError
    from export_check.golden.manifest import load_golden

    _, report, golden_dir, weights = tokens
    row = next(r for r in report["rows"] if r["name"] == "litert")
    ctx = BuildContext(model=None, example=None, opset=17, onnx_exporter="torchscript", threads=1, signature=load_golden(golden_dir).signature)
    rng = np.random.default_rng(0)
    ids, mask = rng.integers(0, 10, (3, 48), dtype=np.int64), np.ones((3, 48), dtype=np.int64)
    mask[1, 40:] = 0
    with torch.inference_mode():
        eager = _eager("TokenClassifier", weights)(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    with KINDS_BY_NAME["litert"].open_runner(Path(row["artifact"]["path"]), ctx) as runner:
        got = runner.infer({"input_ids": ids, "attention_mask": mask})["output"]
        assert got.shape == eager.shape == (3, 10) and float(np.abs(got - eager).mean()) < 1e-5
        with pytest.raises(ArtifactError) as refused:
            runner.infer({"input_ids": ids[:, :50].repeat(2, axis=1)[:, :50], "attention_mask": np.ones((3, 50), dtype=np.int64)})
    assert str(refused.value).startswith("litert: litert.tflite has no signature for input_ids axis 1 and attention_mask axis 1 at 50/50 "
                                         "(input_ids (3, 50); attention_mask (3, 50)): it takes input_ids axis 1 and attention_mask "
                                         "axis 1 at 40/40, 48/48, 56/56, 64/64 only"), str(refused.value)


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
    mae, used, count = _by_hand(row["artifact"]["path"], golden_dir, _eager("SequenceRecognizer", weights), ["image"], 1)
    assert count == 24 and used == set(listed) and mae < 1e-5
    assert row["metrics"]["mae"] == pytest.approx(mae, rel=1e-9)


def test_more_golden_sizes_than_the_signature_cap_is_not_applicable_naming_the_setting(tmp_path: Path) -> None:
    """17 distinct widths of the recogniser (its LSTM goes straight to buckets): refused before anything is converted."""
    from export_check.artifacts import BuildContext, litert
    from export_check.artifacts.base import NotApplicable
    from export_check.golden.manifest import load_golden

    signature = load_golden(REPO / "models" / "examples" / "sequence_recognizer_golden").signature
    ctx = BuildContext(model=_eager("SequenceRecognizer", REPO / "models" / "checkpoints" / "sequence_recognizer.pth"),
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
