"""Attacks on what export-check runs, imports and writes, through the real CLI.

Each attack asserts the exit code, the one ``export-check: error:`` line, and that nothing outside the
tool's own files changed: every file around the run (the checkpoint, the golden set, the architecture
source, the settings file, files a shell command would touch) is hashed before and after. Process
attacks (SIGKILL of the parent, Ctrl-C, an artifact that hangs on load) are in test_faults.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO
from export_check.checkpoint import load_state_dict
from export_check.cli import main
from export_check.errors import CheckpointError


def snapshot(folder: Path, skip: str = "out") -> dict[str, str]:
    """sha256 of every file below ``folder`` except the tool's own output folder ``skip``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink() and p.relative_to(folder).parts[0] != skip
            and "__pycache__" not in p.parts}  # importing the user's arch compiles it, as python and pytest do


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A user's project: checkpoint, architecture file, golden set, a file of notes, all copied."""
    shutil.copy(DEFAULT_CHECKPOINT, tmp_path / "model.pth")
    shutil.copy(REPO / "models" / "resnet.py", tmp_path / "resnet.py")
    shutil.copytree(DEFAULT_GOLDEN, tmp_path / "golden")
    (tmp_path / "notes.txt").write_text("the user's own file\n")
    return tmp_path


def argv(project: Path, *extra: object, out: object = None, arch: str | None = None) -> list[str]:
    return [str(a) for a in (project / "model.pth", "--arch", arch or f"{project / 'resnet.py'}:ResNet", "--golden", project / "golden",
                             "--out", out or project / "out", "--no-cache", "-q", *extra)]


