"""The build server's side: import the heavy libraries once, then fork one child per build request.

This is the code that runs in the server process (``serve``) and in each build child
(``BuildServer._run_in_child``), and nothing the parent runs: the parent's side is client.py and
isolation.py. The server is single-threaded, so forking it is safe, and it holds the run's build
context unpickled, so a child starts with the model in memory and the libraries imported. All its
state is one :class:`BuildServer`, made by ``serve`` in the server process and dropped with it.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import pickle
import select
import signal
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import lifeline, protocol
from .crash import disk_full


def serve(request_fd: int, reply_fd: int, life_fd: int | None = None, parent_pid: int | None = None, pdeathsig: bool = False) -> None:
    """Serve build requests from ``request_fd`` until EOF, replying on ``reply_fd``, in order.

    ``life_fd``: the lifeline (lifeline.py), at EOF once the parent ``parent_pid`` is gone;
    ``pdeathsig``: also ask the kernel to kill this server when its parent dies.
    """
    if parent_pid is not None:
        if pdeathsig:
            lifeline.die_with_parent(parent_pid)
        elif os.getppid() != parent_pid:
            os._exit(0)
    # Ctrl-C at a terminal signals the whole process group: the parent alone decides (it stops this
    # server and the build under way), so neither this server nor its children print a traceback.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    BuildServer(life_fd).serve(request_fd, reply_fd)


class BuildServer:
    """One build server's state: the child building now, the context it holds, what it built."""

    def __init__(self, life_fd: int | None = None) -> None:
        self.life_fd = life_fd  # the lifeline: readable (EOF) once the parent is gone
        self.child: int | None = None  # the pid of the child building now
        self.context: tuple[Any, Any, Any] | None = None  # (key, unpickled build context, or the refusal)
        self.built: dict[str, str] = {}  # artifact path -> reply status, for the builds of the current context
        self.pending: list[str] = []  # modules of PRELOAD the server has yet to import

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
        requests = os.fdopen(request_fd, "rb")
        replies = os.fdopen(reply_fd, "wb")
        while True:
            self._preload_until_readable(request_fd)
            self._ready_for_children()
            try:
                request = protocol.receive(requests)
            except EOFError:
                return  # the parent is gone or done
            ctx, refused = self._context(request)
            if refused is None and self.built.get(request.get("source") or "", "ok") != "ok":
                # Its source file's build failed here: a file at that path is stale, never build from it.
                refused = {"status": "source-failed", "notes": []}
            reply = refused if refused is not None else self._run_in_child(request, ctx)
            self.built[request["path"]] = reply.get("status", "crashed")
            protocol.send(replies, reply)

    def _stop(self, signum: int, frame: Any) -> None:
        """SIGTERM from the parent: it stopped early; end the build under way too, and leave."""
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signal.SIGKILL)
        os._exit(0)

    def _preload_until_readable(self, fd: int) -> None:
        """Import pending modules, one at a time, until ``fd`` has something to read (a request, or a child's reply)."""
        while self.pending and not select.select([fd], [], [], 0)[0]:
            name = self.pending.pop(0)
            _import(name)
            if name == "torch":
                warm_up()

    def _ready_for_children(self) -> None:
        """Every child needs torch: import it (and warm up) before the first fork if the idle time did not."""
        if "torch" in self.pending:
            self.pending.remove("torch")
            _import("torch")
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
        try:
            ctx = ModelUnpickler(io.BytesIO(request["ctx"]), request["files"]).load()
        except Exception as exc:
            refused = {"status": "unpicklable", "notes": [], "description": f"{type(exc).__name__}: {exc}"[:200]}
            self.context = (key, None, refused)
            return None, refused
        self.context = (key, ctx, None)
        return ctx, None

    def _run_in_child(self, request: dict[str, Any], ctx: Any) -> dict[str, Any]:
        result_r, result_w = os.pipe()
        # The child's stderr goes to a file: passed on when it reports back, summed up when it crashes
        # (a native abort prints a long C++ stack there).
        log = tempfile.TemporaryFile()  # noqa: SIM115 (shared with the forked child; closed by `with log` once it exits)
        began = time.perf_counter()
        # SIGTERM (the parent stopping early) waits until self.child names the child, so _stop never misses it.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        server = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: build, report, and leave without running any of the server's cleanup
            code = 0
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
                lifeline.die_with_parent(server)  # this server is single-threaded: the signal is tied to it
                if self.life_fd is not None:
                    lifeline.watch(self.life_fd)
                os.close(result_r)
                os.dup2(log.fileno(), 2)
                built = build_here(request, ctx)
                sys.stderr.flush()  # into the log, before os._exit skips it
                with os.fdopen(result_w, "wb") as out:
                    out.write(pickle.dumps(built, protocol=pickle.HIGHEST_PROTOCOL))
            except BaseException:
                code = 70
            finally:
                os._exit(code)
        self.child = pid
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.close(result_w)
        self._preload_until_readable(result_r)  # while the child builds, on the other core
        timeout = request.get("timeout")
        data, timed_out = _read_until_eof(result_r, None if not timeout else began + float(timeout), self.life_fd)
        if self.life_fd is not None and lifeline.parent_gone(self.life_fd):
            self._stop(signal.SIGTERM, None)  # the parent died while the child built: end both now
        if timed_out:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        self.child = None
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
                reply.update(pickle.loads(data))
                return reply
            except Exception:
                pass  # the child died while writing its reply
        if os.WIFSIGNALED(status):
            reply.update(status="crashed", signal=os.WTERMSIG(status))
        else:
            reply.update(status="crashed", exit_code=os.WEXITSTATUS(status))
        return reply


