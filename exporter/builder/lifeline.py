"""A build process dies with its parent: the parent-death signal, and a pipe whose EOF says the parent is gone.

Without this, SIGKILL of export-check alone (an OOM kill, a CI runner's timeout, ``kill -9``) left its
build server and the child building an artifact running; the child then finished its export minutes
later, into a folder a later run owned. Two mechanisms, because neither is enough alone:

* ``PR_SET_PDEATHSIG`` (Linux ``prctl``): the kernel sends SIGKILL when the process that forked this
  one dies. It is set in every build child (forked by the single-threaded build server) and in the
  server when the parent's main thread started it; it is tied to the *thread* that forked, so a
  server started from a short-lived thread of a test session would be killed with that thread.
* The lifeline: a pipe whose write end only the parent holds and never writes. It reaches EOF (turns
  readable) when the parent is gone, however it died; the server watches it while a child builds and
  every child watches it from a thread of its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import threading

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15


def name_process(name: str) -> None:
    """Name this process ``xc <name>`` (Linux: what ``ps``, ``top`` and ``/proc/<pid>/comm`` show, 15 bytes at most), so
    that a look at the tree tells the build server, its hosts, and each build, load and replay child apart (the memory
    benchmarks read it: benchmarks/harness.py); a fork keeps its parent's name until it names itself."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_NAME, f"xc {name}".encode()[:15], 0, 0, 0)


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGKILL when the process that forked this one dies (Linux); exit at once if
    it already has (this process was re-parented before the request took effect)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(0)


def parent_gone(fd: int) -> bool:
    """Whether the lifeline ``fd`` has reached EOF, without waiting."""
    return bool(select.select([fd], [], [], 0)[0])


def watch(fd: int) -> None:
    """In a build child: a daemon thread that kills this process as soon as the lifeline reaches EOF."""

    def wait_for_eof() -> None:
        try:
            ready = select.select([fd], [], [])[0]
        except (OSError, ValueError):
            return  # the descriptor was closed under us: nothing left to watch
        if ready:
            os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=wait_for_eof, name="export-check-lifeline", daemon=True).start()
