"""Models with several named inputs and outputs, end to end: record a format-2 golden set from .npz
samples, check every artifact, every output compared on its own; a damaged head fails on that
output's row, naming it."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from arches import (
    DictOutputNet,
    EnergyColumnNet,
    EnergyNamedNet,
    EnergyNet,
    EnergyTupleNet,
    MaskedSequenceNet,
    SecondHeadBranch,
    TimeMajorNet,
    TupleOutputNet,
)
from conftest import TESTS, save_state, seeded
from export_check.cli import main
from export_check.golden.manifest import read_manifest

FLOAT = ("torchscript-trace", "torchscript-script", "onnx", "onnx-simplified")


def _samples(folder: Path, kind: str, count: int = 20) -> Path:
    """``count`` samples as .npz files (inputs without the batch axis); sequences in two lengths."""
    rng = np.random.default_rng(1)
    folder.mkdir(parents=True)
    for i in range(count):
        length = 5 if i < count // 2 else 8
        if kind == "features":
            arrays = {"x": rng.standard_normal(12).astype(np.float32)}
        elif kind == "masked":
            mask = np.ones(length, np.int64)
            mask[-1] = 0
            arrays = {"x": rng.standard_normal((length, 6)).astype(np.float32), "mask": mask}
        else:  # a sequence of features
            arrays = {"x": rng.standard_normal((length, 6)).astype(np.float32)}
        np.savez(folder / f"s{i:03d}.npz", **arrays)
    return folder


CASES = {
    "tuple": (TupleOutputNet, "features", "", ("output_0", "output_1")),
    "dict": (DictOutputNet, "features", "", ("scores", "boxes")),
    "two-inputs": (MaskedSequenceNet, "masked", "", ("output",)),
    "time-major": (TimeMajorNet, "sequence", "[outputs.output]\nbatch-axis = 1\n", ("output",)),
}


@pytest.fixture(scope="module", params=list(CASES))
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    return _record(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def dict_recorded(tmp_path_factory: pytest.TempPathFactory):
    return _record("dict", tmp_path_factory)


def _record(case: str, tmp_path_factory: pytest.TempPathFactory):
    factory, samples, settings, outputs = CASES[case]
    folder = tmp_path_factory.mktemp(case)
    checkpoint = save_state(seeded(factory), folder / "model.pth")
    if settings:
        (folder / "export-check.toml").write_text(settings)
    arch = f"{TESTS / 'arches.py'}:{factory.__name__}"
    inputs = _samples(folder / "samples", samples)
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(inputs), "--golden", str(folder / "golden"),
                 *_config(folder)]) == 0
    return case, factory, folder, checkpoint, arch, outputs


def _config(folder: Path) -> list[str]:
    """The case's settings file, named: it lies outside the project the tests stand in (issue 24)."""
    settings = folder / "export-check.toml"
    return ["--config", str(settings)] if settings.exists() else []


def _check(folder: Path, checkpoint: Path, arch: str, tag: str) -> tuple[int, dict]:
    report = folder / f"{tag}.json"
    code = main(["check", str(checkpoint), "--arch", arch, "--golden", str(folder / "golden"), "--out", str(folder / f"out-{tag}"),
                 "--no-cache", "-q", "--artifacts", ",".join(FLOAT), "--json", str(report), *_config(folder)])
    return code, json.loads(report.read_text())


def test_every_output_is_recorded_compared_and_passes(recorded) -> None:
    name, factory, folder, checkpoint, arch, outputs = recorded
    manifest = json.loads((folder / "golden" / "manifest.json").read_text())
    assert manifest["version"] == 2 and [o["name"] for o in manifest["signature"]["outputs"]] == list(outputs)
    code, report = _check(folder, checkpoint, arch, "clean")
    rows = {r["name"]: r for r in report["rows"]}
    assert code == 0, [(r["name"], r["reasons"]) for r in report["rows"]]
    for row in rows.values():
        assert row["status"] == "pass" and row["metrics"]["images"] == 20
        assert row["metrics"]["mae"] <= 1e-5
        if len(outputs) > 1:  # each output compared on its own, all 20 samples
            assert [o["name"] for o in row["outputs"]] == list(outputs)
            assert all(o["metrics"]["images"] == 20 and o["status"] == "pass" for o in row["outputs"])
            # the batch-size check ran on every output: each one's runs are in the report
            if row["name"] != "eager":
                shapes = row["diagnostics"]["shapes"]
                assert [r["size"] for r in shapes["runs"]] and list(shapes["outputs"]) == list(outputs[1:])
                assert all(r["error"] is None and r["mae"] <= 1e-5 for runs in shapes["outputs"].values() for r in runs)
    if name == "time-major":
        assert manifest["signature"]["outputs"][0]["batch_axis"] == 1
        assert manifest["signature"]["outputs"][0]["kind"] == "sequence-logits"
        assert rows["onnx"]["metrics"]["agreement"] == "per-position"


