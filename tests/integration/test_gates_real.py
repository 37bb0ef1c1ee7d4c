"""atol/rtol and max-abs gates on the bundled model, against numpy.allclose run by hand on the same
outputs: the ONNX file reloaded with onnxruntime and the eager model, at the check's batch size."""

from __future__ import annotations

import contextlib
import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN
from export_check.cli import main
from export_check.golden.manifest import load_golden

# tests/run_narrowed.py repeats this module under capped instruction sets (README, "What varies by CPU")
pytestmark = [pytest.mark.cpu_sensitive, pytest.mark.cheap]

ATOL, RTOL, MAX_ABS = 1e-6, 1e-7, 2e-6


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory, nudged_checkpoint: Path):
    """The bundled ResNet nudged by NUDGE (conftest): eager breaks these tolerances against its reference on
    every CPU, not only where the kernels drift from the ones that recorded it."""
    out = tmp_path_factory.mktemp("gated")
    argv = [str(nudged_checkpoint), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx", "--out", str(out / "artifacts"), "-q",
            "--no-cache", "--atol", str(ATOL), "--rtol", str(RTOL), "--max-abs", str(MAX_ABS), "--batch-size", "16",
            "--json", str(out / "r.json"), "--junit", str(out / "r.xml"), "--markdown", str(out / "r.md"), "--html", str(out / "r.html")]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main(argv)
    return code, out, json.loads((out / "r.json").read_text()), printed.getvalue()


def _by_hand(onnx_file: Path, checkpoint: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The golden reference, eager's and the ONNX file's logits over the golden set, batch 16, without the tool's runners."""
    import onnxruntime as ort

    from models.resnet import ResNet

    torch.set_num_threads(1)
    model = ResNet()
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    model.eval()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(onnx_file), options, providers=["CPUExecutionProvider"])
    golden = load_golden(DEFAULT_GOLDEN)
    eager, onnx = [], []
    for _, batch in golden.batches(16):
        with torch.inference_mode():
            eager.append(model(torch.from_numpy(batch)).numpy())
        onnx.append(session.run(None, {session.get_inputs()[0].name: batch})[0])
    return golden.reference(), np.concatenate(eager), np.concatenate(onnx)


def test_allclose_counts_are_numpys_on_the_same_outputs(gated, nudged_checkpoint) -> None:
    code, out, report, _ = gated
    rows = {r["name"]: r for r in report["rows"]}
    reference, eager, onnx = _by_hand(Path(rows["onnx"]["artifact"]["path"]), nudged_checkpoint)
    for name, candidate, against in (("eager", eager, reference), ("onnx", onnx, eager)):
        c, a = candidate.astype(np.float64), against.astype(np.float64)
        outside = int((~np.isclose(c, a, rtol=RTOL, atol=ATOL)).sum())
        (count,) = rows[name]["metrics"]["tolerances"]
        assert (count["atol"], count["rtol"], count["values"]) == (ATOL, RTOL, c.size)
        # the tool's replay and ours run the same files at the same batch size: the same count, give or
        # take a value at the very edge of its bound (onnxruntime is not bit-identical run to run)
        assert abs(count["violations"] - outside) <= 2, (name, count["violations"], outside)
        # eager is nudged 4e-6 from its reference: broken on every CPU; onnxruntime against eager breaks them
        # where its kernels drift past 1e-6, and the verdict follows numpy's count either way
        assert outside > 0 or name == "onnx"
        diff = np.abs(c - a)
        broken = (outside > 0, float(diff.max()) > MAX_ABS)
        assert rows[name]["status"] == ("fail" if any(broken) else "pass"), (name, outside, float(diff.max()))
        assert broken[0] == any(r.startswith(f"allclose(atol={ATOL:g}, rtol={RTOL:g}): {count['violations']} of {c.size} values outside")
                                for r in rows[name]["reasons"])
        assert rows[name]["metrics"]["max_abs"] == pytest.approx(float(diff.max()), rel=1e-3, abs=1e-9)
        assert broken[1] == any(r.startswith("max abs error") for r in rows[name]["reasons"])
        assert rows[name]["gate"]["atol"] == ATOL and rows[name]["gate"]["max_abs"] == MAX_ABS
    assert code == 1 and report["thresholds"]["float"]["atol"] == ATOL and report["thresholds"]["eager"]["rtol"] == RTOL


