"""Issue 24, item 1: settings come only from places the user chose.

The command line, ``--config``, and the project the run stands in: the current directory and its
parents up to the first folder holding ``.git`` (the current directory alone when none does). Never a
folder above it, never the checkpoint's folder, even inside the project (issue 47: it is named, not read). A shared
parent folder (``/tmp``, a downloads folder)
is played here by ``tmp_path/shared``: a real ``/tmp/pyproject.toml`` would reach every other run on
this machine. Every run says which settings file it read (terminal, JSON, JUnit).

A row that must fail fails on purpose (the checkpoint's classifier weights perturbed), never by a gate
tighter than this CPU's float drift.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO
from export_check.cli import main
from export_check.errors import UsageError
from export_check.settings import find_settings, project_folders, project_root

pytest_plugins = ["pytester"]
KIND = "torchscript-trace"
LOOSE = "max-mae = 100.0\nint8-max-relative-mae = 100.0\nint8-min-top1 = 0.0\n"


def _perturbed(path: Path) -> Path:
    """The bundled checkpoint with its classifier scaled: its eager row fails against the golden set by far."""
    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    state["fc.weight"] = state["fc.weight"] * 3.0 + 0.5
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)
    return path


def _evil(folder: Path, marker: Path) -> str:
    """An architecture file that leaves ``marker`` behind when it is imported: proof the code ran."""
    (folder / "evil.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
                                    f"from models.resnet import ResNet\n")
    return "evil.py:ResNet"


@pytest.fixture
def shared(tmp_path: Path) -> dict[str, Path]:
    """A shared parent folder holding a checkpoint and planted settings that loosen every gate and run
    their own code; the user's project (a git repository) beside it, with settings of its own."""
    root = tmp_path / "shared"
    marker = tmp_path / "planted-code-ran"
    root.mkdir()
    evil = _evil(root, marker)
    (root / "pyproject.toml").write_text(f'[tool.export-check]\narch = "{evil}"\n{LOOSE}artifacts = ["onnx"]\n')
    checkpoint = _perturbed(root / "ckpts" / "model.pth")
    (checkpoint.parent / "export-check.toml").write_text(f'arch = "../{evil}"\n{LOOSE}')  # beside the checkpoint
    (checkpoint.parent / "pyproject.toml").write_text(f'[tool.export-check]\narch = "../{evil}"\n{LOOSE}')
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "src").mkdir()
    (project / "net.py").write_text("from models.resnet import ResNet\n")  # the project's own architecture file
    (project / "pyproject.toml").write_text(
        f'[tool.export-check]\narch = "net.py:ResNet"\ngolden = "{DEFAULT_GOLDEN}"\nartifacts = ["{KIND}"]\nbatch-size = 8\n')
    return {"root": root, "checkpoint": checkpoint, "project": project, "marker": marker}


def _check(tmp_path: Path, checkpoint: Path, *extra: str) -> list[str]:
    return ["check", str(checkpoint), "--out", str(tmp_path / "out"), "--json", str(tmp_path / "r.json"),
            "--junit", str(tmp_path / "r.xml"), "-q", "--no-cache", *extra]


def _junit_settings(path: Path) -> str:
    props = {p.get("name"): p.get("value") for p in ET.parse(path).getroot().iter("property")}
    return props["settings_files"]


def test_planted_parent_settings_are_never_read_and_the_project_settings_win(shared, tmp_path, monkeypatch, capsys) -> None:
    """The critical attack: a checkpoint in a shared folder whose parent (and own folder) hold settings
    that loosen every gate and name code. Run from a subfolder of the user's project, the project's
    pyproject.toml is the one read: its artifacts and batch size apply, the planted code never runs,
    and the perturbed model fails its eager row (exit 1) under the default gate."""
    monkeypatch.chdir(shared["project"] / "src")
    code = main(_check(tmp_path, shared["checkpoint"]))
    out = capsys.readouterr().out
    own = str(shared["project"] / "pyproject.toml")
    assert code == 1
    assert f"settings: {own}" in out.splitlines()
    assert not shared["marker"].exists()
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["settings_files"] == [own]
    assert [r["name"] for r in report["rows"]] == ["eager", KIND]  # the project's artifacts, not the planted "onnx"
    assert report["settings"]["batch_size"] == 8
    assert report["rows"][0]["status"] == "fail" and report["thresholds"]["float"]["max_mae"] == 1e-5
    assert _junit_settings(tmp_path / "r.xml") == own


