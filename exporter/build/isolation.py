"""Build each artifact in a child process, so that a native crash is that row's error, not the run's.

The exporters (torch.jit, torch.onnx, onnxsim, onnxruntime.quantization) are native code: a segfault
in one of them, or an ``abort()`` when a write fails on a full disk (torch.jit.save does that),
would otherwise kill the whole run. A small build server holds torch and onnx imported and forks
one short-lived child per build from its single thread. The parent pickles the build context (the
eager model included) once per run; the server unpickles it once and forks each child from a process
that already holds it, so a child starts with the libraries imported and the model in memory. The
child runs the kind's ``build`` exactly as the parent would, and sends back its details and captured
warnings, or the exception it raised. A child that dies by a signal
becomes :class:`BuildCrashed`, and the row reads::

    build crashed (signal 11, SIGSEGV) in its child process; the other artifacts were not affected; ...

The server is started by ``prewarm`` (forked from a fresh CLI process right after it imports
torch, so it costs no second import; started afresh elsewhere), reused by later runs in the same
process, and exits when its parent does (its request pipe reaches EOF). ``EXPORT_CHECK_ISOLATE=0``
builds in-process instead, e.g. to step through an exporter in a debugger.

``start`` sends a build and returns at once; the server works through its requests in order while
the parent replays what is already built, and ``PendingBuild.wait`` collects a reply (replies come
back in request order). The model travels with the first request of a run only. A derived kind
whose source failed in the server is refused there (never built from an earlier run's file). A
parent that stops early calls ``settle``, which ends the server and the build it is running.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import errno
import importlib
import importlib.util
import io
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from ..errors import ArtifactError

ENV_SWITCH = "EXPORT_CHECK_ISOLATE"
# What every child needs is imported once in the server; the rest each child imports itself.
# Imported in this order, one at a time, whenever the server is idle or a child is building.
PRELOAD = ("torch", "torch.onnx", "onnx", "onnx.checker", "onnxsim", "torch.ao.quantization", "onnxruntime", "onnxruntime.quantization")
_PRIVATE_PREFIX = "_export_check_arch_"  # checkpoint._import_file's names for lone architecture files
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
_LOW_DISK = 16 << 20  # bytes free below which a crashed write is blamed on the disk
_STDERR_KEEP = 64 << 10  # bytes of a child's stderr kept
_DISK_FULL_TEXT = ("file write failed", "No space left", "File too large", "Disk quota exceeded")


class BuildCrashed(ArtifactError):
    """The child building an artifact died (a signal or an unexpected exit) before it reported back."""


def enabled() -> bool:
    """Isolation needs ``os.fork`` (Linux; macOS and Windows build in-process) and can be switched off."""
    return hasattr(os, "fork") and os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def prewarm() -> None:
    """Start the build server now, before the model is loaded.

    In a fresh process (torch not imported yet, one thread) the server is forked from this process
    right after importing torch and before any torch op has run: it starts with torch loaded at no
    cost and in the same state a freshly started interpreter would be in, and imports the rest of
    its libraries on the other core while this process loads the model and the golden set. (Forking
    before torch, so that both import at once, measured no faster.) Elsewhere (a test session that
    has run models already) it is started afresh, and imports torch while this process works.
    """
    global _SERVER
    if not enabled():
        return
    with _LOCK:
        if _SERVER is not None and _SERVER.alive():
            return
        fresh = "torch" not in sys.modules and threading.active_count() == 1
        if _SERVER is not None:
            _SERVER.close()
        import torch  # noqa: F401  (the caller needs it next anyway)

        _SERVER = _Server(fork=fresh)


class BuildTimedOut(BuildCrashed):
    """The child building an artifact ran past the build timeout and was killed."""


class SourceFailed(ArtifactError):
    """A derived kind was not built because the build of the file it derives from failed in the server."""


class PendingBuild:
    """One build sent to the build server (or done in-process); :meth:`wait` returns its details.

    The server builds its requests one after another, in the order they were sent, while this
    process goes on (the pipeline replays the artifacts already built). Replies come back in that
    order; waiting on a later build first receives (and keeps) the earlier ones' replies.
    """

    def __init__(self, kind: Any, ctx: Any, path: Path, source: Path | None) -> None:
        self.kind, self.ctx, self.path, self.source = kind, ctx, path, source
        self.notes: list[str] = []
        self.seconds: float | None = None  # the build's own time (in its child, when isolated)
        self._reply: dict[str, Any] | None = None
        self._server: _Server | None = None
        self._done = False
        self._details: dict[str, str] = {}
        self._error: BaseException | None = None

    def _build_in_process(self) -> None:
        began = time.perf_counter()
        try:
            self._details = dict(self.kind.impl().build(self.ctx, self.path, self.source) or {})
        except BaseException as exc:
            self._error = exc
        self.seconds = time.perf_counter() - began
        self._done = True

    def done(self) -> bool:
        """Whether :meth:`wait` would return at once."""
        return self._done or self._reply is not None

    def wait(self, notes: list[str]) -> dict[str, str]:
        """The build's details (its warnings appended to ``notes``); raises what the builder raised,
        :class:`SourceFailed` or :class:`BuildCrashed`."""
        if not self._done:
            self._finish()
        notes.extend(self.notes)
        self.notes = []
        if self._error is not None:
            raise self._error
        return dict(self._details)

    def _finish(self) -> None:
        server = self._server
        assert server is not None
        with _LOCK:
            try:
                server.receive_until(self)
            except (OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
                server.fail_pending(exc)
                server.close()
        reply = self._reply or {}
        self.notes.extend(reply.get("notes", ()))
        self.seconds = reply.get("seconds")
        _remove_partial(self.path, reply.get("pid"))
        status = reply.get("status")
        if status != "crashed" and reply.get("stderr"):
            sys.stderr.write(reply["stderr"])  # what the exporter printed, as if it had run here
            sys.stderr.flush()
        self._done = True
        if status == "ok":
            self._details = dict(reply["details"])
        elif status == "unpicklable":  # e.g. a class defined in a __main__ script: no worse off than before isolation
            self.notes.append(f"built in-process, not isolated: the build process cannot rebuild the model ({reply['description']})"[:300])
            self._build_in_process()
        elif status == "raised":
            self._error = _revive(reply)
        elif status == "source-failed":
            self._error = SourceFailed("not built: the build of the file it derives from failed")
        elif status == "timeout":
            self._error = BuildTimedOut(
                f"build timed out: still running after {reply['timeout']:g} s, its child process was killed; the other "
                "artifacts were not affected; raise --build-timeout if this export is just slow"
            )
        elif status == "server-died":
            self._error = BuildCrashed(f"build crashed: the build server died ({reply['description']}); the rest of the run goes on")
        else:
            self._error = BuildCrashed(_crash_message(reply.get("signal"), reply.get("exit_code"), self.path, last_words(reply.get("stderr", ""))))


def start(kind: Any, ctx: Any, path: Path, source: Path | None, timeout: float | None = None) -> PendingBuild:
    """Send ``kind``'s build to the build server and return at once; ``wait`` on the result.

    ``timeout``: seconds the build may run before its child is killed (the row becomes
    :class:`BuildTimedOut`); ``None`` or 0: no limit. Builds in-process (at once, without a time
    limit) when isolation is off or the context cannot be pickled.
    """
    pending = PendingBuild(kind, ctx, path, source)
    if not enabled():
        pending._build_in_process()
        return pending
    try:
        key, payload = _pickled(ctx)
    except Exception as exc:  # e.g. a model holding a lambda: no worse off than before isolation
        pending.notes.append(f"built in-process, not isolated: the model cannot be pickled ({type(exc).__name__}: {exc})"[:300])
        pending._build_in_process()
        return pending
    request = {
        "module": kind.module,
        "kind": kind.name,
        "ctx_key": key,
        "path": str(path),
        "source": None if source is None else str(source),
        "timeout": timeout,
        "sys_path": list(sys.path),
        "cwd": os.getcwd(),
        "files": {name: m.__file__ for name, m in list(sys.modules.items()) if name.startswith(_PRIVATE_PREFIX) and getattr(m, "__file__", None)},
    }
    with _LOCK:
        server = _server()
        if server.sent_key != key:  # the model travels once per run; later requests name it by key
            request["ctx"] = payload
        try:
            server.send(request, pending)
            server.sent_key = key
        except (OSError, ValueError) as exc:
            server.fail_pending(exc)
            server.close()
        pending._server = server
    return pending


def build(kind: Any, ctx: Any, path: Path, source: Path | None, notes: list[str], timeout: float | None = None) -> dict[str, str]:
    """Run ``kind``'s builder in a child process and wait for it; return its details, append its warnings to ``notes``.

    Raises what the builder raised (re-created in this process), or :class:`BuildCrashed`.
    Falls back to building in-process when isolation is off or the context cannot be pickled.
    """
    return start(kind, ctx, path, source, timeout).wait(notes)


def settle() -> None:
    """Make sure no build is still in flight: close a server that has replies nobody will read
    (after a run stopped early), so that the next run starts from a clean server."""
    with _LOCK:
        if _SERVER is not None and _SERVER.in_flight():
            _SERVER.close(stop=True)


_PICKLED: tuple[Any, str, bytes] | None = None  # (ctx, key, its pickle): the last context sent


def _pickled(ctx: Any) -> tuple[str, bytes]:
    """The build context pickled once per run (every build of a run shares one context), with a fresh key.

    The server unpickles a key's context once and forks every build of the run from it.
    """
    global _PICKLED
    if _PICKLED is None or _PICKLED[0] is not ctx:
        import uuid

        _PICKLED = (ctx, uuid.uuid4().hex, pickle.dumps(ctx, protocol=pickle.HIGHEST_PROTOCOL))
    return _PICKLED[1], _PICKLED[2]


def _crash_message(signum: int | None, exit_code: int | None, path: Path, said: str | None = None) -> str:
    what = f"exited with code {exit_code} before reporting back"
    if signum:
        try:
            what = f"(signal {signum}, {signal.Signals(signum).name})"
        except ValueError:
            what = f"(signal {signum})"
    head = f"build crashed {what} in its child process" if signum else f"build crashed: its child process {what}"
    if said:
        head += f" ({said})"
    disk = _disk_trouble(path)
    if disk:  # native writers often abort() when a write fails, rather than raise
        return f"{head}; {disk}; free space or pass --out to a larger disk"
    if signum == signal.SIGKILL:
        return f"{head}: killed, often by the kernel's out-of-memory killer; the other artifacts were not affected"
    return f"{head}; the other artifacts were not affected; rerun with {ENV_SWITCH}=0 under a debugger to see where"


def _disk_trouble(path: Path) -> str | None:
    """Why writing ``path`` may have failed: a nearly full disk or a file size limit (``ulimit -f``)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if soft != resource.RLIM_INFINITY:
        return f"a file size limit of {soft} bytes is set (ulimit -f)"
    try:
        stat = os.statvfs(path.parent)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    if free < _LOW_DISK:
        return f"the output disk is full ({free // 1024} KB free)"
    return None