def test_every_view_shows_the_gate_and_its_count(gated) -> None:
    _, out, report, printed = gated
    # the eager row: nudged from its reference, it breaks the gate on every CPU (the onnx row only where
    # onnxruntime drifts past it)
    failing = next(r for r in report["rows"] if r["name"] == "eager")
    (count,) = failing["metrics"]["tolerances"]
    cell = f"{count['violations']}/{count['values']}"
    gate = f"atol={ATOL:g} rtol={RTOL:g}"
    markdown = (out / "r.md").read_text()
    assert "| allclose |" in markdown and re.search(rf"\*\*eager\*\* \|[^\n]*\| {re.escape(cell)} \|", markdown)
    assert gate in markdown
    html = (out / "r.html").read_text()
    assert "<th>allclose</th>" in html and f"<td class='n'>{cell}</td>" in html and gate in html
    case = next(c for c in ET.parse(out / "r.xml").getroot().iter("testcase") if c.get("name") == "eager")
    system_out = case.find("system-out")
    assert system_out is not None and f"allclose: allclose(atol={ATOL:g}, rtol={RTOL:g}): {count['violations']} of" in (system_out.text or "")
    failure = case.find("failure")
    assert failure is not None and "allclose" in (failure.get("message") or "") + (failure.text or "")
    assert f"max_abs_at: sample {failing['metrics']['max_abs_at']['sample']}, element" in (system_out.text or "")
    # the terminal table (not a terminal here: 100 columns): an allclose column, the gate, the reason
    header = next(line for line in printed.splitlines() if line.startswith("verdict "))
    row = next(line for line in printed.splitlines() if line.split()[1:2] == ["eager"])
    assert header.split().index("allclose") == row.split().index(cell)
    assert f"gates: float MAE<=1e-05 & max<={MAX_ABS:g} & {gate}" in printed
    assert f"FAIL eager: allclose(atol={ATOL:g}, rtol={RTOL:g}): {count['violations']} of {count['values']} values outside" in printed


def test_cosine_and_snr_are_numpys_on_the_same_outputs_and_gate_every_view(tmp_path: Path, nudged_checkpoint: Path) -> None:
    """--min-snr and --min-cosine on the nudged ResNet: the tool's least cosine and SNR of eager (against
    its reference) and of the ONNX file (against eager) are numpy's on the same outputs, and the verdict
    follows them: eager's SNR (its logits moved by NUDGE) is about 128 dB, so a 200 dB gate fails it."""
    argv = [str(nudged_checkpoint), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx", "--out", str(tmp_path / "a"), "-q", "-v",
            "--no-cache", "--min-snr", "200", "--min-cosine", "0.999999", "--batch-size", "16", "--json", str(tmp_path / "r.json")]
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main(argv)
    report = json.loads((tmp_path / "r.json").read_text())
    rows = {r["name"]: r for r in report["rows"]}
    reference, eager, onnx = _by_hand(Path(rows["onnx"]["artifact"]["path"]), nudged_checkpoint)
    for name, candidate, against in (("eager", eager, reference), ("onnx", onnx, eager)):
        c, a = candidate.astype(np.float64), against.astype(np.float64)
        noise = float(np.sum((c - a) ** 2))
        snr = 10 * np.log10(float(np.sum(a**2)) / noise) if noise else None  # JSON: an infinite SNR is null
        cosine = float(min(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)) for x, y in zip(c, a, strict=True)))
        metrics = rows[name]["metrics"]
        # the same files at the same batch size: numpy's figures, give or take onnxruntime's run-to-run last bits
        assert (metrics["snr_db"] is None) == (snr is None) or abs(metrics["snr_db"] - snr) < 3, (name, metrics["snr_db"], snr)
        assert metrics["cosine"] == pytest.approx(cosine, abs=1e-9)
        assert rows[name]["gate"]["min_snr_db"] == 200 and rows[name]["gate"]["min_cosine"] == 0.999999
        snr_reason = [r for r in rows[name]["reasons"] if r.startswith("SNR ")]
        assert bool(snr_reason) == (snr is not None and snr < 200), (name, snr, rows[name]["reasons"])
        assert not any(r.startswith("cosine") for r in rows[name]["reasons"])  # 1 - 1e-12: far above the gate
    assert 110 < rows["eager"]["metrics"]["snr_db"] < 150 and rows["eager"]["status"] == "fail" and code == 1
    text = printed.getvalue()
    assert "gates: float MAE<=1e-05 & cos>=0.999999 & SNR>=200dB" in text
    # -v: a column each (in the header, or wrapped under each row when 100 columns are too few)
    shown = text.replace("\n    ", "  ")
    assert "SNR dB" in shown and re.search(rf"cos {rows['eager']['metrics']['cosine']:.6f}", shown), text
    assert f"FAIL eager: SNR {rows['eager']['metrics']['snr_db']:.3g} dB < 200 dB" in text


