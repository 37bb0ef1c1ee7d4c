"""ONNX past protobuf's 2 GiB (issue 43, items 1 and 3), at a size the suite can afford: the bundled ResNet
(315 KB of weights) forced over a lowered limit (``EXPORT_CHECK_ONNX_EXTERNAL_ABOVE``, artifacts/_external.py),
so every ONNX kind takes the path a 3-7 B model takes: its weights in one ``<name>.data`` beside the graph.

Every ONNX row builds and passes from its two files in ``--out``, with the MAE onnxruntime gives when run by
hand on the same files; the cache seals both and refuses one altered byte in the ``.data``; a warm run writes
no artifact byte (the same inodes, or the cache's linked); a bundle carries both files, replays them to the
same MAE and refuses one altered byte in either.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN
from export_check.cache.secret import KEY_ENV
from export_check.cli import main

KINDS = ("onnx", "onnx-simplified", "onnx-int8-dynamic", "onnx-int8-static", "onnx-fp16", "onnx-dynamo", "onnx-ort")
EXTERNAL = tuple(k for k in KINDS if k != "onnx-ort")  # .ort is a flatbuffer: one file, its weights inside
LOWERED = "10000"  # bytes: the ResNet's graph and weights total 315,145


def _run(folder: Path, out: str, tag: str, *flags: str) -> dict:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPORT_CHECK_ONNX_EXTERNAL_ABOVE", LOWERED)
        patch.setenv(KEY_ENV, str(folder / "lab.key"))
        code = main(["check", str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN), "--artifacts", ",".join(KINDS),
                     "--out", str(folder / out), "--cache-dir", str(folder / "cache"), "--json", str(folder / f"{tag}.json"), "-q", *flags])
    assert code == 0, tag
    return json.loads((folder / f"{tag}.json").read_text())


def _files(out: Path) -> dict[str, tuple[int, int, int]]:
    """Every artifact file in ``out``: name -> (inode, links, mtime_ns)."""
    return {p.name: (p.stat().st_ino, p.stat().st_nlink, p.stat().st_mtime_ns) for p in out.iterdir() if p.name.startswith("onnx")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """A cold run (bundled), its files' identities, then a warm run in the same --out and one in a fresh --out."""
    folder = tmp_path_factory.mktemp("external")
    cold = _run(folder, "out", "cold", "--bundle", str(folder / "a.bundle"))
    before = _files(folder / "out")
    warm = _run(folder, "out", "warm")
    fresh = _run(folder, "fresh", "fresh")
    return folder, cold, before, warm, fresh


