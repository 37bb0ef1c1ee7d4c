"""Targets without Python (issue 46, item 3): `replay --target node` runs the bundle's onnxruntime rows in onnxruntime-node,
`--target browser` in onnxruntime-web (WebAssembly) in a real headless Chromium; each row's MAE equals the same runtime
driven by hand here (a tiny Node script, a tiny page served by this test's own server: outputs compared with numpy
against the bundle's eager outputs); `merge` shows the build, the CPU target and the browser side by side; without Node
or Chromium the rows are not applicable with the reason.

The bundle: the bundled model checked with the default group's three ONNX kinds and one torch kind (its row is not
applicable on both targets), once per module. The npm packages (pinned in exporter/jstargets/package-lock.json) are
installed once into build/test-js-runtimes/ of the repository and kept between runs, as a CI cache would keep them.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO
from export_check.cache.secret import KEY_ENV
from export_check.cli import main
from export_check.jstargets.bridge import CHROMIUM_FLAGS
from export_check.jstargets.npm import packages_folder
from export_check.jstargets.target import CHROMIUMS

KINDS = "onnx,onnx-simplified,onnx-int8-dynamic,torchscript-trace"
ONNX_ROWS = ("onnx", "onnx-simplified", "onnx-int8-dynamic")
CACHE = REPO / "build" / "test-js-runtimes"


def _needs(program: str | None, name: str, install: str) -> str:
    if program is None:
        message = f"{name} is not installed: apt-get update && apt-get install -y {install}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + " (CI must install it: .ci/run)")
        pytest.skip(message)
    return program


def _node() -> str:
    return _needs(shutil.which("node") if shutil.which("npm") else None, "node (with npm)", "nodejs npm")


def _chromium() -> str:
    return _needs(next((p for n in CHROMIUMS if (p := shutil.which(n))), None), "chromium", "chromium")


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    """The bundle, the build's report, the key that seals both, and the bundle's batches as raw files for the hand runs."""
    folder = tmp_path_factory.mktemp("js")
    key = folder / "lab.key"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(key))
        assert main(["check", str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", KINDS, "-q", "--out", str(folder / "out"),
                     "--json", str(folder / "build.json"), "--bundle", str(folder / "m.bundle")]) == 0
    hand = folder / "hand"
    hand.mkdir()
    batches = []
    with zipfile.ZipFile(folder / "m.bundle") as archive:
        for row in ONNX_ROWS:
            (hand / f"{row}.onnx").write_bytes(archive.read(f"artifacts/{row}.onnx"))
        for name in sorted(n for n in archive.namelist() if n.startswith("inputs/")):
            start = name.split("/")[1]
            x = np.load(io.BytesIO(archive.read(name)))
            (hand / f"{start}.bin").write_bytes(x.astype("<f4").tobytes())
            batches.append({"start": start, "dims": list(x.shape), "eager": np.load(io.BytesIO(archive.read(f"eager/{start}/logits.npy")))})
        text = archive.read("bundle.json").decode()
    threads = json.loads("{" + text[text.index('"artifacts"'):])["settings"]["threads"]
    return folder, key, hand, batches, threads


def _replay(lab, target: str) -> dict:
    folder, key = lab[0], lab[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(key))
        code = main(["replay", str(folder / "m.bundle"), "--target", target, "--cache-dir", str(CACHE), "--out", str(folder / target),
                     "--json", str(folder / f"{target}.json"), "-q"])
    report = json.loads((folder / f"{target}.json").read_text())
    assert code == 0, report["rows"]
    return report


@pytest.fixture(scope="module")
def node_report(lab) -> dict:
    _node()
    return _replay(lab, "node")


@pytest.fixture(scope="module")
def browser_report(lab) -> dict:
    _node(), _chromium()
    return _replay(lab, "browser")


def _mae(outputs: dict[str, np.ndarray], batches: list[dict]) -> float:
    """The MAE against the bundle's eager outputs over every logit of every batch, in float64 (as the replay accumulates it)."""
    total = sum(float(np.abs(outputs[b["start"]].astype(np.float64) - b["eager"].astype(np.float64)).sum()) for b in batches)
    return total / sum(b["eager"].size for b in batches)


