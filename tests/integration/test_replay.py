"""Built here, judged there (issue 28): `check --bundle` writes one sealed file; `replay` judges it on a
machine without torch, in a second virtual environment that has numpy and onnxruntime only, with the
same verdicts and the same MAE to 1e-9 for every ONNX row; an altered bundle is refused with one line;
the same inputs give the same bytes; `merge` joins the build's and the target's reports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, NO_TORCH, REPO, TESTS, read_report, save_state, seeded
from export_check.cache.secret import KEY_ENV, load_key
from export_check.cli import main

KINDS = "onnx,onnx-int8-dynamic,torchscript-trace"
ONNX_ROWS = ("onnx", "onnx-int8-dynamic")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """The bundled ResNet checked with two ONNX kinds and one torch kind, bundled twice (the second
    from the cached run), under a key file the "device lab" shares."""
    folder = tmp_path_factory.mktemp("lab")
    key = folder / "lab.key"
    for tag in ("a", "b"):
        check_and_bundle(folder, key, tag)
    return folder, key


def check_and_bundle(folder: Path, key: Path, tag: str, kinds: str = KINDS, *flags: str) -> None:
    """The bundled ResNet checked with ``kinds`` under the key file ``key``: its report at ``folder/build-TAG.json``, its
    bundle at ``folder/TAG.bundle`` (``flags``: more of the check's, e.g. --sign-key)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(KEY_ENV, str(key))
        assert main(["check", str(DEFAULT_CHECKPOINT), "--golden", str(DEFAULT_GOLDEN), "--artifacts", kinds, "-q", *flags,
                     "--out", str(folder / "out"), "--json", str(folder / f"build-{tag}.json"), "--bundle", str(folder / f"{tag}.bundle")]) == 0


def test_the_same_inputs_give_the_same_bundle_bytes_and_it_holds_what_was_judged(built) -> None:
    folder, _ = built
    first, second = (folder / "a.bundle").read_bytes(), (folder / "b.bundle").read_bytes()
    assert first == second
    with zipfile.ZipFile(folder / "a.bundle") as archive:
        names = archive.namelist()
        assert names[0] == "bundle.json" and all(i.date_time == (1980, 1, 1, 0, 0, 0) for i in archive.infolist())
        manifest = json.loads("{" + archive.read("bundle.json").decode()[archive.read("bundle.json").decode().index('"members"'):])
    assert all(n.endswith(".npy") for n in names if n.startswith(("inputs/", "eager/")))  # arrays, no pickles
    assert {"artifacts/onnx.onnx", "artifacts/onnx-int8-dynamic.onnx", "artifacts/torchscript-trace.pt"} <= set(names)
    assert sum(n.startswith("inputs/") for n in names) == 4 and sum(n.startswith("eager/") for n in names) == 4  # 64 samples, batches of 16
    assert set(manifest["members"]) == set(names) - {"bundle.json"}


@pytest.fixture(scope="module")
def slim_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a second virtual environment: numpy, onnxruntime and this package without its
    dependencies; no torch, and no way to import it."""
    python = _slim_venv(tmp_path_factory.mktemp("slim") / "venv")
    assert subprocess.run([str(python), "-c", "import torch"], capture_output=True).returncode != 0
    return python


def _slim_venv(where: Path) -> Path:
    """A virtual environment with numpy and onnxruntime and this package without its dependencies: no torch.

    Made without a pip of its own (``--without-pip``: seeding one cost about a third of the fixture) and filled by this
    environment's pip pointed at it (``pip --python``), without byte-compiling every installed module ahead of time
    (``--no-compile``: the few a replay imports are compiled when it imports them): the same packages installed, and
    nothing else in the new environment."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=300)
    python = where / "bin" / "python"
    env = {**os.environ, "PIP_CONSTRAINT": str(REPO / "constraints.txt"), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-compile"]
    subprocess.run([*pip, "numpy", "onnxruntime"], check=True, timeout=600, env=env, capture_output=True)
    source = where.parent / "source"  # the package's source, copied: building it leaves nothing in the repository
    shutil.copytree(REPO / "exporter", source / "exporter")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    subprocess.run([*pip, "--no-deps", str(source)], check=True, timeout=600, env=env, capture_output=True)
    return python


def test_replay_without_torch_gives_the_builds_verdicts_and_maes(built, slim_python: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    folder, key = built
    monkeypatch.setenv(KEY_ENV, str(key))
    python = slim_python
    done = subprocess.run([str(python), "-m", "export_check", "replay", str(folder / "a.bundle"), "--target", "lab-1", "--out",
                           str(tmp_path / "replayed"), "--json", str(tmp_path / "target.json")], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    build, target = read_report(folder / "build-a.json"), read_report(tmp_path / "target.json")
    assert target["target"] == "lab-1" and target["checkpoint"]["sha256"] == build["checkpoint"]["sha256"]
    assert target["versions"]["torch"] == "not installed"
    built_rows, replayed = {r["name"]: r for r in build["rows"]}, {r["name"]: r for r in target["rows"]}
    assert list(replayed) == ["torchscript-trace", "onnx", "onnx-int8-dynamic"]  # every artifact judged there, in the build's order
    for name in ONNX_ROWS:
        assert replayed[name]["status"] == built_rows[name]["status"] == "pass"
        assert abs(replayed[name]["metrics"]["mae"] - built_rows[name]["metrics"]["mae"]) <= 1e-9, name
        assert replayed[name]["metrics"]["images"] == 64
    torch_row = replayed["torchscript-trace"]
    assert torch_row["status"] == "not-applicable" and "torch is not installed here" in torch_row["reasons"][0]
    assert "replayed on lab-1" in done.stdout and "3 not applicable" not in done.stdout and "1 not applicable" in done.stdout


def test_a_bundle_altered_by_one_byte_or_sealed_under_another_key_is_refused_with_one_line(built, tmp_path: Path,
                                                                                           monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    folder, key = built
    monkeypatch.setenv(KEY_ENV, str(key))
    data = (folder / "a.bundle").read_bytes()
    with zipfile.ZipFile(folder / "a.bundle") as archive:
        onnx = archive.getinfo("artifacts/onnx.onnx")
        manifest = archive.getinfo("bundle.json")
    header = 30 + len(onnx.filename.encode())  # a stored member's bytes start after its local header
    cases = {
        "artifact": (onnx.header_offset + header + onnx.file_size // 2, "member artifacts/onnx.onnx was altered"),
        "manifest": (manifest.header_offset + 30 + len(b"bundle.json") + manifest.file_size - 40, "bundle.json was altered"),
    }
    for what, (offset, message) in cases.items():
        altered = bytearray(data)
        altered[offset] ^= 0x01
        path = tmp_path / f"{what}.bundle"
        path.write_bytes(bytes(altered))
        assert main(["replay", str(path), "--out", str(tmp_path / what), "-q"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err and str(path) in err and "Traceback" not in err, (what, err)
    # a manifest edited and re-zipped with a correct CRC (a gate loosened): the seal says so
    forged = tmp_path / "forged.bundle"
    with zipfile.ZipFile(folder / "a.bundle") as archive, zipfile.ZipFile(forged, "w") as out:
        for info in archive.infolist():
            data = archive.read(info)
            out.writestr(info, data.replace(b'"max_mae": 1e-05', b'"max_mae": 1.0') if info.filename == "bundle.json" else data)
    assert main(["replay", str(forged), "--out", str(tmp_path / "forged"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "edited since export-check wrote it" in err, err
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "missing.key"))
    assert main(["replay", str(folder / "a.bundle"), "--out", str(tmp_path / "other"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no cache key at" in err and "replay where the key the bundle was sealed with is" in err, err
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "another.key"))
    load_key(tmp_path / "cache")  # this machine's own key, made: not the lab's
    assert main(["replay", str(folder / "a.bundle"), "--out", str(tmp_path / "other"), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sealed with another key" in err and "replay where the key file" in err, err
    (tmp_path / "garbage.bundle").write_bytes(b"not a zip")
    monkeypatch.setenv(KEY_ENV, str(key))
    assert main(["replay", str(tmp_path / "garbage.bundle"), "-q"]) == 2
    assert "not a bundle" in capsys.readouterr().err


def test_merge_joins_the_build_and_the_target_into_one_report(built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    folder, key = built
    monkeypatch.setenv(KEY_ENV, str(key))
    assert main(["replay", str(folder / "a.bundle"), "--target", "lab-2", "--out", str(tmp_path / "r"), "-q",
                 "--json", str(tmp_path / "target.json")]) == 0
    capsys.readouterr()
    assert main(["merge", str(folder / "build-a.json"), str(tmp_path / "target.json"), "--json", str(tmp_path / "merged.json")]) == 0
    merged = read_report(tmp_path / "merged.json")
    names = [m["name"] for m in merged["models"]]
    assert names == [str(DEFAULT_CHECKPOINT), f"{DEFAULT_CHECKPOINT} @ lab-2"] and merged["exit_code"] == 0
    side = {c["artifact"]: c for c in merged["across_machines"]}
    assert set(side) == {"torchscript-trace", "onnx", "onnx-int8-dynamic"} and not any(c["differs"] for c in side.values())
    assert side["onnx"]["build_mae"] == side["onnx"]["target_mae"] and side["torchscript-trace"]["target_status"] == "pass"  # torch is there


def test_a_multi_output_model_replays_without_torch(slim_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dict of two outputs (scores, boxes): each compared on its own at the target (the environment
    without torch), as at the build."""
    from arches import DictOutputNet

    monkeypatch.setenv(KEY_ENV, str(tmp_path / "lab.key"))
    checkpoint = save_state(seeded(DictOutputNet), tmp_path / "model.pth")
    arch = f"{TESTS / 'arches.py'}:{DictOutputNet.__name__}"
    samples = tmp_path / "samples"
    samples.mkdir()
    import numpy as np

    rng = np.random.default_rng(1)
    for i in range(20):
        np.save(samples / f"s{i:03d}.npy", rng.standard_normal(12).astype(np.float32))
    assert main(["golden", "record", str(checkpoint), "--arch", arch, "--inputs", str(samples), "--golden", str(tmp_path / "golden"), "-q"]) == 0
    assert main(["check", str(checkpoint), "--arch", arch, "--golden", str(tmp_path / "golden"), "--artifacts", "onnx,onnx-simplified", "-q",
                 "--out", str(tmp_path / "out"), "--json", str(tmp_path / "build.json"), "--bundle", str(tmp_path / "m.bundle")]) == 0
    done = subprocess.run([str(slim_python), "-m", "export_check", "replay", str(tmp_path / "m.bundle"), "--target", "edge", "--out",
                           str(tmp_path / "replayed"), "--json", str(tmp_path / "target.json"), "-q"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    build, target = read_report(tmp_path / "build.json"), read_report(tmp_path / "target.json")
    for b, t in zip(build["rows"][1:], target["rows"], strict=True):
        assert (b["name"], b["status"]) == (t["name"], t["status"]) == (t["name"], "pass")
        assert [o["name"] for o in t["outputs"]] == ["scores", "boxes"]
        for bo, to in zip(b["outputs"], t["outputs"], strict=True):
            assert abs(bo["metrics"]["mae"] - to["metrics"]["mae"]) <= 1e-9


def test_the_docs_device_lab_workflow_runs_on_the_bundled_model(tmp_path: Path) -> None:
    """The device-lab example of docs/how-to/replay-on-device.md: its YAML parsed, and every export-check command of its jobs run in
    order (build, each target's replay with torch made unimportable, merge) in a copy of the repository."""
    import glob
    import re
    import shlex

    import yaml

    text = (REPO / "docs" / "how-to" / "replay-on-device.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if b.startswith("# device lab"))
    workflow = yaml.safe_load(block)
    project = tmp_path / "checkout"
    for name in ("models", "golden"):
        shutil.copytree(REPO / name, project / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", project / "pyproject.toml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "EXPORT_CHECK_"))}
    env.update(EXPORT_CHECK_CACHE_KEY_FILE=str(tmp_path / "lab.key"), GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"),
               SIGN_KEY=str(tmp_path / "build.pem"), LAB_KEY=str(tmp_path / "lab.pem"))
    (project / "keys").mkdir()
    for name in ("build", "lab"):  # the build's key pair and one lab's (the YAML's; the same lab key for both targets here)
        assert main(["keygen", str(tmp_path / f"{name}.pem")]) == 0
    shutil.copy(tmp_path / "build.pem.pub", project / "keys" / "build.pem.pub")
    (project / "keys" / "trusted.pem").write_bytes((tmp_path / "build.pem.pub").read_bytes() + (tmp_path / "lab.pem.pub").read_bytes())
    targets = workflow["jobs"]["replay"]["strategy"]["matrix"]["target"]
    ran = []
    for job in ("build", "replay", "merge"):
        for target in targets if job == "replay" else [None]:
            for step in workflow["jobs"][job]["steps"]:
                for line in (ln.strip() for ln in step.get("run", "").splitlines() if ln.strip().startswith("export-check ")):
                    line = line.replace("${{ matrix.target }}", str(target))
                    words = [re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: env[m.group(1)], w) for w in shlex.split(line)[1:]]
                    words = [w2 for w in words for w2 in (sorted(glob.glob(str(project / w))) if "*" in w else [w])]
                    command = [sys.executable, "-c", NO_TORCH, *words] if job == "replay" else [sys.executable, "-m", "export_check", *words]
                    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=600)
                    assert done.returncode == 0 and "Traceback" not in done.stderr, f"{line}\n{done.stdout}\n{done.stderr}"
                    ran.append(words[0])
    assert ran == ["models/checkpoints/resnet_digits.pth", "replay", "replay", "merge"]
    assert "arm-board" in (tmp_path / "summary.md").read_text() and (project / "lab.xml").read_text().startswith("<?xml")


def test_a_fleet_of_targets_runs_as_ray_tasks_and_a_target_no_node_offers_is_an_error_row_at_once(built, tmp_path: Path,
                                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Three targets on a local Ray cluster that offers the custom resource lab_board=2: two boards replay
    as tasks and give the build's MAEs; the Mac (macos=1, which no node offers) is an error row before any
    task finishes, never a task waiting forever."""
    try:
        import ray
    except ImportError:
        pytest.fail("ray is in the test extra: install export-check[test]")
    from export_check.fleet.replays import parse_targets, run_replays

    folder, key = built
    monkeypatch.setenv(KEY_ENV, str(key))
    for name, value in (("RAY_AUTH_MODE", "disabled"), ("RAY_USAGE_STATS_ENABLED", "0")):
        monkeypatch.setenv(name, value)
    targets = tmp_path / "lab.toml"
    targets.write_text(f'[targets.board-a]\nbundle = "{folder / "a.bundle"}"\nresources = {{ lab_board = 1 }}\n'
                       f'[targets.mac]\nbundle = "{folder / "a.bundle"}"\nresources = {{ macos = 1 }}\n'
                       f'[targets.board-b]\nbundle = "b.bundle"\nresources = {{ lab_board = 1 }}\n')
    shutil.copy(folder / "b.bundle", tmp_path / "b.bundle")  # a relative bundle path: beside the targets file
    jobs = parse_targets(targets, tmp_path / "out")
    seen = []
    ray.init(num_cpus=2, resources={"lab_board": 2}, runtime_env={"env_vars": {KEY_ENV: str(key)}}, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    try:
        report = run_replays(jobs, "local", seen.append)
    finally:
        ray.shutdown()
    assert report.executor.startswith("ray (local") and seen[0].name == "mac"  # refused at once, before the tasks finished
    mac = seen[0]
    assert mac.report is None and "no node of the Ray cluster offers macos=1" in (mac.error or "")
    build = {r["name"]: r for r in read_report(folder / "build-a.json")["rows"]}
    boards = [m for m in report.models if m.report is not None]
    assert sorted(m.name for m in boards) == [f"{DEFAULT_CHECKPOINT} @ board-a", f"{DEFAULT_CHECKPOINT} @ board-b"]
    for model in boards:
        rows = {r["name"]: r for r in model.report["rows"]}
        for name in ONNX_ROWS:
            assert rows[name]["status"] == "pass" and abs(rows[name]["metrics"]["mae"] - build[name]["metrics"]["mae"]) <= 1e-9
    assert report.exit_code == 1  # results plus a target that could not run: not a pass, and not bad input (exit 2)


def test_without_ray_a_target_whose_resources_this_machine_lacks_is_an_error_row_and_exit_1(built, tmp_path: Path,
                                                                                           monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Issue 47: ``replay --targets`` without ``--ray`` holds each target to what it declares, as a cluster does. A
    target that needs a system this machine is not (a Mac's ``macos = 1`` here, ``linux = 1`` on a Mac) or a resource
    it cannot vouch for (``lab_board``) is an error row naming what it needs and what this machine has, never
    replayed here and reported under its name; the target that declares nothing is replayed and passes; exit 1."""
    import platform

    folder, key = built
    monkeypatch.setenv(KEY_ENV, str(key))
    other = "linux" if platform.system() == "Darwin" else "macos"
    targets = tmp_path / "lab.toml"
    targets.write_text(f'[targets.here]\nbundle = "{folder / "a.bundle"}"\n'
                       f'[targets.mac-m2]\nbundle = "{folder / "a.bundle"}"\nresources = {{ {other} = 1 }}\n'
                       f'[targets.board]\nbundle = "{folder / "a.bundle"}"\nresources = {{ lab_board = 1 }}\n')
    out = tmp_path / "lab.json"
    assert main(["replay", "--targets", str(targets), "--out", str(tmp_path / "out"), "--json", str(out)]) == 1
    report = read_report(out)
    status = {m["name"]: (m["status"], m["error_kind"]) for m in report["models"]}
    assert status == {f"{DEFAULT_CHECKPOINT} @ here": ("pass", None), "mac-m2": ("error", "unplaceable"), "board": ("error", "unplaceable")}
    assert report["exit_code"] == 1 and report["executor"] == "serial"
    mac, board = report["models"][1], report["models"][2]
    assert mac["report"] is None and mac["error"].startswith(f"needs {other}=1, which this machine does not offer (it has CPU=")
    has = mac["error"].split("(it has ", 1)[1].split(")")[0].split(", ")
    this = {"Darwin": "macos"}.get(platform.system(), platform.system().lower())
    assert f"{this}=1" in has and f"{other}=1" not in has and not any(h.startswith("lab_board") for h in has)
    assert board["error"].startswith("needs lab_board=1, which this machine does not offer")
    assert not (tmp_path / "out" / "mac-m2").exists() and not (tmp_path / "out" / "board").exists()  # never replayed here
    assert (tmp_path / "out" / "here").is_dir()
    text = capsys.readouterr().out
    assert f"mac-m2: ERROR needs {other}=1" in text and "3 models: 1 passed, 0 failed, 2 errors" in text

    targets.write_text(f'[targets.mac-m2]\nbundle = "{folder / "a.bundle"}"\nresources = {{ {other} = 1 }}\n')
    assert main(["replay", "--targets", str(targets), "--out", str(tmp_path / "out2"), "--json", str(out)]) == 1  # alone: exit 1 too
    assert [m["status"] for m in read_report(out)["models"]] == ["error"]
