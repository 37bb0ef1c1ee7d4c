"""Reports written like a Unix tool, through the real CLI (issue 16.2): ``-`` is standard output, a
temporary link to the process's stdout (what ``/dev/stdout`` is) writes down the pipe or into the
``> log`` file without reopening it, a FIFO is written through, a symlinked report is written to its
target and the link kept, ``--markdown-append`` and ``$GITHUB_STEP_SUMMARY`` add each check's summary,
files honour the umask; and on exit 2 every report is written carrying the error. Never the
machine's own /dev/stdout: each case uses a temporary link and a pipe."""

from __future__ import annotations

import html
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN, TESTS
from export_check.cli import main

XSD = TESTS / "data" / "junit-10.xsd"
ONE_KIND = ("--artifacts", "torchscript-trace")


def _args(tmp_path: Path, *extra: object, golden: object = DEFAULT_GOLDEN) -> list[str]:
    return [str(a) for a in (DEFAULT_CHECKPOINT, "--arch", DEFAULT_ARCH, "--golden", golden, "--out", tmp_path / "out", *ONE_KIND,
                             "-q", *extra)]


def _cli(tmp_path: Path, *extra: object, umask: int = 0o022, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "export_check", *_args(tmp_path, *extra)], cwd=tmp_path, timeout=600,
                          preexec_fn=lambda: os.umask(umask), **kw)


def _validate_junit(text: str) -> None:
    from lxml import etree

    etree.XMLSchema(etree.parse(str(XSD))).assertValid(etree.fromstring(text.encode()))


def test_dash_is_standard_output_and_the_table_moves_to_stderr(tmp_path: Path) -> None:
    result = _cli(tmp_path, "--json", "-", capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # stdout is the report alone
    assert report["exit_code"] == 0 and [r["status"] for r in report["rows"]] == ["pass", "pass"]
    assert "PASSED: 2 passed, 0 failed, 0 errors" in result.stderr
    assert not (tmp_path / "-").exists()


def test_links_to_stdout_a_fifo_and_a_symlinked_report_are_written_through_and_files_honour_the_umask(tmp_path: Path) -> None:
    """One run, stdout redirected into a log file as `> log` does: --json to a temporary link to the
    process's stdout, --markdown to a FIFO read by another thread, --junit through a symlink, --html new,
    under umask 027."""
    (tmp_path / "stdout").symlink_to("/proc/self/fd/1")  # /dev/stdout's own target
    fifo = tmp_path / "summary.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "junit.xml").write_text("an old report\n")
    (tmp_path / "junit.xml").symlink_to("reports/junit.xml")
    log = tmp_path / "log.txt"
    with open(log, "wb") as stdout:
        stdout.write(b"a line the shell wrote first\n")
        stdout.flush()
        inode = os.fstat(stdout.fileno()).st_ino
        result = _cli(tmp_path, "--json", "stdout", "--markdown", fifo, "--junit", "junit.xml", "--html", "r.html",
                      umask=0o027, stdout=stdout, stderr=subprocess.PIPE, text=True)
    reader.join(30)
    assert result.returncode == 0, result.stderr
    text = log.read_text()
    assert os.stat(log).st_ino == inode and text.startswith("a line the shell wrote first\n{")  # not reopened, not replaced
    assert json.loads(text.split("\n", 1)[1])["exit_code"] == 0
    assert "PASSED" in result.stderr  # the table went to stderr: stdout carries the report
    assert (tmp_path / "stdout").is_symlink() and os.readlink(tmp_path / "stdout") == "/proc/self/fd/1"
    assert len(got) == 1 and got[0].decode().startswith("## ✅ export-check passed: 2 passed, 0 failed, 0 errors")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert (tmp_path / "junit.xml").is_symlink() and os.readlink(tmp_path / "junit.xml") == "reports/junit.xml"
    junit = (tmp_path / "reports" / "junit.xml").read_text()
    _validate_junit(junit)
    assert junit.count("<testcase") == 2 and sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["junit.xml"]
    modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in [tmp_path / "r.html", *(tmp_path / "out").glob("*.pt")]}
    assert modes == {"r.html": "0o640", "torchscript-trace.pt": "0o640"}, modes
    assert oct(stat.S_IMODE((tmp_path / "reports" / "junit.xml").stat().st_mode)) == "0o644"  # a replaced file keeps its mode