def test_a_downloaded_folder_inside_the_project_gives_its_settings_no_say(tmp_path, monkeypatch, capsys) -> None:
    """Issue 47, critical: a checkpoint in a folder downloaded *into* the user's git project, beside a third-party
    pyproject.toml that names its own code and loosens every gate. Run from the project, the project's settings
    apply: the planted code never runs, the perturbed model fails (exit 1), and the run names the unread file
    in one line (terminal and JSON) with the way to use it (--config)."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / "net.py").write_text("from models.resnet import ResNet\n")
    (project / "pyproject.toml").write_text(
        f'[tool.export-check]\narch = "net.py:ResNet"\ngolden = "{DEFAULT_GOLDEN}"\nartifacts = ["{KIND}"]\nbatch-size = 8\n')
    zoo = project / "downloads" / "zoo"
    marker = tmp_path / "planted-code-ran"
    checkpoint = _perturbed(zoo / "model.pth")
    evil = _evil(zoo.parent, marker)
    (zoo / "pyproject.toml").write_text(f'[tool.export-check]\narch = "../{evil}"\n{LOOSE}artifacts = ["onnx"]\n')
    monkeypatch.chdir(project)
    code = main(_check(tmp_path, checkpoint))
    out = capsys.readouterr().out
    assert code == 1 and not marker.exists()
    note = (f"settings: not read: {zoo.resolve() / 'pyproject.toml'}, beside the checkpoint (settings come from --config or from the "
            f"project the command stands in, {project.resolve()}); pass --config {zoo.resolve() / 'pyproject.toml'} to use it, "
            "or run from its folder")
    assert " ".join(out.split()).count(note) == 1, out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["settings_files"] == [str(project / "pyproject.toml")] and report["run_notes"][0] == note
    assert [r["name"] for r in report["rows"]] == ["eager", KIND] and report["rows"][0]["status"] == "fail"
    assert report["thresholds"]["float"]["max_mae"] == 1e-5


def test_outside_any_project_only_the_current_directory_is_read(shared, tmp_path, monkeypatch, capsys) -> None:
    """No ``.git`` above: the current directory alone. A folder under the planted one reads nothing,
    says ``settings: none``, and the run needs --arch and --golden of its own."""
    work = shared["root"] / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert project_folders() == (work.resolve(),)
    code = main(_check(tmp_path, shared["checkpoint"], "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN),
                       "--artifacts", KIND))
    out = capsys.readouterr().out
    assert code == 1 and "settings: none" in out.splitlines() and not shared["marker"].exists()
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["settings_files"] == [] and report["rows"][0]["status"] == "fail"
    assert _junit_settings(tmp_path / "r.xml") == "none"


def test_the_checkpoints_folder_is_read_only_as_the_current_directory(shared, tmp_path, monkeypatch) -> None:
    """Standing in the checkpoint's folder is a choice: then its export-check.toml is the project's."""
    monkeypatch.chdir(shared["checkpoint"].parent)
    found = find_settings(shared["checkpoint"])
    assert found["_files"] == (str(shared["checkpoint"].parent.resolve() / "export-check.toml"),)
    monkeypatch.chdir(shared["project"])
    assert find_settings(shared["checkpoint"])["_files"] == (str(shared["project"].resolve() / "pyproject.toml"),)


def test_arch_outside_the_project_is_refused_unless_named_on_the_command_line(shared, tmp_path, monkeypatch, capsys) -> None:
    """The project's own settings name code outside it (``../shared/evil.py``): one line, exit 2, the
    reports still written, the code never imported. ``--arch`` on the command line runs what it names."""
    (shared["project"] / "pyproject.toml").write_text(
        f'[tool.export-check]\narch = "../shared/{_evil(shared["root"], shared["marker"])}"\ngolden = "{DEFAULT_GOLDEN}"\n'
        f'artifacts = ["{KIND}"]\n')
    monkeypatch.chdir(shared["project"])
    assert main(_check(tmp_path, DEFAULT_CHECKPOINT)) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"export-check: error: {shared['project'] / 'pyproject.toml'}: arch names code "
                                               "outside the project")
    assert "pass --arch" in err[0] and not shared["marker"].exists()
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 2
    assert (tmp_path / "r.xml").exists()
    assert main(_check(tmp_path, DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH)) == 0
    assert "settings: " + str(shared["project"] / "pyproject.toml") in capsys.readouterr().out


def test_a_link_inside_the_project_to_code_outside_is_outside(shared, tmp_path, monkeypatch) -> None:
    (shared["project"] / "net.py").unlink()
    (shared["project"] / "net.py").symlink_to(shared["root"] / _evil(shared["root"], shared["marker"]).split(":")[0])
    (shared["project"] / "pyproject.toml").write_text('[tool.export-check]\narch = "net.py:ResNet"\n')
    monkeypatch.chdir(shared["project"])
    with pytest.raises(UsageError, match="arch names code outside the project"):
        main_config(DEFAULT_CHECKPOINT)
    assert not shared["marker"].exists()


def main_config(checkpoint: Path):
    from export_check.settings import check_config

    return check_config({"checkpoint": checkpoint})[0]


def test_explicit_config_is_read_and_its_own_folder_is_its_project(shared, tmp_path, monkeypatch) -> None:
    """``--config FILE`` is the user's choice: read wherever it is; code beside it may run."""
    monkeypatch.chdir(shared["project"])
    config = tmp_path / "elsewhere" / "ci.toml"
    config.parent.mkdir()
    (config.parent / "net.py").write_text("from models.resnet import ResNet\n")
    config.write_text('arch = "net.py:ResNet"\nbatch-size = 4\n')
    built = check_config_of(config)
    assert built.settings_files == (str(config),) and built.batch_size == 4
    config.write_text(f'arch = "../shared/{_evil(shared["root"], shared["marker"])}"\n')
    with pytest.raises(UsageError, match=f"{config}: arch names code outside the project"):
        check_config_of(config)


