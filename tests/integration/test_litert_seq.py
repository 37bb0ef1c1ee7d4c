"""The litert kind on the bundled token classifier (issue 27, "dynamic shapes as the device sees them"), whose .tflite keeps
its length at the example's: converted with one signature per golden length and matched, by hand, with the LiteRT
interpreter; a length no signature takes is an error naming those it takes. The LSTM recogniser's file is tested in
tests/integration/test_litert.py: the two files, a worker each in `tox -e litert`, take about as long. Skipped in the main
environment, as that file is."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from litert_runs import by_hand, eager_model, multi_io_run

pytest.importorskip("ai_edge_litert", reason="the litert kind runs in its own environment: tox -e litert (README, \"Artifact groups\")")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("litert_torch", reason="the litert kind runs in its own environment: tox -e litert")


# A file that keeps a declared dynamic axis at the example's size gets one signature per size of that axis in the golden
# set, and the runner picks the one each batch matches. The token classifier's file keeps its length (a reshape baked into
# the graph: the probe says so).

@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory):
    """The bundled token classifier (input_ids, attention_mask; length 64, 48, 56, 40 every 4 samples) on 16 held-out samples."""
    return multi_io_run(tmp_path_factory, "token_classifier", "TokenClassifier", 16)


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
    mae, used, count = by_hand(row["artifact"]["path"], golden_dir, eager_model("TokenClassifier", weights), ["input_ids", "attention_mask"], 0)
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
        eager = eager_model("TokenClassifier", weights)(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    with KINDS_BY_NAME["litert"].open_runner(Path(row["artifact"]["path"]), ctx) as runner:
        got = runner.infer({"input_ids": ids, "attention_mask": mask})["output"]
        assert got.shape == eager.shape == (3, 10) and float(np.abs(got - eager).mean()) < 1e-5
        with pytest.raises(ArtifactError) as refused:
            runner.infer({"input_ids": ids[:, :50].repeat(2, axis=1)[:, :50], "attention_mask": np.ones((3, 50), dtype=np.int64)})
    assert str(refused.value).startswith("litert: litert.tflite has no signature for input_ids axis 1 and attention_mask axis 1 at 50/50 "
                                         "(input_ids (3, 50); attention_mask (3, 50)): it takes input_ids axis 1 and attention_mask "
                                         "axis 1 at 40/40, 48/48, 56/56, 64/64 only"), str(refused.value)


