"""The parent's handle on one build server process: start it, send requests, read replies in order, stop it.

Its own module so that the pipes and the process are in one place, apart from what a build means
(isolation.py) and from the server's code (server.py). A :class:`ServerProcess` is owned by a
``BuildService`` (isolation.py), which serialises every call to it under its lock.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from typing import Any, Protocol

from . import protocol


class PendingBuild(Protocol):
    """A request sent to the server whose reply is not read yet (``isolation.PendingBuild``): the
    client sets ``_reply`` when the reply arrives, or when the server dies."""

    _reply: dict[str, Any] | None


class ServerProcess:
    """A running build server and its two pipes; ``fork``: forked from this process, else started afresh."""

    def __init__(self, fork: bool = False) -> None:
        request_r, self._request_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        # The lifeline (lifeline.py): only this process holds its write end, and never writes to it.
        life_r, self._life_w = os.pipe()
        # The replay channel (clean.py): the server hands its end to its load host, which forks a replay child per
        # artifact on it; this process passes each child's socket over it, one message per socket (SOCK_SEQPACKET
        # keeps their boundaries: two are never read as one).
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.channel_lock = threading.Lock()
        # The parent-death signal is tied to the thread that forks: ask for it only from the main thread,
        # which lives as long as this process (a test session's worker thread may end first).
        pdeathsig = threading.current_thread() is threading.main_thread()
        ends = (request_r, reply_w, life_r, os.getpid(), pdeathsig, theirs.fileno())
        try:
            self.process: Any = (_fork_server(ends, (self._request_w, self._reply_r, self._life_w, self.channel.fileno())) if fork
                                 else _spawn_server(ends))
        finally:
            os.close(request_r)
            os.close(reply_w)
            os.close(life_r)
            theirs.close()
        self._out = os.fdopen(self._request_w, "wb")
        self._in = os.fdopen(self._reply_r, "rb")

        self.sent_key: str | None = None  # the build context this server holds
        self._waiting: collections.deque[PendingBuild] = collections.deque()  # sent, reply not yet read

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, request: dict[str, Any], pending: PendingBuild) -> None:
        self._waiting.append(pending)
        protocol.send(self._out, request)

    def tell(self, message: dict[str, Any]) -> None:
        """Send a message the server answers with nothing (``preload``)."""
        protocol.send(self._out, message)

    def in_flight(self) -> bool:
        return bool(self._waiting)

    def receive_until(self, pending: PendingBuild) -> None:
        """Read replies, in the order their requests were sent, until ``pending``'s has arrived."""
        while pending._reply is None:
            if not self._waiting:
                raise EOFError("no reply is due for this build")
            reply = protocol.receive(self._in)
            self._waiting.popleft()._reply = reply

    def fail_pending(self, exc: BaseException) -> None:
        """Every build still waiting for a reply becomes a crash: the server is gone."""
        while self._waiting:
            self._waiting.popleft()._reply = {"status": "server-died", "description": type(exc).__name__}

    def close(self, stop: bool = False) -> None:
        """Close the pipes (the server exits once it has read what was sent); ``stop``: end it now,
        and the build it is running with it, instead of letting it finish what it was sent."""
        self.fail_pending(EOFError("the build server was closed"))
        if stop:
            self.process.terminate()
        for stream in (self._out, self._in, self.channel):
            with contextlib.suppress(OSError):
                stream.close()
        if self._life_w >= 0:  # once: the number may belong to another file after it is closed
            with contextlib.suppress(OSError):
                os.close(self._life_w)
            self._life_w = -1
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _spawn_server(ends: tuple[int, int, int, int, bool, int]) -> subprocess.Popen:
    # -P: no current directory first on sys.path, so that an onnxruntime.py there cannot stand in for
    # the real library while the server preloads it. export_check comes from the installation (its
    # source folder is named exporter/, so a source tree on sys.path could not provide it anyway).
    code = f"from export_check.builder.server import serve; serve(*{ends!r})"
    return subprocess.Popen([sys.executable, "-P", "-c", code], pass_fds=(*ends[:3], ends[5]), stdin=subprocess.DEVNULL, close_fds=True)


def _fork_server(ends: tuple[int, int, int, int, bool, int], parent_ends: tuple[int, ...]) -> _Forked:
    from .server import serve

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+ warns when native threads exist (OpenBLAS's)
        pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for fd in parent_ends:
                os.close(fd)
            serve(*ends)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    return _Forked(pid)


class _Forked:
    """The part of ``subprocess.Popen`` that ``ServerProcess`` uses, for a server forked from this process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("export-check build server", timeout or 0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)