def check_config_of(config: Path):
    from export_check.settings import check_config

    return check_config({"checkpoint": DEFAULT_CHECKPOINT, "config": config})[0]


def test_a_fleet_file_records_itself_and_keeps_its_code_in_its_project(shared, tmp_path, monkeypatch) -> None:
    from export_check.fleet.plan import plan
    from export_check.fleet.spec import parse_fleet

    monkeypatch.chdir(shared["project"])
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(f'[models.a]\ncheckpoint = "{DEFAULT_CHECKPOINT}"\n')
    fleet = parse_fleet(fleet_file)
    (job,) = plan(fleet.models, {}, False, fleet.source)
    assert job.config.settings_files == (str(fleet_file), str(shared["project"].resolve() / "pyproject.toml"))
    fleet_file.write_text(f'[models.a]\ncheckpoint = "{DEFAULT_CHECKPOINT}"\narch = "shared/{_evil(shared["root"], shared["marker"])}"\n')
    assert parse_fleet(fleet_file).models[0].explicit["arch"].startswith(str(tmp_path))  # inside the fleet file's folder: its own
    fleet_file.write_text(f'[models.a]\ncheckpoint = "{DEFAULT_CHECKPOINT}"\narch = "/usr/lib/evil.py:X"\n')
    with pytest.raises(UsageError, match="models.a: arch names code outside the project"):
        parse_fleet(fleet_file)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(depth=st.integers(0, 4), git_at=st.one_of(st.none(), st.integers(0, 4)), planted_above=st.booleans())
def test_lookup_never_leaves_the_project(tmp_path_factory, depth: int, git_at: int | None, planted_above: bool) -> None:
    """Whatever the nesting, the folders searched run from the current directory up to the folder
    holding .git (or the current directory alone), and a settings file above that is never found."""
    base = tmp_path_factory.mktemp("nest")
    chain = [base / "top"]
    for i in range(depth):
        chain.append(chain[-1] / f"d{i}")
    chain[-1].mkdir(parents=True)
    if planted_above:
        (base / "pyproject.toml").write_text('[tool.export-check]\narch = "x.py:X"\n')
    root = chain[min(git_at, depth)] if git_at is not None else None
    if root is not None:
        (root / ".git").write_text("gitdir: elsewhere\n")  # a worktree's .git is a file
    start = chain[-1]
    folders = project_folders(start)
    assert folders[0] == start.resolve()
    assert folders[-1] == (root.resolve() if root is not None else start.resolve()) == project_root(start)
    assert all(base.resolve() != f for f in folders)
    assert find_settings(None, None, start)["_files"] == ()


PLUGIN_TEST = '''
from pathlib import Path


def test_the_plugin_reads_the_rootdirs_project_not_the_checkpoints_folder(export_check, tmp_path):
    report = export_check({checkpoint!r}, out=tmp_path / "out", no_cache=True)
    assert report.settings_files == ({settings!r},)
    assert [(r.name, r.status) for r in report.rows] == [("eager", "fail"), ("{kind}", "pass")]
    assert report.thresholds.gate_for("eager").max_mae == 1e-5
    assert not Path({marker!r}).exists()
'''