def _revive(reply: dict[str, Any]) -> BaseException:
    try:
        exc = pickle.loads(reply["exception"])
        if isinstance(exc, BaseException):
            return exc
    except Exception:
        pass
    return ArtifactError(reply.get("description", "the builder failed in its child process"))


def _remove_partial(path: Path, pid: int | None) -> None:
    # A child killed mid-write leaves its atomic_path temporary (named after its pid) behind.
    if pid:
        for leftover in path.parent.glob(f".{path.stem}.partial-{pid}*"):
            with contextlib.suppress(OSError):
                leftover.unlink()


# --- the parent's handle on the server ---------------------------------------------------------

_LOCK = threading.Lock()
_SERVER: _Server | None = None


def _server() -> _Server:
    global _SERVER
    if _SERVER is None or not _SERVER.alive():
        if _SERVER is not None:
            _SERVER.close()
        _SERVER = _Server()
    return _SERVER


class _Server:
    def __init__(self, fork: bool = False) -> None:
        request_r, self._request_w = os.pipe()
        self._reply_r, reply_w = os.pipe()
        try:
            self._proc: Any = _fork_server(request_r, reply_w, (self._request_w, self._reply_r)) if fork else _spawn_server(request_r, reply_w)
        finally:
            os.close(request_r)
            os.close(reply_w)
        self._out = os.fdopen(self._request_w, "wb")
        self._in = os.fdopen(self._reply_r, "rb")

        self.sent_key: str | None = None  # the build context this server holds
        self._waiting: collections.deque[PendingBuild] = collections.deque()  # sent, reply not yet read

    def alive(self) -> bool:
        return self._proc.poll() is None

    def send(self, request: dict[str, Any], pending: PendingBuild) -> None:
        self._waiting.append(pending)
        _send(self._out, request)

    def in_flight(self) -> bool:
        return bool(self._waiting)

    def receive_until(self, pending: PendingBuild) -> None:
        """Read replies, in the order their requests were sent, until ``pending``'s has arrived."""
        while pending._reply is None:
            if not self._waiting:
                raise EOFError("no reply is due for this build")
            reply = _receive(self._in)
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
            self._proc.terminate()
        for stream in (self._out, self._in):
            with contextlib.suppress(OSError):
                stream.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _spawn_server(request_r: int, reply_w: int) -> subprocess.Popen:
    package_root = str(Path(__file__).resolve().parents[2])
    code = f"import sys; sys.path.insert(0, {package_root!r}); from exporter.build.isolation import serve; serve({request_r}, {reply_w})"
    return subprocess.Popen([sys.executable, "-c", code], pass_fds=(request_r, reply_w), stdin=subprocess.DEVNULL, close_fds=True)


