"""A failing ONNX row's smallest failing subgraph (issue 30, item 4), on real files: the bundled ResNet's
fp16 file under an MAE gate far below what float16 can hold, and the catalogue's in-place op on a view
that the TorchScript-based exporter drops. The truth is measured by hand: the written subgraph run with
onnxruntime on the saved inputs, its error against the saved reference in numpy; the saved reference
and inputs against the fp32 source file run by hand, or eager's own module outputs, on the same sample."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, TESTS, save_state, seeded
from export_check.cli import main
from export_check.golden.manifest import load_golden

# float16 holds 11 significant bits: a value near 1 is off by up to ~2.4e-4 after one rounding, so no
# fp16 value of this ResNet is within 1e-5 of its fp32 value on average, on any CPU (measured: 2.7e-4 at
# the first Conv, 1e-3 at the logits)
FP16_MAX_MAE = 1e-5
FLOAT_MAX_MAE = 1e-5  # the float family's default gate


def _check(argv: list[str], out: Path) -> tuple[int, dict, str]:
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main([*argv, "--out", str(out / "artifacts"), "-q", "--no-cache", "--json", str(out / "r.json"),
                     "--markdown", str(out / "r.md")])
    return code, json.loads((out / "r.json").read_text()), printed.getvalue()


def _by_hand(reduced: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """The saved data, and the subgraph run by hand with onnxruntime on its saved inputs, with its output."""
    data = dict(np.load(reduced["data"]))
    session = ort.InferenceSession(reduced["path"], providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: data[f"input_{k}"] for k, i in enumerate(session.get_inputs())})[0]
    return data, got.astype(np.float64), data["reference_0"].astype(np.float64)


def _values(path: Path, feeds: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """Tensors ``names`` of the ONNX file at ``path`` on ``feeds`` (a graph input: as fed), exposed as outputs by hand."""
    proto = onnx.load(str(path))
    known = {o.name for o in proto.graph.output} | set(feeds)
    proto.graph.output.extend(onnx.ValueInfoProto(name=n) for n in dict.fromkeys(names) if n not in known)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    out = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    return {n: feeds[n] if n in feeds else out[n] for n in names}


def _command_mae(command: str) -> float:
    """The README's one line, run as it is printed (the interpreter swapped for this one), its MAE read back."""
    assert command.startswith("python -c ") and "torch" not in command and "export_check" not in command
    printed = subprocess.run(f"{sys.executable} {command.removeprefix('python ')}", shell=True, check=True, capture_output=True,
                             text=True).stdout
    return float(re.search(r"MAE (\S+) max", printed).group(1))


# ---- the bundled ResNet's fp16 file -------------------------------------------------------------------


@pytest.fixture(scope="module")
def fp16(tmp_path_factory):
    out = tmp_path_factory.mktemp("fp16")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(out / "cache.key"))  # the report's seal, for `export-check judge` below
        code, report, printed = _check([str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx-fp16",
                                        "--fp16-max-mae", str(FP16_MAX_MAE)], out)
    return code, report, printed, out