def test_a_damaged_head_fails_the_eager_row_on_that_output_only(recorded) -> None:
    name, factory, folder, checkpoint, arch, outputs = recorded
    state = torch.load(checkpoint, weights_only=True)
    head = {"tuple": "head.weight", "dict": "boxes.weight", "two-inputs": "head.weight", "time-major": "step.weight"}[name]
    state[head] = state[head] + 0.5
    damaged = folder / "damaged.pth"
    torch.save(state, damaged)
    code, report = _check(folder, damaged, arch, "damaged")
    eager = report["rows"][0]
    assert code == 1 and eager["name"] == "eager" and eager["status"] == "fail"
    damaged_output = {"tuple": "output_0", "dict": "boxes", "two-inputs": "output", "time-major": "output"}[name]
    if len(outputs) > 1:
        by_name = {o["name"]: o for o in eager["outputs"]}
        assert by_name[damaged_output]["status"] == "fail"
        assert all(o["status"] == "pass" for n, o in by_name.items() if n != damaged_output)
        assert eager["reasons"][0].startswith(f"{damaged_output}: MAE ")
    assert eager["reasons"][-1].endswith("wrong or retrained weights?")
    # the artifacts still follow the (damaged) eager model: the drift is the weights', not the export's
    assert all(r["status"] == "pass" for r in report["rows"][1:])


def test_a_setting_leaves_an_output_out_and_every_view_says_so(dict_recorded, capsys) -> None:
    name, factory, folder, checkpoint, arch, outputs = dict_recorded
    config = folder / "exclude.toml"
    config.write_text("[outputs.boxes]\ncompare = false\n")
    report_path = folder / "exclude.json"
    code = main(["check", str(checkpoint), "--arch", arch, "--golden", str(folder / "golden"), "--out", str(folder / "out-x"),
                 "--no-cache", "-q", "--artifacts", "onnx", "--config", str(config), "--json", str(report_path)])
    report = json.loads(report_path.read_text())
    assert code == 0
    for row in report["rows"]:
        assert row["not_compared"] == ["boxes"] and row["outputs"] == []
    assert "onnx: outputs not compared (excluded by a setting): boxes" in capsys.readouterr().out
    config.write_text("[outputs.nope]\ncompare = false\n")
    assert main(["check", str(checkpoint), "--arch", arch, "--golden", str(folder / "golden"), "--out", str(folder / "out-x"),
                 "--no-cache", "-q", "--artifacts", "onnx", "--config", str(config)]) == 2
    assert "settings name outputs nope, the golden set has scores, boxes" in capsys.readouterr().err


