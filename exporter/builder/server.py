"""The build server's side: import the heavy libraries once, then fork one child per build request.

This is the code that runs in the server process (``serve``) and in each build child
(``BuildServer._run_in_child``), and nothing the parent runs: the parent's side is client.py and
isolation.py. The server is single-threaded, so forking it is safe, and it holds the run's build
context unpickled, so a child starts with the model in memory and the libraries imported. All its
state is one :class:`BuildServer`, made by ``serve`` in the server process and dropped with it.

Deployed means deployed: a file is loaded, and its first sample run (the load probe), in a process
that has imported nothing of the user's architecture, as the process that deploys it has not. That is
the load host (:class:`LoadHost`), forked from this server before it unpickles its first model (the
server is clean until then: torch and the exporters, no user code, and a ``sys.path`` without the
user's folders), which forks one load child per built file and never sees a model. A file that
loads only where the architecture's classes are imported (a torch.export ``.pt2`` whose output is a
pytree node class of the user's, say) fails there, and the reply carries that :class:`LoadFailure`
for the parent to make the row's error. The probe costs what it cost in the build child (one fork
more); should the host be gone, the probe runs in a child of this server, beside the model, and the
row's notes say so. The host also forks a replay child per file the parent replays (clean.py), on the
replay channel the server hands it: a replay asked for before any build (every file from the cache)
has the host forked for it then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import io
import os
import pickle
import select
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..artifacts import KINDS_BY_NAME
from ..artifacts.runtimes import RUNTIME_LOADERS
from . import clean, lifeline, protocol
from .ahead import import_ahead, warm_up
from .clean import pin_threads
from .crash import disk_full
from .forked import run_forked


def serve(request_fd: int, reply_fd: int, life_fd: int | None = None, parent_pid: int | None = None, pdeathsig: bool = False,
          channel_fd: int | None = None) -> None:
    """Serve build requests from ``request_fd`` until EOF, replying on ``reply_fd``, in order.

    ``life_fd``: the lifeline (lifeline.py), at EOF once the parent ``parent_pid`` is gone;
    ``pdeathsig``: also ask the kernel to kill this server when its parent dies; ``channel_fd``: the replay
    channel (clean.py), handed to the load host.
    """
    if parent_pid is not None:
        if pdeathsig:
            lifeline.die_with_parent(parent_pid)
        elif os.getppid() != parent_pid:
            os._exit(0)
    # Ctrl-C at a terminal signals the whole process group: the parent alone decides (it stops this
    # server and the build under way), so neither this server nor its children print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lifeline.name_process("server")
    BuildServer(life_fd, channel_fd).serve(request_fd, reply_fd)


class BuildServer:
    """One build server's state: the child building now, the context it holds, what it built."""

    def __init__(self, life_fd: int | None = None, channel_fd: int | None = None) -> None:
        self.life_fd = life_fd  # the lifeline: readable (EOF) once the parent is gone
        self.child: int | None = None  # the pid of the child building now
        self.context: tuple[Any, Any, Any] | None = None  # (key, unpickled build context, or the refusal)
        self.built: dict[str, str] = {}  # artifact path -> reply status, for the builds of the current context
        self.pending: list[str] = []  # modules of PRELOAD the server has yet to import
        self.clean = True  # no model unpickled here yet: a load host forked now holds nothing of the user's
        self.loads: LoadHost | None = None  # the load host, forked before the first model is unpickled
        self.load_ctx: bytes | None = None  # the current context without its model, pickled for the load host
        # How long one import here may take: the run's build timeout (its preload message, each request). An import that
        # hangs (a library waiting on the network at import, say) would otherwise keep this server from ever reading the
        # next request, and the parent waits on it without a deadline of its own; abandoned, the module is imported by
        # the child that needs it, under the build timeout, where a hang costs that row.
        self.import_seconds: float | None = None
        # The replay channel's end (clean.py), until the load host takes it: the parent replays through it, and a
        # replay asked for before any build (every file from the cache) has the host forked for it.
        self.channel_fd = channel_fd
        # In the load host: what to do when the channel is readable (fork a replay child), also while a load child runs
        self.on_channel: Callable[[], bool] | None = None  # False once the channel is closed

    def serve(self, request_fd: int, reply_fd: int) -> None:
        """Import the heavy libraries once, then fork one child per build request until EOF.

        torch first; the rest of ``PRELOAD`` one module at a time whenever the server would otherwise
        wait: for the first request (the parent is still loading the model and the golden set), and for
        each child while it builds. The first builds (TorchScript) need torch alone, so they start at
        once, and the import of onnxsim and the rest overlaps them instead of delaying them.
        """
        signal.signal(signal.SIGTERM, self._stop)
        self.pending = [name for name in protocol.PRELOAD if name not in sys.modules]
        if "torch" in sys.modules:
            warm_up()
        with os.fdopen(request_fd, "rb", buffering=0) as requests, os.fdopen(reply_fd, "wb") as replies:
            while True:
                self._preload_until_readable(request_fd)
                if self._replays_waiting(request_fd, reply_fd):
                    continue
                self._ready_for_children()
                try:
                    request = protocol.receive(requests)
                except EOFError:
                    return  # the parent is gone or done
                self.import_seconds = request.get("timeout") or None  # the run's build timeout
                if "preload" in request:  # the run's kinds' imports (artifacts.preload_of), in place of the default's; no reply
                    self.pending = [name for name in request["preload"] if name not in sys.modules]
                    continue
                if self.loads is None and self.clean:
                    # The run's heavy loaders (torch.export's deserializer): imported here, once, before forking the
                    # load host and the build children, which need them (measured: 2-4 s each when they imported
                    # them apart; on the bundled ResNet, torch-export with torchscript-trace and onnx ran 1.19x slower).
                    for runtime in sorted({*request.get("runtimes", ()), _runtime(request)}):
                        for name in RUNTIME_LOADERS.get(runtime, ()):
                            import_ahead(name, self.import_seconds)
                    self._fork_load_host(request_fd, reply_fd)
                ctx, refused = self._context(request)
                if refused is None and self.built.get(request.get("source") or "", "ok") != "ok":
                    # Its source file's build failed here: a file at that path is stale, never build from it.
                    refused = {"status": "source-failed", "notes": []}
                if refused is None and self.loads is not None:  # the load host imports this file's loader while it builds
                    self.loads.prepare(_runtime(request))
                if refused is None:
                    self._import_for(request)
                reply = refused if refused is not None else self._run_in_child(request, ctx)
                if reply.get("status") == "ok":
                    reply = self._load(request, ctx, reply)
                self.built[request["path"]] = reply.get("status", "crashed")
                protocol.send(replies, reply)

    def _fork_load_host(self, request_fd: int, reply_fd: int) -> None:
        """Fork the load host while this process is clean, and hand it the replay channel."""
        self.loads = LoadHost(self.life_fd, (request_fd, reply_fd), self.import_seconds, self.channel_fd)
        self._drop_channel()

    def _drop_channel(self) -> None:
        if self.channel_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.channel_fd)
            self.channel_fd = None

    def _replays_waiting(self, request_fd: int, reply_fd: int) -> bool:
        """Wait for a request or a replay; True when only a replay came, before any build forked the load host: fork
        it now, if this process is still clean; else close the channel (the parent replays beside the model, and says so)."""
        if self.channel_fd is None:
            return False
        ready = select.select([request_fd, self.channel_fd], [], [])[0]
        if request_fd in ready:
            return False
        if self.loads is None and self.clean:
            self._ready_for_children()
            self._fork_load_host(request_fd, reply_fd)
        else:
            self._drop_channel()
        return True

    def _stop(self, signum: int, frame: Any) -> None:
        """SIGTERM from the parent: it stopped early; end the build under way too, and leave."""
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signal.SIGKILL)
        os._exit(0)

    def _preload_until_readable(self, fd: int, deadline: float | None = None) -> None:
        """Import pending modules, one at a time, until ``fd`` has something to read (a request, or a child's reply).
        ``deadline`` (perf_counter): the building child's; an import is cut short before it (and tried again later),
        so that this server is back reading the child's reply in time: a reply larger than the pipe holds waits on it."""
        watched = [fd] if self.channel_fd is None else [fd, self.channel_fd]
        while self.pending:
            ready = select.select(watched, [], [], 0)[0]
            if ready and ready == [self.channel_fd] and self.on_channel is not None:
                self.on_channel()  # a replay asked for: its child is forked now, and the imports go on
                watched = [fd] if self.channel_fd is None else [fd, self.channel_fd]
                continue
            if ready:
                break
            seconds = self.import_seconds
            if deadline is not None:
                left = deadline - time.perf_counter() - 0.5
                if left <= 0:
                    return
                seconds = left if seconds is None else min(seconds, left)
            name = self.pending.pop(0)
            limited = seconds != self.import_seconds  # by the child's deadline, not the import limit: tried again later
            if import_ahead(name, seconds, abandon=not limited) and limited:
                self.pending.append(name)
            if name == "torch":
                warm_up()

    def _import_for(self, request: dict[str, Any]) -> None:
        """The preload of the request's kind, imported here before its child is forked: so that every later build
        of a kind outside the default group (whose preloads ``PRELOAD`` does not hold) inherits it, as the default
        kinds' builds inherit theirs (on the bundled ResNet, ExecuTorch's 5-7 s import and XNNPACK's 4-6 s of
        pattern graphs, in each child otherwise)."""
        kind = KINDS_BY_NAME.get(request.get("kind", ""))
        for name in kind.preload if kind is not None else ():
            if name in self.pending:
                self.pending.remove(name)
            import_ahead(name, self.import_seconds)

    def _ready_for_children(self) -> None:
        """Every child needs torch: import it (and warm up) before the first fork if the idle time did not."""
        if "torch" in self.pending:
            self.pending.remove("torch")
            import_ahead("torch")
            warm_up()

    def _context(self, request: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
        """The request's build context, unpickled once per key in the server so that every child inherits
        it by fork; or the ``unpicklable`` reply when it cannot be rebuilt here. The parent sends the
        pickled context with the first request of a key only."""
        key = request.get("ctx_key")
        if self.context is not None and self.context[0] == key:
            return self.context[1], self.context[2]
        self.context = None
        self.built.clear()
        if "ctx" not in request:
            return None, {"status": "unpicklable", "notes": [], "description": "the build server did not receive the model"}
        for name in [n for n in sys.modules if n.startswith(protocol.PRIVATE_PREFIX)]:
            del sys.modules[name]  # a lone architecture file is imported afresh for each context, as the parent gave it
        sys.path[:] = request["sys_path"]
        os.chdir(request["cwd"])
        self.clean = False  # from here on this process may hold the user's modules
        try:
            ctx = ModelUnpickler(io.BytesIO(request["ctx"]), request["files"]).load()
            if ctx.model is None and ctx.recipe is not None:  # built here from its checkpoint, never sent (issue 43)
                from ..model import from_recipe

                ctx = dataclasses.replace(ctx, model=from_recipe(ctx.recipe))
        except Exception as exc:
            refused = {"status": "unpicklable", "notes": [], "description": f"{type(exc).__name__}: {exc}"[:200]}
            self.context = (key, None, refused)
            return None, refused
        self.context = (key, ctx, None)
        try:  # what the load host needs of it: the example, the signature, the settings; never the model
            self.load_ctx = pickle.dumps(dataclasses.replace(ctx, model=None), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            self.load_ctx = None  # the probe then runs beside the model (_load says so)
        return ctx, None

    def _load(self, request: dict[str, Any], ctx: Any, reply: dict[str, Any]) -> dict[str, Any]:
        """The file just built, reloaded and its first sample run (the load probe) in the load host, under
        what is left of the build's timeout; ``reply`` with what that found: a crash or a hang there is
        the build's, a load failure the reply's ``load``. Beside the model, in a child of this server,
        when the host is gone or cannot take this context."""
        module = importlib.import_module(request["module"])
        if getattr(ctx, "example", None) is None or not hasattr(module, "open_runner"):
            return reply
        timeout = request.get("timeout")
        left = None if not timeout else max(float(timeout) - float(reply.get("seconds", 0.0)), 0.001)
        key = self.context[0] if self.context is not None else None
        asked = {"module": request["module"], "path": request["path"], "cwd": request["cwd"], "timeout": left, "ctx_key": key}
        loaded = self.loads.load(asked, self.load_ctx, self._preload_until_readable) if self.loads is not None and self.load_ctx is not None else None
        if loaded is None or loaded.get("status") == "unpicklable":
            why = "its build context cannot be sent without the model" if self.load_ctx is None else (
                "its load process is gone" if loaded is None else f"its load process cannot read the build context ({loaded.get('description')})")
            reply.setdefault("notes", []).append(f"loaded beside the model, not in a process without the architecture: {why}"[:300])
            loaded = self._run_in_child({**request, "timeout": left}, ctx, load_here)
            loaded.pop("first", None)  # computed beside the model: nothing to compare the parent's run with
        reply["seconds"] = float(reply.get("seconds", 0.0)) + float(loaded.get("seconds", 0.0))
        status = loaded.get("status")
        if status == "ok" and loaded.get("first") is not None:
            reply["first"] = loaded["first"]
        if status == "raised":
            reply["load"] = loaded.get("load") or protocol.LoadFailure(str(loaded.get("description", "")))
        elif status == "timeout":
            reply.update(status="timeout", timeout=float(timeout or 0), stderr=loaded.get("stderr", ""))
        elif status != "ok":  # the load child crashed: the build's row says so, as when the probe ran in the build child
            reply = {**reply, **{k: v for k, v in loaded.items() if k in ("status", "signal", "exit_code", "stderr")}}
            reply.pop("details", None)
        return reply

    def _run_in_child(self, request: dict[str, Any], ctx: Any, work: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None) -> dict[str, Any]:
        """Run ``work`` (a build, ``build_here``, by default) in a child forked from this process, under the
        request's timeout; its reply, or what became of the child (forked.run_forked)."""

        def track(pid: int | None) -> None:
            self.child = pid

        also = (self.channel_fd, self.on_channel) if self.channel_fd is not None and self.on_channel is not None else None
        # while the child builds, imports go on here, on the other core; back in time to read its reply
        return run_forked(request, ctx, work or build_here, life_fd=self.life_fd, on_child=track, idle=self._preload_until_readable,
                          also=also, on_parent_gone=lambda: self._stop(signal.SIGTERM, None))


def build_here(request: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Run the request's build in this process (a build child) and return its reply."""
    from ..artifacts._common import captured_warnings

    lifeline.name_process(f"b {request['module'].rpartition('.')[2]}")
    sys.path[:] = request["sys_path"]
    os.chdir(request["cwd"])
    if "env" in request:  # the parent's export-check switches, as they are for this build
        for name in [n for n in os.environ if n.startswith("EXPORT_CHECK_") and n not in request["env"]]:
            del os.environ[name]
        os.environ.update(request["env"])
    notes: list[str] = []
    path = Path(request["path"])
    try:
        pin_threads(ctx)
        module = importlib.import_module(request["module"])
        source = None if request["source"] is None else Path(request["source"])
        with captured_warnings(notes):
            details = module.build(ctx, path, source)
        return {"status": "ok", "details": {str(k): str(v) for k, v in dict(details or {}).items()}, "notes": notes}
    except BaseException as exc:  # the parent decides what it means; SystemExit from an exporter included
        exc = disk_full(exc, path)
        reply: dict[str, Any] = {"status": "raised", "notes": notes, "description": f"{type(exc).__name__}: {exc}"[:2000]}
        try:
            reply["exception"] = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
            pickle.loads(reply["exception"])
        except Exception:
            reply.pop("exception", None)
        return reply


def _runtime(request: dict[str, Any]) -> str:
    """The runtime (``ArtifactKind.runtime``) that loads the file of a build request."""
    kind = KINDS_BY_NAME.get(request.get("kind", ""))
    return kind.runtime if kind is not None else ""


def load_here(request: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Run the load probe of the request's file in this process (a load child) and return its reply:
    ``ok``, or ``raised`` with the :class:`~protocol.LoadFailure` (what the load said it lacks)."""
    from ..artifacts._common import captured_warnings
    from ..errors import describe_exception

    lifeline.name_process(f"l {request['module'].rpartition('.')[2]}")
    os.chdir(request["cwd"])
    reply: dict[str, Any] = {"status": "ok"}
    try:
        with protocol.logged_exceptions() as logged:
            pin_threads(ctx)
            module = importlib.import_module(request["module"])
            with captured_warnings([]):  # the parent's reload reports the runtime's warnings, once
                first = probe(module, Path(request["path"]), ctx)
            if first is not None:
                reply["first"] = first
    except Exception as exc:
        how, missing = protocol.missing_at_load([*protocol.chain_texts(exc), *logged])
        if isinstance(exc, FirstRunFailed) and not missing:
            return reply  # it loaded; what its first run raised is the replay's to report (tests/integration/test_hostile_files.py)
        raised = exc.__cause__ if isinstance(exc, FirstRunFailed) and exc.__cause__ is not None else exc
        reply = {"status": "raised", "load": protocol.LoadFailure(describe_exception(raised), missing, how)}
    return reply


def probe(module: Any, path: Path, ctx: Any) -> dict[str, Any] | None:
    """The load probe: reload the artifact just built from its file and run the first sample of the
    example batch (the golden set's first batch) through it, in a load child (:class:`LoadHost`) under
    what is left of the build timeout; its outputs (the parent compares them with its own run of the same
    sample); raises what the load raised, and :class:`FirstRunFailed` from what the run raised.

    An artifact that hangs or crashes when loaded or run then costs its row (the build's timeout or
    crash), never the run: its replay child (clean.py) loads and replays it without a time limit of its own, and
    relies on this probe (and, for a file restored from the cache, on the cache's authentication).
    """
    # One sample of it: what hangs or crashes on load or on the first run does so on one sample too, at
    # a fraction of a large model's batch cost (measured on the bundled ResNet under load: 0.1-0.2 s
    # per ONNX file, 0.4-0.7 s for int8 ONNX, 0.7-1.6 s per TorchScript file, most of it the first
    # run's JIT profiling, all on the build core while this process replays).
    import numpy as np

    feeds = protocol.first_sample(ctx)
    if feeds is None or not hasattr(module, "open_runner"):
        return None
    with module.open_runner(path, ctx) as runner:
        try:
            outputs = runner.infer(feeds)
        except Exception as exc:
            raise FirstRunFailed(str(exc)) from exc
    return {name: np.asarray(value) for name, value in outputs.items()}


class FirstRunFailed(Exception):
    """The file loaded in the load child, and its first sample raised: a failure of the artifact (a shape
    baked by tracing, an op the runtime lacks), which the parent's replay meets and reports on its own row,
    batch size by batch size, not a failure to load without the architecture."""


class LoadHost:
    """The build server's handle on its load host: a process forked from the server while it was still
    clean, which forks one load child per request (``load_here``) and replies in order.

    The host closes the server's own pipe ends (``server_fds``), so that the parent still sees EOF when
    the server dies; it dies with the server (``PR_SET_PDEATHSIG``) and, through the lifeline, with the parent.
    """

    def __init__(self, life_fd: int | None, server_fds: tuple[int, ...], import_seconds: float | None = None,
                 channel_fd: int | None = None) -> None:
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                lifeline.die_with_parent(server)
                lifeline.name_process("load host")
                for fd in (*server_fds, request_w, reply_r):
                    os.close(fd)
                LoadServer(life_fd, import_seconds, channel_fd).serve_loads(request_r, reply_w)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(request_r)
        os.close(reply_w)
        self.pid = pid
        self._out, self._in = os.fdopen(request_w, "wb"), os.fdopen(reply_r, "rb", buffering=0)
        self.sent_key: Any = None  # the key of the context the host holds
        self.gone = False
        self.prepared: set[str] = set()  # the runtimes whose loaders the host was asked to import

    def prepare(self, runtime: str) -> None:
        """Ask the host to import ``runtime``'s loader (``RUNTIME_LOADERS``) while idle, once; no reply."""
        if self.gone or runtime in self.prepared or not RUNTIME_LOADERS.get(runtime):
            return
        self.prepared.add(runtime)
        with contextlib.suppress(OSError, ValueError):  # a host that is gone is found so by the next load
            protocol.send(self._out, {"prepare": list(RUNTIME_LOADERS[runtime])})

    def load(self, request: dict[str, Any], ctx: bytes, idle: Callable[[int], None]) -> dict[str, Any] | None:
        """Send one load request (with the pickled model-less ``ctx`` when the host does not hold its key
        yet) and wait for the reply, calling ``idle(fd)`` first (the server preloads meanwhile); ``None``
        when the host is gone."""
        if self.gone:
            return None
        if request["ctx_key"] != self.sent_key:
            request = {**request, "ctx": ctx}
        try:
            protocol.send(self._out, request)
            self.sent_key = request["ctx_key"]
            idle(self._in.fileno())
            return protocol.receive(self._in)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            self.gone = True
            for stream in (self._out, self._in):
                with contextlib.suppress(OSError):
                    stream.close()
            return None


class LoadServer:
    """The load host's state (see :class:`LoadHost`): the model-less context it holds, what it has yet to preload."""

    def __init__(self, life_fd: int | None, import_seconds: float | None = None, channel_fd: int | None = None) -> None:
        # for its child runner (fork, timeout, reply), never given a model; its preloads pause for a replay too
        self.runner = BuildServer(life_fd, channel_fd)
        self.runner.import_seconds = import_seconds  # its preloads too are bounded by the run's build timeout
        self.context: tuple[Any, Any] | None = None  # (key, the model-less build context)
        self.replays: set[int] = set()  # the replay children running (clean.py), reaped as they end
        self.channel: socket.socket | None = None  # the replay channel, while the parent holds its end
        self.host_fds: tuple[int, ...] = ()  # the host's pipes to the server: a replay child closes them

    def serve_loads(self, request_fd: int, reply_fd: int) -> None:
        signal.signal(signal.SIGTERM, self.runner._stop)
        # The user's folders are not on a deployed process's path: the server's own sys.path[0] is the
        # CLI's script folder or current directory when it was forked from the CLI (none under ``-P``).
        if not sys.flags.safe_path and sys.path:
            del sys.path[0]
        self.runner.pending = [name for name in protocol.LOAD_PRELOAD if name not in sys.modules]
        requests, replies = os.fdopen(request_fd, "rb", buffering=0), os.fdopen(reply_fd, "wb")
        self.channel = None if self.runner.channel_fd is None else socket.socket(fileno=self.runner.channel_fd)
        self.host_fds = (request_fd, reply_fd)
        if self.channel is not None:
            self.runner.on_channel = self._accept  # also while a load child runs: a replay does not wait for a probe
        while True:
            self.runner._preload_until_readable(request_fd)
            clean.reap(self.replays)
            if self.runner.channel_fd is not None and self.runner.channel_fd in select.select([request_fd, self.runner.channel_fd], [], [])[0]:
                self._accept()
                continue
            try:
                request = protocol.receive(requests)
            except EOFError:
                return  # the server is gone or done
            self.runner.import_seconds = request.get("timeout") or self.runner.import_seconds  # the run's build timeout
            if "prepare" in request:  # a file whose loader this is will come: import it while it builds
                self.runner.pending.extend(name for name in request["prepare"] if name not in sys.modules)
                continue
            if "ctx" in request:
                try:
                    self.context = (request["ctx_key"], pickle.loads(request["ctx"]))
                except Exception as exc:  # a context that needs the user's code to unpickle: the server probes beside the model
                    self.context = None
                    protocol.send(replies, {"status": "unpicklable", "description": f"{type(exc).__name__}: {exc}"[:200]})
                    continue
            if self.context is None or self.context[0] != request["ctx_key"]:
                protocol.send(replies, {"status": "unpicklable", "description": "the load process did not receive the build context"})
                continue
            protocol.send(replies, self.runner._run_in_child(request, self.context[1], load_here))


    def _accept(self) -> bool:
        """The channel is readable: fork the replay child of the socket passed on it; False once the parent closed it."""
        assert self.channel is not None
        pid = clean.accept(self.channel, self.host_fds, self.runner.life_fd)
        if pid is None:  # the parent closed the channel
            self.channel.close()
            self.channel = self.runner.channel_fd = self.runner.on_channel = None
            return False
        if pid > 0:
            self.replays.add(pid)
        return True



class ModelUnpickler(pickle.Unpickler):
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
