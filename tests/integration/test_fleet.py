"""Fleets (issue 14): several models in one CLI run, over a process pool or a Ray cluster; --shard and
merge. Every verdict is compared with the same models checked one at a time, and the failing
model's drift with the MAE computed here, by hand, from its two sets of weights."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from export_check.cli import main
from export_check.fleet.spec import shard_index
from fleet_project import Zoo, add_killer, make_zoo, save_mlp

XSD = Path(__file__).resolve().parents[1] / "data" / "junit-10.xsd"


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Zoo:
    """4 models, golden sets recorded; mlp1 retrained since (its eager row fails)."""
    return make_zoo(tmp_path_factory.mktemp("zoo"), 4, broken=(1,))


def _verdicts(report: dict) -> dict[str, dict[str, str]]:
    return {m["name"]: {r["name"]: r["status"] for r in (m["report"] or {"rows": []})["rows"]} for m in report["models"]}


def _fleet(zoo: Zoo, tmp_path: Path, *flags: str, name: str = "fleet.json", fleet: str = "fleet.toml") -> tuple[int, dict]:
    code = main(["--fleet", str(zoo.folder / fleet), "-q", "--out", str(tmp_path / "out"), "--json", str(tmp_path / name), *flags])
    return code, json.loads((tmp_path / name).read_text())


@pytest.fixture(scope="module")
def runs(zoo: Zoo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fleet checked one model after another in this process (no cache), and by two pool workers
    into a cache of its own (``cache/``, which the later runs of this module share): serial.json,
    fleet.json (+ f.xml, f.md) and the exit codes in codes.json."""
    folder = tmp_path_factory.mktemp("fleet-runs")
    serial_code, _ = _fleet(zoo, folder, "--workers", "1", "--no-cache", name="serial.json")
    with pytest.MonkeyPatch.context() as mp:  # the module's own cache key, which the later runs share (see fleet_key)
        mp.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(folder / "key" / "cache.key"))
        code, _ = _fleet(zoo, folder, "--workers", "2", "--cache-dir", str(folder / "cache"), "--junit", str(folder / "f.xml"),
                         "--markdown", str(folder / "f.md"))
    (folder / "codes.json").write_text(json.dumps({"serial": serial_code, "fleet": code}))
    return folder


def _validate_junit(text: str):
    from lxml import etree

    doc = etree.fromstring(text.encode())
    schema = etree.XMLSchema(etree.parse(str(XSD)))
    assert schema.validate(doc), schema.error_log
    return doc


def test_a_fleet_in_parallel_gives_each_model_its_own_serial_verdict(zoo: Zoo, runs: Path, tmp_path: Path) -> None:
    serial, fleet = (json.loads((runs / name).read_text()) for name in ("serial.json", "fleet.json"))
    codes = json.loads((runs / "codes.json").read_text())
    serial_code, code = codes["serial"], codes["fleet"]
    assert serial["executor"] == "serial" and fleet["executor"] == "processes x2"
    assert code == serial_code == 1
    assert _verdicts(fleet) == _verdicts(serial)
    assert _verdicts(fleet) == {
        name: {"eager": zoo.expected(name), "torchscript-trace": "pass", "onnx": "pass"} for name in zoo.names
    }
    assert fleet["counts"] == {"pass": 3, "fail": 1, "error": 0}
    assert len({m["worker"] for m in fleet["models"]}) == 2  # really two processes
    assert all(m["report"]["settings"]["jobs"] == 1 for m in fleet["models"])  # the cores go to the models
    for a, b in zip(fleet["models"], serial["models"], strict=True):
        for ra, rb in zip(a["report"]["rows"], b["report"]["rows"], strict=True):
            assert ra["metrics"]["mae"] == pytest.approx(rb["metrics"]["mae"], rel=1e-6, abs=1e-9)

    # the failing model's drift, computed by hand: its new weights against the ones its golden set holds
    inputs = [np.load(p) for p in sorted((zoo.folder / "digits").glob("*.npy"))]
    netdef, old = zoo.folder / "netdef.py", tmp_path / "old-mlp1.pth"
    save_mlp(netdef, hidden=12, seed=1, out=old)  # the weights mlp1's golden set was recorded from
    new_logits = eager_logits_mlp(netdef, zoo.checkpoint("mlp1"), inputs)
    old_logits = eager_logits_mlp(netdef, old, inputs)
    eager = next(r for r in fleet["models"][1]["report"]["rows"] if r["name"] == "eager")
    assert eager["metrics"]["mae"] == pytest.approx(float(np.abs(new_logits - old_logits).mean()), rel=1e-5)

    # one report over all of them, in every format
    from export_check.fleet.result import FleetReport, ModelResult
    from export_check.fleet.views import render_text

    text = render_text(FleetReport(models=tuple(ModelResult.from_json(m) for m in fleet["models"]), seconds=1.0, executor="x",
                                   created="", tool_version=""))
    assert "export-check fleet: 4 models: 3 passed, 1 failed, 0 errors" in text
    assert "mlp1 / eager: FAIL MAE" in text
    doc = _validate_junit((runs / "f.xml").read_text())
    assert [s.get("name") for s in doc.findall("testsuite")] == list(zoo.names)
    assert doc.get("tests") == "12" and doc.get("failures") == "1" and doc.get("errors") == "0"
    assert doc.find("testsuite[@name='mlp1']/testcase[@name='eager']/failure") is not None
    md = (runs / "f.md").read_text()
    assert "| `mlp1` | ❌ fail | 2 passed, 1 failed, 0 errors |" in md and "| `mlp0` | ✅ pass | 3 passed, 0 failed, 0 errors |" in md


