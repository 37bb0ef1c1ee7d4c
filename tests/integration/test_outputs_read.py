"""Issue 24, item 6: export-check never overwrites a file it read in the same run, nor writes inside the
golden set; a ``.partial`` a killed run left in the cache is removed by the next run.

Each refusal is one line, exit 2, before any work, the file byte for byte as it was, and the other
reports asked for still written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, REPO
from export_check.cache.store import LAYOUT
from export_check.cli import main
from export_check.nofollow import Folder

KIND = "torchscript-trace"


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A user's project (a git repository) whose pyproject.toml names the bundled model's arch and golden set."""
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "net.py").write_text("from models.resnet import ResNet\n")
    (root / "pyproject.toml").write_text(f'[tool.export-check]\narch = "net.py:ResNet"\ngolden = "{DEFAULT_GOLDEN}"\n'
                                         f'artifacts = ["{KIND}"]\n')
    monkeypatch.chdir(root)
    return root


def _one_line(capsys, start: str) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"export-check: error: {start}"), err
    return err[0]


@pytest.mark.parametrize("flag", ["--json", "--junit", "--markdown", "--html", "--history"])
def test_a_report_over_the_settings_file_the_run_read_is_refused(project: Path, tmp_path: Path, flag: str, capsys) -> None:
    before = (project / "pyproject.toml").read_bytes()
    other = ["--junit", str(tmp_path / "r.xml")] if flag != "--junit" else ["--json", str(tmp_path / "r.json")]
    assert main([str(DEFAULT_CHECKPOINT), "-q", "--no-cache", flag, "pyproject.toml", *other]) == 2
    _one_line(capsys, f"{flag} pyproject.toml: is a settings file this run read; writing the report there would overwrite it")
    assert (project / "pyproject.toml").read_bytes() == before
    written = tmp_path / ("r.xml" if flag != "--junit" else "r.json")  # the other report: the error, still written
    read = str(project / "pyproject.toml")
    if written.suffix == ".json":
        assert json.loads(written.read_text())["settings_files"] == [read]
    else:
        assert f'name="settings_files" value="{read}"' in written.read_text()


def test_an_error_report_never_replaces_a_broken_settings_file(project: Path, capsys) -> None:
    """The settings file is what failed to read: the error report asked for at its path is not written there."""
    (project / "export-check.toml").write_text("arch = [\n")
    before = (project / "export-check.toml").read_bytes()
    assert main([str(DEFAULT_CHECKPOINT), "-q", "--json", "export-check.toml"]) == 2
    _one_line(capsys, f"{project / 'export-check.toml'}: not valid TOML")
    assert (project / "export-check.toml").read_bytes() == before


def test_a_fleet_report_over_the_fleet_file_is_refused(project: Path, tmp_path: Path, capsys) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[models.a]\ncheckpoint = "{DEFAULT_CHECKPOINT}"\n')
    before = fleet.read_bytes()
    assert main(["--fleet", str(fleet), "-q", "--no-cache", "--markdown", str(fleet), "--json", str(tmp_path / "f.json")]) == 2
    _one_line(capsys, f"--markdown {fleet}: is a settings file this run read")
    assert fleet.read_bytes() == before and json.loads((tmp_path / "f.json").read_text())["exit_code"] == 2


@pytest.mark.parametrize("inside", ["inputs", "inputs/new", "."])
def test_out_inside_the_golden_set_is_refused(project: Path, tmp_path: Path, inside: str, capsys) -> None:
    manifest = (DEFAULT_GOLDEN / "manifest.json").read_bytes()
    listing = sorted(p.relative_to(DEFAULT_GOLDEN) for p in DEFAULT_GOLDEN.rglob("*"))
    out = DEFAULT_GOLDEN / inside
    assert main([str(DEFAULT_CHECKPOINT), "-q", "--no-cache", "--out", str(out), "--json", str(tmp_path / "r.json")]) == 2
    _one_line(capsys, f"--out {out}: is")
    assert (DEFAULT_GOLDEN / "manifest.json").read_bytes() == manifest
    assert sorted(p.relative_to(DEFAULT_GOLDEN) for p in DEFAULT_GOLDEN.rglob("*")) == listing


def test_merge_never_writes_over_a_report_it_reads(tmp_path: Path, capsys) -> None:
    report = tmp_path / "r.json"
    report.write_text("{}")
    assert main(["merge", str(report), "--json", str(report)]) == 2
    _one_line(capsys, f"--json {report}: is a report this merge reads")
    assert report.read_text() == "{}"


def test_history_never_writes_its_page_over_the_history_it_reads(tmp_path: Path, capsys) -> None:
    history = tmp_path / "h.jsonl"
    history.write_text("")
    assert main(["history", str(history), "--html", str(history)]) == 2
    _one_line(capsys, f"--html {history}: is the history file this command reads")
    assert history.read_text() == ""


_KILLED = """
import os, signal, sys
from pathlib import Path
from export_check.nofollow import Folder
from export_check.cache.store import LAYOUT
with Folder.walk(Path(sys.argv[1]), tuple(sys.argv[2:]), create=False) as folder:
    name, fd = folder.new_temp("artifact")
    os.write(fd, b"half an artifact")
    print(name, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_partial_left_by_a_killed_run_is_removed_by_the_next_run(project: Path, tmp_path: Path, private_cache_dir: Path) -> None:
    argv = [str(DEFAULT_CHECKPOINT), "-q", "--out", str(tmp_path / "out"), "--json", str(tmp_path / "r.json")]
    assert main(argv) == 0
    entries = sorted(p for p in (private_cache_dir / LAYOUT).glob("*/*") if p.is_dir())
    assert len(entries) == 2  # eager and the one kind
    left = []
    for entry in entries:  # a run killed (SIGKILL) while it wrote into each entry
        killed = subprocess.run([sys.executable, "-c", _KILLED, str(private_cache_dir), *entry.relative_to(private_cache_dir).parts],
                                capture_output=True, text=True, cwd=REPO, timeout=120)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        left.append(entry / killed.stdout.strip())
    assert all(p.exists() for p in left)
    past = time.time() - 10  # older than the moment between a writer's create and its lock (PARTIAL_MIN_AGE)
    for path in left:
        os.utime(path, (past, past))
    assert main(argv) == 0
    assert not any(p.exists() for p in left)
    assert {r["cache"] for r in json.loads((tmp_path / "r.json").read_text())["rows"]} == {"hit"}
    # and `cache prune` (as every eviction after a store) sweeps every entry of the cache
    killed = subprocess.run([sys.executable, "-c", _KILLED, str(private_cache_dir), *entries[0].relative_to(private_cache_dir).parts],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    os.utime(entries[0] / killed.stdout.strip(), (past, past))
    assert main(["cache", "prune", "--cache-dir", str(private_cache_dir), "--max-size", "100"]) == 0
    assert not (entries[0] / killed.stdout.strip()).exists() and all(e.is_dir() for e in entries)


def test_a_partial_a_live_writer_holds_is_kept(tmp_path: Path) -> None:
    with Folder.walk(tmp_path, (), create=False) as folder:
        assert folder is not None
        name, fd = folder.new_temp("artifact")
        try:
            past = time.time() - 60
            os.utime(tmp_path / name, (past, past))
            assert folder.sweep_partials() == 0 and (tmp_path / name).exists()
        finally:
            os.close(fd)
        assert folder.sweep_partials() == 1 and not (tmp_path / name).exists()
