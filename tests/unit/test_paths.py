"""paths.py: a report or --out that would overwrite what the run reads is refused before anything is written."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from export_check.config import RunConfig
from export_check.errors import UsageError
from export_check.paths import NAME_MAX, check_lengths, check_outputs, error_report_paths, escaped


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "golden" / "inputs").mkdir(parents=True)
    (tmp_path / "golden" / "manifest.json").write_text("{}")
    (tmp_path / "model.pth").write_bytes(b"weights")
    (tmp_path / "net.py").write_text("class Net: ...\n")
    (tmp_path / "pyproject.toml").write_text("")
    return tmp_path


def config(root: Path, out: str = "out") -> RunConfig:
    return RunConfig(checkpoint=root / "model.pth", arch=f"{root / 'net.py'}:Net", golden=root / "golden", out_dir=root / out,
                     settings_files=(str(root / "pyproject.toml"),))


def refusal(root: Path, out: str = "out", **reports: str) -> str:
    with pytest.raises(UsageError) as info:
        check_outputs(config(root, out), {f"--{k}": root / v for k, v in reports.items()})
    assert "\n" not in str(info.value)
    return str(info.value)


def test_separate_paths_are_accepted(project: Path) -> None:
    check_outputs(config(project), {"--json": project / "report.json", "--junit": project / "r" / "junit.xml", "--html": None})


@pytest.mark.parametrize(("flag", "target", "says"), [
    ("json", "model.pth", "is the checkpoint"),
    ("json", "golden/manifest.json", "is the golden set's manifest"),
    ("json", "golden/inputs/x.json", "is inside the golden set"),
    ("json", "net.py", "is the architecture's source file"),
    ("json", "pyproject.toml", "is a settings file this run read"),
    ("json", "out/onnx.onnx", "is the onnx artifact"),
    ("markdown", "golden/../model.pth", "is the checkpoint"),  # a .. hides nothing
])
def test_a_report_over_what_the_run_reads_is_refused(project: Path, flag: str, target: str, says: str) -> None:
    text = refusal(project, **{flag: target})
    assert text.startswith(f"--{flag} {project / target}: ") and says in text


def test_a_link_to_the_checkpoint_is_the_checkpoint(project: Path) -> None:
    (project / "report.json").symlink_to(project / "model.pth")
    assert "is the checkpoint" in refusal(project, json="report.json")


def test_two_reports_on_one_path_are_refused(project: Path) -> None:
    assert "--json writes there too" in refusal(project, json="r.txt", markdown="r.txt")


@pytest.mark.parametrize(("out", "says"), [
    ("golden", "is the golden set"), (".", "holds the checkpoint"), ("golden/inputs", "is inside the golden set"),
])
def test_an_out_folder_that_mixes_artifacts_into_what_the_run_reads_is_refused(project: Path, out: str, says: str) -> None:
    text = refusal(project, out)
    assert text.startswith("--out ") and says in text


def test_the_settings_files_folder_may_hold_the_artifacts(project: Path) -> None:
    root = project / "sub"
    root.mkdir()
    (root / "pyproject.toml").write_text("")
    cfg = dataclasses.replace(config(project), out_dir=root, settings_files=(str(root / "pyproject.toml"),))
    check_outputs(cfg)


def test_check_lengths_refuses_a_long_name_and_a_nul() -> None:
    check_lengths({"--json": Path("a" * NAME_MAX) / "b", "--html": None})
    with pytest.raises(UsageError, match=f"--json .*a name in it is {NAME_MAX + 1} bytes long"):
        check_lengths({"--json": Path("d") / ("a" * (NAME_MAX + 1))})
    with pytest.raises(UsageError, match="holds a NUL byte"):
        check_lengths({"--out": Path("a\x00b")})
    with pytest.raises(UsageError, match="256 bytes long"):
        check_lengths({"--json": Path("é" * 128)})  # bytes, not characters


def test_error_reports_go_only_where_a_run_could_have_written_them(project: Path) -> None:
    reports = {"--json": project / "ok.json", "--junit": project / "model.pth", "--markdown": project / "same.md",
               "--html": project / "same.md", "--text": project / "sub" / "pyproject.toml",
               "--near-golden": project / "golden" / "e.json", "--none": None}
    safe = error_report_paths(reports, (project / "model.pth",), project / "golden", "net:Net", project / "out")
    assert safe == {"--json": project / "ok.json"}


def test_escaped_rewrites_only_what_holds_an_undecodable_name() -> None:
    @dataclasses.dataclass(frozen=True)
    class Row:
        name: str
        notes: tuple[str, ...]
        extra: dict[str, object]

    bad = os.fsdecode(b"bad\xffname.pth")
    clean = Row("a", ("b",), {"k": [1, "v"]})
    assert escaped(clean) is clean
    row = escaped(Row(bad, ("ok", bad), {bad: 1, "k": (bad,)}))
    assert row == Row("bad\\xffname.pth", ("ok", "bad\\xffname.pth"), {"bad\\xffname.pth": 1, "k": ("bad\\xffname.pth",)})
    row.name.encode("utf-8")
