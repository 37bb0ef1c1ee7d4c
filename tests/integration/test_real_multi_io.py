"""The trained models of models/multi_io.py (a detector returning a tuple and a dict, a CTC text-line
recogniser with a BiLSTM and a time-major output, a token model with input_ids and attention_mask
of varying length, a two-input net), each recorded from held-out samples and checked with default
options: every output compared and passing. A damaged head fails on that output."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from conftest import REPO
from export_check.artifacts import DEFAULT_KINDS
from export_check.cli import main
from models.make_multi_io_samples import write_samples

# tests/run_narrowed.py repeats this module under capped instruction sets (README, "What varies by CPU")
pytestmark = pytest.mark.cpu_sensitive

MODELS = REPO / "models"
EXAMPLE = MODELS / "examples" / "sequence_recognizer.toml"
CASES = {  # case: (class, checkpoint, settings, expected outputs)
    "detector-tuple": ("DigitDetector", "digit_detector", "[outputs.output_0]\nkind = \"values\"\n", ("output_0", "output_1")),
    "detector-dict": ("DigitDetectorDict", "digit_detector", "[outputs.boxes]\nkind = \"values\"\n", ("boxes", "scores")),
    "recognizer": ("SequenceRecognizer", "sequence_recognizer", "[outputs.output]\nbatch-axis = 1\n", ("output",)),
    "tokens": ("TokenClassifier", "token_classifier", "", ("output",)),
    "two-inputs": ("TwoInputNet", "two_input_net", "", ("output",)),
}
# checked on one kind only, not parametrised over every kind
STOCK = {"tokens-stock": ("TokenClassifierStock", "token_classifier", "", ("output",))}


@pytest.fixture(scope="module", params=list(CASES))
def checked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    return _checked(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory):
    """The dict detector's golden set and settings: the parametrised fixture's (which checks every kind), for the tests
    that make their own checkpoints and checks against them."""
    return _recorded("detector-dict", tmp_path_factory)


_SAMPLES: dict[str, Path] = {}
_RECORDED: dict[str, tuple] = {}


def _samples(checkpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """16 held-out samples of the model ``checkpoint``, made once per session (the two detector cases, the stock token
    model and the recogniser's error test read the same ones; nothing writes into them)."""
    if checkpoint not in _SAMPLES:
        samples = tmp_path_factory.mktemp(f"samples-{checkpoint}") / "samples"
        write_samples(samples, checkpoint, count=16)
        _SAMPLES[checkpoint] = samples
    return _SAMPLES[checkpoint]


def _recorded(case: str, tmp_path_factory: pytest.TempPathFactory):
    """The case's settings and golden set, recorded once per session."""
    if case not in _RECORDED:
        cls, checkpoint, settings, outputs = {**CASES, **STOCK}[case]
        folder = tmp_path_factory.mktemp(case)
        config = folder / "settings.toml"
        config.write_text(f"arch = \"{MODELS / 'multi_io.py'}:{cls}\"\ngolden = \"golden\"\nout = \"out\"\n" + settings)
        weights = MODELS / "checkpoints" / f"{checkpoint}.pth"
        assert main(["golden", "record", str(weights), "--config", str(config), "--inputs", str(_samples(checkpoint, tmp_path_factory))]) == 0
        _RECORDED[case] = (case, folder, config, weights, outputs)
    return _RECORDED[case]


def _checked(case: str, tmp_path_factory: pytest.TempPathFactory, kinds: str | None = None):
    case, folder, config, weights, outputs = _recorded(case, tmp_path_factory)
    code = main(["check", str(weights), "--config", str(config), "--no-cache", "-q", "--json", str(folder / "r.json"),
                 *(["--artifacts", kinds] if kinds else [])])
    return case, folder, config, weights, outputs, code, json.loads((folder / "r.json").read_text())


def test_every_kind_passes_with_every_output_compared(checked) -> None:
    case, folder, config, weights, outputs, code, report = checked
    assert code == 0, [(r["name"], r["status"], r["reasons"]) for r in report["rows"]]
    manifest = json.loads((folder / "golden" / "manifest.json").read_text())
    assert tuple(o["name"] for o in manifest["signature"]["outputs"]) == outputs
    assert [r["name"] for r in report["rows"]] == ["eager", *DEFAULT_KINDS]  # the default group
    for row in report["rows"]:
        assert row["status"] == "pass" and row["metrics"]["images"] == 16
        if len(outputs) > 1:
            assert [o["name"] for o in row["outputs"]] == list(outputs)
    if case.startswith("detector"):  # boxes are values: no top-1 on them
        assert report["rows"][3]["outputs"][0]["metrics"]["agreement"] == "none"
    if case == "recognizer":
        assert report["rows"][3]["metrics"]["agreement"] == "per-position"
        assert report["rows"][5]["details"]["quantized_lstm_layers"] == "1"  # the BiLSTM is what torch int8 converts


def test_a_damaged_class_head_of_the_real_detector_fails_on_scores_only(detector, tmp_path: Path) -> None:
    case, folder, config, weights, outputs = detector
    state = torch.load(weights, weights_only=True)
    state["cls_head.weight"] = state["cls_head.weight"] * 1.5
    damaged = tmp_path / "damaged.pth"
    torch.save(state, damaged)
    main(["check", str(damaged), "--config", str(config), "--no-cache", "-q", "--json", str(tmp_path / "d.json"),
          "--artifacts", "onnx"])
    eager = json.loads((tmp_path / "d.json").read_text())["rows"][0]
    by_name = {o["name"]: o["status"] for o in eager["outputs"]}
    assert eager["status"] == "fail" and by_name == {"boxes": "pass", "scores": "fail"}
    assert eager["reasons"][0].startswith("scores: MAE")


def test_torch_int8_of_a_stock_transformer_encoder_builds_and_passes(tmp_path_factory: pytest.TempPathFactory) -> None:
    """issue 25: nn.TransformerEncoder's fast-path check read ``.weight.device`` off a dynamically quantized Linear
    (a method): ``build failed: AttributeError: 'function' object has no attribute 'device'``. The trained token model
    through the stock encoder now builds; its file, run here by torch.jit, is within the int8 gate of eager."""
    case, folder, config, weights, outputs, code, report = _checked("tokens-stock", tmp_path_factory, "torch-int8-dynamic")
    row = report["rows"][1]
    assert row["name"] == "torch-int8-dynamic" and row["status"] == "pass", row["reasons"]
    assert row["details"]["quantized_linear_layers"] == "5"  # linear1, linear2 of two layers and the head; out_proj stays float
    from models.multi_io import TokenClassifierStock
    from models.multi_io_data import heldout, stack

    model = TokenClassifierStock().eval()
    model.load_state_dict(torch.load(weights, weights_only=True))
    feeds = {k: torch.from_numpy(v) for k, v in stack(heldout("token_classifier", 4)).items()}  # the first group: one length
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.load warns of its deprecation; the row's notes record it
        traced = torch.jit.load(str(next(folder.rglob("*torch-int8-dynamic*.pt"))))
    with torch.no_grad():
        reference, int8 = model(**feeds), traced(feeds["input_ids"], feeds["attention_mask"])
    relative = float((int8 - reference).abs().mean() / reference.abs().mean())
    assert 0 < relative < 0.05 and torch.equal(int8.argmax(1), reference.argmax(1))


def _own_gate(config: Path, name: str, lines: str) -> Path:
    """The detector's settings beside its own, with gate settings for one output added to its table."""
    text = config.read_text()
    table = f"[outputs.{name}]\n"
    text = text.replace(table, table + lines) if table in text else text + table + lines
    own = config.parent / f"own-{name}.toml"
    own.write_text(text)
    return own


def test_a_gate_set_for_one_output_judges_that_output_alone_and_survives_the_json(detector, tmp_path: Path, capsys) -> None:
    """issue 25: the boxes head drifts by a bias of 0.002 (a box-regression tolerance a team may accept); the scores
    head is untouched. The float gate fails eager on boxes; boxes' own gate, set in the settings, passes it; the same
    gate set on scores does not; and `judge` keeps the output's gate from the report's JSON."""
    case, folder, config, weights, outputs = detector
    state = torch.load(weights, weights_only=True)
    state["box_head.bias"] = state["box_head.bias"] + 0.002
    damaged = tmp_path / "boxes.pth"
    torch.save(state, damaged)

    def eager(settings: Path, name: str) -> tuple[int, dict]:
        code = main(["check", str(damaged), "--config", str(settings), "--no-cache", "-q", "--artifacts", "onnx",
                     "--out", str(tmp_path / name), "--json", str(tmp_path / f"{name}.json")])
        return code, json.loads((tmp_path / f"{name}.json").read_text())

    code, plain = eager(config, "plain")
    row = plain["rows"][0]
    boxes = next(o for o in row["outputs"] if o["name"] == "boxes")
    assert code == 1 and {o["name"]: o["status"] for o in row["outputs"]} == {"boxes": "fail", "scores": "pass"}
    assert 1e-4 < boxes["metrics"]["mae"] <= 0.002 + 1e-6  # a bias shift of 0.002 moves no box value by more
    assert row["metrics"]["output"] == "boxes" and "outputs" not in plain["thresholds"]

    code, own = eager(_own_gate(config, "boxes", "max-mae = 0.003\n"), "own")
    row = own["rows"][0]
    assert code == 0 and row["status"] == "pass", row["reasons"]
    assert next(o for o in row["outputs"] if o["name"] == "boxes")["metrics"]["mae"] == boxes["metrics"]["mae"]
    assert "boxes is judged by its own gate MAE<=0.003 (settings: outputs.boxes)" in row["notes"]
    assert own["thresholds"]["outputs"] == {"boxes": {"max-mae": 0.003}} and own["thresholds"]["float"] == plain["thresholds"]["float"]

    code, other = eager(_own_gate(config, "scores", "max-mae = 0.003\n"), "other")
    assert code == 1 and other["rows"][0]["reasons"][0].startswith("boxes: MAE")

    # judged again from the JSON: the output's gate is the report's, and a tighter one given now applies to the rest
    capsys.readouterr()
    assert main(["judge", str(tmp_path / "own.json")]) == 0
    assert main(["judge", str(tmp_path / "own.json"), "--max-mae", "1e-4"]) == 0  # boxes keep their own 0.003
    assert main(["judge", str(tmp_path / "plain.json"), "--max-mae", "1e-4"]) == 1
    assert main(["judge", str(tmp_path / "plain.json"), "--max-mae", "0.003"]) == 0


@pytest.mark.parametrize(("line", "said"), [("max-mae = -1", "must be a finite number >= 0"),
                                            ("int8-min-top1 = 2", "is a fraction in [0, 1]"),
                                            ("max-mae = \"0.1\"", "must be a finite number >= 0")])
def test_a_bad_gate_setting_for_one_output_is_one_line_naming_the_file_and_key(detector, line: str, said: str, capsys) -> None:
    case, folder, config, weights, outputs = detector
    own = _own_gate(config, "boxes", line + "\n")
    capsys.readouterr()
    assert main(["check", str(weights), "--config", str(own), "-q", "--artifacts", "onnx"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    key = line.split(" =")[0]
    assert len(err) == 1 and f"{own}: outputs.boxes.{key}" in err[0] and said in err[0], err


def test_the_time_major_recogniser_without_its_batch_axis_is_one_clear_error(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                                                              capsys) -> None:
    samples = _samples("sequence_recognizer", tmp_path_factory)  # the recogniser case's held-out samples
    capsys.readouterr()
    code = main(["golden", "record", str(MODELS / "checkpoints" / "sequence_recognizer.pth"), "--arch",
                 f"{MODELS / 'multi_io.py'}:SequenceRecognizer", "--inputs", str(samples), "--golden", str(tmp_path / "g")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "its axis 0 is not the batch; if the batch is axis 1, set batch-axis = 1 in [tool.export-check.outputs.output]" in err[0]


def test_the_bundled_second_example_passes() -> None:
    assert main(["check", str(MODELS / "checkpoints" / "sequence_recognizer.pth"), "--config", str(EXAMPLE), "--no-cache", "-q",
                 "--artifacts", "onnx,torch-int8-dynamic"]) == 0


def test_static_int8_on_the_real_detector_is_judged_per_output_on_its_uncalibrated_samples(tmp_path_factory: pytest.TempPathFactory,
                                                                                           tmp_path: Path) -> None:
    """onnxruntime's static int8 on the trained two-output detector (a dict of boxes and scores)
    recorded from 64 held-out samples, every output compared on the 32 outside the calibration split,
    passing. onnxruntime's QDQ file is shipped in the recipe that came closest
    to the float file on the calibration split (on this AVX2 machine s8s8 saturates: worst output 15%
    on the split, against 3% with reduce_range); its figures are checked here by running the file by
    hand on the judged samples."""
    import re

    import numpy as np
    import onnxruntime as ort

    from export_check.artifacts.onnx_int8_static import GOOD_ENOUGH, RECIPES
    from export_check.golden.manifest import load_golden

    folder = tmp_path_factory.mktemp("detector64")
    write_samples(folder / "samples", "digit_detector", count=64)
    config = folder / "settings.toml"
    config.write_text(f"arch = \"{MODELS / 'multi_io.py'}:DigitDetectorDict\"\ngolden = \"golden\"\nout = \"out\"\n"
                      + CASES["detector-dict"][2])
    weights = MODELS / "checkpoints" / "digit_detector.pth"
    assert main(["golden", "record", str(weights), "--config", str(config), "--inputs", str(folder / "samples")]) == 0
    outputs = CASES["detector-dict"][3]
    kinds = ("onnx-int8-static",)  # PT2E on the detector: benchmarks/matrix.py; on the ResNet: test_static_int8.py
    code = main(["check", str(weights), "--config", str(config), "--no-cache", "-q", "--json", str(tmp_path / "s.json"),
                 "--out", str(tmp_path / "out"), "--artifacts", ",".join(kinds)])
    rows = {r["name"]: r for r in json.loads((tmp_path / "s.json").read_text())["rows"]}
    assert code == 0, [(r["name"], r["status"], r["reasons"]) for r in rows.values()]
    for kind in kinds:
        row = rows[kind]
        assert row["status"] == "pass" and [o["name"] for o in row["outputs"]] == list(outputs), (kind, row["reasons"])
        assert row["metrics"]["images"] == 32, (kind, row["metrics"]["images"])
        assert row["details"]["judged_samples"] == "32" and row["details"]["calibration_samples_excluded"] == "32"
    static = rows["onnx-int8-static"]
    recipe = static["details"]["recipe"]
    errors = {name: float(value) for name, value in re.findall(r"(s8s8[a-z-]*) ([0-9.e+-]+)", recipe.split(": ", 1)[1])}
    tried = list(errors)
    assert tried == list(RECIPES)[:len(tried)] and "s8s8" in errors  # in the documented order, the full-graph recipe first
    chosen = recipe.split(" ", 1)[0]
    assert chosen == min(errors, key=lambda n: errors[n]) and errors[chosen] <= 0.05
    assert all(errors[n] > GOOD_ENOUGH for n in tried[:-1])  # it stopped at the first good enough, or tried them all
    assert static["details"]["reduce_range"] == str("reduce-range" in chosen)
    golden = load_golden(folder / "golden")
    judged = [i for i in range(len(golden)) if i not in golden.calibration_indices()]
    samples = [golden.load_sample(golden.inputs[i]) for i in judged]
    float_model = ort.InferenceSession(str(tmp_path / "out" / "onnx.onnx"), providers=["CPUExecutionProvider"])
    quantized = ort.InferenceSession(str(tmp_path / "out" / "onnx-int8-static.onnx"), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.stack([s[i.name] for s in samples]) for i in float_model.get_inputs()}
    names = [o.name for o in float_model.get_outputs()]
    for name, ref, got, row in zip(names, float_model.run(None, feeds), quantized.run(None, feeds), static["outputs"], strict=True):
        relative = float(np.abs(got - ref).mean() / np.abs(ref).mean())
        assert row["name"] == name and relative <= 0.05
        assert row["metrics"]["relative_mae"] == pytest.approx(relative, rel=1e-3), (name, relative)
