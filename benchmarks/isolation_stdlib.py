"""A prototype of exporter/builder/isolation.py on the standard library, for benchmarks/isolation_probe.py.

multiprocessing's ``forkserver`` context with ``set_forkserver_preload(PRELOAD + warm-up)`` and one
``multiprocessing.Process`` per build, which receives the pickled build context as its argument.
Builds run one after another, in the order they were started, driven by one thread of the parent
(``Process.start`` blocks until the fork server has finished its preloads, and the pipeline's
thread must not). Everything else (the request, the child's build, the reply statuses and the row
messages) is exporter/builder/isolation.py's own code, so the two differ only in how the processes
are made and how the model reaches the build children.

``install()`` puts it in place of the hand-written server (``isolation.prewarm/start/build/settle``)
in this process; the probe does that in a CLI process it starts.
"""

from __future__ import annotations

import collections
import contextlib
import io
import multiprocessing
import os
import pickle
import sys
import tempfile
import threading
import time
from multiprocessing import connection
from pathlib import Path
from typing import Any

from export_check.builder import isolation as iso
from export_check.builder import protocol, server

WARM_MODULE = "isolation_stdlib_warm"  # benchmarks/isolation_stdlib_warm.py: the server's _warm_up, on import


def _child(conn: Any, request: dict[str, Any], payload: bytes, log_path: str) -> None:
    """The build child: unpickle the context it was sent, build, send the reply (as the server's child does)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)
    os.close(fd)
    sys.path[:] = request["sys_path"]
    os.chdir(request["cwd"])
    try:
        ctx = server.ModelUnpickler(io.BytesIO(payload), request["files"]).load()
    except Exception as exc:
        reply: dict[str, Any] = {"status": "unpicklable", "notes": [], "description": f"{type(exc).__name__}: {exc}"[:200]}
    else:
        reply = server.build_here(request, ctx)
    sys.stderr.flush()
    conn.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
    conn.close()


class StdlibService:
    """What the hand-written server does, on multiprocessing: a queue of builds, one child per build."""

    def __init__(self, preload: tuple[str, ...] = protocol.PRELOAD) -> None:
        self.mp = multiprocessing.get_context("forkserver")
        self.mp.set_forkserver_preload([*preload, WARM_MODULE])
        self.cond = threading.Condition()
        self.queue: collections.deque[tuple[Any, dict[str, Any], bytes]] = collections.deque()
        self.current: Any = None  # the PendingBuild building now
        self.child: Any = None  # its Process
        self.thread: threading.Thread | None = None
        self.pickled: tuple[Any, str, bytes] | None = None
        self.key: str | None = None
        self.built: dict[str, str] = {}
        self.refused: dict[str, Any] | None = None

    # -- the parent's side, as isolation's module functions -----------------------------------

    def prewarm(self) -> None:
        if not iso.enabled():
            return
        from multiprocessing import forkserver

        import torch  # noqa: F401  (the caller needs it next anyway, as in isolation.prewarm)

        forkserver.ensure_running()  # spawns the fork server, which imports PRELOAD while this process goes on

    def start(self, kind: Any, ctx: Any, path: Path, source: Path | None, timeout: float | None = None) -> Any:
        pending = iso.PendingBuild(kind, ctx, path, source)
        if not iso.enabled():
            pending._build_in_process()
            return pending
        try:
            if self.pickled is None or self.pickled[0] is not ctx:
                import uuid

                self.pickled = (ctx, uuid.uuid4().hex, pickle.dumps(ctx, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as exc:
            pending.notes.append(f"built in-process, not isolated: the model cannot be pickled ({type(exc).__name__}: {exc})"[:300])
            pending._build_in_process()
            return pending
        _, key, payload = self.pickled
        request = {
            "module": kind.module, "kind": kind.name, "ctx_key": key, "path": str(path),
            "source": None if source is None else str(source), "timeout": timeout, "sys_path": list(sys.path), "cwd": os.getcwd(),
            "files": {n: m.__file__ for n, m in list(sys.modules.items()) if n.startswith(protocol.PRIVATE_PREFIX) and getattr(m, "__file__", None)},
        }
        pending._service = pending._server = self  # PendingBuild._finish calls self.receive(server, pending)
        with self.cond:
            self.queue.append((pending, request, payload))
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="export-check builds", daemon=True)
                self.thread.start()
            self.cond.notify_all()
        return pending

    def build(self, kind: Any, ctx: Any, path: Path, source: Path | None, notes: list[str], timeout: float | None = None) -> dict[str, str]:
        return self.start(kind, ctx, path, source, timeout).wait(notes)

    def settle(self) -> None:
        with self.cond:
            cancelled = [p for p, _, _ in self.queue] + ([self.current] if self.current is not None else [])
            self.queue.clear()
            for pending in cancelled:
                if pending._reply is None:
                    pending._reply = {"status": "server-died", "description": "EOFError"}
            child = self.child
            self.cond.notify_all()
        if child is not None:
            child.kill()

    # -- what PendingBuild._finish needs of its service ----------------------------------------

    def receive(self, server: Any, pending: Any) -> None:
        with self.cond:
            while pending._reply is None:
                self.cond.wait()

    def in_flight(self) -> bool:
        with self.cond:
            return bool(self.queue) or self.current is not None

    # -- the thread that runs the builds one after another ------------------------------------

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                pending, request, payload = self.queue.popleft()
                self.current = pending
            try:
                reply = self._one(pending, request, payload)
            except BaseException as exc:  # never lose a reply
                reply = {"status": "server-died", "description": type(exc).__name__}
            with self.cond:
                self.current = self.child = None
                if pending._reply is None:
                    pending._reply = reply
                self.cond.notify_all()

    def _one(self, pending: Any, request: dict[str, Any], payload: bytes) -> dict[str, Any]:
        if request["ctx_key"] != self.key:
            self.key, self.built, self.refused = request["ctx_key"], {}, None
        if self.refused is not None:
            reply = dict(self.refused)
        elif self.built.get(request.get("source") or "", "ok") != "ok":
            reply = {"status": "source-failed", "notes": []}
        else:
            reply = self._in_child(pending, request, payload)
            if reply.get("status") == "unpicklable":
                self.refused = reply
        self.built[request["path"]] = reply.get("status", "crashed")
        return reply

    def _in_child(self, pending: Any, request: dict[str, Any], payload: bytes) -> dict[str, Any]:
        with tempfile.NamedTemporaryFile(prefix="export-check-build-", suffix=".log", delete=False) as log:
            log_path = log.name
        result_r, result_w = self.mp.Pipe(duplex=False)
        proc = self.mp.Process(target=_child, args=(result_w, request, payload, log_path), daemon=True, name=f"build {request['kind']}")
        began = time.perf_counter()
        try:
            proc.start()
        finally:
            result_w.close()
        with self.cond:
            self.child = proc
            cancelled = pending._reply is not None
        if cancelled:
            proc.kill()
        timeout = request.get("timeout")
        deadline = None if not timeout else began + float(timeout)
        data, timed_out = b"", False
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.perf_counter())
            ready = connection.wait([result_r, proc.sentinel], wait)
            if not ready:
                timed_out = True
                break
            if result_r in ready or result_r.poll():
                with contextlib.suppress(EOFError, OSError):
                    data = result_r.recv_bytes()
                break
            if proc.sentinel in ready:
                break
        result_r.close()
        if timed_out:
            proc.kill()
        proc.join()
        seconds = time.perf_counter() - began
        try:
            with open(log_path, "rb") as fh:
                stderr = fh.read(protocol.STDERR_KEEP).decode("utf-8", "replace")
        finally:
            os.unlink(log_path)
        reply: dict[str, Any] = {"pid": proc.pid, "stderr": stderr, "seconds": seconds}
        if timed_out:
            reply.update(status="timeout", timeout=float(timeout))
            return reply
        if data:
            try:
                reply.update(pickle.loads(data))
                return reply
            except Exception:
                pass
        code = proc.exitcode
        if code is not None and code < 0:
            reply.update(status="crashed", signal=-code)
        else:
            reply.update(status="crashed", exit_code=code)
        return reply


SERVICE: StdlibService | None = None


def install(preload: tuple[str, ...] = protocol.PRELOAD) -> StdlibService:
    """Replace the hand-written server's entry points in this process by the prototype's."""
    global SERVICE
    SERVICE = StdlibService(preload)
    iso.prewarm = SERVICE.prewarm
    iso.start = SERVICE.start
    iso.build = SERVICE.build
    iso.settle = SERVICE.settle
    return SERVICE


# --- concurrent.futures.ProcessPoolExecutor, for the probe's guarantee check ---------------------


def pool_task(how: str) -> str:
    """A toy build for ``check_pool``: ``segv`` crashes, ``sleep`` hangs, anything else returns."""
    if how == "segv":
        import ctypes

        ctypes.string_at(0)
    elif how == "sleep":
        time.sleep(600)
    return how


def check_pool() -> dict[str, str]:
    """What a ProcessPoolExecutor (one worker holding the model, builds in it) keeps of the guarantees."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout

    results = {}
    mp = multiprocessing.get_context("forkserver")
    pool = ProcessPoolExecutor(1, mp_context=mp)
    futures = [pool.submit(pool_task, how) for how in ("ok", "segv", "ok")]
    outcomes = []
    for future in futures:
        try:
            outcomes.append(future.result(timeout=60))
        except Exception as exc:
            outcomes.append(type(exc).__name__)
    pool.shutdown(wait=True)
    results["segfault costs only its row"] = "kept" if outcomes == ["ok", "BrokenProcessPool", "ok"] else f"LOST: ok, segv, ok -> {outcomes}"
    pool = ProcessPoolExecutor(1, mp_context=mp)
    hung = pool.submit(pool_task, "sleep")
    with contextlib.suppress(FutureTimeout):
        hung.result(timeout=2)
    worker = next(iter(pool._processes.values()))
    cancelled = hung.cancel()
    pool.shutdown(wait=False, cancel_futures=True)
    time.sleep(1)
    alive = worker.is_alive()
    results["hung build killed at the timeout"] = (
        "LOST: a running future cannot be cancelled, shutdown leaves its worker running; only killing the worker (and with it "
        f"the pool and every queued build) stops it (cancel() -> {cancelled}, worker alive after shutdown: {alive})"
    )
    worker.kill()
    worker.join()
    return results
