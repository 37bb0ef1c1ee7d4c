"""How a report reaches its path (exporter/report/destination.py): atomic replace of a regular file
(mode from the umask, or the replaced file's), a symbolic link written through to its target, a FIFO,
a device and a descriptor alias written through, append. Real files, links, FIFOs and pipes in a
temporary folder; never the machine's /dev/stdout."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from export_check.cli import error_line
from export_check.errors import OutputError, error_message
from export_check.report import destination, write_text_atomic


@pytest.fixture()
def umask():
    old = os.umask(0o022)
    try:
        yield os.umask
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask, expected", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_a_new_report_gets_the_mode_the_umask_gives(tmp_path: Path, umask, mask: int, expected: int) -> None:
    umask(mask)
    write_text_atomic(tmp_path / "r.json", "{}\n")
    assert _mode(tmp_path / "r.json") == expected and (tmp_path / "r.json").read_text() == "{}\n"
    write_text_atomic(tmp_path / "a.md", "one\n", append=True)
    assert _mode(tmp_path / "a.md") == expected


def test_a_replaced_report_is_a_new_file_keeping_the_old_ones_mode(tmp_path: Path, umask) -> None:
    path = tmp_path / "r.json"
    path.write_text("old\n")
    path.chmod(0o600)
    before = os.stat(path).st_ino
    write_text_atomic(path, "new\n")
    assert path.read_text() == "new\n" and _mode(path) == 0o600
    assert os.stat(path).st_ino != before  # replaced (atomically), not rewritten in place
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left


def test_a_symlink_is_written_through_to_its_target_atomically_and_kept(tmp_path: Path, umask) -> None:
    (tmp_path / "reports").mkdir()
    target = tmp_path / "reports" / "real.xml"
    target.write_text("old\n")
    link = tmp_path / "link.xml"
    link.symlink_to(Path("reports") / "real.xml")  # relative, as `ln -s` makes them
    chain = tmp_path / "chain.xml"
    chain.symlink_to(link)  # a link to a link
    inode = os.stat(target).st_ino
    write_text_atomic(chain, "new\n")
    assert link.is_symlink() and chain.is_symlink() and os.readlink(link) == "reports/real.xml"
    assert target.read_text() == "new\n" and os.stat(target).st_ino != inode
    assert sorted(p.name for p in (tmp_path / "reports").iterdir()) == ["real.xml"]
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "reports" / "made.json")
    write_text_atomic(dangling, "made\n")
    assert dangling.is_symlink() and (tmp_path / "reports" / "made.json").read_text() == "made\n"
    assert _mode(tmp_path / "reports" / "made.json") == 0o644


def test_a_fifo_is_written_through_and_stays_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "summary.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_text_atomic(fifo, "through the pipe\n")
    reader.join(10)
    assert got == [b"through the pipe\n"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["summary.fifo"]


def test_a_symlink_to_a_descriptor_writes_to_that_descriptor(tmp_path: Path) -> None:
    """A temporary link to /proc/self/fd/N (what /dev/stdout is): the bytes go down the pipe, the link stays."""
    read_end, write_end = os.pipe()
    try:
        link = tmp_path / "stdout-like"
        link.symlink_to(f"/proc/self/fd/{write_end}")
        write_text_atomic(link, '{"ok": true}\n')
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, "rb") as fh:
            read_end = -1
            assert fh.read() == b'{"ok": true}\n'
        assert link.is_symlink() and os.readlink(link) == f"/proc/self/fd/{os.readlink(link).rsplit('/', 1)[1]}"
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)


def test_a_descriptor_alias_to_a_regular_file_is_not_reopened_or_replaced(tmp_path: Path) -> None:
    """`cmd > log` then a report to /dev/fd/N: reopening would write over the log from offset 0, replacing
    would detach the shell's file; the report is appended to what the descriptor already wrote."""
    log = tmp_path / "log.txt"
    with open(log, "wb") as fh:
        fh.write(b"table line\n")
        fh.flush()
        link = tmp_path / "fd-link"
        link.symlink_to(f"/dev/fd/{fh.fileno()}")
        inode = os.stat(log).st_ino
        destination.write(link, b"report\n")
    assert log.read_bytes() == b"table line\nreport\n" and os.stat(log).st_ino == inode


def test_a_character_device_is_written_through(tmp_path: Path) -> None:
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    write_text_atomic(link, "discarded\n")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and link.is_symlink()


def test_append_adds_each_summary_at_the_end_through_a_link(tmp_path: Path) -> None:
    summary = tmp_path / "step_summary"
    summary.write_text("# earlier step\n")
    link = tmp_path / "link"
    link.symlink_to(summary)
    write_text_atomic(link, "## check one\n", append=True)
    write_text_atomic(summary, "## check two\n", append=True)
    assert summary.read_text() == "# earlier step\n## check one\n## check two\n" and link.is_symlink()


def test_a_directory_or_an_unwritable_place_is_one_output_error(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="cannot write the report .*[Ii]s a directory"):
        write_text_atomic(tmp_path, "x")
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="file/r.json: cannot write the report"):
        write_text_atomic(tmp_path / "file" / "r.json", "x")


def test_standard_output_and_its_aliases_are_recognised(tmp_path: Path) -> None:
    assert destination.is_stdout(Path("-")) and destination.is_stdout(Path("/dev/stdout"))
    assert destination.is_stdout(Path("/dev/fd/1")) and destination.is_stdout(Path(f"/proc/{os.getpid()}/fd/1"))
    link = tmp_path / "out"
    link.symlink_to("/proc/self/fd/1")
    assert destination.is_stdout(link)
    assert not destination.is_stdout(Path("/dev/stderr")) and not destination.is_stdout(tmp_path / "-")
    assert destination.describe(Path("-")) == "standard output"


@given(st.lists(st.sampled_from(["export-check: ", "export-check: error: "]), max_size=4), st.text(min_size=1).filter(
    lambda t: not t.startswith("export-check: ")))
def test_the_error_prefix_is_printed_once_however_the_message_began(prefixes: list[str], message: str) -> None:
    exc = ValueError("".join(prefixes) + message)
    assert error_message(exc) == message
    assert error_line(exc) == f"export-check: error: {message}"
