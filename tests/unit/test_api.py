"""The Python API's surface (issue 16.4): what ``import export_check`` offers and costs, bad options
refused by name before any work, the version from one source, the schema shipped with the package."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

import export_check
from export_check import api
from export_check.errors import ExportCheckError, UsageError
from export_check.options import CHECK, for_command
from export_check.report import json_report
from export_check.results import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT = REPO / "models" / "checkpoints" / "resnet_digits.pth"
HEAVY = ("torch", "numpy", "onnx", "onnxruntime", "PIL")


def test_importing_the_api_loads_nothing_heavy() -> None:
    code = (
        "import sys, json, export_check\n"
        f"before = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "names = [export_check.check, export_check.record, export_check.approve, export_check.verify, export_check.ExportCheckError]\n"
        f"after = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(json.dumps({'before': before, 'after': after, 'dir': dir(export_check)}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["before"] == [] and shown["after"] == []
    assert {"check", "record", "approve", "verify", "Report", "ExportCheckError", "__version__"} <= set(shown["dir"])


def test_unknown_names_are_refused() -> None:
    with pytest.raises(AttributeError, match="no attribute 'chek'"):
        export_check.chek  # noqa: B018


def _no_run(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the pipeline ran although the options were bad")

    monkeypatch.setattr("export_check.run.pipeline.run_check", refuse)


@pytest.mark.parametrize(("options", "message"), [
    ({"batch_sise": 8}, r"export_check\.check\(\): unknown option batch_sise; it takes arch, arch_kwargs, golden"),
    ({"json": "r.json"}, r"unknown option json"),  # a CLI view: the API returns the Report
    ({"batch_size": "eight"}, r"option batch_size must be an integer, got 'eight'"),
    ({"jobs": 3}, r"option jobs must be 1 or 2, got 3"),
    ({"onnx_exporter": "fast"}, r"option onnx_exporter must be one of torchscript, dynamo, got 'fast'"),
    ({"max_mae": float("nan")}, r"option max_mae must be a finite number >= 0, got nan"),
    ({"no_cache": "yes"}, r"option no_cache is a switch: pass True or leave it out, got 'yes'"),
    ({"arch_kwargs": {"n": object()}}, r"option arch_kwargs must hold JSON data only"),
])
def test_bad_options_are_one_export_check_error_naming_them(monkeypatch, options, message) -> None:
    _no_run(monkeypatch)
    with pytest.raises(UsageError, match=message):
        export_check.check(CHECKPOINT, arch="models/resnet.py:ResNet", **options)


def test_bad_checkpoint_and_golden_arguments(monkeypatch, tmp_path: Path) -> None:
    _no_run(monkeypatch)
    with pytest.raises(UsageError, match=r"checkpoint must be a path, got 3"):
        export_check.check(3, arch="m.py:Net")  # type: ignore[arg-type]
    with pytest.raises(ExportCheckError, match=r"missing\.pth.*checkpoint"):
        export_check.check(tmp_path / "missing.pth", arch="m.py:Net")
    with pytest.raises(UsageError, match=r"unknown option dry_run"):
        export_check.record(CHECKPOINT, arch="m.py:Net", dry_run=True)
    with pytest.raises(UsageError, match=r"golden must be the path"):
        export_check.verify("")


def test_the_api_takes_every_check_option_but_the_views() -> None:
    flags = {o.python for o in for_command(CHECK) if not o.positional}
    assert set(api.options_of(CHECK)) == flags - {"json", "junit", "markdown", "html", "history", "quiet", "fleet", "shard", "workers", "ray"}
    assert {"arch", "batch_size", "artifacts", "max_mae", "int8_max_relative_mae", "cache_dir", "no_cache", "out"} <= set(api.options_of(CHECK))


def test_the_version_has_one_source(tmp_path: Path) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "export_check.__version__"}
    cli = subprocess.run([sys.executable, "-m", "export_check", "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.strip() == f"export-check {export_check.__version__}"
    assert version("export-check") == export_check.__version__
    assert f"## [{export_check.__version__}]" in (REPO / "CHANGELOG.md").read_text()


def test_license_is_the_apache_2_text_pyproject_names() -> None:
    text = (REPO / "LICENSE").read_text()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "Apache-2.0"}
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) == 202


def test_the_schema_ships_with_the_package_at_the_report_version() -> None:
    schema = json_report.schema()
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert json_report.SCHEMA_FILE in package_data["export_check.report"]
    assert (Path(json_report.__file__).parent / json_report.SCHEMA_FILE).is_file()
    assert (Path(export_check.__file__).parent / "py.typed").is_file()


def test_the_wheel_ships_the_typing_marker_the_schema_and_the_license(tmp_path: Path) -> None:
    """Built by the real build backend from a copy of the sources (so no build/ lands in the checkout)."""
    import shutil
    import zipfile

    source = tmp_path / "src"
    source.mkdir()
    shutil.copytree(REPO / "exporter", source / "exporter", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md"):
        shutil.copy(REPO / name, source / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(source), "-w", str(tmp_path / "dist")]
    result = subprocess.run(build, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (wheel,) = (tmp_path / "dist").glob("export_check-*.whl")
    assert wheel.name.startswith(f"export_check-{export_check.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"export_check/py.typed", "export_check/report/report.schema.json", "export_check/api.py"} <= set(names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    schema = json.loads(zipfile.ZipFile(wheel).read("export_check/report/report.schema.json"))
    assert schema == json_report.schema()