@pytest.mark.cpu_sensitive  # tests/run_narrowed.py repeats it under capped instruction sets
def test_markdown_append_and_the_step_summary_add_each_checks_summary(tmp_path: Path, capfd, monkeypatch, nudged_checkpoint) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("# Earlier step\n\n")
    assert main(_args(tmp_path, "--markdown", summary, "--markdown-append")) == 0
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))  # GitHub's convention: every step appends
    # a failing check on every CPU: the nudged checkpoint's eager sits 4e-6 from the reference (conftest)
    nudged = [str(nudged_checkpoint), *_args(tmp_path, "--markdown", summary, "--max-mae", "1e-12", "--no-cache")[1:]]
    assert main(nudged) == 1
    assert main(_args(tmp_path, "--markdown", summary, golden=tmp_path / "no-golden")) == 2
    capfd.readouterr()
    text = summary.read_text()
    heads = [line for line in text.splitlines() if line.startswith(("# ", "## "))]
    assert heads[0] == "# Earlier step" and heads[1].startswith("## ✅ export-check passed: 2 passed")
    assert heads[2].startswith("## ❌ export-check FAILED: 1 passed, 1 failed, 0 errors")
    assert heads[3].startswith("## ❌ export-check stopped with an error (exit 2): ") and "no-golden" in heads[3]
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert main(_args(tmp_path, "--markdown", summary)) == 0  # without either: replaced, as before
    capfd.readouterr()
    assert summary.read_text().startswith("## ✅ export-check passed") and "Earlier step" not in summary.read_text()


def test_markdown_append_is_a_settings_key_too(tmp_path: Path, capfd) -> None:
    (tmp_path / "export-check.toml").write_text("markdown-append = true\n")
    summary = tmp_path / "s.md"
    summary.write_text("kept\n")
    assert main(_args(tmp_path, "--markdown", summary, "--config", tmp_path / "export-check.toml")) == 0
    capfd.readouterr()
    assert summary.read_text().startswith("kept\n## ✅ export-check passed")


def _tampered(tmp_path: Path) -> Path:
    golden = tmp_path / "golden"
    shutil.copytree(DEFAULT_GOLDEN, golden)
    reference = next(golden.glob("reference-*.npy"))
    data = bytearray(reference.read_bytes())
    data[-1] ^= 0x01  # one bit of one logit
    reference.write_bytes(bytes(data))
    return golden


@pytest.mark.parametrize("case", ["missing golden", "tampered golden", "bad config"])
def test_every_report_is_written_on_exit_2_carrying_the_error(tmp_path: Path, capfd, case: str) -> None:
    golden: object = DEFAULT_GOLDEN
    extra: list[object] = []
    if case == "missing golden":
        golden = tmp_path / "nowhere"
    elif case == "tampered golden":
        golden = _tampered(tmp_path)
    else:
        (tmp_path / "bad.toml").write_text("max-mea = 1e-5\n")  # a typo of max-mae
        extra = ["--config", tmp_path / "bad.toml"]
    reports = tmp_path / "reports"
    code = main(_args(tmp_path, "--json", reports / "r.json", "--junit", reports / "r.xml", "--markdown", reports / "r.md",
                      "--html", reports / "r.html", *extra, golden=golden))
    _, err = capfd.readouterr()
    assert code == 2 and err.count("\n") == 1 and err.startswith("export-check: error: ") and "Traceback" not in err
    message = err.removeprefix("export-check: error: ").rstrip("\n")
    says = {"missing golden": "nowhere", "tampered golden": "reference-", "bad config": "max-mea"}[case]
    assert says in message
    doc = json.loads((reports / "r.json").read_text())
    assert doc["exit_code"] == 2 and doc["passed"] is False and doc["rows"] == []
    assert doc["error"] == {"type": "UsageError" if case == "bad config" else "GoldenError", "message": message}
    junit = (reports / "r.xml").read_text()
    _validate_junit(junit)
    from lxml import etree

    error = etree.fromstring(junit.encode()).find("testsuite/testcase/error")
    assert error is not None and error.get("message") == message and error.get("type") == doc["error"]["type"]
    assert (reports / "r.md").read_text().splitlines()[0] == f"## ❌ export-check stopped with an error (exit 2): {message}"
    assert html.escape(message) in (reports / "r.html").read_text()


