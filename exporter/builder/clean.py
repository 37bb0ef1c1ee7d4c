"""Replay every artifact in a process that has imported nothing of the user's architecture, as a deployed one has not.

The load probe (server.py) loads each file built, and runs its first sample, in the load host: a process forked
from the build server before the server unpickled any model. The replay itself (every golden sample, every batch
size, the determinism rerun, the latency) runs there too, in a *replay child* the load host forks per artifact, and
this process, which holds the architecture, only sends the golden inputs and reads the outputs back:
:class:`CleanRunner` is the artifact's runner as the observe stage sees it (``Runner``: ``infer``), the file opened
and run in that child. What the architecture's import does to the process (a global torch setting, a registered op,
a patched library) cannot change what is measured, a file that loads only beside the architecture fails its row
there, and a native crash while the file runs costs its row, not the run. A file whose runtime a deployed process
runs without torch (``RUNTIME_ALONE``: onnxruntime, OpenVINO, LiteRT) is replayed in a child of a :class:`RuntimeHost`
instead: a fresh interpreter that imports that runtime and numpy only, as the deployed process does.

The channel: the parent holds one end of a socket pair whose other end the build server hands to its load host
(client.py, server.py), or a runtime host holds. Per artifact the parent makes a new socket pair and passes one end over that channel
(``socket.send_fds``); the host forks a replay child that serves the other, one message per call, in the build
protocol's framing (protocol.py)::

    parent -> child   {"module", "path", "ctx"}   once: the kind's module, the file, the run's build context without
                                                   its model, example or calibration, pickled (``replay_context``)
    child -> parent   {"status": "ok"} | {"status": "raised", "error": ...}   the file opened, or why not
    parent -> child   {"feeds": {name: array}}     per call
    child -> parent   {"outputs", "seconds", "notes"} | {"error", "notes"}    seconds: the call's own time there,
                                                   without the messages' (what the latency reports); notes: the
                                                   runtime's warnings (into the row's notes, as beside the model)

The child ends when the parent closes its end (the runner's ``__exit__``), when the parent dies, or with the host.
Measured (benchmarks/clean_reload.py): docs/explanation/trust-model.md, "A file that loads only where the architecture
is imported".
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import lifeline, protocol

_HELLO = b"r"  # the one byte sent with each passed socket


def replay_context(ctx: Any) -> bytes:
    """The build context a replay child opens a file with: without the model (the child must not need the
    architecture), the example and the calibration batches (no runner reads them; they can weigh megabytes)."""
    fields = {f.name for f in dataclasses.fields(ctx)}
    stripped = {"model": None, "example": None, **({"calibration": ()} if "calibration" in fields else {})}
    return pickle.dumps(dataclasses.replace(ctx, **stripped), protocol=pickle.HIGHEST_PROTOCOL)


class CleanUnavailable(Exception):
    """No replay child could be had (isolation is off, the host is gone, or the context needs the user's code): the
    caller replays beside the model, or a runtime's files in the load host, and the row says so."""


class CleanRunner:
    """An artifact opened and run in a replay child (see the module's docstring): the ``Runner`` the observe stage
    replays. ``last_seconds``: the last ``infer``'s own time in the child (``artifacts.base.ran_for``)."""

    def __init__(self, channel: socket.socket, channel_lock: threading.Lock, module: str, path: Path, ctx: bytes,
                 timeout: float | None = None) -> None:
        self._opening = (channel, channel_lock, module, path, ctx)
        self.timeout = timeout  # seconds one call (the opening, one batch) may take before its replay child is killed
        self._lock = threading.Lock()
        self.last_seconds: float | None = None
        self.dead = False  # its child ended on a call: the next call opens the file in a new one (a crash costs that call)
        self._open()

    def _open(self) -> None:
        channel, channel_lock, module, path, ctx = self._opening
        ours, theirs = socket.socketpair()
        try:
            with channel_lock:
                socket.send_fds(channel, [_HELLO], [theirs.fileno()])
        except OSError as exc:
            ours.close()
            raise CleanUnavailable(f"its replay process is gone ({exc.strerror or exc})") from None
        finally:
            theirs.close()
        self._socket = ours
        ours.settimeout(self.timeout)  # a file that hangs its runtime costs its row at the timeout, never the run
        self._stream = ours.makefile("rwb")
        try:  # the child's first word: it was forked (an EOF instead: the host is gone, the socket never reached it)
            self.pid = int(protocol.receive(self._stream)["pid"])
        except (OSError, EOFError, ValueError, KeyError):
            self.close()
            raise CleanUnavailable("its replay process is gone") from None
        # what the runtime there really uses, read back from it: torch's thread counts, an onnxruntime session's options
        try:
            self.settings_in_use: dict[str, Any] = dict(self._call({"module": module, "path": str(path), "ctx": ctx}, "loading")["settings"])
        except BaseException:  # the file did not open there: its socket is closed here, not left to the collector
            self.close()
            raise

    def __enter__(self) -> CleanRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for closing in (self._stream, self._socket):
            with contextlib.suppress(OSError):
                closing.close()

    def infer(self, feeds: Any) -> dict[str, np.ndarray]:
        if self.dead:  # the last call crashed its runtime: this one runs in a new replay child, on the same file
            self._open()
            self.dead = False
        reply = self._call({"feeds": {name: np.asarray(value) for name, value in feeds.items()}})
        self.last_seconds = float(reply["seconds"])
        return dict(reply["outputs"])

    def _call(self, message: dict[str, Any], doing: str = "running") -> dict[str, Any]:
        from ..artifacts._common import pass_on_notes

        with self._lock:
            try:
                protocol.send(self._stream, message)
                reply = protocol.receive(self._stream)
            except TimeoutError:
                with contextlib.suppress(OSError):
                    os.kill(self.pid, signal.SIGKILL)  # a child of its host, which reaps it
                self.close()
                self.dead = True
                raise ReplayTimedOut(doing, self.timeout or 0.0) from None
            except (OSError, EOFError, ValueError):
                self.close()
                self.dead = True
                raise ReplayProcessDied(doing) from None
        pass_on_notes(reply.get("notes", ()))
        if reply.get("load") is not None:
            raise NeedsWhatItLacks(reply["load"])
        if "error" in reply:
            raise _exception(reply["error"])
        return reply


class NeedsWhatItLacks(Exception):
    """The file did not open in its replay child for want of what the architecture's import provides (``failure``: the
    :class:`~protocol.LoadFailure` naming it): the row's error, worded by ``protocol.load_needs``."""

    def __init__(self, failure: protocol.LoadFailure) -> None:
        super().__init__(failure.description)
        self.failure = failure


class ReplayProcessDied(RuntimeError):
    """The replay child ended while it ran the file (a native crash, killed): the row's error, not the run's."""

    def __init__(self, doing: str) -> None:
        from ..sentences import RUNTIME_CRASHED

        super().__init__(f"{RUNTIME_CRASHED} {doing} the file, without a reply (it runs nothing else: a native crash in the "
                         "runtime, or the process was killed)")


class ReplayTimedOut(ReplayProcessDied):
    """One call of the replayed file (its opening, or one batch) ran past the run's build timeout: its replay child
    was killed; the row's error, not the run's. Its replay process is gone, as after a crash: the row runs no
    diagnostics (each would wait the timeout again)."""

    def __init__(self, doing: str, seconds: float) -> None:
        RuntimeError.__init__(self, f"replay timed out: still {doing} the file after {seconds:g} s, its replay process was killed; the other "
                                 "artifacts were not affected; raise --build-timeout if this file is just slow")


def _exception(error: dict[str, Any]) -> BaseException:
    """The child's exception, re-created here: itself when it unpickles, else one of its type's name and message."""
    with contextlib.suppress(Exception):
        exc = pickle.loads(error["pickled"])
        if isinstance(exc, BaseException):
            return exc
    kind = type(str(error["type"]), (RuntimeError,), {})
    return kind(str(error["message"]))


def _error(exc: BaseException) -> dict[str, Any]:
    error: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    with contextlib.suppress(Exception):
        error["pickled"] = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
    return error


def pin_threads(ctx: Any) -> None:
    """A build, load or replay child's settings: torch's intra-op threads as the run's context says (``--threads``),
    and its heap bounded (``bound_heap``)."""
    bound_heap()
    threads = getattr(ctx, "threads", None)
    if isinstance(threads, int) and threads > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def bound_heap() -> bool:
    """Fix glibc's mmap threshold at 4 MB in this process (a build, load or replay child; never the run's own), as
    ``golden record`` does (artifacts/_heap.py): a block of 4 MB or more is mapped on its own and unmapped when freed.
    By default the threshold climbs with every large block freed (up to 32 MB), and an export's freed buffers stay in
    the child's heap: the 92 M transformer's ONNX export peaked at 2,873 MB, 2,503 MB with this (issue 43;
    benchmarks/NOTES.md, "Big models: where the peak was"). A torch runner's ``reused_heap`` overrides it while open
    (every block from the heap: its replay's speed). False under another C library (nothing changed)."""
    from ..artifacts._heap import _HOLD, M_MMAP_THRESHOLD

    libc = _HOLD._lib()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, 4 << 20))


