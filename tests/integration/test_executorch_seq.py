"""The executorch kind on the bundled sequence recogniser (convolutions + a BiLSTM, the width of its
image a declared dynamic axis): every declared axis is exported bounded, each nn.LSTM as a torch.scan
loop the program keeps (torch.export's own LSTM fixes the time steps), the batch static at one sample.
The row passes over the golden set's three widths, and its MAE is the one the .pte gives when loaded
and run by hand with the ExecuTorch runtime beside eager; a width beyond the bound planned in the file
is an error in the runtime's words that names the bound.

executorch-int8 on the bundled token classifier (input_ids + attention_mask, lengths 40-64): the recipe
(convolutions and linear layers int8, the head and the mask arithmetic float) passes the default int8 gate,
its figures are the .pte's run by hand on the judged samples beside eager, and the file holds the int8
weights worked out by hand (per-channel symmetric) in place of the float ones; the recogniser's LSTM is
not applicable and says why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import REPO
from export_check.artifacts import BuildContext, executorch_pte
from export_check.artifacts._common import captured_warnings
from export_check.cli import main
from export_check.config import RunConfig
from export_check.errors import ArtifactError
from export_check.golden.manifest import load_golden
from export_check.records import Int8Coverage
from export_check.results import Row
from export_check.run.pipeline import run_check
from models.make_multi_io_samples import write_samples
from models.multi_io import SequenceRecognizer, TokenClassifier

pytest.importorskip("executorch.runtime", reason="the executorch kind needs the [executorch] extra")

CHECKPOINT = REPO / "models" / "checkpoints" / "sequence_recognizer.pth"
GOLDEN = REPO / "models" / "examples" / "sequence_recognizer_golden"
KIND, INT8 = "executorch", "executorch-int8"


@pytest.fixture(scope="module")
def recogniser(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Row], Path, object]:
    """One run of both kinds on the recogniser."""
    out = tmp_path_factory.mktemp("executorch-seq") / "out"
    config = RunConfig(checkpoint=CHECKPOINT, arch=f"{REPO / 'models' / 'multi_io.py'}:SequenceRecognizer", golden=GOLDEN, out_dir=out,
                       kinds=(KIND, INT8))
    report = run_check(config)
    rows = {row.name: row for row in report.rows}
    assert list(rows) == ["eager", KIND, INT8]
    return rows, out, load_golden(GOLDEN)


@pytest.fixture(scope="module")
def checked(recogniser) -> tuple[Row, Path, object]:
    rows, out, golden = recogniser
    return rows[KIND], out, golden


def test_the_recogniser_passes_and_agrees_with_the_pte_run_by_hand(checked) -> None:
    from executorch.runtime import Runtime

    row, out, golden = checked
    assert row.status == "pass" and row.family == "float", row.reasons
    details = dict(row.details)
    # the width (axis 3) bounded at 4 x 80, the longest width in the golden set; torch.export raised its minimum to 8
    assert details["axis_bounds"] == ("image axis 3: exported with Dim.AUTO(max=320) (4 x 80, the longest in the golden set), "
                                      "kept as [8, 320]; planned in the .pte for 320"), details
    assert details["batch_bound"] == "static at 1 (fed sample by sample); planned in the .pte for 1"
    assert details["recurrence"].startswith("nn.LSTM exported as a torch.scan loop")
    assert details["delegates"].startswith("XnnpackBackend x") and details["dim_order"] == "contiguous"
    pte = out / "executorch.pte"
    assert row.artifact is not None and pte.stat().st_size == row.artifact.size_bytes
    # the truth, by hand: the file in the ExecuTorch runtime, one golden sample at a time, against eager on the same sample
    model = SequenceRecognizer()
    model.load_state_dict(torch.load(CHECKPOINT, weights_only=True))
    model.eval()
    method = Runtime.get().load_program(pte).load_method("forward")
    errors, flips, widths = [], 0, set()
    for _, feeds in golden.feed_batches(16):  # eager on the golden batches (consecutive samples of one width), as it is compared
        x = torch.from_numpy(feeds["image"])
        widths.add(x.shape[3])
        with torch.inference_mode():
            eager = model(x).numpy()
        # the .pte holds one sample: each is fed alone, and the outputs joined on the batch axis (1: time-major)
        got = np.concatenate([method.execute([x[i:i + 1].clone()])[0].numpy() for i in range(len(x))], axis=1)
        assert got.shape == eager.shape == (x.shape[3] // 4, len(x), 11)
        errors.append(np.abs(got.astype(np.float64) - eager.astype(np.float64)).ravel())
        flips += int((got.argmax(-1) != eager.argmax(-1)).sum())
    by_hand = float(np.concatenate(errors).mean())
    assert widths == {48, 64, 80} and by_hand < 1e-5 and flips == 0
    assert row.metrics is not None and row.metrics.images == len(golden) == 24
    assert row.metrics.mae == pytest.approx(by_hand, rel=1e-6)


def test_a_width_beyond_the_planned_bound_is_an_error_naming_the_bound(checked) -> None:
    """The runner, on the row's file: a batch of 3 at width 320 (the bound) runs sample by sample and agrees with eager;
    width 324 is refused by the runtime, and the error says which axis passed which bound."""
    row, out, golden = checked
    ctx = BuildContext(model=None, example=None, opset=17, onnx_exporter="torchscript", threads=1, signature=golden.signature)
    model = SequenceRecognizer()
    model.load_state_dict(torch.load(CHECKPOINT, weights_only=True))
    model.eval()
    x = np.random.default_rng(0).random((3, 1, 16, 320), dtype=np.float32)
    # the runtime's own lines (its threadpool reset, on the first program a process loads) are notes, as in a run
    with captured_warnings([]), executorch_pte.open_runner(out / "executorch.pte", ctx) as runner:
        got = runner.infer({"image": x})["output"]
        with torch.inference_mode():
            eager = model(torch.from_numpy(x)).numpy()
        assert got.shape == eager.shape == (80, 3, 11) and float(np.abs(got - eager).mean()) < 1e-5
        with pytest.raises(ArtifactError) as refused:
            runner.infer({"image": np.zeros((1, 1, 16, 324), dtype=np.float32)})
    message = str(refused.value)
    assert message.startswith("executorch: Attempted to resize a bounded tensor with a maximum capacity of 5120 elements to 5184 elements"), message
    assert message.endswith("; image axis 3 is 324, above the bound of 320 planned in the .pte"), message


def test_int8_on_the_recogniser_quantizes_around_the_loop_and_agrees_with_the_pte_run_by_hand(recogniser) -> None:
    """The LSTM stays a float scan loop (its input projections too: their bias is the sum of the LSTM's two), the head
    float, the three convolutions int8: the row says so, its int8 coverage counts them, and it passes."""
    from executorch.runtime import Runtime

    rows, out, golden = recogniser
    row = rows[INT8]
    assert row.status == "pass" and row.family == "int8", row.reasons
    details = dict(row.details)
    assert details["int8_layers"] == "3 of 6 convolution/linear layers", details
    assert details["float_layers"] == "rnn (computed weight or bias), linear_1 (computed weight or bias), classifier (head)", details
    model = SequenceRecognizer()
    model.load_state_dict(torch.load(CHECKPOINT, weights_only=True))
    model.eval()
    # the int8 coverage: the convolutions' kernels of every weight (the LSTM's two matrices a direction, the classifier)
    coverage = Int8Coverage.from_details(details)
    convs = sum(m.weight.numel() for m in model.features if isinstance(m, torch.nn.Conv2d))
    weights = convs + sum(p.numel() for name, p in model.rnn.named_parameters() if name.startswith("weight")) + model.classifier.weight.numel()
    assert coverage is not None and (coverage.quantized_params, coverage.weight_params) == (convs, weights), coverage
    assert details["recurrence"].startswith("nn.LSTM exported as a torch.scan loop") and "its loop float" in details["recurrence"]
    assert (out / f"{INT8}.pte").stat().st_size < (out / f"{KIND}.pte").stat().st_size  # the LSTM's float weights dominate both
    calibration = set(sorted(range(len(golden)), key=lambda i: golden.inputs[i].sha256)[:12])  # the default split: half of 24
    method = Runtime.get().load_program(out / f"{INT8}.pte").load_method("forward")
    errors, eager_abs, flips = [], [], 0
    for start, feeds in golden.feed_batches(16):
        x = torch.from_numpy(feeds["image"])
        with torch.inference_mode():
            eager = model(x).numpy().astype(np.float64)
        for i in range(len(x)):
            if start + i in calibration:
                continue
            got = method.execute([x[i:i + 1].clone()])[0].numpy().astype(np.float64)[:, 0]
            errors.append(np.abs(got - eager[:, i]).ravel())
            eager_abs.append(np.abs(eager[:, i]).ravel())
            flips += int((got.argmax(-1) != eager[:, i].argmax(-1)).sum())
    mae, scale = float(np.concatenate(errors).mean()), float(np.concatenate(eager_abs).mean())
    assert row.metrics is not None and row.metrics.images == 12 and flips == 0
    assert row.metrics.mae == pytest.approx(mae, rel=1e-9) and row.metrics.reference_mean_abs == pytest.approx(scale, rel=1e-9)
    assert 1e-4 < mae / scale < 0.05  # quantized (eager's log-probabilities moved), within the default int8 gate


TOKENS = REPO / "models" / "checkpoints" / "token_classifier.pth"


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> tuple[Row, Path, object]:
    """The token classifier's golden set (16 held-out samples, lengths 64/48/56/40, 8 of them the calibration split)
    and one run of executorch-int8 on it."""
    folder = tmp_path_factory.mktemp("executorch-int8-tokens")
    # models.make_multi_io_samples's own writer, called here: the samples its command line writes, without a second
    # interpreter importing torch and the data sets again
    write_samples(folder / "samples", "token_classifier", count=16)
    arch = f"{REPO / 'models' / 'multi_io.py'}:TokenClassifier"
    assert main(["golden", "record", str(TOKENS), "--arch", arch, "--inputs", str(folder / "samples"), "--golden",
                 str(folder / "golden"), "-q"]) == 0
    report = run_check(RunConfig(checkpoint=TOKENS, arch=arch, golden=folder / "golden", out_dir=folder / "out", kinds=(INT8,)))
    rows = {row.name: row for row in report.rows}
    assert list(rows) == ["eager", INT8]
    return rows[INT8], folder / "out", load_golden(folder / "golden")


def test_int8_on_the_token_classifier_passes_and_agrees_with_the_pte_run_by_hand(tokens) -> None:
    from executorch.runtime import Runtime

    row, out, golden = tokens
    assert row.status == "pass" and row.family == "int8", row.reasons
    details = dict(row.details)
    assert details["int8_layers"] == "8 of 9 convolution/linear layers" and details["float_layers"] == "head (head)", details
    assert details["calibration_samples"] == "8" and details["judged_samples"] == "8"
    # the default split, from the manifest itself: the 8 samples of smallest sha256 (half the set)
    calibration = set(sorted(range(len(golden)), key=lambda i: golden.inputs[i].sha256)[:8])
    model = TokenClassifier()
    model.load_state_dict(torch.load(TOKENS, weights_only=True))
    model.eval()
    method = Runtime.get().load_program(out / f"{INT8}.pte").load_method("forward")
    errors, eager_abs, flips, lengths = [], [], 0, set()
    for start, feeds in golden.feed_batches(16):  # consecutive samples of one length, as the tool replays them
        # the whole batch through both (eager's float sums depend on the batch), then the judged samples kept
        ids, mask = (torch.from_numpy(feeds[name]) for name in ("input_ids", "attention_mask"))
        keep = [i for i in range(len(ids)) if start + i not in calibration]
        lengths.add(ids.shape[1])
        with torch.inference_mode():
            eager = model(ids, mask).numpy().astype(np.float64)[keep]
        got = method.execute([ids.clone(), mask.clone()])[0].numpy().astype(np.float64)[keep]
        assert got.shape == eager.shape == (len(keep), 10)
        errors.append(np.abs(got - eager).ravel())
        eager_abs.append(np.abs(eager).ravel())
        flips += int((got.argmax(1) != eager.argmax(1)).sum())
    mae, scale = float(np.concatenate(errors).mean()), float(np.concatenate(eager_abs).mean())
    assert lengths == {40, 48, 56, 64} and flips == 0
    assert row.metrics is not None and row.metrics.images == 8 and row.metrics.top1_agreement == 1.0
    assert row.metrics.mae == pytest.approx(mae, rel=1e-9) and row.metrics.reference_mean_abs == pytest.approx(scale, rel=1e-9)
    # really quantized (over 0.5 % of the mean |logit|) and within the default int8 gate (5 %); the global recipe gave 129 %
    assert row.metrics.relative_mae == pytest.approx(mae / scale, rel=1e-9) and 0.005 < mae / scale < 0.05


def test_int8_on_the_token_classifier_holds_int8_weights_worked_out_by_hand(tokens) -> None:
    """Per-channel symmetric int8 (scale = max |w| of the row / 127, round half to even) of a layer's weights: those
    bytes are in the .pte and its float32 weights are not; the head, kept float, is there as float32."""
    row, out, _ = tokens
    data = (out / f"{INT8}.pte").read_bytes()
    state = torch.load(TOKENS, weights_only=True)
    int8 = ["encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.0.self_attn.out_proj.weight", "encoder.layers.0.linear1.weight",
            "encoder.layers.0.linear2.weight", "encoder.layers.1.self_attn.in_proj_weight", "encoder.layers.1.self_attn.out_proj.weight",
            "encoder.layers.1.linear1.weight", "encoder.layers.1.linear2.weight"]
    for name in [*int8, "head.weight"]:
        weight = state[name].numpy().astype(np.float32)
        scale = np.abs(weight).max(axis=1, keepdims=True) / 127
        by_hand = np.clip(np.round(weight / scale), -127, 127).astype(np.int8)
        assert (by_hand.tobytes() in data, weight.tobytes() in data) == ((True, False) if name in int8 else (False, True)), name
