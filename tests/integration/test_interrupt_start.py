"""Ctrl-C while export-check is still starting (issue 16.10): SIGINT while the CLI's own modules are
being imported, through `python -m export_check` and through the installed `export-check` script,
ends with the one line `export-check: interrupted` and exit 130, never a KeyboardInterrupt traceback
(it used to be one in 1 of 3 tries started by hand). The moments later in a run (importing torch,
loading the checkpoint, building, replaying) are test_faults.py's. `-X importtime` says which module
has just been imported, so each signal lands inside the import chain of the CLI."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DEFAULT_ARCH, DEFAULT_CHECKPOINT, DEFAULT_GOLDEN

SCRIPT = shutil.which("export-check", path=str(Path(sys.executable).parent))


@pytest.mark.parametrize("launcher", ["python -m", "script"])
@pytest.mark.parametrize("after", ["export_check.errors", "export_check.config", "tomllib", "export_check.settings"])
def test_ctrl_c_while_the_cli_is_imported_is_one_line_and_exit_130(tmp_path: Path, launcher: str, after: str) -> None:
    program = [sys.executable, "-X", "importtime", "-m", "export_check"] if launcher == "python -m" else \
        [sys.executable, "-X", "importtime", str(SCRIPT)]
    proc = subprocess.Popen([*program, str(DEFAULT_CHECKPOINT), "--arch", DEFAULT_ARCH, "--golden", str(DEFAULT_GOLDEN),
                             "--out", str(tmp_path / "out"), "--no-cache"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    seen = b""
    try:
        os.set_blocking(proc.stderr.fileno(), False)
        deadline = time.monotonic() + 120
        imported = re.compile(rb"\| +" + re.escape(after.encode()) + rb"\n")  # its -X importtime line, at any nesting depth
        while not imported.search(seen):
            assert proc.poll() is None and time.monotonic() < deadline, seen.decode()[-2000:]
            seen += proc.stderr.read() or b""
            time.sleep(0.001)
        os.killpg(proc.pid, signal.SIGINT)
        os.set_blocking(proc.stderr.fileno(), True)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for stream in (proc.stdout, proc.stderr):  # closed on every path, so no unclosed pipe warns in a later test
            stream.close()
    lines = [line for line in (seen + rest).decode().splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 130, "\n".join(lines)
    assert "Traceback" not in "\n".join(lines) and "KeyboardInterrupt" not in "\n".join(lines)
    assert lines[-1] == "export-check: interrupted", lines


def test_an_interrupted_run_exits_130_even_when_cpython_saw_the_keyboardinterrupt_as_unhandled(tmp_path: Path) -> None:
    """The race the test above hit in CI (1 run in 30 there; 1 in 6 with the signal sent 6-16 ms after
    `export_check.settings`), measured: CPython's `_Py_UnhandledKeyboardInterrupt` flag was 1 though the
    CLI had caught the interrupt, and under `python -m` the interpreter checks that flag after a
    SystemExit and kills itself with SIGINT (-2). Set the flag directly: the CLI's exit after an
    interrupt must still be 130. The control: the same flag and a plain `sys.exit(130)` give -2, so
    the test sees the interpreter behaviour it guards against."""
    flag = "import ctypes; ctypes.c_int.in_dll(ctypes.pythonapi, '_Py_UnhandledKeyboardInterrupt').value = 1\n"
    (tmp_path / "via_cli.py").write_text("from export_check.cli import _exit\n" + flag + "_exit(130)\n")
    (tmp_path / "plain.py").write_text(flag + "import sys\nsys.exit(130)\n")
    codes = {name: subprocess.run([sys.executable, "-m", name], cwd=tmp_path, capture_output=True, text=True, timeout=60)
             for name in ("via_cli", "plain")}
    assert codes["plain"].returncode == -signal.SIGINT, codes["plain"].stderr
    assert codes["via_cli"].returncode == 130, codes["via_cli"].stderr