@pytest.mark.parametrize("factory, inputs", [(EnergyNet, ".npy"), (EnergyTupleNet, ".npz"), (EnergyNamedNet, ".npz")])
def test_one_value_per_sample_round_trips_through_record_check_and_approve(factory, inputs: str, tmp_path: Path) -> None:
    """A (batch,) output, alone (from .npy inputs, which once made it a format-1 (N, 1) reference), second in a
    tuple, and second in a named tuple (named by its fields, in every row: the TorchScript files return a plain
    tuple): recorded as (N,), checked green, approved, checked green again (issue 25)."""
    model = seeded(factory)
    checkpoint = save_state(model, tmp_path / "model.pth")
    arch = f"{TESTS / 'arches.py'}:{factory.__name__}"
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20, 12)).astype(np.float32)
    folder = tmp_path / "samples"
    folder.mkdir()
    for i, sample in enumerate(x):
        np.save(folder / f"s{i:03d}.npy", sample) if inputs == ".npy" else np.savez(folder / f"s{i:03d}.npz", x=sample)
    energy_name = {EnergyNet: "output", EnergyTupleNet: "output_1", EnergyNamedNet: "energy"}[factory]

    def by_hand(net: torch.nn.Module) -> np.ndarray:  # the truth: eager run by hand, outside the tool
        with torch.inference_mode():
            out = net(torch.from_numpy(x))
        return (out if factory is EnergyNet else out[1]).numpy()

    truth = by_hand(model)
    assert truth.shape == (20,)
    golden = tmp_path / "golden"
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(folder), "--golden", str(golden)]) == 0
    stored = read_manifest(golden).reference_outputs(0, 20)[energy_name]
    assert stored.shape == (20,)
    np.testing.assert_allclose(stored, truth, rtol=0, atol=1e-6)

    code, report = _check(tmp_path, checkpoint, arch, "clean")
    assert code == 0, [(r["name"], r["reasons"]) for r in report["rows"]]
    assert all(r["status"] == "pass" and r["metrics"]["images"] == 20 for r in report["rows"])
    if factory is EnergyNamedNet:
        assert {r["name"]: [o["name"] for o in r["outputs"]] for r in report["rows"]} == {
            r["name"]: ["embedding", "energy"] for r in report["rows"]}
    for row in report["rows"]:  # no argmax on one value per sample: no top-1 figure for it
        energy = row["metrics"] if factory is EnergyNet else row["outputs"][1]["metrics"]
        assert energy["agreement"] == "none" and energy["top1_agreement"] is None

    # approve a retrained head: the stored reference becomes the new model's (20,) energies
    state = torch.load(checkpoint, weights_only=True)
    state["head.bias"] = state["head.bias"] + 0.25
    retrained = tmp_path / "retrained.pth"
    torch.save(state, retrained)
    model.load_state_dict(state)
    new_truth = by_hand(model)
    assert main(["golden", "approve", str(retrained), "--arch", arch, "--golden", str(golden)]) == 0
    stored = read_manifest(golden).reference_outputs(0, 20)[energy_name]
    assert stored.shape == (20,)
    np.testing.assert_allclose(stored, new_truth, rtol=0, atol=1e-6)
    code, report = _check(tmp_path, retrained, arch, "approved")
    assert code == 0, [(r["name"], r["reasons"]) for r in report["rows"]]


def test_a_set_recorded_with_positional_names_for_a_named_tuple_says_to_re_record_it(tmp_path: Path, capsys) -> None:
    """A golden set recorded before named tuples were named by their fields (output_0, output_1; recorded here from the
    same weights returned as a plain tuple): the check is an error that says why and how to fix it."""
    checkpoint = save_state(seeded(EnergyTupleNet), tmp_path / "model.pth")
    folder = tmp_path / "samples"
    folder.mkdir()
    for i, x in enumerate(np.random.default_rng(0).standard_normal((8, 12)).astype(np.float32)):
        np.savez(folder / f"s{i}.npz", x=x)
    golden = tmp_path / "golden"
    assert main(["golden", "record", str(checkpoint), "--arch", f"{TESTS / 'arches.py'}:EnergyTupleNet", "--inputs", str(folder),
                 "--golden", str(golden), "-q"]) == 0
    capsys.readouterr()
    assert main(["check", str(checkpoint), "--arch", f"{TESTS / 'arches.py'}:EnergyNamedNet", "--golden", str(golden), "--out",
                 str(tmp_path / "out"), "--no-cache", "-q", "--artifacts", "onnx"]) == 2
    err = capsys.readouterr().err
    assert "returned outputs embedding, energy; the golden set has output_0, output_1 (missing: output_0, output_1); a named " \
           "tuple's or a dataclass's outputs are named by their fields since issue 25, and this set was recorded before: " \
           "re-record it (golden record --force)" in err, err


def test_a_set_that_flattened_a_per_sample_value_says_to_re_record_it(tmp_path: Path, capsys) -> None:
    """A format-1 set holding (N, 1) for a model that returns (N,), as recorded before issue 25: the
    check's eager row and approve say to re-record it (approving would write the flattened shape again)."""
    checkpoint = save_state(seeded(EnergyNet), tmp_path / "model.pth")
    folder = tmp_path / "samples"
    folder.mkdir()
    for i, x in enumerate(np.random.default_rng(0).standard_normal((8, 12)).astype(np.float32)):
        np.save(folder / f"s{i}.npy", x)
    golden = tmp_path / "golden"
    column, energy = (f"{TESTS / 'arches.py'}:{cls.__name__}" for cls in (EnergyColumnNet, EnergyNet))
    assert main(["golden", "record", str(checkpoint), "--arch", column, "--inputs", str(folder), "--golden", str(golden)]) == 0
    assert read_manifest(golden).reference_shape == (8, 1)
    code, report = _check(tmp_path, checkpoint, energy, "old")
    eager = report["rows"][0]
    assert code == 1 and eager["status"] == "fail"
    assert eager["reasons"][0] == ("eager output does not match the golden reference: output shape (8,) != reference (8, 1); this golden "
                                   "set (format 1) holds one (batch, classes) output: re-record it with `export-check golden record "
                                   "--force`, which keeps every output's shape")
    capsys.readouterr()
    assert main(["golden", "approve", str(checkpoint), "--arch", energy, "--golden", str(golden)]) == 2
    assert capsys.readouterr().err.strip() == (f"export-check: error: {checkpoint}: the model does not return one (batch, classes) "
                                               f"tensor, the one output the format-1 golden set {golden} holds; re-record it with "
                                               "`export-check golden record --force`, which keeps every output's shape")
    assert read_manifest(golden).reference_shape == (8, 1)  # unchanged
    assert main(["golden", "record", str(checkpoint), "--arch", energy, "--inputs", str(folder), "--golden", str(golden), "--force"]) == 0
    assert _check(tmp_path, checkpoint, energy, "new")[0] == 0