def eager_logits_mlp(netdef: Path, checkpoint: Path, inputs: list[np.ndarray]) -> np.ndarray:
    import torch

    from export_check.checkpoint import resolve_factory

    hidden = torch.load(checkpoint, weights_only=True)["net.0.weight"].shape[0]
    model = resolve_factory(f"{netdef}:DigitsMLP")(hidden=hidden)
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    with torch.inference_mode():
        return model.eval()(torch.from_numpy(np.stack(inputs).astype(np.float32))).numpy()


def test_shards_then_merge_give_the_whole_fleets_verdicts_and_the_cache_serves_every_process(zoo: Zoo, runs: Path, tmp_path: Path,
                                                                                          capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    whole, code = json.loads((runs / "fleet.json").read_text()), json.loads((runs / "codes.json").read_text())["fleet"]
    # the cache is authenticated by its writer's key: these later processes are the same user, with the same key
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(runs / "key" / "cache.key"))
    shards = []
    for i in (1, 2):
        shard_code, shard = _fleet(zoo, tmp_path, "--shard", f"{i}/2", "--cache-dir", str(runs / "cache"), name=f"shard{i}.json")
        assert [m["name"] for m in shard["models"]] == [n for n in zoo.names if shard_index(n, 2) == i - 1]
        assert shard["shard"] == f"{i}/2" and shard_code == shard["exit_code"]
        # checked again by other processes: every row of every model is a cache hit
        assert {r["cache"] for m in shard["models"] for r in m["report"]["rows"]} <= {"hit"}
        shards.append(tmp_path / f"shard{i}.json")
    capsys.readouterr()
    merged_paths = [str(tmp_path / p) for p in ("merged.json", "merged.xml", "merged.md")]
    merged_code = main(["merge", *map(str, shards), "--json", merged_paths[0], "--junit", merged_paths[1], "--markdown", merged_paths[2]])
    merged = json.loads(Path(merged_paths[0]).read_text())
    assert merged_code == code == 1
    assert _verdicts(merged) == _verdicts(whole)
    assert [m["name"] for m in merged["models"]] == list(zoo.names)  # in fleet order
    assert "export-check fleet: 4 models: 3 passed, 1 failed, 0 errors" in capsys.readouterr().out
    doc = _validate_junit(Path(merged_paths[1]).read_text())
    assert doc.get("tests") == "12" and doc.get("failures") == "1"
    assert "| `mlp1` | ❌ fail |" in Path(merged_paths[2]).read_text()

    # one shard's report alone: the other shard's models are error rows, never a silent pass
    assert main(["merge", str(shards[0]), "--json", str(tmp_path / "half.json")]) == 1
    half = json.loads((tmp_path / "half.json").read_text())
    missing = [m for m in half["models"] if m["error_kind"] == "missing"]
    assert {m["name"] for m in missing} == {n for n in zoo.names if shard_index(n, 2) == 1}
    # a single model's --json report merges too
    single = tmp_path / "single.json"
    assert main([str(zoo.checkpoint("mlp0")), "-q", "--out", str(tmp_path / "one"), "--json", str(single), "--cache-dir", str(runs / "cache"),
                 "--config", str(zoo.folder / "mlp0" / "export-check.toml")]) == 0
    assert {r["cache"] for r in json.loads(single.read_text())["rows"]} == {"hit"}
    assert main(["merge", str(single), "--json", str(tmp_path / "m1.json")]) == 0
    assert _verdicts(json.loads((tmp_path / "m1.json").read_text())) == {str(zoo.checkpoint("mlp0")): _verdicts(whole)["mlp0"]}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json at all", "not a report export-check wrote (it carries no seal); pass the --json files export-check wrote, unedited"),
        ('{"rows": []}', "not a report export-check wrote (it carries no seal)"),
        ('{"schema": "export-check-fleet-report", "models": [{"name": "x"}]}', "not a report export-check wrote (it carries no seal)"),
        ('{"export_check_seal": "hmac-sha256:0123456789abcdef:' + "0" * 64 + '",\n "schema": "export-check-report"}',
         "sealed with another key (key 0123456789abcdef, this machine's is "),
    ],
)
def test_merge_refuses_what_the_tool_did_not_write_with_one_line(tmp_path: Path, capsys, content: str, message: str) -> None:
    from export_check.cache.secret import load_key

    load_key(tmp_path / "cache")  # this user's key exists: a seal is checked against it
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert main(["merge", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"export-check: error: {bad}: {message}") and err.count("\n") == 1


def test_merge_refuses_a_model_twice_and_reports_of_other_fleets(zoo: Zoo, runs: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(runs / "key" / "cache.key"))  # the key the runs sealed their reports with
    assert main(["merge", str(runs / "fleet.json"), str(runs / "fleet.json")]) == 2
    assert "model 'mlp0' is also in" in capsys.readouterr().err
    # another fleet of two of the zoo's models, each with its own settings file named (issue 47: a checkpoint's folder has no say)
    other_fleet = tmp_path / "other.toml"
    other_fleet.write_text("".join(f'[models.other-{name}]\ncheckpoint = "{zoo.checkpoint(name)}"\n'
                                   f'config = "{zoo.checkpoint(name).parent / "export-check.toml"}"\n\n' for name in ("mlp0", "mlp2")))
    monkeypatch.chdir(zoo.folder)  # standing in the zoo's project: the settings' code lies inside it
    other = main(["--fleet", str(other_fleet), "-q", "--out", str(tmp_path / "o"), "--json", str(tmp_path / "b.json"),
                  "--cache-dir", str(runs / "cache"), "--workers", "1"])
    assert other == 0
    assert main(["merge", str(runs / "fleet.json"), str(tmp_path / "b.json")]) == 2
    assert "reports of 2 different fleet files" in capsys.readouterr().err


def _error_of(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("export-check: error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    return captured.err


def test_bad_fleet_input_is_one_line_before_any_model_runs(zoo: Zoo, tmp_path: Path, capsys) -> None:
    fleet = tmp_path / "fleet.toml"
    ckpt = str(zoo.checkpoint("mlp0"))
    cases = {
        "": "no models; add a [models.NAME] table",
        "[models.a]\narch = 'x.py:Net'\n": "models.a: no checkpoint",
        f"[models.a]\ncheckpoint = '{ckpt}'\nbatchsize = 3\n": "unknown key 'batchsize'",
        f"[models.a]\ncheckpoint = '{ckpt}'\nbatch-size = 'big'\n": "batch-size must be an integer",
        f"[models.a]\ncheckpoint = '{ckpt}'\ninputs = 'x'\n": "inputs belongs in the model's settings file",
        f"[models.a]\ncheckpoint = '{ckpt}'\nresources = 3\n": "resources must be a table",
        f"[models.a]\ncheckpoint = '{ckpt}'\nnum-cpus = -1\n": "num-cpus must be a finite number >= 0",
        "[models.a]\ncheckpoint = 'nowhere.pth'\n": "nowhere.pth: checkpoint not found",
        "[model.a]\n": "unknown table 'model'",
        "[models\n": "not valid TOML",
    }
    for text, message in cases.items():
        fleet.write_text(text)
        assert message in _error_of(["--fleet", str(fleet), "-q", "--out", str(tmp_path / "out")], capsys), text
    assert not (tmp_path / "out").exists()  # nothing started
    assert "fleet file not found" in _error_of(["--fleet", str(tmp_path / "none.toml")], capsys)
    assert "not both" in _error_of([ckpt, "--fleet", str(zoo.folder / "fleet.toml")], capsys)
    assert "--shard must be I/N" in _error_of([ckpt, "--shard", "3/2"], capsys)
    assert "--html takes one model's report" in _error_of([ckpt, ckpt.replace("mlp0", "mlp2"), "--html", "r.html"], capsys)
    assert "given twice" in _error_of([ckpt, ckpt], capsys)
    assert "--ray took" in _error_of(["--ray", ckpt, ckpt.replace("mlp0", "mlp2")], capsys)
    assert "required: checkpoint (one or more), or --fleet FILE" in _error_of(["check"], capsys)


def test_a_worker_that_dies_costs_its_own_model_only(zoo: Zoo, runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = (zoo.folder / "fleet.toml").read_text().split("[models.mlp2]")[0]  # defaults, mlp0, mlp1
    # mlp3's first death waits for mlp2's: had it broken the pool first, mlp2 would be lost before it ever ran, and
    # its first (killing) try would be the one alone: "died also when checked alone" (seen in CI at eb09683)
    (zoo.folder / "fleet-killers.toml").write_text(base + add_killer(zoo, "mlp2", always=False, marker=tmp_path / "once")
                                                   + add_killer(zoo, "mlp3", always=True, marker=tmp_path / "always", after=tmp_path / "once"))
    # mlp0 and mlp1 are cache hits (under the key the module's cache was sealed with: another key's entries are not
    # trusted, and would be built again); the killers' arch is their own, so their checks load the model (and die)
    monkeypatch.setenv("EXPORT_CHECK_CACHE_KEY_FILE", str(runs / "key" / "cache.key"))
    code, report = _fleet(zoo, tmp_path, "--workers", "2", "--cache-dir", str(runs / "cache"), fleet="fleet-killers.toml")
    assert {r["cache"] for m in report["models"][:2] for r in m["report"]["rows"]} == {"hit"}
    status = {m["name"]: m["status"] for m in report["models"]}
    assert status == {"mlp0": "pass", "mlp1": "fail", "mlp2-killed": "pass", "mlp3-killed": "error"}
    assert code == 1
    lost = report["models"][3]
    assert lost["error_kind"] == "lost" and "died" in lost["error"] and lost["report"] is None
    assert len((tmp_path / "once").read_text().split()) == 1  # killed once, then checked whole
    assert _verdicts(report)["mlp2-killed"] == {"eager": "pass", "torchscript-trace": "pass", "onnx": "pass"}


def _require_ray() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        if os.environ.get("CI") or os.environ.get("EXPORT_CHECK_REQUIRE_INSTALLED"):
            pytest.fail("ray is in the test extra: install export-check[test]")
        pytest.skip("ray is not installed (pip install 'export-check[ray]')")


def test_ray_gives_the_serial_verdicts_and_retries_a_lost_worker(zoo: Zoo, runs: Path, tmp_path: Path) -> None:
    _require_ray()
    fleet = zoo.folder / "fleet-ray.toml"
    # and a model that needs a resource no node of the local cluster offers: an error row at once; results plus it exit 1, not 2
    unplaceable = ('[models.mlp0-on-gpu]\ncheckpoint = "mlp0/model.pth"\narch = "netdef.py:DigitsMLP"\narch-kwargs = { hidden = 8 }\n'
                   'golden = "mlp0/golden"\nresources = { lab_gpu = 1 }\n')
    fleet.write_text((zoo.folder / "fleet.toml").read_text() + unplaceable + add_killer(zoo, "mlp2", always=False, marker=tmp_path / "once")
                     + add_killer(zoo, "mlp3", always=True, marker=tmp_path / "always"))
    exe = Path(sys.executable).with_name("export-check")
    # the key the module's cache was sealed with: the zoo's models are cache hits, as the killers' first tries are not
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "EXPORT_CHECK_CACHE_KEY_FILE": str(runs / "key" / "cache.key")}
    run = subprocess.run([str(exe), "--fleet", str(fleet), "-q", "--out", str(tmp_path / "out"), "--json", str(tmp_path / "ray.json"),
                          "--cache-dir", str(runs / "cache"), "--ray"], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 1, run.stderr[-3000:]
    report = json.loads((tmp_path / "ray.json").read_text())
    assert report["executor"] == "ray (local, 2 CPUs)"
    serial, serial_code = json.loads((runs / "serial.json").read_text()), json.loads((runs / "codes.json").read_text())["serial"]
    verdicts = _verdicts(report)
    assert {n: verdicts[n] for n in zoo.names} == _verdicts(serial) and serial_code == 1
    assert {r["cache"] for m in report["models"] if m["name"] in zoo.names for r in m["report"]["rows"]} == {"hit"}
    assert verdicts["mlp2-killed"] == verdicts["mlp2"]  # its worker was killed mid-check; Ray ran it again
    assert len((tmp_path / "once").read_text().split()) == 1
    lost = report["models"][-1]
    assert lost["name"] == "mlp3-killed" and lost["error_kind"] == "lost" and "lost 3 times" in lost["error"]
    assert len((tmp_path / "always").read_text().split()) == 3  # the first try and its 2 retries
    gpu = next(m for m in report["models"] if m["name"] == "mlp0-on-gpu")
    assert (gpu["status"], gpu["error_kind"], gpu["exit_code"], gpu["report"]) == ("error", "unplaceable", 1, None)
    assert gpu["error"].startswith("no node of the Ray cluster offers lab_gpu=1 (the cluster has CPU=2")