def _pin_interop_threads() -> None:
    """torch's inter-op threads as export-check's own process pins them (model.pinned_threads)."""
    from ..pinned import TORCH_INTEROP_THREADS

    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_interop_threads() != TORCH_INTEROP_THREADS:
        with contextlib.suppress(RuntimeError):  # allowed once per process, before any inter-op work
            torch.set_num_interop_threads(TORCH_INTEROP_THREADS)


# The packages whose presence in a replay child is reported (``settings_in_use``): what the process has imported.
_REPORTED_PACKAGES = ("torch", "onnx", "onnxsim", "onnxruntime", "openvino", "executorch", "coremltools", "ai_edge_litert")


def settings_in_use(runner: Any) -> dict[str, Any]:
    """What the replay child's runtime uses, read back from it: the heavy packages imported there, torch's thread
    counts and, for a runner holding an onnxruntime session, the session's options and providers (enums as names)."""
    seen: dict[str, Any] = {"imported": [name for name in _REPORTED_PACKAGES if name in sys.modules]}
    torch = sys.modules.get("torch")
    if torch is not None:
        seen.update(torch_threads=torch.get_num_threads(), torch_interop_threads=torch.get_num_interop_threads())
    session = getattr(runner, "session", None)
    if session is not None and hasattr(session, "get_session_options"):
        used = session.get_session_options()
        seen["onnxruntime"] = {
            "intra_op_num_threads": used.intra_op_num_threads, "inter_op_num_threads": used.inter_op_num_threads,
            "execution_mode": getattr(used.execution_mode, "name", str(used.execution_mode)),
            "graph_optimization_level": getattr(used.graph_optimization_level, "name", str(used.graph_optimization_level)),
            "providers": list(session.get_providers()),
        }
    return seen