# onnxruntime-node driven by hand: the session pinned as a replay pins it (the check's intra-op threads, one inter-op thread,
# sequential, every graph optimisation); each batch's logits written raw beside its input
BY_HAND_NODE = """
const ort = require(process.argv[2]);
const [hand, threads, ...rows] = process.argv.slice(3);
const fs = require('fs');
const batches = JSON.parse(fs.readFileSync(`${hand}/batches.json`));
(async () => {
  for (const row of rows) {
    const s = await ort.InferenceSession.create(`${hand}/${row}.onnx`, {intraOpNumThreads: +threads, interOpNumThreads: 1,
      executionMode: 'sequential', graphOptimizationLevel: 'all'});
    for (const b of batches) {
      const raw = fs.readFileSync(`${hand}/${b.start}.bin`);
      const x = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
      const out = await s.run({[s.inputNames[0]]: new ort.Tensor('float32', x, b.dims)});
      const y = out[s.outputNames[0]].data;
      fs.writeFileSync(`${hand}/node-${row}-${b.start}.out`, Buffer.from(y.buffer, y.byteOffset, y.byteLength));
    }
  }
})().catch((e) => { console.error(e); process.exit(1); });
"""

# onnxruntime-web driven by hand in a page of this test's own server: one WebAssembly thread, the same session options;
# each batch's logits POSTed back raw
BY_HAND_PAGE = """<!DOCTYPE html><meta charset="utf-8"><script type="module">
import * as ort from './dist/ort.wasm.min.mjs';
ort.env.wasm.numThreads = 1; ort.env.wasm.wasmPaths = new URL('./dist/', location.href).href;
const {rows, threads, batches} = await (await fetch('job.json')).json();
try {
  for (const row of rows) {
    const s = await ort.InferenceSession.create(`${row}.onnx`, {intraOpNumThreads: threads, interOpNumThreads: 1,
      executionMode: 'sequential', graphOptimizationLevel: 'all'});
    for (const b of batches) {
      const x = new Float32Array(await (await fetch(`${b.start}.bin`)).arrayBuffer());
      const out = await s.run({[s.inputNames[0]]: new ort.Tensor('float32', x, b.dims)});
      await fetch(`out/browser-${row}-${b.start}.out`, {method: 'POST', body: out[s.outputNames[0]].data});
    }
  }
  await fetch('out/done', {method: 'POST', body: 'ok'});
} catch (e) { await fetch('out/done', {method: 'POST', body: String(e.stack || e)}); }
</script>"""


def _outputs(hand: Path, prefix: str, batches: list[dict]) -> dict[str, np.ndarray]:
    return {b["start"]: np.frombuffer((hand / f"{prefix}-{b['start']}.out").read_bytes(), "<f4").reshape(b["eager"].shape) for b in batches}