def test_every_onnx_row_builds_and_passes_from_its_graph_and_one_data_file(runs) -> None:
    import onnx

    folder, cold, *_ = runs
    rows = {r["name"]: r for r in cold["rows"]}
    assert {name: rows[name]["status"] for name in KINDS} == dict.fromkeys(KINDS, "pass"), {n: rows[n]["reasons"] for n in KINDS}
    for name in EXTERNAL:
        artifact = rows[name]["artifact"]
        graph = Path(artifact["path"])
        data = graph.with_name(f"{graph.name}.data")
        assert graph.parent == folder / "out" and data.is_file(), name
        assert artifact["parts"] == [{"name": data.name, "size_bytes": data.stat().st_size,
                                      "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}], name
        assert artifact["size_bytes"] == graph.stat().st_size + data.stat().st_size  # the report names the total
        model = onnx.load(str(graph), load_external_data=False)
        locations = {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}
        assert locations == {data.name}, (name, locations)  # ONE data file, named after the graph
        assert data.stat().st_size > 50_000 and graph.stat().st_size < data.stat().st_size, name
        assert "external_data" in rows[name]["details"], name
    assert "parts" not in rows["onnx-ort"]["artifact"]
    assert not list((folder / "out").glob(".building-*")) and not list((folder / "out").glob("*scratch*"))


def test_each_rows_mae_is_onnxruntimes_on_the_same_files_by_hand(runs) -> None:
    """Truth from outside the tool: each file in --out loaded by onnxruntime here, at the row's pinned level, fed the
    golden inputs at the run's batch size on one thread, beside eager torch on the same batches."""
    import onnxruntime as ort
    import torch

    from export_check.golden.manifest import load_golden
    from export_check.model import load_model

    folder, cold, *_ = runs
    rows = {r["name"]: r for r in cold["rows"]}
    golden = load_golden(DEFAULT_GOLDEN)
    x = np.stack([golden.load_input(item) for item in golden.inputs]).astype(np.float32)
    model = load_model(DEFAULT_CHECKPOINT, DEFAULT_ARCH, {}, None)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.inference_mode():
            eager = np.concatenate([model(torch.from_numpy(x[i:i + 16])).numpy() for i in range(0, len(x), 16)])
    finally:
        torch.set_num_threads(threads)
    levels = {"onnx-ort": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}
    for name in ("onnx", "onnx-simplified", "onnx-int8-dynamic", "onnx-fp16", "onnx-dynamo", "onnx-ort"):
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.graph_optimization_level = levels.get(name, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
        session = ort.InferenceSession(rows[name]["artifact"]["path"], options, providers=["CPUExecutionProvider"])
        feed = session.get_inputs()[0].name
        shipped = np.concatenate([session.run(None, {feed: x[i:i + 16]})[0] for i in range(0, len(x), 16)])
        mae = float(np.abs(shipped.astype(np.float64) - eager.astype(np.float64)).mean())
        assert rows[name]["metrics"]["mae"] == pytest.approx(mae, rel=1e-5, abs=1e-12), name


def test_a_warm_run_writes_no_artifact_byte(runs) -> None:
    folder, cold, before, warm, fresh = runs
    assert {r["name"]: r["cache"] for r in warm["rows"] if r["name"] in KINDS} == dict.fromkeys(KINDS, "hit")
    assert _files(folder / "out") == before  # the same inodes, links and mtimes: nothing rewritten
    assert [r["artifact"] for r in warm["rows"] if r["name"] in KINDS] == [r["artifact"] for r in cold["rows"] if r["name"] in KINDS]
    # a fresh --out: each graph (and the .ort) is the cache's own file, hard-linked; a .data is copied (onnx refuses
    # external data with two links, "a potential hardlink attack") and loads with onnx.load
    import onnx

    cached = {p.stat().st_ino for p in (folder / "cache").rglob("*") if p.is_file()}
    for name, (inode, links, _) in _files(folder / "fresh").items():
        if name.endswith(".data"):
            assert links == 1 and inode not in cached, name
        else:
            assert links == 2 and inode in cached, name
    assert len(onnx.load(str(folder / "fresh" / "onnx.onnx")).graph.initializer) > 10
    assert {r["name"]: r["metrics"]["mae"] for r in fresh["rows"]} == {r["name"]: r["metrics"]["mae"] for r in cold["rows"]}


def test_one_altered_byte_in_the_cached_data_file_is_refused_and_rebuilt(runs, tmp_path: Path) -> None:
    folder, cold, *_ = runs
    original = (folder / "out" / "onnx.onnx.data").read_bytes()
    graph = (folder / "out" / "onnx.onnx").read_bytes()  # the onnx entry: its graph's bytes (onnx-simplified's .data is the same)
    (entry,) = [p.parent for p in (folder / "cache").rglob("*.onnx") if p.read_bytes() == graph]
    (data,) = [p for p in entry.glob("*.data") if p.read_bytes() == original]
    altered = bytearray(data.read_bytes())
    altered[len(altered) // 2] ^= 0x01
    data.write_bytes(bytes(altered))
    report = _run(folder, "altered", "altered")
    rows = {r["name"]: r for r in report["rows"]}
    assert rows["onnx"]["cache"] == "rebuilt" and rows["onnx"]["status"] == "pass", rows["onnx"]
    assert any("damaged" in note and "changed (sha256" in note for note in rows["onnx"]["notes"]), rows["onnx"]["notes"]
    assert (folder / "altered" / "onnx.onnx.data").read_bytes() == original  # --out holds the measured bytes, never the altered


def test_a_bundle_carries_both_files_replays_them_and_refuses_one_altered_byte_in_either(runs, tmp_path: Path, capsys) -> None:
    folder, cold, *_ = runs
    bundle = folder / "a.bundle"
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        infos = {i.filename: i for i in archive.infolist()}
    assert {f"artifacts/{k}.onnx.data" for k in EXTERNAL} <= names
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(folder / "lab.key"))
        assert main(["replay", str(bundle), "--out", str(tmp_path / "replayed"), "--json", str(tmp_path / "replay.json"), "-q"]) == 0
        replayed = {r["name"]: r for r in json.loads((tmp_path / "replay.json").read_text())["rows"]}
        built = {r["name"]: r for r in cold["rows"]}
        for name in EXTERNAL:
            assert replayed[name]["status"] == "pass" and replayed[name]["metrics"]["mae"] == pytest.approx(built[name]["metrics"]["mae"], rel=1e-6)
            assert (tmp_path / "replayed" / f"{name}.onnx.data").read_bytes() == (folder / "out" / f"{name}.onnx.data").read_bytes()
        data = bundle.read_bytes()
        for member in ("artifacts/onnx.onnx.data", "artifacts/onnx.onnx"):
            info = infos[member]
            altered = bytearray(data)
            altered[info.header_offset + 30 + len(member.encode()) + info.file_size // 2] ^= 0x01  # a stored member's bytes
            path = tmp_path / f"{Path(member).name}.bundle"
            path.write_bytes(bytes(altered))
            capsys.readouterr()
            assert main(["replay", str(path), "--out", str(tmp_path / path.stem), "-q"]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"member {member} was altered" in err and "Traceback" not in err, (member, err)


def test_the_limit_is_read_from_the_environment_and_a_bad_value_is_one_line(monkeypatch) -> None:
    from export_check.artifacts import _external
    from export_check.errors import ArtifactError

    monkeypatch.delenv(_external.ENV, raising=False)
    assert _external.external_above() == _external.EXTERNAL_ABOVE == (2 << 30) - (64 << 20)
    monkeypatch.setenv(_external.ENV, "12345")
    assert _external.external_above() == 12345
    monkeypatch.setenv(_external.ENV, "2GB")
    with pytest.raises(ArtifactError, match="EXPORT_CHECK_ONNX_EXTERNAL_ABOVE='2GB' is not a number of bytes"):
        _external.external_above()
    assert os.environ[_external.ENV] == "2GB"
