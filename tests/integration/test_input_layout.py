"""The layout an app feeds is part of the signature (issue 44, item 7): ``[tool.export-check.model-inputs.input]
layout = "channels-last"`` on a tiny conv net. Every file is fed that layout; the ``.pte`` is exported from an
example in it, records it, and passes; a ``.pte`` exported contiguous (an export script that forgot the app's
layout: the module's test-only knob) runs without an error, computes garbage (the ExecuTorch trap,
pytorch/executorch#21837), and fails with that cause, a sentence naming both layouts and the fix. The truth is
the file run by hand with the ExecuTorch runtime beside eager, fed each layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import TESTS, save_state, seeded
from export_check.artifacts import executorch_pte
from export_check.builder.protocol import ENV_SWITCH
from export_check.cli import main
from export_check.config import RunConfig
from export_check.golden.manifest import load_golden
from export_check.report.text import Style, render
from export_check.results import Report
from export_check.run.pipeline import run_check
from export_check.signature import SignatureSettings

pytest.importorskip("executorch.runtime")

ARCH = f"{TESTS / 'arches.py'}:TinyNet"
# The check's batch size: the export example's. (A channels-last example of 8 samples made ExecuTorch 1.5.1 plan the
# .pte for 15, under the Dim bound of 64, and refuse the whole probe of 24; one of 16 or 24 plans 64.)
BATCH = 16
CHANNELS_LAST = SignatureSettings(inputs={"input": {"layout": "channels-last"}})


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, digit_images: Path) -> tuple[Path, Path, np.ndarray, np.ndarray]:
    """(checkpoint, golden set, its inputs, eager's logits for them) of TinyNet on 24 digits at 32x32."""
    from arches import TinyNet

    root = tmp_path_factory.mktemp("layout")
    model = seeded(TinyNet)
    checkpoint = save_state(model, root / "model.pth")
    assert main(["golden", "record", str(checkpoint), "--arch", ARCH, "--inputs", str(digit_images), "--golden", str(root / "golden"),
                 "--size", "32", "--batch-size", "8", "-q"]) == 0
    golden = load_golden(root / "golden")
    x = np.stack([golden.load_input(item) for item in golden.inputs]).astype(np.float32)
    with torch.inference_mode():
        logits = model.eval()(torch.from_numpy(x)).numpy()
    return checkpoint, root / "golden", x, logits


def _check(recorded, out: Path, kinds: tuple[str, ...]) -> tuple[dict, Report]:
    checkpoint, golden, _, _ = recorded
    report = run_check(RunConfig(checkpoint=checkpoint, arch=ARCH, golden=golden, out_dir=out, kinds=kinds, batch_size=BATCH,
                                 signature_settings=CHANNELS_LAST))
    return {row.name: row for row in report.rows}, report


def _by_hand(pte: Path, x: np.ndarray, order: tuple[int, ...]) -> np.ndarray:
    """The .pte run by the ExecuTorch runtime, fed ``x`` laid out in memory in ``order``, batch by batch."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    inverse = [order.index(axis) for axis in range(4)]
    fed = [torch.from_numpy(x[i:i + BATCH].copy()).permute(*order).contiguous().permute(*inverse) for i in range(0, len(x), BATCH)]
    return np.concatenate([method.execute([batch])[0].numpy() for batch in fed])


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


NHWC, NCHW = (0, 2, 3, 1), (0, 1, 2, 3)


def test_every_file_is_fed_the_apps_layout_and_the_pte_exported_in_it_passes(recorded, tmp_path: Path) -> None:
    _, _, x, logits = recorded
    rows, _ = _check(recorded, tmp_path / "out", ("torchscript-trace", "onnx", "executorch"))
    assert all(row.status == "pass" for row in rows.values()), {n: r.reasons for n, r in rows.items()}
    details = dict(rows["executorch"].details)
    assert details["fed_layout"] == "input: channels-last" and details["dim_order"] == "channels_last", details
    assert details["input_dim_orders"] == "0,2,3,1" and "layout_mismatch" not in details
    # the file needs the layout it records: by hand, channels-last agrees with eager, contiguous does not
    pte = tmp_path / "out" / "executorch.pte"
    right, wrong = _mae(_by_hand(pte, x, NHWC), logits), _mae(_by_hand(pte, x, NCHW), logits)
    assert right < 1e-5 and wrong > 1000 * max(right, 1e-8), (right, wrong)
    metrics = rows["executorch"].metrics
    assert metrics is not None and metrics.images == len(x) and metrics.mae == pytest.approx(right, rel=1e-3, abs=1e-8)


def test_a_pte_exported_for_another_layout_fails_with_that_cause(recorded, tmp_path: Path, monkeypatch) -> None:
    _, _, x, logits = recorded
    monkeypatch.setenv(ENV_SWITCH, "0")  # built and replayed in this process, where the knob is set
    monkeypatch.setattr(executorch_pte, "_EXPORT_LAYOUT", "contiguous")  # the export script forgot the app's layout
    rows, report = _check(recorded, tmp_path / "out", ("executorch",))
    row = rows["executorch"]
    details = dict(row.details)
    assert details["dim_order"] == "contiguous" and details["fed_layout"] == "input: channels-last", details
    # what the app gets, by hand: the contiguous file fed channels-last, no error, numbers off by the signal
    by_hand = _mae(_by_hand(tmp_path / "out" / "executorch.pte", x, NHWC), logits)
    assert by_hand > 1e-3 and row.metrics is not None and row.metrics.mae == pytest.approx(by_hand, rel=1e-3)
    assert row.status == "fail" and row.reasons[0].startswith("MAE "), row.reasons
    cause = [r for r in row.reasons if r.startswith("cause: ")]
    assert cause == [
        "cause: executorch.pte was exported for input input in contiguous NCHW and the app feeds channels-last (NHWC in memory) "
        "([tool.export-check.model-inputs.input] layout, default the eager model's: contiguous): its runtime does not check the "
        "layout it is fed and computes with the wrong one, without an error (pytorch/executorch#21837); export it with an example "
        "in the app's layout (x.contiguous(memory_format=torch.channels_last)), or set layout = \"contiguous\" if the app feeds "
        "that"], row.reasons
    assert not any("loosen" in r or "noise" in r for r in row.reasons), row.reasons
    # -v names the layout fed and the one the file records
    verbose = render(report, Style(verbose=True))
    assert "layout executorch: fed input: channels-last (the app's: [tool.export-check.model-inputs.NAME] layout); the file records contiguous" \
        in verbose.replace("\n", " "), verbose
    assert "layout executorch" not in render(report, Style())