def test_an_error_report_never_goes_where_the_run_may_not_write(tmp_path: Path, capfd) -> None:
    """A report aimed at the golden manifest is refused (exit 2) and the error report goes only to the
    other, safe paths; with a broken settings file, nothing is written into a folder holding a golden set."""
    golden = tmp_path / "golden"
    shutil.copytree(DEFAULT_GOLDEN, golden)
    manifest = (golden / "manifest.json").read_bytes()
    code = main(_args(tmp_path, "--json", golden / "manifest.json", "--junit", tmp_path / "r.xml", golden=golden))
    _, err = capfd.readouterr()
    assert code == 2 and "is the golden set's manifest" in err
    assert (golden / "manifest.json").read_bytes() == manifest
    assert "is the golden set's manifest" in (tmp_path / "r.xml").read_text()
    (tmp_path / "bad.toml").write_text("nonsense = 1\n")
    code = main(_args(tmp_path, "--json", golden / "new.json", "--markdown", tmp_path / "r.md", "--config", tmp_path / "bad.toml"))
    _, err = capfd.readouterr()
    assert code == 2 and "nonsense" in err
    assert not (golden / "new.json").exists() and "nonsense" in (tmp_path / "r.md").read_text()


def test_a_command_line_the_parser_refuses_still_gets_its_reports_but_never_over_other_files(tmp_path: Path, capfd) -> None:
    """A mistyped flag (exit 2 before any option is read): the reports named on the command line carry
    the error; a word of the command line (the checkpoint) or an existing file that is no report is never written."""
    model = tmp_path / "model.pth"
    shutil.copy(DEFAULT_CHECKPOINT, model)
    notes = tmp_path / "notes.txt"
    notes.write_text("the user's own file\n")
    old = tmp_path / "old.xml"
    old.write_text('<?xml version="1.0"?>\n<testsuites name="export-check" tests="0"/>\n')  # an earlier report: replaced
    code = main([str(model), "--max-maе", "1e-5", "--json", str(tmp_path / "r.json"), f"--junit={old}", "--markdown", str(notes),
                 "--html", str(model)])
    _, err = capfd.readouterr()
    assert code == 2 and err.count("\n") == 1 and "unrecognized arguments: --max-maе" in err
    assert json.loads((tmp_path / "r.json").read_text())["error"]["type"] == "UsageError"
    assert "<error" in old.read_text() and notes.read_text() == "the user's own file\n"
    assert model.read_bytes() == DEFAULT_CHECKPOINT.read_bytes()