def attack(capfd: pytest.CaptureFixture[str], project: Path, args: list[str], *expected: str, code: int = 2) -> str:
    """Run the CLI on ``args``; assert the exit code, one error line holding ``expected``, and no file around it changed."""
    before = snapshot(project)
    got = main(args)
    out, err = capfd.readouterr()
    assert got == code, out + err
    assert err.startswith("export-check: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "export-check: error: export-check" not in err  # no doubled prefix
    for fragment in expected:
        assert fragment in err, (fragment, err)
    assert snapshot(project) == before
    return err


# --- output paths ------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown", "--html", "--history"])
@pytest.mark.parametrize("target, says", [
    ("model.pth", "is the checkpoint"),
    ("golden/manifest.json", "is the golden set's manifest"),
    ("golden/reference.npy", "is inside the golden set"),
    ("golden/inputs/new.png", "is inside the golden set"),
    ("resnet.py", "is the architecture's source file"),
    ("out/onnx.onnx", "is the onnx artifact"),
    ("link-to-model", "is the checkpoint"),  # a symbolic link does not hide it
])
def test_a_report_aimed_at_what_the_run_reads_is_refused_before_anything_is_written(
        project: Path, capfd, flag: str, target: str, says: str) -> None:
    (project / "link-to-model").symlink_to(project / "model.pth")
    attack(capfd, project, argv(project, flag, project / target), f"{flag} ", says)
    assert not (project / "out").exists()  # refused before the output folder was even made


@pytest.mark.parametrize("out, says", [
    ("golden", "is the golden set"),
    (".", "holds the checkpoint"),
    ("golden/..", "holds the checkpoint"),
    ("model.pth", "is the checkpoint"),
])
def test_an_out_folder_that_is_or_holds_what_the_run_reads_is_refused(project: Path, capfd, out: str, says: str) -> None:
    attack(capfd, project, argv(project, out=project / out), "--out ", says, "pass a folder of its own")
    assert not (project / "golden" / "onnx.onnx").exists()


def test_two_reports_at_one_path_are_refused(project: Path, capfd) -> None:
    attack(capfd, project, argv(project, "--json", project / "r.txt", "--markdown", project / "." / "r.txt"),
           "--markdown", "--json writes there too")


@pytest.mark.parametrize("flag", ["--out", "--json", "--golden", "checkpoint"])
def test_a_path_component_over_255_bytes_is_one_line(project: Path, capfd, flag: str) -> None:
    long = project / ("é" * 130)  # 260 bytes in UTF-8
    args = argv(project)
    if flag == "checkpoint":
        args[0] = str(long)
    elif flag in args:
        args[args.index(flag) + 1] = str(long)
    else:
        args += [flag, str(long)]
    attack(capfd, project, args, "255")


# --- the architecture: code that runs, but only a model factory -------------------------------


@pytest.mark.parametrize("arch, kwargs", [
    ("subprocess:run", {"args": "touch PWNED", "shell": True}),
    ("subprocess:Popen", {"args": ["touch", "PWNED"]}),
    ("os:system", {"command": "touch PWNED"}),
    ("builtins:eval", {"source": "open('PWNED', 'w')"}),
    ("builtins:exec", {"source": "open('PWNED', 'w')"}),
    ("shutil:rmtree", {"path": "golden"}),
    ("reexport:run", {"args": "touch PWNED", "shell": True}),  # a user module that re-exports subprocess.run
])
def test_arch_from_the_standard_library_or_builtins_is_refused_before_it_is_called(
        project: Path, capfd, monkeypatch, arch: str, kwargs: dict) -> None:
    (project / "reexport.py").write_text("from subprocess import run\n")
    monkeypatch.chdir(project)
    attack(capfd, project, argv(project, "--arch-kwargs", json.dumps(kwargs), arch=arch), arch, "refused", "standard library")
    assert not (project / "PWNED").exists()


def test_arch_from_a_settings_file_alone_cannot_run_a_shell_command(project: Path, capfd, monkeypatch) -> None:
    """The issue's attack: `arch = "subprocess:run"` and `arch-kwargs` in pyproject.toml, nothing on the command line."""
    (project / "pyproject.toml").write_text(
        '[tool.export-check]\narch = "subprocess:run"\ngolden = "golden"\n'
        'arch-kwargs = {args = "touch PWNED", shell = true}\n')
    monkeypatch.chdir(project)
    before = snapshot(project)
    assert main([str(project / "model.pth"), "--out", str(project / "out"), "--no-cache", "-q"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "subprocess:run: refused" in err, err
    assert not (project / "PWNED").exists() and snapshot(project) == before


@pytest.mark.parametrize("source, says", [
    ("NET = 3\n", "NET is a int, not a class or factory function"),
    ("import functools, torch\nNET = functools.partial(torch.nn.Linear, 1)\n", "NET is a partial, not a class or factory function"),
    ("def NET():\n    return [1, 2]\n", "returned a list, not a torch.nn.Module"),
    ("import torch\nNET = torch.nn.Linear(1, 1)\n", "NET is a Linear, not a class or factory function"),
])
def test_arch_must_name_a_factory_that_returns_a_module(project: Path, capfd, source: str, says: str) -> None:
    (project / "odd.py").write_text(source)
    attack(capfd, project, argv(project, arch=f"{project / 'odd.py'}:NET"), says)


# --- imports that mean what they say ----------------------------------------------------------


def test_a_stray_onnxruntime_py_in_the_current_directory_does_not_shadow_the_real_library(project: Path) -> None:
    """`python -m export_check` puts the current directory first on sys.path; an onnxruntime.py there (which
    would leave a marker and break every ONNX row) must not run, while the model module there still imports."""
    (project / "onnxruntime.py").write_text("open('SHADOWED', 'w').write('ran')\nraise ImportError('the fake onnxruntime')\n")
    (project / "mynet.py").write_text((REPO / "models" / "resnet.py").read_text())
    before = snapshot(project)
    result = subprocess.run(
        [sys.executable, "-m", "export_check", "model.pth", "--arch", "mynet:ResNet", "--golden", "golden", "--out", "out",
         "--artifacts", "onnx", "--no-cache", "--json", "out/report.json", "-q"],
        cwd=project, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": ""},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (project / "SHADOWED").exists()
    rows = {row["name"]: row["status"] for row in json.loads((project / "out" / "report.json").read_text())["rows"]}
    assert rows == {"eager": "pass", "onnx": "pass"}
    assert snapshot(project) == before


def test_a_file_path_arch_imports_its_sibling_modules(project: Path, capfd, monkeypatch) -> None:
    """`--arch sub/badnet.py:Net` where badnet.py does `from mynet import ResNet`: the sibling is found
    (the file's folder goes on sys.path, after the installed libraries), from any current directory."""
    sub = project / "sub"
    sub.mkdir()
    (sub / "mynet.py").write_text((REPO / "models" / "resnet.py").read_text())
    (sub / "badnet.py").write_text("from mynet import ResNet\n\n\nclass Net(ResNet):\n    pass\n")
    monkeypatch.chdir(REPO / "models")
    before = snapshot(project)
    code = main(argv(project, "--artifacts", "torchscript-trace", "--json", project / "out" / "r.json", arch=f"{sub / 'badnet.py'}:Net"))
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert [row["status"] for row in json.loads((project / "out" / "r.json").read_text())["rows"]] == ["pass", "pass"]
    assert snapshot(project) == before


# --- bad values on the command line and in settings -------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(threads=st.one_of(st.integers(max_value=0), st.integers(min_value=1025), st.just(10**10), st.just(2**31)))
def test_out_of_range_threads_are_one_line_before_any_work(project: Path, capfd, threads: int) -> None:
    attack(capfd, project, argv(project, "--threads", threads), "threads")
    assert not (project / "out").exists()


@st.composite
def hostile_kwargs(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["deep-object", "deep-list", "huge-int", "long", "nan"]))
    depth = draw(st.integers(33, 5000))
    if kind == "deep-object":
        return '{"a": ' * depth + "1" + "}" * depth
    if kind == "deep-list":
        return '{"a": ' + "[" * depth + "]" * depth + "}"
    if kind == "huge-int":
        return '{"a": ' + "9" * draw(st.integers(20, 6000)) + "}"
    if kind == "nan":
        return '{"a": ' + draw(st.sampled_from(["NaN", "Infinity", "-Infinity"])) + "}"
    return '{"a": "' + "x" * (1 << 20) + '"}'


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=hostile_kwargs())
def test_hostile_arch_kwargs_json_is_one_line_before_any_work(project: Path, capfd, text: str) -> None:
    attack(capfd, project, argv(project, "--arch-kwargs", text), "--arch-kwargs")
    assert not (project / "out").exists()


@pytest.mark.parametrize("value, says", [
    ("1979-05-27T07:32:00Z", ("pyproject.toml: arch-kwargs", "got a datetime")),
    ("1979-05-27", ("pyproject.toml: arch-kwargs", "got a date")),
    ("07:32:00", ("pyproject.toml: arch-kwargs", "got a time")),
    ('{inner = [1, 1979-05-27]}', ("pyproject.toml: arch-kwargs", "got a date")),
    # numbers out of range are refused as the file is read, for every key (exporter/parsing.py, issue 24)
    ("1e999", ("pyproject.toml: the number at tool.export-check.arch-kwargs.when is inf, not a finite number",)),
    ("9" * 30, ("pyproject.toml: the integer at tool.export-check.arch-kwargs.when needs 100 bits, outside the 64-bit range",)),
])
def test_non_json_arch_kwargs_in_toml_are_one_line_and_the_run_never_starts(project: Path, capfd, monkeypatch, value: str,
                                                                            says: tuple[str, ...]) -> None:
    """A TOML date in arch-kwargs used to pass the run and then crash the --json report."""
    monkeypatch.chdir(project)  # the project's settings: read where the run stands (issue 24)
    (project / "pyproject.toml").write_text(f'[tool.export-check]\narch = "resnet.py:ResNet"\ngolden = "golden"\n'
                                            f'arch-kwargs = {{num_classes = 10, when = {value}}}\n')
    report = project.parent / f"{project.name}-r.json"
    args = [str(project / "model.pth"), "--out", str(project / "out"), "--json", str(report), "--no-cache", "-q"]
    err = attack(capfd, project, args, *says)
    assert not (project / "out").exists()
    doc = json.loads(report.read_text())  # the report holds the error (issue 16.2), and only the error
    assert doc["exit_code"] == 2 and doc["rows"] == [] and doc["error"]["message"] == err.removeprefix("export-check: error: ").rstrip("\n")


# --- checkpoints -------------------------------------------------------------------------------


def _with_tensor(state: dict, key: str, what: str) -> dict:
    value = state[key]
    if what == "sparse":
        state[key] = value.to_sparse()
    elif what == "sparse_csr":
        state[key] = value.reshape(value.shape[0], -1).to_sparse_csr()
    elif what == "meta":
        state[key] = torch.empty_like(value, device="meta")
    elif what == "quantized":
        state[key] = torch.quantize_per_tensor(value, 0.01, 0, torch.qint8)
    elif what == "complex":
        state[key] = value.to(torch.complex64)
    return state


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's beta/deprecation notes on sparse CSR and quantized tensors
@pytest.mark.parametrize("what, says", [
    ("sparse", "a sparse tensor (sparse_coo)"), ("sparse_csr", "a sparse tensor (sparse_csr)"),
    ("meta", "a meta tensor"), ("quantized", "a quantized tensor (qint8)"), ("complex", "a complex tensor (complex64)"),
])
def test_a_checkpoint_holding_non_dense_tensors_is_one_line_naming_the_key(project: Path, capfd, what: str, says: str) -> None:
    state = torch.load(DEFAULT_CHECKPOINT, weights_only=True)
    key = next(k for k, v in state.items() if v.dtype.is_floating_point and v.ndim == 4)
    torch.save(_with_tensor(state, key, what), project / "model.pth")
    err = attack(capfd, project, argv(project), "model.pth", key, says, "dense float weights")
    assert "load_state_dict" not in err
    with pytest.raises(CheckpointError, match=key):
        load_state_dict(project / "model.pth")


def test_a_checkpoint_name_that_is_not_utf8_is_shown_escaped_and_every_report_is_written(project: Path, capfd) -> None:
    raw = os.fsencode(project) + b"/bad\xff\xfename.pth"
    os.rename(project / "model.pth", raw)
    checkpoint = Path(os.fsdecode(raw))
    reports = {flag: project / f"report.{flag}" for flag in ("json", "junit", "markdown", "html", "history")}
    args = [str(checkpoint), "--arch", f"{project / 'resnet.py'}:ResNet", "--golden", str(project / "golden"), "--out", str(project / "out"),
            "--artifacts", "torchscript-trace", "--no-cache", "-q", *(a for flag, path in reports.items() for a in (f"--{flag}", str(path)))]
    assert main(args) == 0
    out, err = capfd.readouterr()
    assert "bad\\xff\\xfename.pth" in out and "Traceback" not in err, out + err
    for flag, path in reports.items():
        text = path.read_bytes().decode("utf-8")  # valid UTF-8, every one
        assert "bad\\\\xff\\\\xfename.pth" in text or "bad\\xff\\xfename.pth" in text, (flag, text[:300])
    assert json.loads(reports["json"].read_text())["checkpoint"]["path"].endswith("bad\\xff\\xfename.pth")
    assert os.path.exists(raw)  # the file itself untouched, under its real name
