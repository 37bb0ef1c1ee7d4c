"""Which runtime release changed it (issue 46): `bisect` replays a bundle over onnxruntime releases, each in a
torch-free environment of its own, and names the first release that judges a row differently.

The real boundary on the bundled model (a manual sweep of 17 releases from 1.15.0 to 1.32.0, each replayed by
hand): the int8 ONNX row (dynamic int8, ConvInteger) is an error up to onnxruntime 1.23.2 ("Could not find an
implementation for ConvInteger(10)") and passes from 1.24.1 on (1.24.0 is not on the index), with the build's MAE.
The test bisects the 5 releases 1.23.0-1.24.2 around it.

Cheap on re-runs: the environments and uv's own cache live in build/test-runtime-envs/ of the repository (kept
between runs, as a CI cache would keep them; `export-check cache prune --cache-dir build/test-runtime-envs
--max-size 0` empties it). A first run downloads 5 onnxruntime wheels from the package index.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO
from export_check.cache.secret import KEY_ENV
from export_check.cli import main

pytestmark = pytest.mark.runtime_releases
RANGE = ("1.23.0", "1.24.2")
IN_RANGE = ("1.23.0", "1.23.1", "1.23.2", "1.24.1", "1.24.2")
ENVS = REPO / "build" / "test-runtime-envs"

# the bundle's ONNX artifact run by hand in one release's environment: onnxruntime and numpy, the session pinned as a
# replay pins it (intra-op threads of the check, one inter-op thread, sequential, every graph optimisation)
BY_HAND = """
import io, json, sys, zipfile
import numpy as np, onnxruntime as ort
bundle, member, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
z = zipfile.ZipFile(bundle)
o = ort.SessionOptions(); o.intra_op_num_threads = threads; o.inter_op_num_threads = 1
o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
try:
    s = ort.InferenceSession(z.read(member), o, providers=["CPUExecutionProvider"])
except Exception as exc:
    print(json.dumps({"error": str(exc)})); sys.exit(0)
total, count = 0.0, 0
for name in sorted(n for n in z.namelist() if n.startswith("inputs/")):
    x = np.load(io.BytesIO(z.read(name)))
    ref = np.load(io.BytesIO(z.read(next(n for n in z.namelist() if n.startswith("eager/" + name.split("/")[1] + "/")))))
    y = s.run(None, {s.get_inputs()[0].name: x})[0]
    total += float(np.abs(y.astype(np.float64) - ref.astype(np.float64)).sum()); count += y.size
print(json.dumps({"version": ort.__version__, "mae": total / count}))
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory):
    """The bundled ResNet checked with its two ONNX kinds and bundled, under a lab key; the persistent environment cache."""
    folder = tmp_path_factory.mktemp("bisect")
    key = folder / "lab.key"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(key))
        assert main(["check", str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", "onnx,onnx-int8-dynamic", "-q",
                     "--out", str(folder / "out"), "--bundle", str(folder / "m.bundle")]) == 0
    ENVS.mkdir(parents=True, exist_ok=True)
    return folder, key