def test_a_refused_command_line_never_appends_its_error_report_to_a_binary_file(tmp_path: Path, capfd, monkeypatch) -> None:
    """Found by a fresh draw of the fuzzer below: ``--bogus --markdown-append --markdown model.pth`` appended
    the error summary to the checkpoint. A text file (a step summary has no suffix) still gets it."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(DEFAULT_CHECKPOINT, tmp_path / "model.pth")
    (tmp_path / "summary").write_text("# earlier step\n")
    assert main(["--bogus", "--markdown-append", "--markdown", "model.pth"]) == 2
    assert main(["--bogus", "--markdown-append", "--markdown", "summary"]) == 2
    capfd.readouterr()
    assert (tmp_path / "model.pth").read_bytes() == DEFAULT_CHECKPOINT.read_bytes()
    summary = (tmp_path / "summary").read_text()
    assert summary.startswith("# earlier step\n") and "export-check stopped with an error (exit 2)" in summary


_WORDS = ["model.pth", "notes.txt", "golden", "golden/manifest.json", "r.json", "-", "--json", "--junit", "--markdown", "--html",
          "--json=model.pth", "--golden", "--arch", "--out", "--markdown-append", "check", "merge", "=", "--"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(_WORDS), max_size=10))
def test_fuzzed_refused_command_lines_are_one_line_and_touch_nothing_but_reports(tmp_path: Path, capfd, words: list[str]) -> None:
    project = tmp_path / "p"
    if not project.exists():
        project.mkdir()
        shutil.copy(DEFAULT_CHECKPOINT, project / "model.pth")
        shutil.copytree(DEFAULT_GOLDEN, project / "golden")
        (project / "notes.txt").write_text("mine\n")
    protected = {p: p.read_bytes() for p in (project / "model.pth", project / "notes.txt", project / "golden" / "manifest.json")}
    cwd = os.getcwd()
    os.chdir(project)
    try:
        code = main(["--bogus", *words])
    finally:
        os.chdir(cwd)
    out, err = capfd.readouterr()
    assert code == 2 and err.startswith("export-check: error: ") and "Traceback" not in err
    assert all(p.read_bytes() == data for p, data in protected.items())
    assert {p.name for p in project.iterdir()} <= {"model.pth", "notes.txt", "golden", "r.json"}  # no file named after a stray word
    assert set(p.name for p in (project / "golden").iterdir()) == set(p.name for p in DEFAULT_GOLDEN.iterdir())
    if out:  # a report to standard output is one whole report
        assert out.startswith("{") or out.startswith("<?xml") or out.startswith("## ") or out.startswith("<!DOCTYPE")


def test_the_report_an_error_is_about_gets_no_error_report_and_the_others_do(tmp_path: Path, capfd, monkeypatch) -> None:
    """`--html` with several models is refused: no HTML error page, but --json and --junit carry the error."""
    monkeypatch.chdir(tmp_path)
    code = main([str(DEFAULT_CHECKPOINT), str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--html", "r.html", "--json", "r.json",
                 "--junit", "r.xml"])
    _, err = capfd.readouterr()
    assert code == 2 and "--html takes one model's report" in err
    assert not (tmp_path / "r.html").exists()
    assert json.loads((tmp_path / "r.json").read_text())["exit_code"] == 2 and "<error" in (tmp_path / "r.xml").read_text()


def test_a_link_planted_in_out_is_never_written_through_by_a_report_or_the_history(tmp_path: Path, capfd) -> None:
    """Issue 47: --out is a folder others may write to. A report aimed there at a link to a file outside
    (~/.bashrc), or into a linked folder, or the history into a hard link, is refused in one line (exit 2),
    and the files outside keep their bytes; the run's other reports carry the error, or say why not."""
    out, home = tmp_path / "out", tmp_path / "home"
    out.mkdir(), home.mkdir()
    (home / ".bashrc").write_bytes(b"export PATH=$HOME/bin:$PATH\n")
    (home / "r.md").write_bytes(b"the user's notes\n")
    (out / "r.json").symlink_to(home / ".bashrc")
    (out / "notes").symlink_to(home)
    before = {p.name: p.read_bytes() for p in home.iterdir()}
    code = main(_args(tmp_path, "--json", out / "r.json", "--markdown", out / "notes" / "r.md", "--junit", tmp_path / "r.xml"))
    _, err = capfd.readouterr()
    line = f"export-check: error: {out / 'r.json'}: is a symbolic link inside {out} that export-check did not make; " \
           "not written through it: remove it"
    assert code == 2 and line in err.splitlines(), err
    assert f"{out / 'notes'} is a symbolic link, not a folder export-check made; not followed" in err  # the error report: not there either
    assert line.removeprefix("export-check: error: ") in (tmp_path / "r.xml").read_text()  # the safe report carries the error
    assert {p.name: p.read_bytes() for p in home.iterdir()} == before and (out / "r.json").is_symlink()
    os.link(home / ".bashrc", out / "history.jsonl")  # a hard link: appending would write into the file outside
    code = main(_args(tmp_path, "--json", out / "fine.json", "--history", out / "history.jsonl"))
    _, err = capfd.readouterr()
    assert code == 2 and f"{out / 'history.jsonl'}: has 1 other name(s) (a hard link) inside {out}" in err, err
    assert len(err.strip().splitlines()) == 1 and json.loads((out / "fine.json").read_text())["exit_code"] == 0
    assert {p.name: p.read_bytes() for p in home.iterdir()} == before
