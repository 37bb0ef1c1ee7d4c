"""The litert kind on the bundled sequence models (issue 27, "dynamic shapes as the device sees them"): the token classifier
and the LSTM recogniser, whose .tflite files keep their length at the example's, converted with one signature per golden size
and matched, by hand, with the LiteRT interpreter; a length no signature takes is an error naming those it takes; more sizes
than the signature cap is not applicable. Runs in `tox -e litert` beside tests/integration/test_litert.py (a file per worker);
skipped in the main environment, as that file is."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO, read_report
from export_check.cli import main
from litert_runs import multi_io_run

pytest.importorskip("ai_edge_litert", reason="the litert kind runs in its own environment: tox -e litert (README, \"Artifact groups\")")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("litert_torch", reason="the litert kind runs in its own environment: tox -e litert")


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
    return multi_io_run(tmp_path_factory, "token_classifier", "TokenClassifier", 16)


@pytest.fixture(scope="module")
def recogniser(tmp_path_factory: pytest.TempPathFactory):
    """The bundled sequence recogniser (image (N, 1, 16, W), W = 48, 64, 80; a BiLSTM; time-major output) on its bundled golden set."""
    folder = tmp_path_factory.mktemp("litert-recogniser")
    weights = REPO / "models" / "checkpoints" / "sequence_recognizer.pth"
    code = main(["check", str(weights), "--config", str(REPO / "models" / "examples" / "sequence_recognizer.toml"), "--artifacts",
                 "litert", "-q", "--no-cache", "--out", str(folder / "out"), "--json", str(folder / "r.json")])
    return code, read_report(folder / "r.json"), REPO / "models" / "examples" / "sequence_recognizer_golden", weights


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
