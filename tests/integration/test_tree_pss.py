"""benchmarks/harness.py reports memory as the whole process tree's PSS (issue 43, item 4): a grandchild's pages
count, a page shared by a fork counts once, and ``measured`` samples the peak of the sum while a command runs."""

from __future__ import annotations

import importlib.util
import os
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


# A build, load or replay child (builder/clean.py's pin_threads) fixes glibc's mmap threshold: blocks of 4 MB and more
# freed go back to the system. By default a freed 24 MB block raises the threshold, and 24 MB of 6 MB blocks freed
# stay in the heap (what an export's freed buffers did in its build child). Run in a fresh interpreter each.
HEAP = """
import ctypes, sys
from export_check.builder.clean import pin_threads
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
def block(mb):
    address = libc.malloc(mb << 20)
    ctypes.memset(address, 1, mb << 20)
    return address
if sys.argv[1] == "child":
    pin_threads(None)
libc.free(block(24))
before = rss_mb()
held = [block(6) for _ in range(4)]
guard = libc.malloc(64)  # above them: the heap's top cannot simply shrink
for address in held:
    libc.free(address)
print(rss_mb() - before)
"""


@pytest.mark.skipif(not str(getattr(os, "confstr", lambda _: "")("CS_GNU_LIBC_VERSION") or "").startswith("glibc"), reason="glibc's malloc only")
def test_a_child_process_gives_freed_large_blocks_back() -> None:
    kept = {how: float(subprocess.run([sys.executable, "-c", HEAP, how], capture_output=True, text=True, check=True).stdout)
            for how in ("default", "child")}
    assert kept["default"] >= 20, kept  # the default keeps the 24 MB freed (this test would pass vacuously otherwise)
    assert kept["child"] < 2, kept
