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

Why a hand-written server and not the standard library's (measured 2026-12-01 with
benchmarks/isolation_probe.py on the bundled ResNet check, 2 cores shared with other work,
interleaved runs, medians; the bar was 0.1 s per run and no guarantee lost):

* multiprocessing's forkserver context with ``set_forkserver_preload(PRELOAD)`` and one ``Process``
  per build receiving the pickled context (builds run in order by a thread of the parent) keeps the
  crash, timeout and Ctrl-C guarantees but costs 1.6-2.0 s per run (wall 6.36 s against 4.76 s over
  7 repeats, each repeat's difference 1.8 s; 6.32 s against 4.21 s over 5, 2.0 s), and it loses
  "the model is sent once": every child is sent the pickled context and unpickles it (6 times a run:
  3.2 MB against 0.5 MB for this small model). Its fork server is a fresh interpreter that imports
  torch, onnx and onnxsim before it forks the first child (server start to the first build's reply
  3.7 s against 2.1-2.3 s; this process waited 1.9-2.0 s for builds against 0.005-0.05 s), where this
  server is forked right after the CLI imported torch and imports the rest while children build.
  Preloading torch alone (each child importing the rest) cost 2.2 s per run.
* concurrent.futures.ProcessPoolExecutor (one worker holding the model, builds in it): a segfault
  breaks the pool and fails the queued builds too (BrokenProcessPool), and a running build cannot be
  killed at the timeout short of killing the pool.

The parent's state (the server, the pickled context, the lock) is one :class:`BuildService`; the
module functions the pipeline calls use the one instance ``SERVICE``. The modules: this one (what
a build means to the parent), client.py (the server process and its pipes), server.py (the server,
its children, and its load host: each file built is loaded, its first sample run, in a process that
has imported nothing of the user's architecture), protocol.py (the messages between them), crash.py (what a failed build says).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..artifacts import KINDS_BY_NAME, preload_of
from ..artifacts.runtimes import RUNTIME_ALONE
from ..errors import ArtifactError, describe_exception
from .clean import CleanRunner, CleanUnavailable, NeedsWhatItLacks, ReplayProcessDied, RuntimeHost, replay_context
from .client import ServerProcess
from .crash import crash_message, last_words, remove_partial, revive, the_rows
from .forked import run_forked
from .protocol import ENV_SWITCH, PRELOAD, PRIVATE_PREFIX, LoadFailure
from .server import build_here

__all__ = ["ENV_SWITCH", "PRELOAD", "BuildCrashed", "BuildTimedOut", "SourceFailed", "PendingBuild", "BuildService", "SERVICE",
           "enabled", "prewarm", "start", "build", "settle", "open_deployed", "CleanRunner", "CleanUnavailable", "NeedsWhatItLacks",
           "ReplayProcessDied"]


class BuildCrashed(ArtifactError):
    """The child building an artifact died (a signal or an unexpected exit) before it reported back."""


class BuildTimedOut(BuildCrashed):
    """The child building an artifact ran past the build timeout and was killed."""


class SourceFailed(ArtifactError):
    """A derived kind was not built because the build of the file it derives from failed in the server."""


def enabled() -> bool:
    """Isolation needs ``os.fork`` (Linux; macOS and Windows build in-process) and can be switched off."""
    return hasattr(os, "fork") and os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


class PendingBuild:
    """One build sent to the build server (or done in-process); :meth:`wait` returns its details.

    The server builds its requests one after another, in the order they were sent, while this
    process goes on (the pipeline replays the artifacts already built). Replies come back in that
    order; waiting on a later build first receives (and keeps) the earlier ones' replies.
    """

    def __init__(self, kind: Any, ctx: Any, path: Path, source: Path | None, timeout: float | None = None) -> None:
        self.kind, self.ctx, self.path, self.source, self.timeout = kind, ctx, path, source, timeout
        self.notes: list[str] = []
        self.seconds: float | None = None  # the build's own time (in its child, when isolated)
        self._reply: dict[str, Any] | None = None
        self._service: BuildService | None = None
        self._server: ServerProcess | None = None
        self._done = False
        self._details: dict[str, str] = {}
        self._error: BaseException | None = None
        # The file built but did not load in the load host (server.py), where nothing of the architecture
        # is imported; None when it did, or when it was built in-process (no such process then).
        self.load: LoadFailure | None = None
        self.first: dict[str, Any] | None = None  # the first sample's outputs as the load host computed them

    def _build_in_process(self) -> None:
        began = time.perf_counter()
        try:
            self._details = dict(self.kind.build(self.ctx, self.path, self.source) or {})
        except BaseException as exc:
            self._error = the_rows(exc)
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
        assert self._service is not None and self._server is not None
        self._service.receive(self._server, self)
        self._take(self._reply or {})

    def _take(self, reply: dict[str, Any]) -> None:
        """The build's outcome from its child's reply (the server's, or one forked here: ``_build_forked``)."""
        self.notes.extend(reply.get("notes", ()))
        self.seconds = reply.get("seconds")
        remove_partial(self.path, reply.get("pid"))
        status = reply.get("status")
        if status != "crashed" and reply.get("stderr"):
            self.notes.extend(stderr_notes(reply["stderr"]))  # kept out of the terminal, carried in the row's notes
        self._done = True
        if status == "ok":
            self._details = dict(reply["details"])
            self.load = reply.get("load")
            self.first = reply.get("first")
        elif status == "unpicklable":  # e.g. a class defined in a __main__ script: built in a child forked from here
            self._build_forked(f"the build process cannot rebuild the model ({reply['description']})")
        elif status == "raised":
            self._error = revive(reply)
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
            self._error = BuildCrashed(crash_message(reply.get("signal"), reply.get("exit_code"), self.path, last_words(reply.get("stderr", ""))))

    def _build_forked(self, why: str) -> None:
        """Build in a child forked from this process, which holds the model already: for a model the build
        server cannot be sent or cannot rebuild. Isolated as a server build is (a crash, a hang past the
        timeout, an exit are this row's), only not from a process that imported nothing of the run."""
        self.notes.append(f"built in a child of the run's process, not the build server: {why}"[:300])
        self._take(run_forked(build_request(self.kind, self.path, self.source, self.timeout), self.ctx, build_here))


def build_request(kind: Any, path: Path, source: Path | None, timeout: float | None) -> dict[str, Any]:
    """What ``server.build_here`` reads of a build, in the build server's child or in one forked here."""
    return {"module": kind.module, "kind": kind.name, "path": str(path), "source": None if source is None else str(source),
            "timeout": timeout, "sys_path": list(sys.path), "cwd": os.getcwd()}


def stderr_notes(text: str) -> list[str]:
    """What a build child wrote to stderr (onnxruntime's and torch's native logs, a library's log
    lines) as row notes: torch's C++ warnings one ``NativeWarning`` each, the rest one
    ``BuildOutput`` note, so that nothing a build prints reaches the terminal ahead of the report.

    >>> stderr_notes("[W1129 18:18:02.751 Quantizer.cpp:111] Warning: per-tensor (function f)\\nW1201 torchvision is not installed\\n")
    ['NativeWarning: per-tensor', 'BuildOutput: the build printed 1 line to stderr (kept out of the terminal): W1201 torchvision is not installed']
    """
    from ..artifacts._common import _C10_WARNING

    notes, other = [], []
    for line in text.splitlines():
        match = _C10_WARNING.match(line.strip())
        if match:
            notes.append(f"NativeWarning: {match['text']}")
        elif line.strip():
            other.append(" ".join(line.split()))
    if other:
        lines = "line" if len(other) == 1 else "lines"
        notes.append(f"BuildOutput: the build printed {len(other)} {lines} to stderr (kept out of the terminal): " + " | ".join(other)[:600])
    return notes


class BuildService:
    """The parent's side of build isolation, all of its state in one place.

    ``server``: the build server process (``None`` until the first build or ``prewarm``), reused
    by later runs until it dies or :meth:`settle` stops it; the last build context pickled (every
    build of a run shares one context, sent to the server once); and the lock that serialises
    sending to and reading from the server (a test session may call in from several threads). That
    lock orders this process's threads around two pipes, which no other process opens: a thread
    lock, not a file lock (filelock is for what processes share, like the output directory).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: ServerProcess | None = None
        self._pickled: tuple[Any, str, bytes] | None = None  # (ctx, key, its pickle): the last context sent
        self._replay_ctx: tuple[Any, bytes] | None = None  # (ctx, clean.replay_context of it): the last one replayed
        self.hosts: dict[str, RuntimeHost] = {}  # per runtime a deployed process runs without torch (RUNTIME_ALONE)
        self.call_timeout: float | None = None  # seconds one replayed call may take (the run's build timeout, set by prewarm)

    def prewarm(self, kinds: tuple[str, ...] = (), timeout: float | None = None) -> None:
        """Start the build server now, before the model is loaded, and have it import what ``kinds`` need ahead.

        In a fresh process (torch not imported yet, one thread) the server is forked from this process
        right after importing torch and before any torch op has run: it starts with torch loaded at no
        cost and in the same state a freshly started interpreter would be in, and imports the rest of
        its libraries on the other core while this process loads the model and the golden set. (Forking
        before torch, so that both import at once, measured no faster.) Elsewhere (a test session that
        has run models already) it is started afresh, and imports torch while this process works.
        """
        self.call_timeout = timeout or None
        if not enabled():
            return
        with self.lock:
            if self.server is None or not self.server.alive():
                fresh = "torch" not in sys.modules and threading.active_count() == 1
                if self.server is not None:
                    self.server.close()
                import torch  # noqa: F401  (the caller needs it next anyway)

                self.server = ServerProcess(fork=fresh)
            if kinds:
                with contextlib.suppress(OSError, ValueError):  # a server that is gone is found so by the first build
                    self.server.tell({"preload": list(preload_of(kinds)), "timeout": timeout})
            for runtime in sorted({KINDS_BY_NAME[name].runtime for name in kinds if name in KINDS_BY_NAME} & RUNTIME_ALONE):
                with contextlib.suppress(OSError):  # one that cannot start is found so by the first replay of its files
                    self._host(runtime)

    def start(self, kind: Any, ctx: Any, path: Path, source: Path | None, timeout: float | None = None,
              runtimes: tuple[str, ...] = ()) -> PendingBuild:
        """Send ``kind``'s build to the build server and return at once; ``wait`` on the result.

        ``timeout``: seconds the build may run before its child is killed (the row becomes
        :class:`BuildTimedOut`); ``None`` or 0: no limit. ``runtimes``: those of every kind the run
        builds, whose heavy loaders the server imports once, ahead (``artifacts.runtimes``). Builds in a child forked
        from this process (at once, under the same timeout) when the context cannot be pickled; in-process (at once, without a
        time limit or crash containment) only when isolation is switched off (``EXPORT_CHECK_ISOLATE=0``).
        """
        pending = PendingBuild(kind, ctx, path, source, timeout)
        if not enabled():
            pending._build_in_process()
            return pending
        try:
            key, payload = self._pickle(ctx)
        except Exception as exc:  # e.g. a model holding a lambda: built in a child of this process, which holds it
            pending._build_forked(f"the model cannot be pickled ({describe_exception(exc)})")
            return pending
        request = {
            **build_request(kind, path, source, timeout),
            "ctx_key": key,
            "runtimes": list(runtimes),
            # export-check's own switches as this process has them now (the server was started before a caller changed one)
            "env": {name: value for name, value in os.environ.items() if name.startswith("EXPORT_CHECK_")},
            "files": {name: m.__file__ for name, m in list(sys.modules.items()) if name.startswith(PRIVATE_PREFIX) and getattr(m, "__file__", None)},
        }
        with self.lock:
            server = self._running_server()
            if server.sent_key != key:  # the model travels once per run; later requests name it by key
                request["ctx"] = payload
            try:
                server.send(request, pending)
                server.sent_key = key
            except (OSError, ValueError) as exc:
                server.fail_pending(exc)
                server.close()
            pending._service, pending._server = self, server
        return pending

    def build(self, kind: Any, ctx: Any, path: Path, source: Path | None, notes: list[str], timeout: float | None = None) -> dict[str, str]:
        """Run ``kind``'s builder in a child process and wait for it; return its details, append its warnings to ``notes``.

        Raises what the builder raised (re-created in this process), or :class:`BuildCrashed`.
        Builds in a child of this process when the context cannot be pickled; in-process only when isolation is off.
        """
        return self.start(kind, ctx, path, source, timeout).wait(notes)

    def settle(self) -> None:
        """Make sure no build is still in flight: close a server that has replies nobody will read
        (after a run stopped early), so that the next run starts from a clean server."""
        with self.lock:
            if self.server is not None and self.server.in_flight():
                self.server.close(stop=True)

    def stop(self) -> None:
        """End the server and the build it is running now, whatever is in flight (Ctrl-C): without the
        lock, which the interrupted thread may have held."""
        server, self.server = self.server, None
        if server is not None:
            server.close(stop=True)

    def in_flight(self) -> bool:
        """Whether a build was sent whose reply has not been read."""
        with self.lock:
            return self.server is not None and self.server.in_flight()

    def shutdown(self) -> None:
        """Close the server (it finishes what it was sent, then exits) and the runtime hosts; at this process's exit, so
        without the lock: a thread that still holds it must not keep the process from exiting."""
        if self.server is not None:
            self.server.close()
            self.server = None
        hosts, self.hosts = self.hosts, {}
        for host in hosts.values():
            host.close()

    def _host(self, runtime: str) -> RuntimeHost:
        """The running host of ``runtime`` (started now if it is not); raises OSError when it cannot start."""
        host = self.hosts.get(runtime)
        if host is None or not host.alive():
            if host is not None:
                host.close()
            host = self.hosts[runtime] = RuntimeHost(runtime)
        return host

    def open_clean(self, kind: Any, path: Path, ctx: Any, notes: list[str]) -> CleanRunner:
        """``kind``'s file at ``path`` opened in a replay child, where nothing of the architecture is imported (clean.py):
        of the host of its runtime alone for a runtime a deployed process runs without torch (``RUNTIME_ALONE``; should
        that host not start, ``notes`` says so and the load host serves), else of the load host. Raises what opening it
        raised there, or :class:`CleanUnavailable` (no such process here: isolation is off, the context needs the user's
        code, the host is gone)."""
        if not enabled():
            raise CleanUnavailable(f"build isolation is off ({ENV_SWITCH}=0)")
        if self._replay_ctx is None or self._replay_ctx[0] is not ctx:
            try:
                self._replay_ctx = (ctx, replay_context(ctx))
            except Exception as exc:
                raise CleanUnavailable(f"its build context cannot be sent without the model ({describe_exception(exc)})"[:300]) from None
        path = Path(path).resolve()
        if kind.runtime in RUNTIME_ALONE:  # a process holding that runtime alone, as a deployed one does
            try:
                with self.lock:
                    host = self._host(kind.runtime)
                return CleanRunner(host.channel, host.channel_lock, kind.module, path, self._replay_ctx[1], self.call_timeout)
            except (OSError, CleanUnavailable) as exc:
                why = exc if isinstance(exc, CleanUnavailable) else describe_exception(exc)
                notes.append(f"replayed where torch is imported too: the process holding {kind.runtime} alone could not be had ({why})")
        with self.lock:  # every file from the cache: no build has started the server yet
            server = self._running_server()
        return CleanRunner(server.channel, server.channel_lock, kind.module, path, self._replay_ctx[1], self.call_timeout)

    def receive(self, server: ServerProcess, pending: PendingBuild) -> None:
        """Read ``server``'s replies up to ``pending``'s; a server that fails on the way fails every build it still owes."""
        with self.lock:
            try:
                server.receive_until(pending)
            except (OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
                server.fail_pending(exc)
                server.close()

    def _running_server(self) -> ServerProcess:
        if self.server is None or not self.server.alive():
            if self.server is not None:
                self.server.close()
            self.server = ServerProcess()
        return self.server

    def _pickle(self, ctx: Any) -> tuple[str, bytes]:
        """The build context pickled once per run (every build of a run shares one context), with a fresh key.

        The server unpickles a key's context once and forks every build of the run from it. A context with a
        ``recipe`` travels without its model: the server builds the model from the checkpoint itself (issue 43: the
        model never crosses a pipe, and the weights, mapped from one file, are one copy between the processes).
        """
        if self._pickled is None or self._pickled[0] is not ctx:
            import dataclasses
            import uuid

            sent = dataclasses.replace(ctx, model=None) if getattr(ctx, "recipe", None) is not None else ctx
            self._pickled = None  # a context that cannot be pickled leaves none of its predecessor's behind
            self._pickled = (ctx, uuid.uuid4().hex, pickle.dumps(sent, protocol=pickle.HIGHEST_PROTOCOL))
        return self._pickled[1], self._pickled[2]


# The one service of this process, which the module functions below (the pipeline's interface) use.
SERVICE = BuildService()
atexit.register(SERVICE.shutdown)


def open_deployed(kind: Any, path: Path, ctx: Any, notes: list[str]) -> Any:
    """``kind``'s file opened as deployed: in a replay child, where nothing of the architecture is imported
    (:meth:`BuildService.open_clean`); beside the model where there is no such process, and ``notes`` says so."""
    try:
        return SERVICE.open_clean(kind, path, ctx, notes)
    except CleanUnavailable as exc:
        notes.append(f"replayed beside the model, not in a process without the architecture: {exc}")
    return kind.open_runner(path, ctx)


def prewarm(kinds: tuple[str, ...] = (), timeout: float | None = None) -> None:
    """Start this process's build server now, before the model is loaded (:meth:`BuildService.prewarm`)."""
    SERVICE.prewarm(kinds, timeout)


def start(kind: Any, ctx: Any, path: Path, source: Path | None, timeout: float | None = None, runtimes: tuple[str, ...] = ()) -> PendingBuild:
    """Send ``kind``'s build to the build server and return at once (:meth:`BuildService.start`)."""
    return SERVICE.start(kind, ctx, path, source, timeout, runtimes)


def build(kind: Any, ctx: Any, path: Path, source: Path | None, notes: list[str], timeout: float | None = None) -> dict[str, str]:
    """Build in a child process and wait for it (:meth:`BuildService.build`)."""
    return SERVICE.build(kind, ctx, path, source, notes, timeout)


def shutdown() -> None:
    """End the build server and the runtime hosts now, once a process's last run needs them no more
    (:meth:`BuildService.shutdown`); a later build or replay starts them again."""
    with SERVICE.lock:
        SERVICE.shutdown()


def settle() -> None:
    """Make sure no build is still in flight (:meth:`BuildService.settle`)."""
    SERVICE.settle()