def test_fp16_subgraph_is_smaller_and_fails_the_same_gate_on_its_own(fp16) -> None:
    code, report, printed, out = fp16
    row = next(r for r in report["rows"] if r["name"] == "onnx-fp16")
    assert code == 1 and row["status"] == "fail"
    reduced = row["diagnostics"]["reduced"]
    assert reduced["error"] is None and reduced["gate"].startswith(f"MAE<={FP16_MAX_MAE:g}")
    model_nodes = len(onnx.load(row["artifact"]["path"]).graph.node)
    sub = onnx.load(reduced["path"])
    onnx.checker.check_model(sub)
    assert reduced["model_nodes"] == model_nodes and reduced["nodes"] == len(sub.graph.node) < model_nodes
    data, got, reference = _by_hand(reduced)
    mae = float(np.abs(got - reference).mean())
    assert mae > FP16_MAX_MAE  # fails the row's gate on its own
    assert reduced["metrics"]["mae"] == pytest.approx(mae, rel=1e-3)
    assert _command_mae(reduced["command"]) == pytest.approx(mae, rel=1e-3)
    # the truth behind the saved data: its inputs are the golden sample (cut at the graph input, or at a
    # tensor the fp32 source computes), its reference the fp32 source file's value of the same tensor
    golden = load_golden(DEFAULT_GOLDEN)
    image = next(batch for _, batch in golden.batches(len(golden)))[reduced["sample"] : reduced["sample"] + 1]
    names = [i.name for i in sub.graph.input]
    fp32 = _values(Path(row["artifact"]["path"]).with_name("onnx.onnx"), {"input": image}, names + reduced["outputs"])
    for k, name in enumerate(names):  # fed as the fp16 graph holds them: the fp32 value rounded to float16 at most
        np.testing.assert_allclose(data[f"input_{k}"].astype(np.float32), fp32[name], rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(reference, fp32[reduced["outputs"][0]], rtol=0, atol=1e-6)
    # and every view says so
    assert f"reduced: {reduced['nodes']} of {model_nodes} nodes" in printed
    assert "reproduce onnx-fp16" in printed and reduced["command"] in printed
    assert reduced["command"] in (out / "r.md").read_text()


def test_a_passing_run_reduces_nothing(tmp_path) -> None:
    code, report, printed = _check([str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx-fp16"], tmp_path)
    assert code == 0
    assert all(r["diagnostics"] is None or r["diagnostics"]["reduced"] is None for r in report["rows"])
    assert not (tmp_path / "artifacts" / "reduced").exists() and "reproduce" not in printed


# ---- an exporter bug from the catalogue ----------------------------------------------------------------


@pytest.fixture(scope="module")
def inplace(tmp_path_factory, digit_images):
    """InplaceOnView (tests/data/catalogue_arches.py): ``x.narrow(1, 0, 32).clamp_(max=0.05)`` inside module
    ``clamp``; the TorchScript-based exporter writes no node for it."""
    arches = TESTS / "data" / "catalogue_arches.py"
    spec = importlib.util.spec_from_file_location("catalogue_arches", arches)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = tmp_path_factory.mktemp("inplace")
    model = seeded(module.InplaceOnView)
    checkpoint = save_state(model, root / "model.pth")
    arch = f"{arches}:InplaceOnView"
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(digit_images), "--golden", str(root / "golden"),
                 "--size", "32", "-q"]) == 0
    code, report, printed = _check([str(checkpoint), "--arch", arch, "--golden", str(root / "golden"), "--artifacts", "onnx"], root)
    return code, report, printed, model.eval(), root


def test_exporter_bug_subgraph_is_smaller_and_fails_the_float_gate_on_its_own(inplace) -> None:
    code, report, printed, model, root = inplace
    row = next(r for r in report["rows"] if r["name"] == "onnx")
    assert code == 1 and row["status"] == "fail"
    reduced = row["diagnostics"]["reduced"]
    assert reduced["error"] is None and reduced["reference"] == "eager"
    model_nodes = len(onnx.load(row["artifact"]["path"]).graph.node)
    assert reduced["nodes"] == len(onnx.load(reduced["path"]).graph.node) < model_nodes
    data, got, reference = _by_hand(reduced)
    mae = float(np.abs(got - reference).mean())
    assert mae > FLOAT_MAX_MAE
    assert _command_mae(reduced["command"]) == pytest.approx(mae, rel=1e-3)
    # the truth behind the saved data, from eager itself on the same golden sample: the reference is
    # what the clamp module returns (the value the graph lost), the inputs are eager module outputs
    golden = load_golden(root / "golden")
    image = next(batch for _, batch in golden.batches(len(golden)))[reduced["sample"] : reduced["sample"] + 1]
    outputs: dict[str, np.ndarray] = {}

    def keep(name: str):
        def hook(module, args, out) -> None:
            outputs.setdefault(name, out.detach().clone().numpy())

        return hook

    hooks = [m.register_forward_hook(keep(name)) for name, m in model.named_modules()]
    with torch.inference_mode():
        model(torch.from_numpy(image))
    for hook in hooks:
        hook.remove()
    np.testing.assert_allclose(reference, outputs["clamp"], rtol=0, atol=1e-6)
    fed = [data[f"input_{k}"] for k in range(len(reduced["inputs"]))]
    assert all(any(v.shape == o.shape and np.allclose(v, o, rtol=0, atol=1e-6) for o in outputs.values()) for v in fed)
    # what the export lost, and nothing else: the subgraph (the trunk's last ReLU, fed eager's projection)
    # computes the clamp's input; eager's clamp holds the first 32 features at 0.05 at most
    assert reduced["ops"] == ["Relu"] and got.shape == reference.shape == (1, 64)
    np.testing.assert_allclose(reference[:, :32], np.minimum(got[:, :32], 0.05), rtol=0, atol=1e-6)
    np.testing.assert_allclose(reference[:, 32:], got[:, 32:], rtol=0, atol=1e-6)
    assert float(got[:, :32].max()) > 0.05
    assert "reduced: " in printed and "reproduce onnx" in printed


def test_a_cached_failing_row_keeps_its_reduction_and_a_new_gate_reduces_again(tmp_path) -> None:
    """The record is an observation: a cache hit restores it as measured, its files put in this run's --out
    and named there (issue 47: it named the first run's); a gate it was not reduced under makes the row
    observed again (the files reused, the row replayed), as a per-layer table does."""
    base = [str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx-fp16", "--cache-dir", str(tmp_path / "cache"),
            "-q", "--json", str(tmp_path / "r.json")]

    def run(gate: float, out: str = "artifacts") -> dict:
        with contextlib.redirect_stdout(io.StringIO()):
            assert main([*base, "--out", str(tmp_path / out), "--fp16-max-mae", str(gate)]) == 1
        return next(r for r in json.loads((tmp_path / "r.json").read_text())["rows"] if r["name"] == "onnx-fp16")

    cold = run(FP16_MAX_MAE)
    hit = run(FP16_MAX_MAE, "second")
    before, after = cold["diagnostics"]["reduced"], hit["diagnostics"]["reduced"]
    assert hit["cache"] == "hit" and {**after, "path": None, "data": None, "command": None} == {**before, "path": None, "data": None,
                                                                                                  "command": None}
    assert (after["path"], after["data"]) == (str(tmp_path / "second" / "reduced" / "onnx-fp16.onnx"),
                                              str(tmp_path / "second" / "reduced" / "onnx-fp16.npz"))
    assert Path(after["path"]).read_bytes() == Path(before["path"]).read_bytes()
    assert Path(after["data"]).read_bytes() == Path(before["data"]).read_bytes()
    shutil.rmtree(tmp_path / "artifacts")  # the first run's --out gone: the printed command runs on this run's files
    assert str(tmp_path / "artifacts") not in after["command"] and _command_mae(after["command"]) == pytest.approx(before["metrics"]["mae"],
                                                                                                                rel=1e-3)
    assert [r.replace(str(tmp_path / "second"), "OUT") for r in hit["reasons"]] == [
        r.replace(str(tmp_path / "artifacts"), "OUT") for r in cold["reasons"]]
    # issue 47: links planted in --out, to the user's files outside; the row keeps its verdict, its reduction says why it is not there
    home = tmp_path / "home"
    home.mkdir()
    for name in ("onnx-fp16.onnx", "onnx-fp16.npz", "model.onnx"):
        (home / name).write_bytes(f"the user's {name}\n".encode())
    before = {p.name: p.read_bytes() for p in home.iterdir()}
    for out in ("planted", "planted-too"):
        (tmp_path / out).mkdir()
        (tmp_path / out / "reduced").symlink_to(home)
        (tmp_path / out / "onnx-fp16.onnx").symlink_to(home / "model.onnx")  # the artifact's name: replaced, never followed
    refused = f"{tmp_path / 'planted' / 'reduced'} is a symbolic link, not a folder export-check made; not followed"
    planted = run(FP16_MAX_MAE, "planted")  # a hit: the cached reduction is refused on its way into --out
    assert planted["cache"] == "hit" and planted["status"] == "fail" and planted["diagnostics"]["reduced"]["error"] == refused
    assert f"reduced: no failing subgraph written: {refused}" in planted["reasons"]
    assert {p.name: p.read_bytes() for p in home.iterdir()} == before
    assert not (tmp_path / "planted" / "onnx-fp16.onnx").is_symlink() and planted["artifact"]["path"] == str(tmp_path / "planted" / "onnx-fp16.onnx")
    tighter = run(FP16_MAX_MAE / 10, "planted-too")  # reduced afresh: the reducer itself refuses to write through the link
    assert tighter["cache"] == "artifact" and tighter["diagnostics"]["reduced"]["gate"].startswith(f"MAE<={FP16_MAX_MAE / 10:g}")
    assert tighter["status"] == "fail" and tighter["diagnostics"]["reduced"]["error"] == refused.replace("planted", "planted-too")
    assert {p.name: p.read_bytes() for p in home.iterdir()} == before


def test_a_report_judged_again_under_another_gate_says_its_reduction_is_of_the_old_gate(fp16, capsys, monkeypatch) -> None:
    """`export-check judge REPORT.json` re-runs nothing: the stored reduction is shown as what it is, one
    reduced under the report's gate, and the run says a check with the new gate reduces again."""
    _, report, _, out = fp16
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(out / "cache.key"))
    reduced = next(r for r in report["rows"] if r["name"] == "onnx-fp16")["diagnostics"]["reduced"]
    assert main(["judge", str(out / "r.json"), "--fp16-max-mae", str(FP16_MAX_MAE / 10), "--json", str(out / "again.json")]) == 1
    printed = capsys.readouterr().out
    row = next(r for r in json.loads((out / "again.json").read_text())["rows"] if r["name"] == "onnx-fp16")
    line = next(r for r in row["reasons"] if r.startswith("reduced: "))
    assert f"reduced under {reduced['gate']}: a check with these gates reduces it again" in line
    assert row["diagnostics"]["reduced"] == reduced
    assert "onnx-fp16 (the reduced subgraph of a failing ONNX row)" in printed