def test_a_batch_size_bug_on_the_second_output_fails_its_row(tmp_path: Path) -> None:
    """Issue 25: the batch-size check covers every compared output. ``SecondHeadBranch``'s second output
    moves by 0.01 when more than 8 samples come at once; a trace at batch size 16 keeps that branch for
    every size. The replay (two full batches of 16) agrees; at batch size 1 the second output is 0.01 off
    while the first is exact: the trace row must fail on output_1, and script (which keeps the branch) pass."""
    checkpoint = save_state(seeded(SecondHeadBranch), tmp_path / "model.pth")
    arch = f"{TESTS / 'arches.py'}:SecondHeadBranch"
    inputs = _samples(tmp_path / "samples", "features", count=32)
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(inputs), "--golden", str(tmp_path / "golden")]) == 0
    report = tmp_path / "r.json"
    code = main(["check", str(checkpoint), "--arch", arch, "--golden", str(tmp_path / "golden"), "--out", str(tmp_path / "out"), "--no-cache",
                 "-q", "--artifacts", "torchscript-trace,torchscript-script", "--json", str(report)])
    rows = {r["name"]: r for r in json.loads(report.read_text())["rows"]}
    assert code == 1 and rows["torchscript-script"]["status"] == "pass" and rows["eager"]["status"] == "pass"
    trace = rows["torchscript-trace"]
    assert trace["status"] == "fail" and trace["metrics"]["mae"] == 0.0  # the replay itself agrees to the bit
    found = [r for r in trace["reasons"] if not r.startswith("where: ")]  # "where:": the per-layer table's line
    assert found and all(r.startswith("output_1: ") for r in found), trace["reasons"]
    assert any("batch size 1" in r for r in trace["reasons"]), trace["reasons"]
    at_one = {r["size"]: r for r in trace["diagnostics"]["shapes"]["outputs"]["output_1"]}[1]
    # the same figure by hand: the trace file and eager, each at batch size 1, on the first sample
    model = seeded(SecondHeadBranch)
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    x = torch.from_numpy(np.load(inputs / "s000.npz")["x"])[None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.load warns of its deprecation; the pipeline records it
        traced = torch.jit.load(str(tmp_path / "out" / "torchscript-trace.pt"))
    with torch.inference_mode():
        (head, second), (eager_head, eager_second) = traced(x), model.eval()(x)
    assert np.array_equal(head.numpy(), eager_head.numpy())
    by_hand = float(np.abs(second.numpy() - eager_second.numpy()).mean())
    assert by_hand == pytest.approx(0.01, rel=1e-3) and at_one["worst_image_mae"] == pytest.approx(by_hand, rel=1e-4)
    # a real batch-size bug keeps its cause under a gate far below the float noise (issue 25, item 8): the run's own
    # observations judged again at 1e-9 (`export-check judge`, no torch); the 0.01 is 10^5 times eager's float noise here
    kept = "the export kept what its example batch computed"
    assert any(r.startswith("output_1: batch size 1: ") and kept in r for r in trace["reasons"]), trace["reasons"]
    again = tmp_path / "again.json"
    assert main(["judge", str(report), "--max-mae", "1e-9", "--json", str(again)]) == 1
    tight = {r["name"]: r for r in json.loads(again.read_text())["rows"]}["torchscript-trace"]
    second_head = [r for r in tight["reasons"] if r.startswith("output_1: batch size 1: ")]
    assert len(second_head) == 1 and kept in second_head[0] and "eager moves by MAE 0.01" in second_head[0], tight["reasons"]
    assert "float noise" not in second_head[0]