@pytest.fixture
def env(lab, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(KEY_ENV, str(lab[1]))
    monkeypatch.setenv("UV_CACHE_DIR", os.environ.get("UV_CACHE_DIR") or str(ENVS / "uv"))
    return lab[0]


def _bisect(folder: Path, tag: str, *more: str) -> dict:
    out = folder / f"{tag}.json"
    code = main(["bisect", str(folder / "m.bundle"), "--runtime", "onnxruntime", "--from", RANGE[0], "--to", RANGE[1],
                 "--cache-dir", str(ENVS), "--json", str(out), "-q", *more])
    assert code == 0
    (search,) = json.loads(out.read_text())["searches"]
    return search


@pytest.fixture(scope="module")
def sweep(lab) -> dict:
    """``bisect --all`` over the range: every release replayed, in an environment of its own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(lab[1]))
        patch.setenv("UV_CACHE_DIR", os.environ.get("UV_CACHE_DIR") or str(ENVS / "uv"))
        return _bisect(lab[0], "all", "--all")


def test_bisection_names_the_real_boundary_in_few_replays_and_the_full_sweep_agrees(env: Path, sweep: dict, capsys) -> None:
    capsys.readouterr()
    search = _bisect(env, "bisect")
    text = capsys.readouterr().out
    assert search["releases"] == list(IN_RANGE) and search["mode"] == "bisection"
    assert search["boundary"]["before"] == "1.23.2" and search["boundary"]["after"] == "1.24.1"
    assert search["boundary"]["changes"] == ["onnx-int8-dynamic: error -> pass (MAE - -> 0.0579)"]
    bound = math.ceil(math.log2(len(IN_RANGE))) + 2
    assert search["replayed"] <= bound and search["installed"] == 0  # the sweep's environments, reused
    # 1.23.0 (the baseline), 1.24.1 (the middle of the 4 after it: differs), 1.23.2 (agrees): 3 of at most 1 + ceil(log2 5) = 4
    assert [r["version"] for r in search["results"]] == ["1.23.0", "1.23.2", "1.24.1"] and search["most_replays"] == 4
    assert text.splitlines()[1] == "boundary: onnxruntime 1.24.1 is the first release that judges differently from 1.23.2:"  # boundary first
    assert "Could not find an implementation for ConvInteger(10)" in text and "uv pip install --python" in text
    assert sweep["mode"] == "all" and sweep["replayed"] == len(IN_RANGE) and sweep["boundaries"] == [search["boundary"]]
    rows = {(r["version"], row["name"]): row for r in sweep["results"] for row in r["rows"]}
    for version in IN_RANGE:
        assert rows[version, "onnx"]["status"] == "pass"
        assert rows[version, "onnx-int8-dynamic"]["status"] == ("error" if version < "1.24" else "pass")
    assert "ConvInteger(10)" in rows["1.23.2", "onnx-int8-dynamic"]["error"] and rows["1.24.1", "onnx-int8-dynamic"]["error"] is None


@pytest.mark.parametrize("version", ["1.23.2", "1.24.1"])
def test_each_reported_mae_is_the_release_run_by_hand_in_its_environment(env: Path, sweep: dict, version: str) -> None:
    result = next(r for r in sweep["results"] if r["version"] == version)
    python = Path(result["env"]) / "bin" / "python"
    with zipfile.ZipFile(env / "m.bundle") as archive:
        text = archive.read("bundle.json").decode()
    threads = json.loads("{" + text[text.index('"artifacts"'):])["settings"]["threads"]
    for row in result["rows"]:
        done = subprocess.run([str(python), "-c", BY_HAND, str(env / "m.bundle"), f"artifacts/{row['name']}.onnx", str(threads)],
                              capture_output=True, text=True, timeout=300, check=True)
        truth = json.loads(done.stdout)
        if "error" in truth:
            assert row["status"] == "error" and row["mae"] is None and truth["error"].split(" : ")[-1] in row["error"], (row, truth)
        else:
            assert truth["version"] == version and row["status"] == "pass"
            assert abs(row["mae"] - truth["mae"]) <= 1e-9 * max(1.0, truth["mae"]), (row, truth)
    assert {r["name"] for r in result["rows"]} == {"onnx", "onnx-int8-dynamic"}
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0  # the environment has no torch


def test_newest_replays_the_newest_release_and_passes_when_no_verdict_changes(env: Path, capsys) -> None:
    code = main(["bisect", str(env / "m.bundle"), "--newest", "--cache-dir", str(ENVS), "--json", str(env / "newest.json"), "-q"])
    out = capsys.readouterr().out
    (search,) = json.loads((env / "newest.json").read_text())["searches"]
    newest = search["releases"][0]
    assert search["mode"] == "newest" and search["runtime"] == "onnxruntime" and newest >= "1.32.0"
    judged = next(r for r in search["results"] if r["version"] == newest)
    assert [r["status"] for r in judged["rows"]] == ["pass", "pass"] and code == 0
    assert out.startswith(f"onnxruntime {newest} (the newest) judges every row as the build did")


def test_bad_input_is_one_line_before_anything_installs(env: Path, capsys, tmp_path: Path) -> None:
    bundle = str(env / "m.bundle")
    cases = [
        (["bisect", bundle, "--runtime", "onnxruntime", "--from", "0.1"], "--from 0.1: the package index offers no onnxruntime 0.1"),
        (["bisect", bundle], "choose the runtime whose releases to replay"),
        (["bisect", bundle, "--runtime", "openvino"], "holds no row the openvino runtime replays"),
        (["bisect", bundle, "--newest", "--all"], "drop --all, --from and --to"),
        (["bisect", str(tmp_path / "none.bundle"), "--runtime", "onnxruntime"], "no such bundle"),
        (["bisect", bundle, "--runtime", "tensorrt"], "invalid choice"),
    ]
    for argv, message in cases:
        assert main([*argv, "--cache-dir", str(tmp_path / "c"), "-q"]) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and "Traceback" not in err, (argv, err)
    assert not (tmp_path / "c").exists()  # nothing was installed
