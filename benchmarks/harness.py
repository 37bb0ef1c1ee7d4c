"""What the benchmark scripts share: where they write, and running the real CLI in a subprocess with its
wall time and peak memory (``run.py`` and ``large.py`` both import it; neither imports the other back)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "out"


@dataclass
class Run:
    wall: float
    maxrss_mb: float
    code: int
    report: dict[str, Any] = field(default_factory=dict)


def export_check_cmd() -> list[str]:
    script = Path(sys.executable).with_name("export-check")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "export_check"]


def timed(cmd: list[str], json_out: Path | None = None, expect: tuple[int, ...] = (0,), env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` from the repo root; wall time and the child's own peak RSS (``wait4``)."""
    log = OUT / "last-run.log"
    with open(log, "wb") as sink:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, env=None if env is None else {**os.environ, **env})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in expect:
        sys.exit(f"benchmark command failed ({proc.returncode}): {shlex.join(cmd)}\n{log.read_text()[-3000:]}")
    report = json.loads(json_out.read_text()) if json_out is not None else {}
    return Run(wall=wall, maxrss_mb=usage.ru_maxrss / 1024, code=proc.returncode, report=report)