@pytest.fixture(scope="module")
def node_by_hand(lab, node_report) -> dict[str, dict[str, np.ndarray]]:
    _, _, hand, batches, threads = lab
    (hand / "batches.json").write_text(json.dumps([{"start": b["start"], "dims": b["dims"]} for b in batches]))
    modules = packages_folder(CACHE) / "node_modules"
    (hand / "by_hand.js").write_text(BY_HAND_NODE)
    done = subprocess.run([_node(), str(hand / "by_hand.js"), str(modules / "onnxruntime-node"), str(hand), str(threads), *ONNX_ROWS],
                          timeout=300, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return {row: _outputs(hand, f"node-{row}", batches) for row in ONNX_ROWS}


@pytest.fixture(scope="module")
def browser_by_hand(lab, browser_report, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, np.ndarray]]:
    _, _, hand, batches, threads = lab
    (hand / "dist").symlink_to(packages_folder(CACHE) / "node_modules" / "onnxruntime-web" / "dist")
    (hand / "page.html").write_text(BY_HAND_PAGE)
    (hand / "job.json").write_text(json.dumps({"rows": ONNX_ROWS, "threads": threads,
                                               "batches": [{"start": b["start"], "dims": b["dims"]} for b in batches]}))
    done = threading.Event()
    said: list[str] = []

    class Handler(SimpleHTTPRequestHandler):
        extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript", ".wasm": "application/wasm"}

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(hand), **kwargs)

        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            name = self.path.rsplit("/", 1)[1]
            if name == "done":
                said.append(body.decode())
                done.set()
            else:
                (hand / name).write_bytes(body)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = tmp_path_factory.mktemp("profile")
    browser = subprocess.Popen([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"http://127.0.0.1:{server.server_address[1]}/page.html"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert done.wait(timeout=300) and said == ["ok"], said
    finally:
        os.killpg(browser.pid, 15)
        browser.wait(timeout=30)
        server.shutdown()
        server.server_close()
    return {row: _outputs(hand, f"browser-{row}", batches) for row in ONNX_ROWS}


def _rows(report: dict) -> dict[str, dict]:
    return {r["name"]: r for r in report["rows"]}


@pytest.mark.parametrize("target", ["node", "browser"])
def test_each_onnx_row_is_judged_in_the_javascript_runtime_with_the_mae_it_gives_by_hand(lab, target: str, request) -> None:
    report = request.getfixturevalue(f"{target}_report")
    by_hand = request.getfixturevalue(f"{target}_by_hand")
    rows = _rows(report)
    package = {"node": "onnxruntime-node", "browser": "onnxruntime-web"}[target]
    assert report["target"] == target and dict(report["versions"])[package] == "1.31.1"
    for row in ONNX_ROWS:
        truth = _mae(by_hand[row], lab[3])
        assert rows[row]["status"] == "pass" and abs(rows[row]["metrics"]["mae"] - truth) <= 1e-12 * max(1.0, truth), (target, row, truth)
    torch_row = rows["torchscript-trace"]
    assert torch_row["status"] == "not-applicable"
    assert f"the {target} target runs the onnxruntime rows only (in {package})" in torch_row["reasons"][0]
    assert any(package in note for note in report["run_notes"])


def test_the_browser_differs_from_native_onnxruntime_by_what_its_kernels_compute(lab, node_by_hand, browser_by_hand, capsys) -> None:
    """What WebAssembly changes: the outputs of onnxruntime-web against native onnxruntime on this CPU (onnxruntime-node, and
    this Python's onnxruntime, the build's runtime) for the same inputs, compared with numpy; none of it is the tool's. The
    float rows stay far inside the float gate of each other; the numbers are printed (docs/how-to/replay-on-device.md)."""
    import onnxruntime as ort

    _, _, hand, batches, threads = lab
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    measured = []
    for row in ONNX_ROWS:
        session = ort.InferenceSession(str(hand / f"{row}.onnx"), options, providers=["CPUExecutionProvider"])
        python = {b["start"]: session.run(None, {session.get_inputs()[0].name: np.frombuffer((hand / f"{b['start']}.bin").read_bytes(), "<f4")
                                                 .reshape(b["dims"])})[0] for b in batches}
        against = {name: _mae(browser_by_hand[row], [{"start": b["start"], "eager": native[b["start"]]} for b in batches])
                   for name, native in (("node", node_by_hand[row]), ("python", python))}
        measured.append(f"{row}: wasm vs onnxruntime-node MAE {against['node']:.3e}, "
                        f"vs onnxruntime {ort.__version__} (Python) {against['python']:.3e}")
        assert all(np.isfinite(v) for v in against.values())
        if row != "onnx-int8-dynamic":
            assert max(against.values()) < 1e-5, (row, against)
    with capsys.disabled():
        print("\n" + "\n".join(measured))


def test_merge_shows_the_build_the_cpu_target_and_the_browser_side_by_side(lab, node_report, browser_report, capsys) -> None:
    folder = lab[0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(lab[1]))
        capsys.readouterr()
        code = main(["merge", *(str(folder / f"{name}.json") for name in ("build", "node", "browser")), "--json", str(folder / "merged.json")])
    text = capsys.readouterr().out
    assert code == 0
    build = _rows(json.loads((folder / "build.json").read_text()))
    for row in ONNX_ROWS:
        mae = {name: f"{report[row]['metrics']['mae']:.2e}" for name, report in (("build", build), ("node", _rows(node_report)),
                                                                                   ("browser", _rows(browser_report)))}
        assert f"  {row}: build PASS MAE {mae['build']}; node PASS MAE {mae['node']}; browser PASS MAE {mae['browser']}\n" in text
    merged = json.loads((folder / "merged.json").read_text())
    assert {(c["artifact"], c["target"]) for c in merged["across_machines"]} >= {(r, t) for r in ONNX_ROWS for t in ("node", "browser")}


def test_without_node_or_chromium_the_rows_are_not_applicable_with_the_reason(lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, str(lab[1]))
    monkeypatch.setenv("PATH", str(tmp_path))  # neither node nor chromium on it
    for target, reason in (("node", "node is not installed here (apt-get install nodejs npm)"),
                           ("browser", "chromium is not installed here (apt-get install chromium)")):
        code = main(["replay", str(lab[0] / "m.bundle"), "--target", target, "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / target),
                     "--json", str(tmp_path / f"{target}.json"), "-q"])
        rows = _rows(json.loads((tmp_path / f"{target}.json").read_text()))
        assert code == 1  # a replay that judged nothing never passes
        for row in ONNX_ROWS:
            assert rows[row]["status"] == "not-applicable" and reason in rows[row]["reasons"][0], rows[row]
    assert not (tmp_path / "cache").exists()  # nothing was installed