def test_the_accuracy_drop_gate_on_a_damaged_resnet_is_the_labels_counted_by_hand(tmp_path: Path) -> None:
    """The bundled ResNet with its class-0 logit raised by 6: eager's top-1 accuracy on the golden labels
    drops against the approved reference's. The tool's counts are the labels counted by hand (torch and the
    golden files, outside the tool); --max-accuracy-drop 1 fails the eager row with them, and the ONNX file,
    judged against that same eager model, loses nothing against it."""
    from models.resnet import ResNet

    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    state["fc.bias"] = state["fc.bias"] + torch.nn.functional.one_hot(torch.tensor(0), state["fc.bias"].numel()) * 6.0
    damaged = tmp_path / "damaged.pth"
    torch.save(state, damaged)
    report_path = tmp_path / "r.json"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main([str(damaged), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx", "--out", str(tmp_path / "a"), "-q",
                     "--no-cache", "--max-accuracy-drop", "1", "--json", str(report_path)])
    rows = {r["name"]: r for r in json.loads(report_path.read_text())["rows"]}
    golden = load_golden(DEFAULT_GOLDEN)
    labels = np.asarray(golden.labels())
    model = ResNet()
    model.load_state_dict(state)
    model.eval()
    with torch.inference_mode():
        eager = np.concatenate([model(torch.from_numpy(batch)).numpy() for _, batch in golden.batches(16)])
    mine, approved = float((eager.argmax(1) == labels).mean()), float((golden.reference().argmax(1) == labels).mean())
    assert approved - mine > 0.01, (approved, mine)  # the damage costs more than the 1 point gate
    m = rows["eager"]["metrics"]
    assert (m["labelled"], m["label_accuracy"], m["reference_label_accuracy"]) == (64, pytest.approx(mine), pytest.approx(approved))
    assert any(r.startswith(f"label accuracy {mine:.1%} against the reference's {approved:.1%}: a drop of") for r in rows["eager"]["reasons"])
    onnx = rows["onnx"]["metrics"]
    assert onnx["labelled"] == 64 and onnx["accuracy_drop"] == pytest.approx(0.0, abs=100 / 64 + 1e-9)  # one flip at most, at a near-tie
    assert rows["eager"]["gate"]["max_accuracy_drop"] == 1 and code == 1


def test_top_k_agreement_of_the_int8_file_is_numpys_on_the_same_outputs(tmp_path: Path, nudged_checkpoint: Path) -> None:
    """--min-topk 1 --top-k 3 on dynamic int8: the tool's top-3 agreement of the int8 ONNX file against eager
    is the share numpy counts on the same outputs (the file run by hand), and the verdict follows it."""
    argv = [str(nudged_checkpoint), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx-int8-dynamic", "--out", str(tmp_path / "a"),
            "-q", "--no-cache", "--int8-min-topk", "1", "--int8-top-k", "3", "--batch-size", "16", "--json", str(tmp_path / "r.json")]
    with contextlib.redirect_stdout(io.StringIO()):
        main(argv)
    row = next(r for r in json.loads((tmp_path / "r.json").read_text())["rows"] if r["name"] == "onnx-int8-dynamic")
    _, eager, int8 = _by_hand(Path(row["artifact"]["path"]), nudged_checkpoint)
    same = [set(np.argsort(-c)[:3]) == set(np.argsort(-e)[:3]) for e, c in zip(eager, int8, strict=True)]
    measured = row["metrics"]["topk_agreement"]["3"]
    # the same file at the same batch size: numpy's share, give or take a near-tie onnxruntime breaks otherwise
    assert abs(measured - float(np.mean(same))) <= 1 / 64 + 1e-9, (measured, float(np.mean(same)))
    failed = any(r.startswith("top-3 agreement") for r in row["reasons"])
    assert failed == (measured < 1.0) and row["gate"]["top_k"] == 3 and row["gate"]["min_topk"] == 1
