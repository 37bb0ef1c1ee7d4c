"""benchmarks/harness.py reports memory as the whole process tree's PSS (issue 43, item 4): a grandchild's pages
count, a page shared by a fork counts once, and ``measured`` samples the peak of the sum while a command runs."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MB = 200  # what the grandchild allocates and touches

# A parent that forks a grandchild; the grandchild fills MB of fresh memory, says so, and waits for stdin to close
# (WAIT), or a second.
TREE = """
import os, sys, time
pid = os.fork()
if pid == 0:
    block = bytearray(MB << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    os.write(1, b"filled\\n")
    WAIT
    os._exit(0)
os.waitpid(pid, 0)
""".replace("MB", str(MB))
WAIT = TREE.replace("WAIT", "sys.stdin.read()")
SECOND = TREE.replace("WAIT", "time.sleep(1)")


@pytest.fixture(scope="module")
def harness():
    spec = importlib.util.spec_from_file_location("bench_harness", REPO / "benchmarks" / "harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_the_tree_pss_sums_a_grandchild_that_allocates(harness) -> None:
    with subprocess.Popen([sys.executable, "-c", WAIT], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        try:
            assert proc.stdout.readline() == b"filled\n"
            pids = harness.tree_pids(proc.pid)
            assert len(pids) == 2 and pids[0] == proc.pid  # the parent and its forked child
            own = harness.tree_pss_mb(proc.pid) - harness.tree_pss_mb(pids[1])  # the parent alone: an interpreter
            total = harness.tree_pss_mb(proc.pid)
            assert own < 100 and MB <= total - own < MB + 100, (own, total)
        finally:
            proc.stdin.close()
            proc.wait(30)
    assert harness.tree_pids(proc.pid) == [proc.pid] and harness.tree_pss_mb(proc.pid) == 0  # gone: no pages


def test_measured_samples_the_peak_while_the_command_runs(harness) -> None:
    began = time.perf_counter()
    code, wall, cpu, peak = harness.measured([sys.executable, "-c", SECOND], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert code == 0 and 0 < wall <= time.perf_counter() - began
    assert MB < peak < MB + 150, peak  # the grandchild's 200 MB and two small interpreters, each page once
    assert 0.01 < cpu < wall  # the tree's user+sys (the grandchild's page faults), less than its wall: it slept
