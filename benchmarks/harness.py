"""What the benchmark scripts share: where they write, and running the real CLI in a subprocess with its
wall time, CPU and peak memory (``run.py`` and ``large.py`` both import it; neither imports the other back).

Memory is always the whole process tree's PSS (``tree_pss_mb``: the command, its build server, build and
replay children), sampled while it runs (``measured``): a fork shares its pages with its parent, so the
sum of PSS counts each page once, where the largest process's RSS misses the children and a sum of RSS
counts shared pages twice. CPU is user+sys of the whole tree (``wait4`` on the command: every descendant
its parent reaped)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "out"


SAMPLE_SECONDS = 0.05  # how often the tree's PSS is read while a command runs


@dataclass
class Run:
    wall: float
    pss_mb: float  # the process tree's peak PSS, sampled (tree_pss_mb)
    code: int
    report: dict[str, Any] = field(default_factory=dict)
    cpu: float = 0.0  # user+sys seconds of the whole tree


def tree_pids(root: int) -> list[int]:
    """``root`` and every live descendant of it (from each process's parent in /proc/<pid>/stat)."""
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:  # ended meanwhile
            continue
        parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(parents.get(pid, ()))
    return found


def tree_pss_mb(root: int) -> float:
    """The summed PSS (``/proc/<pid>/smaps_rollup``) of ``root`` and its live descendants, in MB (2**20 bytes)."""
    return sum(pss for _, pss in tree_pss_by_pid(root))


def tree_pss_by_pid(root: int) -> list[tuple[int, float]]:
    """(pid, PSS in MB) of ``root`` and each live descendant (a process that ended meanwhile, or a zombie, left out)."""
    found = []
    for pid in tree_pids(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
                for line in rollup:
                    if line.startswith(b"Pss:"):
                        found.append((pid, int(line.split()[1]) / 1024))
                        break
        except OSError:  # ended meanwhile, or a zombie
            continue
    return found


def process_role(pid: int) -> str:
    """What a process of the tree is, from its name (``/proc/<pid>/comm``, which export-check's processes set:
    builder/lifeline.py ``name_process``) and its command line; ``?`` once it has ended."""
    try:
        with open(f"/proc/{pid}/comm") as comm:
            name = comm.read().strip()
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
    except OSError:
        return "?"
    return name if name.startswith("xc ") else " ".join(Path(a.decode(errors="replace")).name for a in argv[:2])


class TreePeak:
    """Samples ``tree_pss_mb(root)`` on a thread every ``SAMPLE_SECONDS`` until ``stop``; ``peak`` is the largest sum."""

    def __init__(self, root: int, every: float = SAMPLE_SECONDS) -> None:
        self.root, self.every, self.peak = root, every, 0.0
        self.at_peak: list[tuple[str, int, float]] = []  # (role, pid, PSS MB) of each process when the peak was read
        self._roles: dict[int, str] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            found = tree_pss_by_pid(self.root)
            total = sum(pss for _, pss in found)
            if total > self.peak:
                for pid, _ in found:  # a pid's role read again each sample: a fork renames itself after it started
                    self._roles[pid] = process_role(pid)
                self.peak, self.at_peak = total, [(self._roles.get(pid, "?"), pid, pss) for pid, pss in found]
            if self._done.wait(self.every):
                return

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self.peak


def measured(cmd: list[str], stdout: Any = subprocess.DEVNULL, stderr: Any = subprocess.STDOUT, env: dict[str, str] | None = None,
             cwd: Path = REPO, at_peak: list[tuple[str, int, float]] | None = None) -> tuple[int, float, float, float]:
    """Run ``cmd`` to its end: (exit code, wall seconds, tree CPU seconds, tree peak PSS in MB); ``at_peak``, when
    given, is filled with each process's (role, pid, PSS MB) at the peak (``TreePeak.at_peak``)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=stdout, stderr=stderr, env=None if env is None else {**os.environ, **env})
    sampler = TreePeak(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)  # a descendant that outlives the command leaves its tree (reparented)
    wall = time.perf_counter() - started
    peak = sampler.stop()
    if at_peak is not None:
        at_peak[:] = sampler.at_peak
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, wall, usage.ru_utime + usage.ru_stime, peak


def export_check_cmd() -> list[str]:
    script = Path(sys.executable).with_name("export-check")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "export_check"]


def timed(cmd: list[str], json_out: Path | None = None, expect: tuple[int, ...] = (0,), env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` from the repo root; wall time, the tree's CPU and its peak PSS (``measured``)."""
    log = OUT / "last-run.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as sink:
        code, wall, cpu, peak = measured(cmd, stdout=sink, env=env)
    if code not in expect:
        sys.exit(f"benchmark command failed ({code}): {shlex.join(cmd)}\n{log.read_text()[-3000:]}")
    report = json.loads(json_out.read_text()) if json_out is not None else {}
    return Run(wall=wall, pss_mb=peak, code=code, report=report, cpu=cpu)
