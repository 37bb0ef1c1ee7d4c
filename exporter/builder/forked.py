"""Run one piece of work in a child forked from this process, under a time limit: its reply, or what became of it.

The build server runs every build this way (``BuildServer._run_in_child``), and so does the run's own process
for a model the server cannot be sent (a class defined in a ``__main__`` script, a model holding a lambda):
forked from the process that already holds the model, the child needs no pickle of it. Either way a
segfault, an ``abort()``, a hang past the timeout, ``os._exit(0)`` or ``sys.exit(0)`` inside an exporter
is the child's, and the caller gets a reply that says so::

    {"status": "ok" | "raised" | ..., ...}      what the work returned (pickled back through a pipe)
    {"status": "timeout", "timeout": 30.0}      still running at the deadline: killed
    {"status": "crashed", "signal": 11}         died by a signal before reporting back
    {"status": "crashed", "exit_code": 0}       exited (any code, 0 included) before reporting back

each with ``pid``, ``stderr`` (the first ``protocol.STDERR_KEEP`` bytes the child wrote there) and ``seconds``.

Forking a process with threads (the run's own, which may have a progress thread or a second build
thread) copies only the forking thread: the work runs there alone. The child asks the kernel for
SIGKILL when the forking thread's process dies (``lifeline.die_with_parent``) and never runs its
parent's clean-up (it leaves by ``os._exit``).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import lifeline, protocol

Work = Callable[[dict[str, Any], Any], dict[str, Any]]


def run_forked(request: dict[str, Any], ctx: Any, work: Work, *, life_fd: int | None = None,
               on_child: Callable[[int | None], None] | None = None,
               idle: Callable[[int, float | None], None] | None = None,
               also: tuple[int, Callable[[], bool]] | None = None,
               on_parent_gone: Callable[[], None] | None = None) -> dict[str, Any]:
    """``work(request, ctx)`` in a forked child under ``request["timeout"]`` seconds (None or 0: no limit).

    ``life_fd``: a lifeline the child watches and the wait returns on (the build server's); ``on_child``: told
    the child's pid once it is forked (SIGTERM is held back until then) and ``None`` once it is reaped;
    ``idle(fd, deadline)``: called once before the wait (the server imports ahead there); ``also``: a descriptor
    and what to do when it turns readable during the wait; ``on_parent_gone``: called when the lifeline ends.
    """
    result_r, result_w = os.pipe()
    # The child's stderr goes to a file: passed on when it reports back, summed up when it crashes
    # (a native abort prints a long C++ stack there).
    log = tempfile.TemporaryFile()  # noqa: SIM115 (shared with the forked child; closed by `with log` once it exits)
    began = time.perf_counter()
    timeout = request.get("timeout")
    deadline = None if not timeout else began + float(timeout)
    # SIGTERM (a server's parent stopping early) waits until on_child knows the child, so it is never missed.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    forker = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: work, report, and leave without running any of the forking process's clean-up
        code = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            lifeline.die_with_parent(forker)
            if life_fd is not None:
                lifeline.watch(life_fd)
            os.close(result_r)
            os.dup2(log.fileno(), 2)
            done = work(request, ctx)
            sys.stderr.flush()  # into the log, before os._exit skips it
            with os.fdopen(result_w, "wb") as out:
                out.write(pickle.dumps(done, protocol=pickle.HIGHEST_PROTOCOL))
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    if on_child is not None:
        on_child(pid)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.close(result_w)
    if idle is not None:
        idle(result_r, deadline)
    data, timed_out = read_until_eof(result_r, deadline, life_fd, also)
    if life_fd is not None and lifeline.parent_gone(life_fd) and on_parent_gone is not None:
        on_parent_gone()
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if on_child is not None:
        on_child(None)
    seconds = time.perf_counter() - began
    with log:
        log.seek(0)
        stderr = log.read(protocol.STDERR_KEEP).decode("utf-8", "replace")
    reply: dict[str, Any] = {"pid": pid, "stderr": stderr, "seconds": seconds}
    if timed_out:
        reply.update(status="timeout", timeout=float(timeout or 0))
        return reply
    if data:
        try:
            reply.update(pickle.loads(data))  # our own child's reply: trusted
            return reply
        except Exception:
            pass  # the child died while writing its reply
    if os.WIFSIGNALED(status):
        reply.update(status="crashed", signal=os.WTERMSIG(status))
    else:
        reply.update(status="crashed", exit_code=os.WEXITSTATUS(status))
    return reply


def read_until_eof(fd: int, deadline: float | None, life_fd: int | None = None,
                   also: tuple[int, Callable[[], bool]] | None = None) -> tuple[bytes, bool]:
    """All of ``fd`` up to EOF (then closed), or what came before ``deadline`` (perf_counter) and ``True``;
    returns early, too, when the lifeline ``life_fd`` says the parent is gone. ``also``: a descriptor and what to
    do when it is readable meanwhile (the load host's replay channel: a replay is not kept waiting for a probe)."""
    chunks: list[bytes] = []
    watched = [fd] if life_fd is None else [fd, life_fd]
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.perf_counter())
            ready = select.select(watched if also is None else [*watched, also[0]], [], [], wait)[0]
            if not ready:
                return b"".join(chunks), True
            if also is not None and also[0] in ready:
                if not also[1]():  # the channel was closed: no more to watch
                    also = None
                if len(ready) == 1:
                    continue
            if fd not in ready:
                return b"".join(chunks), False  # the lifeline: the caller ends the child
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
    finally:
        os.close(fd)