class RuntimeHost:
    """A runtime that a deployed process runs without torch (``RUNTIME_ALONE``: onnxruntime, OpenVINO, LiteRT): a fresh
    interpreter (``serve_host``) that imports that runtime and numpy only, and forks a replay child per file on its
    own channel. Started by this process (the parent of a run), ahead of the replay (``BuildService.prewarm``); it
    ends when this process closes the channel or dies."""

    def __init__(self, runtime: str) -> None:
        self.runtime = runtime
        # one message per passed socket, never two read as one (SOCK_SEQPACKET keeps their boundaries)
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.channel_lock = threading.Lock()
        pdeathsig = threading.current_thread() is threading.main_thread()  # the signal is tied to the thread that forks
        code = f"from export_check.builder.clean import serve_host; serve_host({theirs.fileno()}, {os.getpid()}, {runtime!r}, {pdeathsig})"
        # -P: nothing of the current folder first on sys.path, as for the build server; a session of its own: a terminal's
        # Ctrl-C (to the whole process group) must not reach it while it starts (a traceback), the parent ends it
        try:
            self.process = subprocess.Popen([sys.executable, "-P", "-c", code], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                            close_fds=True, start_new_session=True)
        finally:
            theirs.close()

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.channel.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def serve_host(channel_fd: int, parent_pid: int, runtime: str, pdeathsig: bool = True) -> None:
    """A runtime host's process (:class:`RuntimeHost`): import the runtime, then fork a replay child per socket passed
    on the channel, until the parent closes it."""
    from ..artifacts.runtimes import RUNTIME_MODULES

    if pdeathsig:
        lifeline.die_with_parent(parent_pid)
    elif os.getppid() != parent_pid:
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent alone decides, and closes the channel
    lifeline.name_process(f"host {runtime}")
    from ..artifacts import KINDS

    # the runtime, and the runners of its kinds (none imports torch), once here rather than in each replay child
    for name in (*RUNTIME_MODULES.get(runtime, ()), "export_check.artifacts._common", *(k.module for k in KINDS if k.runtime == runtime)):
        with contextlib.suppress(Exception):  # one that fails to import fails in the replay child, which says why
            importlib.import_module(name)
    children: set[int] = set()
    with socket.socket(fileno=channel_fd) as channel:
        while True:
            pid = accept(channel, (), None)
            if pid is None:
                return
            if pid > 0:
                children.add(pid)
            reap(children)