def _import(name: str) -> None:
    with contextlib.suppress(ImportError):
        importlib.import_module(name)


def warm_up() -> None:
    """Unpickling the first module and tensor imports a tail of torch modules lazily; do it once in
    the server rather than in every child (it is most of a child's start-up cost)."""
    from ..artifacts import KINDS

    for kind in KINDS:  # the builders' own modules are light: their heavy imports are inside build()
        kind.impl()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        pickle.loads(pickle.dumps(torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1), torch.nn.BatchNorm2d(1), torch.nn.Linear(1, 1))))


def _read_until_eof(fd: int, deadline: float | None, life_fd: int | None = None) -> tuple[bytes, bool]:
    """All of ``fd`` up to EOF (then closed), or what came before ``deadline`` (perf_counter) and ``True``;
    returns early, too, when the lifeline ``life_fd`` says the parent is gone."""
    chunks: list[bytes] = []
    watched = [fd] if life_fd is None else [fd, life_fd]
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.perf_counter())
            ready = select.select(watched, [], [], wait)[0]
            if not ready:
                return b"".join(chunks), True
            if fd not in ready:
                return b"".join(chunks), False  # the lifeline: the caller ends the child
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks), False
            chunks.append(chunk)
    finally:
        os.close(fd)


def build_here(request: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Run the request's build in this process (a build child) and return its reply."""
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
        with captured_warnings([]):  # the parent's reload reports the runtime's warnings, once
            probe(module, path, ctx)
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


def probe(module: Any, path: Path, ctx: Any) -> None:
    """The load probe: reload the artifact just built from its file and run the first sample of the
    example batch (the golden set's first batch) through it, here in the build child and so under the build timeout.

    An artifact that hangs or crashes when loaded or run then costs its row (the build's timeout or
    crash), never the run: the parent loads and replays it without a time limit of its own, and
    relies on this probe (and, for a file restored from the cache, on the cache's authentication).
    An exception is not this probe's to report: the parent's reload raises it again, worded as a
    reload failure of that row.
    """
    example = getattr(ctx, "example", None)
    if example is None or not hasattr(module, "open_runner"):
        return
    from ..artifacts.base import INPUT

    # One sample of it: what hangs or crashes on load or on the first run does so on one sample too, at
    # a fraction of a large model's batch cost (measured on the bundled ResNet under load: 0.1-0.2 s
    # per ONNX file, 0.4-0.7 s for int8 ONNX, 0.7-1.6 s per TorchScript file, most of it the first
    # run's JIT profiling, all on the build core while this process replays).
    axes = {spec.name: spec.batch_axis for spec in getattr(getattr(ctx, "signature", None), "inputs", ())}
    if isinstance(example, Mapping):
        feeds = {name: value.narrow(axes.get(name, 0), 0, 1).numpy() for name, value in example.items()}
    else:
        feeds = {INPUT: example[:1].numpy()}
    try:
        with module.open_runner(path, ctx) as runner:
            runner.infer(feeds)
    except Exception:
        return


def _pin_threads(ctx: Any) -> None:
    threads = getattr(ctx, "threads", None)
    if isinstance(threads, int) and threads > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


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