def _fork_server(request_r: int, reply_w: int, parent_ends: tuple[int, int]) -> _Forked:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12+ warns when native threads exist (OpenBLAS's)
        pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for fd in parent_ends:
                os.close(fd)
            serve(request_r, reply_w)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    return _Forked(pid)


class _Forked:
    """The part of ``subprocess.Popen`` that ``_Server`` uses, for a server forked from this process."""

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


@atexit.register
def _shutdown() -> None:
    global _SERVER
    if _SERVER is not None:
        _SERVER.close()
        _SERVER = None


def _send(stream: Any, message: dict[str, Any]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream: Any) -> dict[str, Any]:
    header = stream.read(8)
    if len(header) < 8:
        raise EOFError("the build server closed its pipe")
    (size,) = struct.unpack("<Q", header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the build server closed its pipe mid-message")
    return pickle.loads(data)  # our own server's reply: trusted


# --- the server and its children ---------------------------------------------------------------


def serve(request_fd: int, reply_fd: int) -> None:
    """Import the heavy libraries once, then fork one child per build request until EOF.

    torch first; the rest of ``PRELOAD`` one module at a time whenever the server would otherwise
    wait: for the first request (the parent is still loading the model and the golden set), and for
    each child while it builds. The first builds (TorchScript) need torch alone, so they start at
    once, and the import of onnxsim and the rest overlaps them instead of delaying them.
    """
    signal.signal(signal.SIGTERM, _stop)
    _PENDING[:] = [name for name in PRELOAD if name not in sys.modules]
    if "torch" in sys.modules:
        _warm_up()
    requests = os.fdopen(request_fd, "rb")
    replies = os.fdopen(reply_fd, "wb")
    while True:
        _preload_until_readable(request_fd)
        _ready_for_children()
        try:
            request = _receive(requests)
        except EOFError:
            return  # the parent is gone or done
        ctx, refused = _context(request)
        if refused is None and _BUILT.get(request.get("source") or "", "ok") != "ok":
            # Its source file's build failed here: a file at that path is stale, never build from it.
            refused = {"status": "source-failed", "notes": []}
        reply = refused if refused is not None else _run_in_child(request, ctx)
        _BUILT[request["path"]] = reply.get("status", "crashed")
        _send(replies, reply)


_CHILD: int | None = None  # the pid of the child building now


def _stop(signum: int, frame: Any) -> None:
    """SIGTERM from the parent: it stopped early; end the build under way too, and leave."""
    if _CHILD is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(_CHILD, signal.SIGKILL)
    os._exit(0)


_CONTEXT: tuple[Any, Any, Any] | None = None  # (key, unpickled build context, or the refusal), held by the server
_BUILT: dict[str, str] = {}  # artifact path -> reply status, for the builds of the current context
_PENDING: list[str] = []  # modules of PRELOAD the server has yet to import


def _import(name: str) -> None:
    with contextlib.suppress(ImportError):
        importlib.import_module(name)


def _preload_until_readable(fd: int) -> None:
    """Import pending modules, one at a time, until ``fd`` has something to read (a request, or a child's reply)."""
    import select

    while _PENDING and not select.select([fd], [], [], 0)[0]:
        name = _PENDING.pop(0)
        _import(name)
        if name == "torch":
            _warm_up()


def _ready_for_children() -> None:
    """Every child needs torch: import it (and warm up) before the first fork if the idle time did not."""
    if "torch" in _PENDING:
        _PENDING.remove("torch")
        _import("torch")
        _warm_up()


def _context(request: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    """The request's build context, unpickled once per key in the server so that every child inherits
    it by fork; or the ``unpicklable`` reply when it cannot be rebuilt here. The parent sends the
    pickled context with the first request of a key only."""
    global _CONTEXT
    key = request.get("ctx_key")
    if _CONTEXT is not None and _CONTEXT[0] == key:
        return _CONTEXT[1], _CONTEXT[2]
    _CONTEXT = None
    _BUILT.clear()
    if "ctx" not in request:
        return None, {"status": "unpicklable", "notes": [], "description": "the build server did not receive the model"}
    for name in [n for n in sys.modules if n.startswith(_PRIVATE_PREFIX)]:
        del sys.modules[name]  # a lone architecture file is imported afresh for each context, as the parent gave it
    sys.path[:] = request["sys_path"]
    os.chdir(request["cwd"])
    try:
        ctx = _ModelUnpickler(io.BytesIO(request["ctx"]), request["files"]).load()
    except Exception as exc:
        refused = {"status": "unpicklable", "notes": [], "description": f"{type(exc).__name__}: {exc}"[:200]}
        _CONTEXT = (key, None, refused)
        return None, refused
    _CONTEXT = (key, ctx, None)
    return ctx, None


def _warm_up() -> None:
    # Unpickling the first module and tensor imports a tail of torch modules lazily; do it once here
    # rather than in every child (it is most of a child's start-up cost).
    from ..artifacts import KINDS

    for kind in KINDS:  # the builders' own modules are light: their heavy imports are inside build()
        kind.impl()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        pickle.loads(pickle.dumps(torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1), torch.nn.BatchNorm2d(1), torch.nn.Linear(1, 1))))


def _run_in_child(request: dict[str, Any], ctx: Any) -> dict[str, Any]:
    result_r, result_w = os.pipe()
    # The child's stderr goes to a file: passed on when it reports back, summed up when it crashes
    # (a native abort prints a long C++ stack there).
    log = tempfile.TemporaryFile()  # noqa: SIM115 (shared with the forked child; closed by `with log` once it exits)
    global _CHILD
    began = time.perf_counter()
    # SIGTERM (the parent stopping early) waits until _CHILD names the child, so _stop never misses it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    pid = os.fork()
    if pid == 0:  # the child: build, report, and leave without running any of the server's cleanup
        code = 0
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            os.close(result_r)
            os.dup2(log.fileno(), 2)
            built = _build_here(request, ctx)
            sys.stderr.flush()  # into the log, before os._exit skips it
            with os.fdopen(result_w, "wb") as out:
                out.write(pickle.dumps(built, protocol=pickle.HIGHEST_PROTOCOL))
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    _CHILD = pid
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.close(result_w)
    _preload_until_readable(result_r)  # while the child builds, on the other core
    timeout = request.get("timeout")
    data, timed_out = _read_until_eof(result_r, None if not timeout else began + float(timeout))
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    _CHILD = None
    seconds = time.perf_counter() - began
    with log:
        log.seek(0)
        stderr = log.read(_STDERR_KEEP).decode("utf-8", "replace")
    reply: dict[str, Any] = {"pid": pid, "stderr": stderr, "seconds": seconds}
    if timed_out:
        reply.update(status="timeout", timeout=float(timeout or 0))
        return reply
    if data:
        try:
            reply.update(pickle.loads(data))
            return reply
        except Exception:
            pass  # the child died while writing its reply
    if os.WIFSIGNALED(status):
        reply.update(status="crashed", signal=os.WTERMSIG(status))
    else:
        reply.update(status="crashed", exit_code=os.WEXITSTATUS(status))
    return reply


def _read_until_eof(fd: int, deadline: float | None) -> tuple[bytes, bool]:
    """All of ``fd`` up to EOF (then closed), or what came before ``deadline`` (perf_counter) and ``True``."""
    import select

    chunks: list[bytes] = []
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.perf_counter())
            if not select.select([fd], [], [], wait)[0]:
                return b"".join(chunks), True
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
    finally:
        os.close(fd)


