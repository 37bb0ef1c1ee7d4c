"""The example GitHub Actions workflow and the pre-commit hooks (issue 16.9), as far as this machine
allows: both YAML files parsed, every export-check command of the workflow checked by the real
argument parser and then run against the bundled model in a temporary copy of the repository (with
``$GITHUB_STEP_SUMMARY`` a file that already holds an earlier step's summary), and each hook's entry
run as pre-commit would run it."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import REPO
from export_check.cli import _normalise, build_parser
from export_check.errors import UsageError
from export_check.report import json_report

WORKFLOW = REPO / ".github" / "workflows" / "export-check.yml"
HOOKS = REPO / ".pre-commit-hooks.yaml"
BIN = Path(sys.executable).parent


def workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def steps() -> list[dict]:
    (job,) = workflow()["jobs"].values()
    return job["steps"]


def commands(script: str) -> list[str]:
    """The export-check command lines of a `run:` script (backslash continuations joined)."""
    logical = script.replace("\\\n", " ")
    return [line.strip() for line in logical.splitlines() if line.strip().startswith("export-check ")]


def argv(line: str, env: dict[str, str]) -> list[str]:
    """The arguments of one command line as the shell gives them: quotes removed, ``$VAR`` from ``env`` (a missing one fails)."""
    words = shlex.split(line)
    assert words[0] == "export-check"
    return [re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: env[m.group(1)], w) for w in words[1:]]


def test_the_workflow_installs_with_constraints_checks_appends_the_summary_and_uploads() -> None:
    data = workflow()
    assert set(data["on"]) == {"pull_request", "push"} and data["permissions"] == {"contents": "read"}
    uses = [s.get("uses", "").split("@")[0] for s in steps()]
    assert uses[:2] == ["actions/checkout", "actions/setup-python"] and "actions/upload-artifact" in uses
    assert steps()[0]["with"]["lfs"] is True
    runs = {s.get("name"): s.get("run", "") for s in steps()}
    assert runs["Install"].split() == ["python", "-m", "pip", "install", "-c", "constraints.txt", "-e", "."]
    assert (REPO / "constraints.txt").is_file()
    (check,) = commands(runs["Export, replay and gate"])
    assert '--markdown "$GITHUB_STEP_SUMMARY" --markdown-append' in check
    upload = next(s for s in steps() if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()"
    written = [w for flag in ("--json", "--junit", "--history") for w in [shlex.split(check)[shlex.split(check).index(flag) + 1]]]
    assert all(w.startswith(upload["with"]["path"]) for w in written), written
    cache = next(s for s in steps() if s.get("uses", "").startswith("actions/cache"))
    assert cache["with"]["path"] == "~/.cache/export-check"  # the default cache folder (config.default_cache_dir)


def test_every_export_check_command_of_the_workflow_is_a_valid_invocation() -> None:
    env = {"GITHUB_STEP_SUMMARY": "/tmp/summary.md", "RUNNER_TEMP": "/tmp"}
    found = [line for s in steps() for line in commands(s.get("run", ""))]
    assert len(found) == 2
    parser = build_parser()
    for line in found:
        try:
            parser.parse_args(_normalise(argv(line, env)))
        except UsageError as exc:
            pytest.fail(f"{line}: {exc}")


def _project_copy(tmp_path: Path) -> Path:
    """The repository's bundled model, golden set and settings in a fresh folder, as a checkout would have them
    (docs/first_screen.py's copy, which the README's first screen runs in too)."""
    sys.path.insert(0, str(REPO / "docs"))
    import first_screen

    return first_screen.project_copy(tmp_path)


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "EXPORT_CHECK_"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", RUNNER_TEMP=str(tmp_path / "runner-temp"),
               GITHUB_STEP_SUMMARY=str(tmp_path / "step_summary.md"))
    return env


def test_the_workflow_commands_run_on_the_bundled_model(tmp_path: Path) -> None:
    project, env = _project_copy(tmp_path), _env(tmp_path)
    summary = Path(env["GITHUB_STEP_SUMMARY"])
    summary.write_text("## an earlier step's summary\n")
    for line in (line for s in steps() for line in commands(s.get("run", ""))):
        result = subprocess.run(["export-check", *argv(line, env)], cwd=project, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        assert "Traceback" not in result.stderr
    report = json.loads((project / "reports" / "export-check.json").read_text())
    jsonschema.validate(report, json_report.schema(), cls=jsonschema.Draft202012Validator)
    assert report["passed"] is True and len(report["rows"]) >= 7
    assert (project / "reports" / "export-check.xml").read_text().startswith("<?xml")
    assert len((project / "reports" / "history.jsonl").read_text().splitlines()) == 1
    text = summary.read_text()
    assert text.startswith("## an earlier step's summary\n") and "onnx" in text and len(text) > 200  # appended, not replaced


def hooks() -> list[dict]:
    data = yaml.safe_load(HOOKS.read_text())
    assert isinstance(data, list)
    return data


def test_the_hooks_are_pre_commit_definitions() -> None:
    found = {h["id"]: h for h in hooks()}
    assert set(found) == {"export-check", "export-check-golden"}
    for hook in found.values():
        assert {"id", "name", "entry", "language"} <= set(hook) and hook["language"] == "python"
        assert shlex.split(hook["entry"])[0] == "export-check"
    # pre-commit matches `files` with re.search on repository-relative paths
    files = re.compile(found["export-check"]["files"])
    assert files.search("models/checkpoints/resnet_digits.pth") and files.search("m.safetensors") and not files.search("models/resnet.py")
    golden = re.compile(found["export-check-golden"]["files"])
    assert golden.search("golden/manifest.json") and golden.search("sub/golden/inputs/a.png") and not golden.search("goldenrod.txt")


def test_the_hook_entries_run_as_pre_commit_runs_them(tmp_path: Path) -> None:
    project, env = _project_copy(tmp_path), _env(tmp_path)
    env.update(XDG_CACHE_HOME=str(tmp_path / "xdg-cache"), XDG_CONFIG_HOME=str(tmp_path / "xdg-config"))
    found = {h["id"]: h for h in hooks()}

    def run(hook: dict, filenames: list[str]) -> subprocess.CompletedProcess[str]:
        command = [*shlex.split(hook["entry"]), *hook.get("args", []), *(filenames if hook.get("pass_filenames", True) else [])]
        return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=600)

    checked = run(found["export-check"], ["models/checkpoints/resnet_digits.pth"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "PASSED: 7 passed, 0 failed, 0 errors" in checked.stdout and checked.stderr == ""
    verified = run(found["export-check-golden"], ["golden/manifest.json"])
    # the settings file it read first (issue 24: every run says which), then the verdict
    assert verified.returncode == 0 and verified.stdout.startswith(f"settings: {project / 'pyproject.toml'}\ngolden set {project / 'golden'}: "
                                                                   "OK (64 inputs"), verified.stdout
    victim = sorted((project / "golden" / "inputs").iterdir())[0]
    victim.write_bytes(victim.read_bytes() + b"\0")  # a changed golden file fails the hook, naming it
    verified = run(found["export-check-golden"], [f"golden/inputs/{victim.name}"])
    assert verified.returncode == 1 and victim.name in verified.stdout and "CHANGED" in verified.stdout