def test_the_pytest_plugin_keeps_to_the_sessions_project(shared, pytester) -> None:
    """The plugin's settings come from the project of pytest's rootdir, as the CLI's from the current
    directory's: the planted files beside the shared checkpoint are not read there either."""
    shutil.copy(REPO / "models" / "resnet.py", pytester.path / "net.py")
    (pytester.path / ".git").mkdir()
    settings = pytester.path / "pyproject.toml"
    settings.write_text(f'[tool.pytest.ini_options]\naddopts = "-p no:cacheprovider"\n\n[tool.export-check]\narch = "net.py:ResNet"\n'
                        f'golden = "{DEFAULT_GOLDEN}"\nartifacts = ["{KIND}"]\n')
    pytester.makepyfile(test_planted=PLUGIN_TEST.format(checkpoint=str(shared["checkpoint"]), settings=str(settings.resolve()),
                                                        kind=KIND, marker=str(shared["marker"])))
    result = pytester.runpytest("-q")
    result.assert_outcomes(passed=1)


def test_golden_verify_says_which_settings_named_its_golden_set(shared, monkeypatch, capsys) -> None:
    monkeypatch.chdir(shared["project"] / "src")
    assert main(["golden", "verify"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"settings: {shared['project'] / 'pyproject.toml'}" and out[1].startswith(f"golden set {DEFAULT_GOLDEN}: OK")


REAL_TMP = '''
import json, os, shutil, subprocess, sys
from pathlib import Path

import torch

repo = Path(sys.argv[1])
# What the run needs that lives under /tmp (a checkout and its environment cloned into mktemp -d) is bound back into
# the new /tmp at the same paths, from a view of the old /tmp kept outside it for the time of the mounts.
needed = sorted({p for p in (Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), repo.resolve()) if Path("/tmp") in p.parents})
kept = Path(os.path.expanduser("~")) / f".export-check-kept-tmp-{os.getpid()}"
if needed:
    kept.mkdir()
    subprocess.run(["mount", "--bind", "/tmp", str(kept)], check=True)
subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/tmp"], check=True)  # this namespace's own /tmp: no one else sees it
for path in needed:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "--bind", str(kept / path.relative_to("/tmp")), str(path)], check=True)
if needed:
    subprocess.run(["umount", str(kept)], check=True)
    kept.rmdir()
checkpoint = Path("/tmp/ckpts/model.pth")
checkpoint.parent.mkdir()
state = torch.load(repo / "models" / "checkpoints" / "resnet_digits.pth", weights_only=True)
state["fc.weight"] = state["fc.weight"] * 3.0 + 0.5
torch.save(state, checkpoint)
Path("/tmp/evil.py").write_text("from pathlib import Path\\nPath('/tmp/planted-code-ran').write_text('ran')\\nResNet = None\\n")
Path("/tmp/pyproject.toml").write_text('[tool.export-check]\\narch = "evil.py:ResNet"\\nmax-mae = 100.0\\n'
                                       'artifacts = ["onnx"]\\n')
project = Path("/tmp/home/project")
(project / ".git").mkdir(parents=True)
shutil.copy(repo / "models" / "resnet.py", project / "net.py")
(project / "pyproject.toml").write_text(f'[tool.export-check]\\narch = "net.py:ResNet"\\ngolden = "{repo / "golden"}"\\n'
                                        'artifacts = ["torchscript-trace"]\\n')
env = {**os.environ, "XDG_CACHE_HOME": "/tmp/xdg-cache", "XDG_CONFIG_HOME": "/tmp/xdg-config"}
run = subprocess.run([sys.executable, "-m", "export_check", str(checkpoint), "--json", "-", "-q", "--no-cache", "--out", "/tmp/out"],
                     cwd=project, env=env, capture_output=True, text=True, timeout=600)
print(json.dumps({"code": run.returncode, "report": json.loads(run.stdout) if run.stdout else None, "stderr": run.stderr,
                  "ran": Path("/tmp/planted-code-ran").exists()}))
'''


def test_a_real_planted_tmp_pyproject_is_never_read(tmp_path) -> None:
    """The issue's attack as it happens: /tmp/pyproject.toml, the parent of the checkpoint's folder
    /tmp/ckpts, loosens the gate and names its own code; the user runs from their project. In a mount
    namespace of its own, so that the planted file reaches no other run on this machine."""
    import os
    import subprocess
    import sys

    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"cannot make a mount namespace here: {probe.stderr.strip()}")
        pytest.skip(f"cannot make a mount namespace here ({probe.stderr.strip()}); tmp_path/shared plays /tmp in the tests above")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable, "-c", REAL_TMP, str(REPO)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 1 and not result["ran"], result["stderr"]
    report = result["report"]
    assert report["settings_files"] == ["/tmp/home/project/pyproject.toml"]
    assert [(r["name"], r["status"]) for r in report["rows"]] == [("eager", "fail"), (KIND, "pass")]
    assert report["thresholds"]["float"]["max_mae"] == 1e-5 and "settings: /tmp/home/project/pyproject.toml" in result["stderr"]