def last_words(stderr: str) -> str | None:
    """The line of a crashed child's stderr that says what went wrong, without the stack frames."""
    lines = [" ".join(line.split()) for line in stderr.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("frame #", "<omitting", "Exception raised from", "Fatal Python error"))]
    for line in lines:
        if "what():" in line:
            return line.split("what():", 1)[1].strip()[:200] or None
    return lines[-1][:200] if lines else None


def _build_here(request: dict[str, Any], ctx: Any) -> dict[str, Any]:
    from ..artifacts._common import captured_warnings

    sys.path[:] = request["sys_path"]
    os.chdir(request["cwd"])
    notes: list[str] = []
    path = Path(request["path"])
    try:
        _pin_threads(ctx)
        module = importlib.import_module(request["module"])
        source = None if request["source"] is None else Path(request["source"])
        with captured_warnings(notes):
            details = module.build(ctx, path, source)
        return {"status": "ok", "details": {str(k): str(v) for k, v in dict(details or {}).items()}, "notes": notes}
    except BaseException as exc:  # the parent decides what it means; SystemExit from an exporter included
        exc = _disk_full(exc, path)
        reply: dict[str, Any] = {"status": "raised", "notes": notes, "description": f"{type(exc).__name__}: {exc}"[:2000]}
        try:
            reply["exception"] = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.loads(reply["exception"])
        except Exception:
            reply.pop("exception", None)
        return reply


def _pin_threads(ctx: Any) -> None:
    threads = getattr(ctx, "threads", None)
    if isinstance(threads, int) and threads > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def _disk_full(exc: BaseException, path: Path) -> BaseException:
    """Say plainly when a write failed because the disk (or a file size limit) ran out."""
    text = str(exc)
    full = (isinstance(exc, OSError) and exc.errno in _DISK_FULL) or any(t in text for t in _DISK_FULL_TEXT)
    if not full:
        return exc
    return ArtifactError(
        f"writing {path.name} failed: no space left on the device or a file size limit reached "
        f"({' '.join(text.split())[:120]}); free space or pass --out to a larger disk"
    )


class _ModelUnpickler(pickle.Unpickler):
    """Unpickles the parent's build context; imports lone architecture files under the parent's names."""

    def __init__(self, stream: Any, files: dict[str, str]) -> None:
        super().__init__(stream)
        self._files = files

    def find_class(self, module: str, name: str) -> Any:
        if module not in sys.modules and module in self._files:
            spec = importlib.util.spec_from_file_location(module, self._files[module])
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {self._files[module]}")
            loaded = importlib.util.module_from_spec(spec)
            sys.modules[module] = loaded
            spec.loader.exec_module(loaded)
        return super().find_class(module, name)
