"""Progress under a real pseudo-terminal at 80 and 160 columns: one line rewritten in place, never
wider than the terminal (no debris, no wrapped lines), cleared before the report; and plain lines
when stderr is a pipe."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN

ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
SGR = re.compile(r"\x1b\[[0-9;]*m")


def _cmd(tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "export_check", "check", str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--golden",
            str(DEFAULT_GOLDEN), "--artifacts", "torchscript-trace,onnx", "--no-cache", "--out", str(tmp_path / "out")]


def _run_in_pty(cmd: list[str], columns: int) -> str:
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(cmd, stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=300) == 0
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("columns", [80, 160])
def test_progress_is_one_line_cut_to_the_terminal_width(tmp_path: Path, columns: int) -> None:
    text = _run_in_pty(_cmd(tmp_path), columns)
    head, sep, report = text.rpartition("\r\x1b[K")  # the last erase clears the progress line before the report
    assert sep, text[:500]
    draws = [d for d in head.split("\r\x1b[K") if d]
    # every state of the line, each no wider than the terminal less one column, none with a newline
    assert draws and all(len(d) <= columns - 1 and "\n" not in d and "\r" not in d for d in draws), draws
    shown = [d.split("] ", 1)[1] for d in draws]
    assert "replaying onnx: 64/64 inputs" in shown and "replaying torchscript-trace: 64/64 inputs" in shown, shown
    assert "eager over the golden set: 64/64 inputs" in shown
    assert any(s.startswith("diagnosing onnx: batch sizes") for s in shown), shown
    # the widest states were cut: the diagnosing line is longer than 80 columns
    if columns == 80:
        assert any(len(d) == 79 for d in draws)
    # the report starts on a clean line, and has nothing of the progress line in it
    # the report after it: no cursor or erase sequence left over (colour of the verdicts is the table's own)
    assert not ESCAPES.search(SGR.sub("", report)) and "[export-check" not in report and "onnx" in report


def test_progress_is_plain_lines_on_a_pipe(tmp_path: Path) -> None:
    proc = subprocess.run(_cmd(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert all(line.startswith("[export-check ") for line in lines), lines
    counts = [line for line in lines if "replaying onnx: " in line]
    # a fast replay of 4 batches: its first count and its last, not one line per batch
    assert counts[0].endswith("replaying onnx: 16/64 inputs") and counts[-1].endswith("replaying onnx: 64/64 inputs")
    assert len(counts) <= 3, counts