def reap(children: set[int]) -> None:
    """Wait for the replay children in ``children`` that have ended (without blocking), and drop them from it."""
    for child in list(children):
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(child, os.WNOHANG)[0] == 0:
                continue
        children.discard(child)


# --- the load host's side ------------------------------------------------------------------------------------------

def accept(channel: socket.socket, host_fds: tuple[int, ...], life_fd: int | None) -> int | None:
    """In a host (the load host, a runtime host), once ``channel`` is readable: take the passed socket and fork its
    replay child, which closes the host's ``host_fds``; the child's pid, -1 for a message without exactly one socket
    (its sender sees the socket closed: it replays elsewhere), or None when the parent closed the channel (EOF)."""
    try:
        data, fds, _, _ = socket.recv_fds(channel, 16, 4)
    except OSError:
        return None
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        return -1
    host = os.getpid()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            lifeline.die_with_parent(host)
            if life_fd is not None:
                lifeline.watch(life_fd)
            channel.close()
            for fd in host_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            serve_replay(fds[0])
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(fds[0])
    return pid


def serve_replay(fd: int) -> None:
    """The replay child: open the file the first message names, then run each batch sent until the parent closes."""
    from ..artifacts._common import captured_warnings
    from ..errors import describe_exception

    with socket.socket(fileno=fd) as sock, sock.makefile("rwb") as stream:
        protocol.send(stream, {"pid": os.getpid()})
        opening = protocol.receive(stream)
        notes: list[str] = []
        logged: list[str] = []
        try:
            with captured_warnings(notes), protocol.logged_exceptions() as logged:
                lifeline.name_process(f"r {opening['module'].rpartition('.')[2]}")
                ctx = pickle.loads(opening["ctx"])
                pin_threads(ctx)
                _pin_interop_threads()
                module = importlib.import_module(opening["module"])
                opened = module.open_runner(Path(opening["path"]), ctx)
                runner = opened.__enter__()  # what a `with` would bind
        except Exception as exc:
            # what the file needs and this process lacks (a user's pytree class, a module), worded as the load probe does
            how, missing = protocol.missing_at_load([*protocol.chain_texts(exc), *logged])
            failure = protocol.LoadFailure(describe_exception(exc), missing, how) if missing else None
            protocol.send(stream, {"error": _error(exc), "notes": notes, "load": failure})
            return
        protocol.send(stream, {"status": "ok", "notes": notes, "settings": settings_in_use(runner)})
        while True:
            try:
                message = protocol.receive(stream)
            except EOFError:
                break
            notes = []
            try:
                with captured_warnings(notes):
                    began = time.perf_counter()
                    outputs = runner.infer(message["feeds"])
                    seconds = time.perf_counter() - began
                    reply = {"outputs": {name: np.asarray(value) for name, value in outputs.items()}, "seconds": seconds, "notes": notes}
            except Exception as exc:
                reply = {"error": _error(exc), "notes": notes}
            protocol.send(stream, reply)
        with contextlib.suppress(Exception):
            opened.__exit__(None, None, None)
